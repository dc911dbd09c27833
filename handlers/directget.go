package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dwr-run/dwr/eventstore"
)

// directGetRequest is a JetStream direct get as the server reads it: the
// next messages whose subject matches NextFor from stream sequence Seq (or
// from StartTime; 0 and nil: from the first), at most Batch of them (0: one,
// answered alone) and no more once MaxBytes are sent.
type directGetRequest struct {
	Seq       uint64     `json:"seq,omitempty"`
	NextFor   string     `json:"next_by_subj,omitempty"`
	Batch     int        `json:"batch,omitempty"`
	MaxBytes  int        `json:"max_bytes,omitempty"`
	StartTime *time.Time `json:"start_time,omitempty"`
}

// storedMsg is a message a direct get read: its stream sequence, the
// subject the stream stores it under, and its data.
type storedMsg struct {
	seq     uint64
	subject string
	data    []byte
}

// directGetter reads a stream by direct gets on a connection.
type directGetter struct {
	nc      *nats.Conn
	subject string // the stream's DIRECT.GET API subject
}

// feedGetter reads the feed's stream on the queries' connection.
func (s *Service) feedGetter() directGetter {
	js := s.readJS()
	return directGetter{nc: js.Conn(), subject: eventstore.APIPrefix(js) + "DIRECT.GET." + strings.ToUpper(s.cfg.Prefix) + "_EVENTS"}
}

// get reads what req asks for, in the stream's order, and for a batch how
// many messages that match follow the last it read (none read: none
// follow). The server sends a batch's messages and then an end of batch
// (status 204) that counts them; no message at all is a 404.
func (g directGetter) get(ctx context.Context, req directGetRequest) ([]storedMsg, uint64, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, 0, err
	}
	// A callback, not a channel: a synchronous subscription makes a
	// channel of 65,536 places for each read.
	type result struct {
		pending uint64
		err     error
	}
	var msgs []storedMsg
	done := make(chan result, 1)
	finished := false // the callbacks of a subscription run one at a time
	finish := func(r result) {
		finished = true
		done <- r
	}
	sub, err := g.nc.Subscribe(g.nc.NewInbox(), func(m *nats.Msg) {
		if finished {
			return // nothing should follow an end: what does is passed over
		}
		switch status := m.Header.Get("Status"); status {
		case "":
		case "404":
			finish(result{})
			return
		case "204": // the end of a batch
			pending, err := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
			if err != nil {
				err = fmt.Errorf("an end of batch without a count: %q", m.Header.Get("Nats-Num-Pending"))
			}
			finish(result{pending: pending, err: err})
			return
		default:
			finish(result{err: fmt.Errorf("%s %s", status, m.Header.Get("Description"))})
			return
		}
		seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil {
			finish(result{err: fmt.Errorf("a message without its sequence")})
			return
		}
		msgs = append(msgs, storedMsg{seq: seq, subject: m.Header.Get(jetstream.SubjectHeader), data: m.Data})
		if req.Batch == 0 {
			finish(result{})
		}
	})
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := g.nc.PublishRequest(g.subject, sub.Subject, body); err != nil {
		return nil, 0, err
	}
	select {
	case r := <-done:
		if r.err != nil {
			return nil, 0, fmt.Errorf("direct get on %s: %w", g.subject, r.err)
		}
		// The callback wrote msgs before it sent r: the channel orders them.
		return msgs, r.pending, nil
	case <-ctx.Done():
		return nil, 0, fmt.Errorf("direct get on %s: %w", g.subject, ctx.Err())
	}
}
