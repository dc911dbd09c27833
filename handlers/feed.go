package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// feed publishes committed events on <prefix>.ev.<ws>.<aggregate>.<id>.<event>,
// captured by a derived stream (async persistence: it is rebuilt from the log).
//
// Events are sent without waiting for the stream, each expecting the one
// before it as the stream's last (Nats-Expected-Last-Sequence), so the stream
// stores an event only after its predecessor: an event that is lost (the
// stream unavailable, a publish that failed) stops the feed there instead of
// leaving a hole behind later events. audit sees the stream's end stay
// behind what was sent, and repair sends the rest again from the log.
type feed struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	config jetstream.StreamConfig // the stream's, made again if it is deleted
	prefix string
	logger *slog.Logger

	mu sync.Mutex
	// last is the stream sequence the next event expects as the stream's
	// last: that of the last event sent (or found at the feed's end).
	last uint64
	// logSeq is the log record whose events were sent last.
	logSeq uint64
	// failed: a publish failed; repairing: the feed's end is being found
	// again and what follows it sent from the log. Either way live
	// publishing reaches live subscribers only, until a repair has stored
	// what it skipped.
	failed, repairing bool
}

// DefaultFeedMaxBytes is the event feed stream's default bound (Config's
// FeedMaxBytes): 1 GiB, some 1.8 million events of chain-3's size.
const DefaultFeedMaxBytes = 1 << 30

// minFeedBytes is the least FeedMaxBytes: one message at its largest.
const minFeedBytes = 1 << 20

// FeedBytesFor returns the event feed's default bound on a server whose
// JetStream may store storeLimit bytes: DefaultFeedMaxBytes, or a quarter
// of the limit when that is less (JetStream sets a stream's bound aside
// from the limit when it creates it, and the log needs the rest), but no
// less than one event at its largest.
func FeedBytesFor(storeLimit int64) int64 {
	return max(min(DefaultFeedMaxBytes, storeLimit/4), minFeedBytes)
}

func newFeed(ctx context.Context, js jetstream.JetStream, cfg Config, logger *slog.Logger) (*feed, error) {
	// The stream stores each event under its subject without the
	// aggregate's id (storedFilter reads it back): JetStream keeps an index entry in
	// memory for every subject a stream holds, ~200 bytes each, and with
	// the id nearly every event would be a subject of its own. Live
	// subscribers still receive every event on its whole subject; the feed
	// query matches stored events against the whole subject again.
	sc := jetstream.StreamConfig{
		Name: strings.ToUpper(cfg.Prefix) + "_EVENTS", Description: "dwr public event feed, derived from the log",
		Subjects: []string{cfg.Prefix + ".ev.>"}, Storage: jetstream.FileStorage, Retention: jetstream.LimitsPolicy,
		Replicas: 1, PersistMode: jetstream.AsyncPersistMode, AllowDirect: true,
		MaxBytes: cfg.FeedMaxBytes, Discard: jetstream.DiscardOld,
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: cfg.Prefix + ".ev.*.*.*.*",
			Destination: cfg.Prefix + ".evs.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(4)}}"},
	}
	st, err := js.CreateOrUpdateStream(ctx, sc)
	if err != nil {
		return nil, fmt.Errorf("handlers: event feed stream: %w", err)
	}
	return &feed{js: js, stream: st, config: sc, prefix: cfg.Prefix, logger: logger}, nil
}

// Subject returns the feed subject of an event.
func Subject(prefix string, e *eventstore.Event) string {
	name := e.Type
	if i := strings.IndexByte(name, '.'); i >= 0 {
		name = name[i+1:]
	}
	return prefix + ".ev." + e.Workspace + "." + e.AggregateType + "." + e.AggregateID + "." + name
}

// publish sends a committed record's events, without waiting: the feed is
// derived, and repair mends what did not reach it. It sends them without a
// Nats-Msg-Id: JetStream's deduplication would keep every event's id for its
// window (about 5 % of a chain's CPU and ~8 MiB at 2,000 chains in flight);
// the expected last sequence keeps an event from being stored twice.
func (f *feed) publish(c *eventstore.Commit, seq uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case seq <= f.logSeq: // a repair sent it
	case f.failed || f.repairing:
		// Live subscribers (executors watching for cancellations) get it
		// now; the stream takes it from the repair, in its place.
		f.sendLive(c, seq)
	default:
		f.send(c, seq, 0)
	}
}

// send sends a record's events from the from-th (0: all), each expecting
// the one before it as the stream's last. Called with f.mu held.
func (f *feed) send(c *eventstore.Commit, seq uint64, from int) {
	nc := f.js.Conn()
	for i := from; i < len(c.Events); i++ {
		m := f.msg(&c.Events[i], seq)
		m.Header.Set(jetstream.ExpectedLastSeqHeader, strconv.FormatUint(f.last, 10))
		if err := nc.PublishMsg(m); err != nil {
			f.logger.Warn("handlers: event feed publish failed; the feed is repaired from the log", "seq", seq, "err", err)
			f.failed = true
			return
		}
		f.last++
	}
	f.logSeq = seq
}

// sendLive sends a record's events to live subscribers only: they expect
// another stream than the feed's, which refuses them.
func (f *feed) sendLive(c *eventstore.Commit, seq uint64) {
	nc := f.js.Conn()
	for i := range c.Events {
		m := f.msg(&c.Events[i], seq)
		m.Header.Set(jetstream.ExpectedStreamHeader, liveOnly)
		if err := nc.PublishMsg(m); err != nil {
			return // the repair sends it
		}
	}
}

// liveOnly is the stream an event sent to live subscribers only expects:
// none is named so.
const liveOnly = "live-only"

