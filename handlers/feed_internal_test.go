package handlers

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/schemas"
)

// The feed's stream stores an event only after the one before it, and
// while the feed waits for a repair its events still reach live
// subscribers, but not the stream.
func TestFeedEventsFollowTheirPredecessorOrReachLiveSubscribersOnly(t *testing.T) {
	js := startJetStream(t)
	nc := js.Conn()
	ctx := context.Background()
	f, err := newFeed(ctx, js, Config{Prefix: "dwr", FeedMaxBytes: minFeedBytes}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	live := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe("dwr.ev.>", live)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	record := func(ids ...string) *eventstore.Commit {
		c := &eventstore.Commit{}
		for _, id := range ids {
			c.Events = append(c.Events, eventstore.Event{ID: id, Type: "goal.created", Workspace: "default",
				AggregateType: "goal", AggregateID: "g-" + id, Version: 1, Raw: []byte(`{"id":"` + id + `"}`)})
		}
		return c
	}
	// stored returns the stream's last sequence once it has taken what was
	// sent before: a message it refuses, answered in turn.
	stored := func() uint64 {
		m := nats.NewMsg("dwr.ev.default.goal.probe.created")
		m.Header.Set(jetstream.ExpectedStreamHeader, liveOnly)
		_, err := js.PublishMsg(ctx, m)
		var refused *jetstream.APIError
		require.ErrorAs(t, err, &refused)
		require.Equal(t, jetstream.ErrorCode(10060), refused.ErrorCode, "expected stream not matched: %v", err)
		info, err := f.stream.Info(ctx)
		require.NoError(t, err)
		return info.State.LastSeq
	}
	received := func(n int) []string {
		var logSeqs []string
		for len(logSeqs) < n {
			select {
			case m := <-live:
				if m.Header.Get(schemas.HeaderLogSeq) == "" {
					continue // stored's probe
				}
				logSeqs = append(logSeqs, m.Header.Get(schemas.HeaderLogSeq))
			case <-time.After(5 * time.Second):
				t.Fatalf("live subscribers got %d of %d events", len(logSeqs), n)
			}
		}
		return logSeqs
	}

	f.publish(record("a", "b"), 1)
	require.Equal(t, uint64(2), stored())
	require.Equal(t, []string{"1", "1"}, received(2))

	// An event that does not follow the stream's last is not stored.
	f.mu.Lock()
	f.last = 5
	f.mu.Unlock()
	f.publish(record("c"), 2)
	require.Equal(t, uint64(2), stored(), "stored after a hole")
	require.Equal(t, []string{"2"}, received(1), "live subscribers get it all the same")

	// Waiting for a repair: live subscribers only.
	f.mu.Lock()
	f.last, f.repairing = 2, true
	f.mu.Unlock()
	f.publish(record("d", "e"), 3)
	require.Equal(t, []string{"3", "3"}, received(2))
	require.Equal(t, uint64(2), stored(), "the repair stores them")
	require.Equal(t, uint64(2), f.last, "nothing counted")

	// A record a repair sent is not sent again.
	f.mu.Lock()
	f.repairing, f.logSeq = false, 4
	f.mu.Unlock()
	f.publish(record("f"), 4)
	f.publish(record("g"), 5)
	require.Equal(t, uint64(3), stored())
	require.Equal(t, []string{strconv.Itoa(5)}, received(1))
}
