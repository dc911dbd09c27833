package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/schemas"
)

// Bounds of a live stream.
const (
	// streamBuffer is how many feed messages a stream holds before it is
	// behind; past it the stream ends and the browser reconnects, resuming
	// from the last snapshot it saw.
	streamBuffer = 4096
	// maxReplay bounds the events a resumed stream replays.
	maxReplay = 1000
	// keepAlive is how often an idle stream sends a comment, so that
	// proxies keep it open.
	keepAlive = 25 * time.Second
)

// feedEvent is what a stream tells of one event of the goal or its tasks.
type feedEvent struct {
	Seq     uint64    `json:"seq,omitempty"`
	Type    string    `json:"type"`
	Agg     string    `json:"agg"`
	AggID   string    `json:"agg_id"`
	Version uint64    `json:"ver"`
	Actor   string    `json:"actor,omitempty"`
	Time    time.Time `json:"time"`
}

// snapshot is a stream's "goal" message: the goal with its plan graph and
// its tasks' states, as of log sequence Seq.
type snapshot struct {
	Seq  uint64            `json:"seq"`
	Goal *schemas.GoalView `json:"goal"`
}

// stream is GET /api/goals/{id}/stream: server-sent events of the goal's
// plan graph. It subscribes to the goal's and the tasks' events on the feed
// with the session's own connection (so only an identity that may read the
// feed gets any), and after each batch of events of this goal it sends the
// goal as it then stands ("goal", with id = the log sequence it reflects)
// and the events themselves ("event"). A browser that reconnects sends the
// last id (Last-Event-ID): it gets the events the feed kept since, then a
// snapshot at least that fresh. The stream ends when the browser leaves,
// at sign-out, or when the console closes.
func (c *Console) stream(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("id")
	if !validToken(id) {
		writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("goal id %q: letters, digits, '-' and '_' only", id))
		return
	}
	if s.streams.Add(1) > MaxStreamsPerSession {
		s.streams.Add(-1)
		writeError(w, http.StatusTooManyRequests, "unavailable", fmt.Sprintf("this session holds %d live streams, its bound: close a tab", MaxStreamsPerSession))
		return
	}
	defer s.streams.Add(-1)
	var last uint64
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("Last-Event-ID %q: a log sequence this stream sent", v))
			return
		}
		last = n
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	go func() {
		select {
		case <-c.done:
			cancel()
		case <-ctx.Done():
		}
	}()

	nc := s.cl.Conn()
	msgs := make(chan *nats.Msg, streamBuffer)
	base := c.cfg.Prefix + ".ev." + s.workspace + "."
	for _, subj := range []string{base + "task.>", base + "goal." + id + ".>"} {
		sub, err := nc.ChanSubscribe(subj, msgs)
		if err != nil {
			writeError(w, http.StatusBadGateway, "unavailable", "cannot subscribe to the feed: "+err.Error())
			return
		}
		defer func() { _ = sub.Unsubscribe() }()
	}
	fctx, fcancel := context.WithTimeout(ctx, RequestTimeout)
	err := nc.FlushWithContext(fctx) // the server has the subscriptions
	fcancel()
	if err != nil {
		writeError(w, http.StatusBadGateway, "unavailable", "cannot subscribe to the feed: "+err.Error())
		return
	}
	g, seq, err := goalAt(ctx, s.cl, id, last)
	if err != nil {
		writeClientError(w, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(event string, id uint64, v any) bool {
		b, err := json.Marshal(v)
		if err != nil {
			return false
		}
		var sb strings.Builder
		if id > 0 {
			fmt.Fprintf(&sb, "id: %d\n", id)
		}
		fmt.Fprintf(&sb, "event: %s\ndata: %s\n\n", event, b)
		if _, err := w.Write([]byte(sb.String())); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	tasks := tasksOf(g)
	if last > 0 {
		n := 0
		for raw, err := range s.cl.FeedHistory(ctx, ">", client.FeedFrom{Seq: last + 1}) {
			if err != nil || n >= maxReplay {
				break
			}
			if e, ok := relevant(raw, id, tasks); ok && !send("event", 0, e) {
				return
			}
			n++
		}
	}
	if !send("goal", seq, snapshot{Seq: seq, Goal: g}) {
		return
	}
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		var batch []*nats.Msg
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if _, err := w.Write([]byte(": keep-alive\n\n")); err != nil || rc.Flush() != nil {
				return
			}
			continue
		case m := <-msgs:
			batch = append(batch, m)
		}
		if len(msgs) == cap(msgs) {
			return // behind: the browser reconnects and resumes
		}
		for more := true; more; {
			select {
			case m := <-msgs:
				batch = append(batch, m)
			default:
				more = false
			}
		}
		var upTo uint64
		for _, m := range batch {
			e, ok := relevant(m.Data, id, tasks)
			if !ok {
				continue
			}
			e.Seq, _ = strconv.ParseUint(m.Header.Get(schemas.HeaderLogSeq), 10, 64)
			upTo = max(upTo, e.Seq)
			if !send("event", 0, e) {
				return
			}
		}
		if upTo == 0 {
			continue
		}
		g, seq, err := goalAt(ctx, s.cl, id, upTo)
		if err != nil {
			if ctx.Err() == nil {
				send("failure", 0, map[string]string{"message": err.Error()})
			}
			return
		}
		tasks = tasksOf(g)
		if !send("goal", seq, snapshot{Seq: seq, Goal: g}) {
			return
		}
	}
}

// goalAt reads goal id from views that reflect at least log sequence seq,
// and returns it with the sequence its reply reflects.
func goalAt(ctx context.Context, cl *client.Client, id string, seq uint64) (*schemas.GoalView, uint64, error) {
	var g schemas.GoalView
	r, err := cl.Query(ctx, "goal.get", schemas.Query{ID: id}, &g, client.MinSeq(seq))
	if err != nil && seq > 0 && errorsIsInvalid(err) {
		// A sequence past the log's end (another server's, say): read the
		// goal as it stands.
		r, err = cl.Query(ctx, "goal.get", schemas.Query{ID: id}, &g)
	}
	if err != nil {
		return nil, 0, err
	}
	return &g, max(r.Seq, seq), nil
}

// tasksOf returns the ids of the tasks of g's current plan.
func tasksOf(g *schemas.GoalView) map[string]bool {
	ids := make(map[string]bool, len(g.Nodes))
	for _, n := range g.Nodes {
		ids[n.TaskID] = true
	}
	for _, p := range g.Plan {
		ids[p.TaskID] = true
	}
	return ids
}

// relevant decodes a feed event and reports whether it is goal's or one of
// its tasks'.
func relevant(raw []byte, goal string, tasks map[string]bool) (feedEvent, bool) {
	var e schemas.Event
	if json.Unmarshal(raw, &e) != nil {
		return feedEvent{}, false
	}
	ok := e.AggregateType == "goal" && e.AggregateID == goal || e.AggregateType == "task" && tasks[e.AggregateID]
	return feedEvent{Type: e.Type, Agg: e.AggregateType, AggID: e.AggregateID, Version: e.Version, Actor: e.Actor, Time: e.Time}, ok
}
