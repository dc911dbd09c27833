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

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// feed publishes committed events on <prefix>.ev.<ws>.<aggregate>.<id>.<event>,
// captured by a derived stream (async persistence: it is rebuilt from the log).
type feed struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	prefix string
	logger *slog.Logger
}

// DefaultFeedMaxBytes is the event feed stream's default bound (Config's
// FeedMaxBytes): 1 GiB, some 1.8 million events of chain-3's size.
const DefaultFeedMaxBytes = 1 << 30

// minFeedBytes is the least FeedMaxBytes: one message at its largest.
const minFeedBytes = 1 << 20

func newFeed(ctx context.Context, js jetstream.JetStream, cfg Config, logger *slog.Logger) (*feed, error) {
	// The stream stores each event under its subject without the
	// aggregate's id (storedFilter reads it back): JetStream keeps an index entry in
	// memory for every subject a stream holds, ~200 bytes each, and with
	// the id nearly every event would be a subject of its own. Live
	// subscribers still receive every event on its whole subject; the feed
	// query matches stored events against the whole subject again.
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: strings.ToUpper(cfg.Prefix) + "_EVENTS", Description: "dwr public event feed, derived from the log",
		Subjects: []string{cfg.Prefix + ".ev.>"}, Storage: jetstream.FileStorage, Retention: jetstream.LimitsPolicy,
		Replicas: 1, PersistMode: jetstream.AsyncPersistMode, AllowDirect: true,
		MaxBytes: cfg.FeedMaxBytes, Discard: jetstream.DiscardOld,
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: cfg.Prefix + ".ev.*.*.*.*",
			Destination: cfg.Prefix + ".evs.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(4)}}"},
	})
	if err != nil {
		return nil, fmt.Errorf("handlers: event feed stream: %w", err)
	}
	return &feed{js: js, stream: st, prefix: cfg.Prefix, logger: logger}, nil
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
// derived, and catchUp repairs what a crash lost. It sends them without a
// Nats-Msg-Id: JetStream's deduplication would keep every event's id for its
// window (about 5 % of a chain's CPU and ~8 MiB at 2,000 chains in flight),
// and catchUp resumes after the last event the feed holds rather than
// sending a record again.
func (f *feed) publish(c *eventstore.Commit, seq uint64) { f.publishFrom(c, seq, 0) }

// publishFrom sends a record's events from the from-th (0: all).
func (f *feed) publishFrom(c *eventstore.Commit, seq uint64, from int) {
	nc := f.js.Conn()
	for i := from; i < len(c.Events); i++ {
		e := &c.Events[i]
		m := nats.NewMsg(Subject(f.prefix, e))
		m.Header.Set(schemas.HeaderLogSeq, strconv.FormatUint(seq, 10))
		m.Data = e.Raw
		if err := nc.PublishMsg(m); err != nil {
			f.logger.Warn("handlers: event feed publish failed", "seq", seq, "err", err)
			return
		}
	}
}

// catchUp republishes the events of the log records after the last event
// the feed holds, up to the views' checkpoint: the rest of that event's
// record (a crash can cut a record's events short), then the records after
// it. Those records were verified when the views applied them; the
// stretches an acceptance left out of the log are skipped.
func (f *feed) catchUp(ctx context.Context, log eventstore.Log, views *projections.Store) error {
	upTo := views.Checkpoint()
	var from uint64 = 1
	var lastID string // the last event the feed holds, in record from
	// Events are stored with their ids (a feed written before) or without.
	m, err := f.stream.GetLastMsgForSubject(ctx, f.prefix+".*.>")
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		return err
	default:
		n, err := strconv.ParseUint(m.Header.Get(schemas.HeaderLogSeq), 10, 64)
		if err != nil {
			return fmt.Errorf("handlers: feed message without %s", schemas.HeaderLogSeq)
		}
		var e struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(m.Data, &e); err != nil || e.ID == "" {
			return fmt.Errorf("handlers: the feed's last message (seq %d) is not an event", m.Sequence)
		}
		from, lastID = n, e.ID
	}
	if from > upTo {
		return nil
	}
	discarded, err := views.Discarded()
	if err != nil {
		return err
	}
	return log.Read(ctx, from, func(seq uint64, rec []byte) error {
		if seq > upTo {
			return nil
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
		f.publishFrom(c, seq, next)
		return nil
	})
}
