package handlers

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	fastjson "github.com/go-json-experiment/json/v1"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/handlers/embedded"
	"github.com/dwr-run/dwr/schemas"
)

// feedQueryWait bounds how long the feed query waits for the feed's stream.
const feedQueryWait = 5 * time.Second

// feedFetchBytes bounds the events a feed query reads at once, well under
// the server's max_pending (64 MiB by default): a read of 256 events of up
// to 1 MiB passed a connection's max_pending, and the server cut the
// connection it came on (any viewer could, with a feed of large events).
const feedFetchBytes = 8 << 20

// feedPage answers the feed query: the events the feed stream holds for
// workspace ws whose subject matches q.Filter, oldest first, from just after
// the stream sequence q.After (a reply's next), or from the first event of
// log sequence q.FromSeq or later, or from q.Since, or from the oldest. It
// reads them with batched direct gets on the stream, in the stream's order
// (no consumer is made for a page: on a cluster each would be a proposal
// to the meta leader), so a client that lists until no next follows and
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
	var from directGetRequest // where the page starts: the oldest event by default
	switch {
	case q.After != "":
		seq, err := strconv.ParseUint(q.After, 10, 64)
		if err != nil || seq == 0 {
			return nil, "", &schemas.Error{Code: schemas.CodeInvalid, Message: "after must be a feed position, as a feed reply's next gives it",
				Fields: []schemas.FieldError{{Pointer: "/after", Message: "not a feed position"}}}
		}
		from.Seq = seq + 1
	case q.FromSeq > 0:
		pos, err := s.feedPosition(q.FromSeq)
		if err != nil {
			return nil, "", err
		}
		from.Seq = pos
	case q.Since != nil:
		from.StartTime = q.Since
	}
	ctx, cancel := context.WithTimeout(context.Background(), feedQueryWait)
	defer cancel()
	// The stream stores events without their aggregate's id (newFeed):
	// the reads ask for what the stored subjects can tell apart, and each
	// event is matched against the whole filter by its whole subject. A
	// feed written before stores them whole, under <prefix>.ev.: while it
	// holds such events from the page's start on, the page reads both
	// kinds (<prefix>.*.<ws>.>) and matches each.
	whole := s.cfg.Prefix + ".ev." + ws + "." + filter
	read, exact := storedFilter(s.cfg.Prefix, ws, filter)
	getter := s.feedGetter()
	legacy := from
	legacy.NextFor = s.cfg.Prefix + ".ev." + ws + ".>"
	switch msgs, _, err := getter.get(ctx, legacy); {
	case err != nil:
		return nil, "", fmt.Errorf("handlers: feed query: %w", err)
	case len(msgs) > 0:
		read, exact = s.cfg.Prefix+".*."+ws+".>", false
	}
	// Up to feedScanLimit events are read for a page; the ones the filter
	// does not match are passed over. A page that stops at the limit says
	// where to go on (its next), with the events it matched so far.
	scanned, passed, scanLimit := 0, "", feedScanLimit
	if n := feedScanOverride.Load(); n > 0 {
		scanLimit = int(n)
	}
	from.NextFor = read
	more := true
	for more && pg.next == "" && scanned < scanLimit {
		// One more than the page takes, so that a full page knows whether
		// more follow; a few hundred at once when most may be passed over
		// (a filter the stored subjects cannot tell exactly).
		ask := pg.limit - pg.n + 1
		if !exact {
			ask = max(ask, 256)
		}
		from.Batch, from.MaxBytes = min(ask, scanLimit-scanned), feedFetchBytes
		msgs, pending, err := getter.get(ctx, from)
		if err != nil {
			return nil, "", fmt.Errorf("handlers: feed query: %w", err)
		}
		more = pending > 0 && len(msgs) > 0
		for _, m := range msgs {
			scanned++
			pos := strconv.FormatUint(m.seq, 10)
			from.Seq, from.StartTime = m.seq+1, nil
			if !exact && !s.feedMatches(m.subject, m.data, whole) {
				passed = pos
				continue
			}
			if !pg.addRaw(m.data, "at feed position "+pos, pos) {
				more = true
				break
			}
			passed = ""
		}
	}
	if more && pg.next == "" { // the scan's limit
		pg.next = pg.last
		if passed != "" {
			pg.next = passed // go on after the events passed over
		}
	}
	return pg.result(nil)
}

