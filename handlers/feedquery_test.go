package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/schemas"
)

// The feed's stream stores events without their aggregate's id, so that it
// holds a subject per aggregate kind and event, not per aggregate
// (JetStream keeps every subject a stream holds in memory), while live
// subscribers get each event on its whole subject. The feed query still
// lists one aggregate's events: each page reads a bounded stretch of the
// feed, so a page may come back empty, with a next to go on from.
func TestTheFeedHoldsNoSubjectPerAggregate(t *testing.T) {
	defer handlers.SetFeedScanLimit(3)()
	b := setupJetStream(t)
	live := make(chan string, 64)
	sub, err := b.nc.Subscribe("dwr.ev.default.goal.>", func(m *nats.Msg) { live <- m.Subject })
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	var ids []string
	var seq uint64
	for i := range 12 {
		r, s := b.mustCommand(t, "goal.create", map[string]any{"title": fmt.Sprintf("g%d", i)})
		ids, seq = append(ids, r.ID), s
	}
	for _, id := range ids {
		require.Equal(t, "dwr.ev.default.goal."+id+".created", <-live, "live, an event comes on its whole subject")
	}
	st, _ := feedAt(t, b, seq)
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(">"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, info.State.Msgs, uint64(len(ids)))
	require.Equal(t, map[string]uint64{"dwr.evs.default.goal.created": uint64(len(ids)), "dwr.evs.default.workspace.created": 1},
		info.State.Subjects, "one subject per aggregate kind and event")

	got, empty := feedPages(t, b, schemas.Query{Filter: "goal." + ids[7] + ".>", Limit: 10})
	require.Len(t, got, 1)
	require.Equal(t, "goal.created", got[0].Type)
	require.Equal(t, ids[7], got[0].AggregateID)
	require.Positive(t, empty, "pages that read only other goals' events came back empty, with a next")

	all, _ := feedPages(t, b, schemas.Query{Filter: "goal.*.created", Limit: 100})
	require.Len(t, all, len(ids), "a filter without an id lists every goal's")
}

// A feed written before the stream stored events without their ids keeps
// them under their whole subjects until they age out: the feed query finds
// an aggregate's events stored either way.
func TestTheFeedQueryReadsEventsStoredWithTheirIDs(t *testing.T) {
	b := setupJetStream(t)
	ctx := context.Background()
	st, err := b.jetstream(t).Stream(ctx, "DWR_EVENTS")
	require.NoError(t, err)
	cfg := st.CachedInfo().Config
	cfg.SubjectTransform = nil // as the stream was
	_, err = b.jetstream(t).UpdateStream(ctx, cfg)
	require.NoError(t, err)
	old, seq := b.mustCommand(t, "goal.create", map[string]any{"title": "stored whole"})
	st, _ = feedAt(t, b, seq)
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(">"))
	require.NoError(t, err)
	require.Contains(t, info.State.Subjects, "dwr.ev.default.goal."+old.ID+".created")

	dir := b.dir
	b.stop()
	b = start(t, dir) // the stream stores without ids again
	later, _ := b.mustCommand(t, "goal.create", map[string]any{"title": "stored without its id"})
	for _, id := range []string{old.ID, later.ID} {
		var page []schemas.Event
		require.Eventually(t, func() bool {
			r := b.request(t, "dwr.q.default.feed", schemas.Query{Filter: "goal." + id + ".>"}, nil)
			require.True(t, r.OK, "%+v", r.Error)
			require.NoError(t, json.Unmarshal(r.Result, &page))
			return len(page) == 1
		}, 10*time.Second, 20*time.Millisecond, "goal %s", id)
		require.Equal(t, id, page[0].AggregateID)
	}
}