// msg is event e's message, from log record seq.
func (f *feed) msg(e *eventstore.Event, seq uint64) *nats.Msg {
	m := nats.NewMsg(Subject(f.prefix, e))
	m.Header.Set(schemas.HeaderLogSeq, strconv.FormatUint(seq, 10))
	m.Data = e.Raw
	return m
}

// feedAuditEvery is how often the writer compares the feed's end with what
// it sent.
const feedAuditEvery = 2 * time.Second

// feedAuditMax is the longest round after repairs that did not last.
const feedAuditMax = 10 * time.Second

// audit repairs the feed whenever its stream's last sequence stays behind
// what was sent for a whole round (or went past it: events this writer did
// not send), or a publish failed, until ctx ends. After a repair the next
// round comes later and later (up to every 10 s) until the feed is found
// whole: a stream that keeps losing events is not read back every 2 s.
func (f *feed) audit(ctx context.Context, log eventstore.Log, views *projections.Store, repaired func()) {
	wait := feedAuditEvery
	var prev uint64
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t.Reset(wait)
		info, err := f.stream.Info(ctx)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			// Deleted: made again, and filled from the log by the repair.
			f.logger.Warn("handlers: the event feed's stream is gone; making it again from the log", "stream", f.config.Name)
			if _, err = f.js.CreateOrUpdateStream(ctx, f.config); err == nil {
				info, err = f.stream.Info(ctx)
			}
		}
		if err != nil {
			continue // unavailable: the next round
		}
		got := info.State.LastSeq
		f.mu.Lock()
		want, stuck := f.last, f.failed || f.repairing
		f.mu.Unlock()
		moved := got != prev
		prev = got
		if !stuck && (got == want || got < want && moved) {
			wait = feedAuditEvery
			continue
		}
		if err := f.repair(ctx, log, views); err != nil {
			if ctx.Err() == nil {
				f.logger.Warn("handlers: event feed repair failed; tried again later", "err", err, "in", wait)
			}
		} else {
			f.logger.Info("handlers: event feed repaired from the log", "from", got, "to", want)
			repaired()
		}
		wait = min(2*wait, feedAuditMax)
	}
}

// repair finds the feed's last event and sends, from the log, the events
// that follow it, up to the views' checkpoint (meanwhile live publishing
// reaches live subscribers only); then live publishing stores again. The
// records are sent as they were verified when the views applied them; the
// stretches an acceptance left out of the log are skipped. On an error the
// feed stays so, for the next repair.
func (f *feed) repair(ctx context.Context, log eventstore.Log, views *projections.Store) error {
	f.mu.Lock()
	f.repairing, f.failed = true, false
	f.mu.Unlock()
	from, lastID, err := f.end(ctx)
	if err != nil {
		return err
	}
	discarded, err := views.Discarded()
	if err != nil {
		return err
	}
	for {
		upTo := views.Checkpoint()
		if from <= upTo {
			if err := f.sendLog(ctx, log, discarded, from, lastID, upTo); err != nil {
				return err
			}
		}
		f.mu.Lock()
		if f.failed {
			f.mu.Unlock()
			return errors.New("handlers: an event feed publish failed")
		}
		if views.Checkpoint() == upTo { // what live publishing skipped is sent
			f.repairing = false
			f.mu.Unlock()
			return nil
		}
		f.mu.Unlock()
		from, lastID = upTo+1, ""
	}
}

// end reads the feed's end: the stream's last sequence (what the next event
// expects) and the log record and id of its last event, and returns the
// record to resume from and the id of the event to resume after ("": the
// whole record; record 1 when the feed holds no event).
func (f *feed) end(ctx context.Context) (from uint64, lastID string, _ error) {
	info, err := f.stream.Info(ctx)
	if err != nil {
		return 0, "", err
	}
	last := info.State.LastSeq
	from = 1
	// Events are stored with their ids (a feed written before) or without.
	m, err := f.stream.GetLastMsgForSubject(ctx, f.prefix+".*.>")
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		return 0, "", err
	default:
		n, err := strconv.ParseUint(m.Header.Get(schemas.HeaderLogSeq), 10, 64)
		if err != nil {
			return 0, "", fmt.Errorf("handlers: feed message without %s", schemas.HeaderLogSeq)
		}
		var e struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(m.Data, &e); err != nil || e.ID == "" {
			return 0, "", fmt.Errorf("handlers: the feed's last message (seq %d) is not an event", m.Sequence)
		}
		from, lastID = n, e.ID
		last = max(last, m.Sequence) // stored since Info
	}
	f.mu.Lock()
	f.last, f.logSeq = last, from-1
	f.mu.Unlock()
	return from, lastID, nil
}

// sendLog sends the events of log records from to upTo, resuming record
// from after its event lastID ("": the whole record).
func (f *feed) sendLog(ctx context.Context, log eventstore.Log, discarded [][2]uint64, from uint64, lastID string, upTo uint64) error {
	err := log.Read(ctx, from, func(seq uint64, rec []byte) error {
		if seq > upTo {
			return errSent
		}
		for _, d := range discarded {
			if seq >= d[0] && seq <= d[1] {
				return nil
			}
		}
		c, err := eventstore.DecodeCommit(rec)
		if err != nil {
			return err
		}
		next := 0
		if seq == from && lastID != "" {
			// Not there (a feed left from another log): the whole record.
			next = slices.IndexFunc(c.Events, func(e eventstore.Event) bool { return e.ID == lastID }) + 1
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.failed {
			return errors.New("handlers: an event feed publish failed")
		}
		f.send(c, seq, next)
		return nil
	})
	if errors.Is(err, errSent) {
		return nil
	}
	return err
}

// errSent stops sendLog's read of the log past the records it sends.
var errSent = errors.New("handlers: sent up to the views' checkpoint")
