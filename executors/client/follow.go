package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/dwr-run/dwr/schemas"
)

// FeedFrom says where FeedHistory and FollowFeed start: with the events of
// the log records from log sequence Seq on (a reply's Seq names one), from
// the events stored at or after Since, or from the oldest the feed holds
// (All). FollowFeed with none of them delivers the events published from
// now on.
type FeedFrom struct {
	Seq   uint64
	Since time.Time
	All   bool
}

// FeedHistory returns the events of the Client's workspace that the feed's
// stream holds, oldest first, whose subject after <prefix>.ev.<workspace>.
// matches filter (">" for every one), from from (the feed query, page by
// page). The iteration ends at the first error, which it yields.
func (c *Client) FeedHistory(ctx context.Context, filter string, from FeedFrom) iter.Seq2[json.RawMessage, error] {
	return func(yield func(json.RawMessage, error) bool) {
		q := schemas.Query{Filter: filter, Limit: 1000}
		switch {
		case from.Seq > 0:
			q.FromSeq = from.Seq
		case !from.Since.IsZero():
			t := from.Since
			q.Since = &t
		}
		for {
			var page []json.RawMessage
			r, err := c.Query(ctx, "feed", q, &page)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, raw := range page {
				if !yield(raw, nil) {
					return
				}
			}
			// A page may come back empty with a next (the feed reads a
			// bounded stretch of events for each page); a next that does
			// not move on ends it.
			if r.Next == "" || r.Next == q.After {
				return
			}
			q.After, q.FromSeq, q.Since = r.Next, 0, nil
		}
	}
}

// catchUpMargin is how far before the last event delivered FollowFeed's
// catch-up after a reconnection starts (what it delivered already it skips).
const catchUpMargin = 5 * time.Second

// feedSettle is how long after its first replay FollowFeed lists the feed
// once more: an event published before FollowFeed subscribed, but not yet
// stored by the feed's stream when the replay listed it, reached neither
// (the service publishes the feed after each commit, without waiting).
// A listing that finds such events is followed by another, twice as late,
// up to feedSettleMax: a feed that lags so far may lag further.
const (
	feedSettle    = time.Second
	feedSettleMax = 16 * time.Second
)

// seenWindow is how many event ids FollowFeed remembers to deliver each
// event once where a replay and the live feed overlap.
const seenWindow = 16 << 10

// FollowFeed calls f with each event of the Client's workspace whose
// subject matches filter: first those the feed holds from from (none when
// from is zero), then the live feed, until ctx ends (it returns nil then)
// or f returns an error (which it returns). After a reconnection it lists
// what the feed stored since the last event it delivered, so that a
// restarted service or a lost connection loses nothing the feed kept; a
// catch-up that fails (the service is not ready yet) is tried again every
// second while live events go on. A second after the first replay it lists
// once more what the first may have missed: events published before it
// subscribed that the feed's stream had not stored yet (and again, each
// time twice as late up to 16 s, while such a listing finds any). caught,
// when not nil, is told how many events each catch-up after a reconnection
// delivered, or why one failed. Each event is delivered once (by its id);
// live events come in the order they arrive.
// The Client's connection must reconnect for FollowFeed to ride out an
// outage (Connect's default). It returns the first replay's error, or one
// when the subscription cannot be made (a filter that is not a subject:
// nats.ErrBadSubject).
func (c *Client) FollowFeed(ctx context.Context, filter string, from FeedFrom, f func(raw json.RawMessage) error, caught func(n int, err error)) error {
	live := make(chan *nats.Msg, 4096)
	sub, err := c.nc.ChanSubscribe(c.prefix+".ev."+c.ws+"."+filter, live)
	if err != nil {
		return fmt.Errorf("client: feed %s: %w", filter, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := c.nc.Flush(); err != nil { // the server has the subscription
		return fmt.Errorf("client: feed %s: %w", filter, err)
	}
	status := c.nc.StatusChanged(nats.CONNECTED)
	defer c.nc.RemoveStatusListener(status)

	seen := newSeenSet(seenWindow)
	var last time.Time // the time of the latest event delivered
	deliver := func(raw json.RawMessage) error {
		var head struct {
			ID   string    `json:"id"`
			Time time.Time `json:"time"`
		}
		if json.Unmarshal(raw, &head) != nil || head.ID == "" || !seen.add(head.ID) {
			return nil // not an event of the feed, or one delivered already
		}
		if head.Time.After(last) {
			last = head.Time
		}
		return f(raw)
	}
	// replay delivers the history from from; the count, or the error of
	// the listing (listErr) or of f.
	replay := func(from FeedFrom) (n int, listErr, fErr error) {
		for raw, err := range c.FeedHistory(ctx, filter, from) {
			if err != nil {
				return n, err, nil
			}
			before := seen.n
			if err := deliver(raw); err != nil {
				return n, nil, err
			}
			n += seen.n - before
		}
		return n, nil, nil
	}
	settle := time.NewTimer(feedSettle)
	defer settle.Stop()
	if from != (FeedFrom{}) {
		if _, listErr, fErr := replay(from); fErr != nil || listErr != nil {
			return ctxOr(ctx, errors.Join(listErr, fErr))
		}
	} else {
		last = time.Now()
		settle.Stop() // the events from now on: the subscription has them
	}
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	settleWait := feedSettle
	settled := func(n int, err error) {
		if err == nil && n > 0 && settleWait < feedSettleMax {
			settleWait *= 2
			settle.Reset(settleWait)
		}
	}
	// catchUp lists what the feed stored since the last event delivered
	// (since from, when none was) and tells tell (caught, or settled for
	// the listings after the first replay); a listing that fails is tried
	// again a second later.
	catchUp := func(again *time.Timer, tell func(int, error)) error {
		// From a little before the last event delivered: the feed's stream
		// stamps a message when it stores it, which another node's clock
		// may put before the event's own time.
		since := from
		if !last.IsZero() {
			since = FeedFrom{Since: last.Add(-catchUpMargin)}
		}
		n, listErr, fErr := replay(since)
		if fErr != nil {
			return fErr
		}
		if listErr != nil && ctx.Err() == nil {
			again.Reset(time.Second)
		}
		if tell != nil && ctx.Err() == nil {
			tell(n, listErr)
		}
		return nil
	}
	for {
		var err error
		select {
		case <-ctx.Done():
			return nil
		case <-status:
			err = catchUp(retry, caught)
		case <-retry.C:
			err = catchUp(retry, caught)
		case <-settle.C:
			err = catchUp(settle, settled)
		case m := <-live:
			err = deliver(m.Data)
		}
		if err != nil {
			return err
		}
	}
}

// ctxOr returns nil when ctx has ended (the caller stopped), else err.
func ctxOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// seenSet remembers the last ids added (as many as its ring holds).
type seenSet struct {
	ids  map[string]struct{}
	ring []string
	next int
	n    int // how many were added in all
}

func newSeenSet(n int) *seenSet {
	return &seenSet{ids: make(map[string]struct{}, n), ring: make([]string, n)}
}

// add records id and reports whether it was new.
func (s *seenSet) add(id string) bool {
	if _, ok := s.ids[id]; ok {
		return false
	}
	if old := s.ring[s.next]; old != "" {
		delete(s.ids, old)
	}
	s.ring[s.next], s.ids[id] = id, struct{}{}
	s.next = (s.next + 1) % len(s.ring)
	s.n++
	return true
}
