package handlers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

func newFeed(ctx context.Context, js jetstream.JetStream, cfg Config, logger *slog.Logger) (*feed, error) {
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: strings.ToUpper(cfg.Prefix) + "_EVENTS", Description: "dwr public event feed, derived from the log",
		Subjects: []string{cfg.Prefix + ".ev.>"}, Storage: jetstream.FileStorage, Retention: jetstream.LimitsPolicy,
		Replicas: 1, PersistMode: jetstream.AsyncPersistMode, AllowDirect: true,
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
// derived, and catchUp repairs what a crash lost.
func (f *feed) publish(c *eventstore.Commit, seq uint64) {
	nc := f.js.Conn()
	for i := range c.Events {
		e := &c.Events[i]
		m := nats.NewMsg(Subject(f.prefix, e))
		m.Header.Set(jetstream.MsgIDHeader, e.ID)
		m.Header.Set(schemas.HeaderLogSeq, strconv.FormatUint(seq, 10))
		m.Data = e.Raw
		if err := nc.PublishMsg(m); err != nil {
			f.logger.Warn("handlers: event feed publish failed", "seq", seq, "err", err)
			return
		}
	}
}

// catchUp republishes the events of the log records after the last one the
// feed holds, up to the views' checkpoint. Those records were verified when
// the views applied them; the stretches an acceptance left out of the log are
// skipped.
func (f *feed) catchUp(ctx context.Context, log eventstore.Log, views *projections.Store) error {
	upTo := views.Checkpoint()
	var from uint64 = 1
	m, err := f.stream.GetLastMsgForSubject(ctx, f.prefix+".ev.>")
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		return err
	default:
		n, err := strconv.ParseUint(m.Header.Get(schemas.HeaderLogSeq), 10, 64)
		if err != nil {
			return fmt.Errorf("handlers: feed message without %s", schemas.HeaderLogSeq)
		}
		from = n + 1
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
		f.publish(c, seq)
		return nil
	})
}
