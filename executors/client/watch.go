package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/dwr-run/dwr/schemas"
)

// Aggregate kinds, the first argument of Watch and History (the wire
// values of schemas.Agg*).
const (
	AggWorkspace = schemas.AggWorkspace
	AggGoal      = schemas.AggGoal
	AggTask      = schemas.AggTask
	// AggRitual: a ritual, whose id is "<workspace>:<name>" (History also
	// takes its name alone).
	AggRitual = schemas.AggRitual
	// AggSchedule: a schedule, whose id is "<workspace>:<name>" (History
	// also takes its name alone).
	AggSchedule = schemas.AggSchedule
)

// Event is one event of an aggregate's history, as the feed publishes it
// and the events query lists it.
type Event struct {
	schemas.Event
	// Seq is a log sequence at which the event is committed and the views
	// show it: a query with MinSeq(Seq) reads the state after it.
	Seq uint64 `json:"-"`
}

// resyncEvery is how often a quiet Watch asks the history whether it missed
// an event (the live feed is published without acknowledgements, so an event
// can be lost in a crash or while the connection is down).
const resyncEvery = 10 * time.Second

// History returns the events of one aggregate (a goal, a task or the
// workspace) after version after (0 for all), oldest first, page by page.
// The iteration ends at the first error, which it yields.
func (c *Client) History(ctx context.Context, agg, id string, after uint64) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		q := schemas.Query{ID: id, Aggregate: agg}
		if after > 0 {
			q.After = strconv.FormatUint(after, 10)
		}
		for {
			var page []schemas.Event
			r, err := c.Query(ctx, "events", q, &page)
			if err != nil {
				yield(Event{}, err)
				return
			}
			for _, e := range page {
				if !yield(Event{Event: e, Seq: r.Seq}, nil) {
					return
				}
			}
			if r.Next == "" || len(page) == 0 {
				return
			}
			q.After = r.Next
		}
	}
}

// Watch returns the events of one aggregate after version after (0 for all),
// in version order with none missed or repeated: first its history, then the
// live feed as the service publishes it. It rides out reconnections and a
// lossy feed by reading the history again wherever the versions show a gap,
// after a reconnection, and when the feed has been quiet a while. It ends
// when ctx does (without yielding ctx's error), when the caller stops, or at
// the first error it cannot ride out, which it yields.
func (c *Client) Watch(ctx context.Context, agg, id string, after uint64) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		live := make(chan *nats.Msg, 256)
		sub, err := c.nc.ChanSubscribe(c.prefix+".ev."+c.ws+"."+agg+"."+id+".>", live)
		if err != nil {
			yield(Event{}, fmt.Errorf("client: watch %s %s: %w", agg, id, err))
			return
		}
		defer func() { _ = sub.Unsubscribe() }()
		status := c.nc.StatusChanged(nats.CONNECTED)
		defer c.nc.RemoveStatusListener(status)
		tick := time.NewTicker(resyncEvery)
		defer tick.Stop()

		last := after
		// catchUp yields the history after last; false when the watch ends.
		catchUp := func() bool {
			for e, err := range c.History(ctx, agg, id, last) {
				if err != nil {
					if ctx.Err() == nil {
						yield(Event{}, err)
					}
					return false
				}
				if e.Version <= last {
					continue
				}
				last = e.Version
				if !yield(e, nil) {
					return false
				}
			}
			return true
		}
		if !catchUp() {
			return
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-status:
				if !catchUp() {
					return
				}
			case <-tick.C:
				if !catchUp() {
					return
				}
			case m := <-live:
				var e Event
				if err := json.Unmarshal(m.Data, &e.Event); err != nil {
					continue // not an event of the feed: nothing to deliver
				}
				e.Raw = m.Data
				e.Seq, _ = strconv.ParseUint(m.Header.Get(schemas.HeaderLogSeq), 10, 64)
				switch {
				case e.Version <= last:
				case e.Version == last+1:
					last = e.Version
					if !yield(e, nil) {
						return
					}
				default: // a gap: the history has what the feed lost
					if !catchUp() {
						return
					}
				}
				tick.Reset(resyncEvery)
			}
		}
	}
}

// WaitGoal waits until goal id has ended (achieved, failed or cancelled),
// and returns it as goal.get does then. It follows the goal's events, so it
// costs one subscription, not a poll per interval.
func (c *Client) WaitGoal(ctx context.Context, id string) (*schemas.GoalView, error) {
	g, err := c.Goal(ctx, id)
	if err != nil || goalEnded(g.State) {
		return g, err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for e, err := range c.Watch(wctx, AggGoal, id, g.Version) {
		if err != nil {
			return nil, err
		}
		if goalEnded(goalStateOf(e.Type)) {
			return c.Goal(ctx, id, MinSeq(e.Seq))
		}
	}
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	return nil, errors.New("client: the watch of the goal ended")
}

// Feed calls f with each event of the Client's workspace that the service
// publishes on the live feed from now on, as it encoded it, until stop is
// called: those whose subject, after <prefix>.ev.<workspace>., matches
// filter (">" for every event, "task.>" for the tasks', "task.<id>.>" for
// one task's). f runs on one goroutine, an event at a time. The feed is
// published without acknowledgements, so an event can be missed; Watch
// follows one aggregate without a gap. It returns an error when the
// subscription cannot be made.
func (c *Client) Feed(filter string, f func(raw []byte)) (stop func(), err error) {
	sub, err := c.nc.Subscribe(c.prefix+".ev."+c.ws+"."+filter, func(m *nats.Msg) { f(m.Data) })
	if err != nil {
		return nil, fmt.Errorf("client: feed %s: %w", filter, err)
	}
	stop = func() { _ = sub.Unsubscribe() }
	if err := c.nc.Flush(); err != nil { // the server has the subscription
		stop()
		return nil, fmt.Errorf("client: feed %s: %w", filter, err)
	}
	return stop, nil
}
