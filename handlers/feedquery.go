package handlers

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dwr-run/dwr/schemas"
)

// feedQueryWait bounds how long the feed query waits for the feed's stream.
const feedQueryWait = 5 * time.Second

// feedPage answers the feed query: the events the feed stream holds for
// workspace ws whose subject matches q.Filter, oldest first, from just after
// the stream sequence q.After (a reply's next), or from the first event of
// log sequence q.FromSeq or later, or from q.Since, or from the oldest. It reads them with an ordered consumer of its own, so the listing
// is the feed's order, and a client that lists until no next follows and
// then subscribes (deduplicating by event id) misses nothing the feed holds.
func (s *Service) feedPage(ws string, q schemas.Query, pg *page) (res []byte, next string, err error) {
	filter := q.Filter
	if filter == "" {
		filter = ">"
	}
	if msg := subjectFilterProblem(filter); msg != "" {
		return nil, "", &schemas.Error{Code: schemas.CodeInvalid, Message: fmt.Sprintf("filter %q %s", filter, msg),
			Fields: []schemas.FieldError{{Pointer: "/filter", Message: msg}}}
	}
	// The consumer is deleted once the page is read; the server drops one
	// left behind (a replica stopped meanwhile) after its inactivity.
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{s.cfg.Prefix + ".ev." + ws + "." + filter},
		InactiveThreshold: 10 * time.Second}
	switch {
	case q.After != "":
		seq, err := strconv.ParseUint(q.After, 10, 64)
		if err != nil || seq == 0 {
			return nil, "", &schemas.Error{Code: schemas.CodeInvalid, Message: "after must be a feed position, as a feed reply's next gives it",
				Fields: []schemas.FieldError{{Pointer: "/after", Message: "not a feed position"}}}
		}
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, seq+1
	case q.FromSeq > 0:
		pos, err := s.feedPosition(q.FromSeq)
		if err != nil {
			return nil, "", err
		}
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, pos
	case q.Since != nil:
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, q.Since
	}
	ctx, cancel := context.WithTimeout(context.Background(), feedQueryWait)
	defer cancel()
	stream := strings.ToUpper(s.cfg.Prefix) + "_EVENTS"
	cons, err := s.js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, "", fmt.Errorf("handlers: feed query: %w", err)
	}
	defer func() {
		if info := cons.CachedInfo(); info != nil {
			_ = s.js.DeleteConsumer(context.Background(), stream, info.Name)
		}
	}()
	// One more than the page takes, so that a full page knows whether more
	// follow; none pending after the last says nothing does.
	batch, err := cons.FetchNoWait(pg.limit + 1)
	if err != nil {
		return nil, "", fmt.Errorf("handlers: feed query: %w", err)
	}
	more := false
	for m := range batch.Messages() {
		md, err := m.Metadata()
		if err != nil {
			return nil, "", fmt.Errorf("handlers: feed query: %w", err)
		}
		pos := strconv.FormatUint(md.Sequence.Stream, 10)
		if !pg.addRaw(m.Data(), "at feed position "+pos, pos) {
			more = true
			break
		}
		more = md.NumPending > 0
	}
	if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && pg.n == 0 {
		return nil, "", fmt.Errorf("handlers: feed query: %w", err)
	}
	if more && pg.next == "" {
		pg.next = pg.last
	}
	return pg.result(nil)
}

// feedPosition returns the position in the feed's stream of the first event
// of log sequence logSeq or later (past the last one when there is none):
// a binary search over the stream by direct gets, each reading the log
// sequence of the first message at or after a position (the feed is
// published in log order).
func (s *Service) feedPosition(logSeq uint64) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), feedQueryWait)
	defer cancel()
	st, err := s.js.Stream(ctx, strings.ToUpper(s.cfg.Prefix)+"_EVENTS")
	if err != nil {
		return 0, fmt.Errorf("handlers: feed query: %w", err)
	}
	state := st.CachedInfo().State
	lo, hi := max(state.FirstSeq, 1), state.LastSeq+1
	for lo < hi {
		mid := lo + (hi-lo)/2
		m, err := st.GetMsg(ctx, mid, jetstream.WithGetMsgSubject(s.cfg.Prefix+".ev.>"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			hi = mid
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("handlers: feed query: %w", err)
		}
		at, err := strconv.ParseUint(m.Header.Get(schemas.HeaderLogSeq), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("handlers: feed message %d without %s", m.Sequence, schemas.HeaderLogSeq)
		}
		if at >= logSeq {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, nil
}

// subjectFilterProblem says what is wrong with a subject filter's tokens,
// or "" when nothing is: tokens are not empty and hold no white space, and
// ">" stands only last.
func subjectFilterProblem(filter string) string {
	if len(filter) > 256 {
		return "is longer than 256 bytes"
	}
	tokens := strings.Split(filter, ".")
	for i, tok := range tokens {
		switch {
		case tok == "":
			return "has an empty token: use tokens separated by dots, e.g. task.>"
		case strings.ContainsAny(tok, " \t\r\n"):
			return "holds white space"
		case tok == ">" && i != len(tokens)-1:
			return "has > before its last token: > stands for the rest of the subject"
		case len(tok) > 1 && strings.ContainsAny(tok, "*>"):
			return fmt.Sprintf("has token %q: * and > stand alone in a token", tok)
		}
	}
	return ""
}