// feedScanLimit bounds the events one feed page reads to find those its
// filter matches; feedScanOverride, when set, replaces it (tests).
const feedScanLimit = 2_000

var feedScanOverride atomic.Int64

// storedFilter returns the subject the feed's stream stores the events of
// workspace ws that filter (tokens after <prefix>.ev.<ws>.) may match
// under: <prefix>.evs.<ws>.<aggregate>.<event>, without the aggregate's id.
// It matches every such event, and may match more; exact says it matches
// only those (the filter names no aggregate id, so nothing is left to check).
func storedFilter(prefix, ws, filter string) (stored string, exact bool) {
	stored = prefix + ".evs." + ws + "."
	tokens := strings.Split(filter, ".")
	if tokens[0] == ">" {
		return stored + ">", true
	}
	// Exact: <agg>.> (any id, any event), or three tokens with * for the id.
	exact = len(tokens) == 2 && tokens[1] == ">" || len(tokens) == 3 && tokens[1] == "*"
	if len(tokens) == 3 && tokens[2] != ">" {
		return stored + tokens[0] + "." + tokens[2], exact
	}
	return stored + tokens[0] + ".>", exact
}

// feedMatches reports whether the feed message with stored subject subj
// and envelope data is an event whose whole subject matches filter.
func (s *Service) feedMatches(subj string, data []byte, filter string) bool {
	if !strings.HasPrefix(subj, s.cfg.Prefix+".evs.") {
		return embedded.SubjectMatches(subj, filter) // stored whole, by a feed written before
	}
	var e struct {
		Type          string `json:"type"`
		Workspace     string `json:"ws"`
		AggregateType string `json:"agg"`
		AggregateID   string `json:"agg_id"`
	}
	if err := fastjson.Unmarshal(data, &e); err != nil {
		return false
	}
	return embedded.SubjectMatches(Subject(s.cfg.Prefix, &eventstore.Event{Type: e.Type, Workspace: e.Workspace,
		AggregateType: e.AggregateType, AggregateID: e.AggregateID}), filter)
}

// feedStream returns the feed's stream on the queries' connection, read
// once for that connection: its direct gets go to the stream, while reading
// its info (as JetStream.Stream does) waits in JetStream's info queue, which
// the whole server shares, and a feed query asked it each time.
func (s *Service) feedStream(ctx context.Context) (jetstream.Stream, error) {
	js := s.readJS()
	if h := s.feedHandle.Load(); h != nil && h.js == js {
		return h.st, nil
	}
	st, err := js.Stream(ctx, strings.ToUpper(s.cfg.Prefix)+"_EVENTS")
	if err != nil {
		return nil, err
	}
	s.feedHandle.Store(&streamHandle{js: js, st: st})
	return st, nil
}

// streamHandle is a stream as read on a JetStream context.
type streamHandle struct {
	js jetstream.JetStream
	st jetstream.Stream
}

// feedPosition returns the position in the feed's stream of the first event
// of log sequence logSeq or later (past the last one when there is none):
// a binary search over the stream by direct gets, each reading the log
// sequence of the first message at or after a position (the feed is
// published in log order).
func (s *Service) feedPosition(logSeq uint64) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), feedQueryWait)
	defer cancel()
	st, err := s.feedStream(ctx)
	if err != nil {
		return 0, fmt.Errorf("handlers: feed query: %w", err)
	}
	lo, hi := uint64(1), uint64(1) // a message before the first reads as the first
	switch last, err := st.GetLastMsgForSubject(ctx, s.cfg.Prefix+".*.>"); {
	case err == nil:
		hi = last.Sequence + 1
	case !errors.Is(err, jetstream.ErrMsgNotFound):
		return 0, fmt.Errorf("handlers: feed query: %w", err)
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		m, err := st.GetMsg(ctx, mid, jetstream.WithGetMsgSubject(s.cfg.Prefix+".*.>")) // the first at or after mid, stored either way
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