// A feed page from a log sequence starts at that record's first event,
// found by direct gets on the feed's stream: the stream's info, which
// waits in JetStream's info queue (the whole server's), is read once, not
// for each page.
func TestAFeedPageFromASequenceReadsTheStreamsInfoOnce(t *testing.T) {
	b := setupJetStream(t)
	var seqs []uint64
	var ids []string
	for i := range 3 {
		r, seq := b.mustCommand(t, "goal.create", map[string]any{"title": fmt.Sprintf("goal %d", i)})
		seqs, ids = append(seqs, seq), append(ids, r.ID)
	}
	feedAt(t, b, seqs[2])
	var infos atomic.Int64
	sub, err := b.svcNC.Subscribe("$JS.API.STREAM.INFO.DWR_EVENTS", func(*nats.Msg) { infos.Add(1) })
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	require.NoError(t, b.svcNC.Flush())
	for range 3 {
		for i, seq := range seqs {
			var page []schemas.Event
			r := b.request(t, "dwr.q.default.feed", schemas.Query{FromSeq: seq}, nil)
			require.True(t, r.OK, "%+v", r.Error)
			require.NoError(t, json.Unmarshal(r.Result, &page))
			var goals []string
			for _, e := range page {
				if !slices.Contains(goals, e.AggregateID) {
					goals = append(goals, e.AggregateID)
				}
			}
			require.Equal(t, ids[i:], goals, "the events of record %d and after", seq)
		}
	}
	require.LessOrEqual(t, infos.Load(), int64(1), "the stream's info is read once")
	var page []schemas.Event
	r := b.request(t, "dwr.q.default.feed", schemas.Query{FromSeq: seqs[2] + 1}, nil)
	require.True(t, r.OK, "%+v", r.Error)
	require.NoError(t, json.Unmarshal(r.Result, &page))
	require.Empty(t, page, "past the last record: nothing yet")
}

// A feed page is read by direct gets on the feed's stream, not by a
// consumer of its own: on a cluster every consumer made is a proposal to
// the meta leader, and a viewer paging quickly would make one a page. The
// pages still list the events in the feed's order, from each start.
func TestFeedPagesMakeNoConsumer(t *testing.T) {
	b := setupJetStream(t)
	var seq uint64
	var ids []string
	for i := range 5 {
		r, s := b.mustCommand(t, "goal.create", map[string]any{"title": fmt.Sprintf("goal %d", i)})
		ids, seq = append(ids, r.ID), s
	}
	feedAt(t, b, seq)
	var creates atomic.Int64
	sub, err := b.svcNC.Subscribe("$JS.API.CONSUMER.CREATE.DWR_EVENTS.>", func(*nats.Msg) { creates.Add(1) })
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	require.NoError(t, b.svcNC.Flush())
	since := time.Now().Add(-time.Hour)
	var got []string
	page, _ := feedPages(t, b, schemas.Query{Filter: "goal.*.created", Limit: 2})
	for _, e := range page {
		got = append(got, e.AggregateID)
	}
	require.Equal(t, ids, got, "every goal's, in order, two a page")
	for _, q := range []schemas.Query{{FromSeq: seq}, {Since: &since, Filter: "goal." + ids[3] + ".>"}} {
		r := b.request(t, "dwr.q.default.feed", q, nil)
		require.True(t, r.OK, "%+v", r.Error)
		var page []schemas.Event
		require.NoError(t, json.Unmarshal(r.Result, &page))
		require.NotEmpty(t, page, "%+v", q)
	}
	require.NoError(t, b.svcNC.Flush())
	require.Zero(t, creates.Load(), "consumers made for the pages")
}

// feedPages lists the feed query q page by page until no next follows,
// and returns the events with the number of pages that came back empty.
func feedPages(t *testing.T, b *bundle, q schemas.Query) (events []schemas.Event, empty int) {
	t.Helper()
	for pages := 1; ; pages++ {
		require.Less(t, pages, 100, "the listing ends")
		r := b.request(t, "dwr.q.default.feed", q, nil)
		require.True(t, r.OK, "%+v", r.Error)
		var page []schemas.Event
		require.NoError(t, json.Unmarshal(r.Result, &page))
		events = append(events, page...)
		if len(page) == 0 {
			empty++
		}
		if r.Next == "" {
			return events, empty
		}
		require.NotEqual(t, q.After, r.Next, "each next moves on")
		q.After = r.Next
	}
}
