package client_test

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// feedTypes lists the feed from from (filter f) as "type agg_id" lines.
func feedTypes(t *testing.T, c *client.Client, f string, from client.FeedFrom) []string {
	t.Helper()
	var got []string
	for raw, err := range c.FeedHistory(within(t, 10*time.Second), f, from) {
		require.NoError(t, err)
		var e schemas.Event
		require.NoError(t, json.Unmarshal(raw, &e))
		got = append(got, e.Type+" "+e.AggregateID)
	}
	return got
}

// The feed query replays what the feed's stream keeps: from a log
// sequence, from a time, filtered, page by page.
func TestFeedHistoryReplaysTheFeed(t *testing.T) {
	s := start(t)
	c := connectAs(t, s, "ops", domain.RoleClient)
	var ids []string
	var seqs []uint64
	created := func(ids ...string) []string {
		var s []string
		for _, id := range ids {
			s = append(s, "task.created "+id)
		}
		return s
	}
	var between time.Time // after the first task's event was stored, before the others were
	for i := range 3 {
		r, err := c.CreateTask(within(t, 10*time.Second), schemas.TaskSpec{Queue: "feed"})
		require.NoError(t, err)
		ids, seqs = append(ids, r.ID), append(seqs, r.Seq)
		// The feed is published after the commit: wait until it holds it.
		require.Eventually(t, func() bool {
			return slices.Equal(feedTypes(t, c, "task.>", client.FeedFrom{All: true}), created(ids...))
		}, 10*time.Second, 20*time.Millisecond)
		if i == 0 {
			between = time.Now()
		}
	}

	require.Equal(t, created(ids[1:]...), feedTypes(t, c, "task.>", client.FeedFrom{Seq: seqs[1]}))
	require.Equal(t, created(ids[2]), feedTypes(t, c, "task."+ids[2]+".>", client.FeedFrom{All: true}))
	require.Equal(t, created(ids[1:]...), feedTypes(t, c, "task.>", client.FeedFrom{Since: between}))
	require.Empty(t, feedTypes(t, c, "task.>", client.FeedFrom{Seq: seqs[2] + 1000}), "past the end: nothing")
	require.Contains(t, feedTypes(t, c, ">", client.FeedFrom{All: true}), "task.created "+ids[0])

	// Page by page: one event a reply, each next continuing after it.
	var pages []string
	q := schemas.Query{Filter: "task.>", Limit: 1}
	for {
		var page []schemas.Event
		r, err := c.Query(within(t, 10*time.Second), "feed", q, &page)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page), 1)
		for _, e := range page {
			pages = append(pages, e.Type+" "+e.AggregateID)
		}
		if r.Next == "" {
			break
		}
		q.After = r.Next
	}
	require.Equal(t, created(ids...), pages)

	// Bad input names its field; a member that may not read the feed is
	// refused.
	for field, q := range map[string]schemas.Query{
		"/filter": {Filter: "task..>"}, "/after": {After: "first"},
	} {
		_, err := c.Query(within(t, 10*time.Second), "feed", q, nil)
		var se *schemas.Error
		require.True(t, errors.As(err, &se), "%v", err)
		require.Equal(t, schemas.CodeInvalid, se.Code)
		require.Equal(t, field, se.Fields[0].Pointer)
	}
	_, err := c.Query(within(t, 10*time.Second), "feed", schemas.Query{Filter: "task.>.created"}, nil)
	require.ErrorIs(t, err, client.ErrInvalid)
	viewer := connectAs(t, s, "auditor", domain.RoleViewer)
	require.Equal(t, created(ids...), feedTypes(t, viewer, "task.>", client.FeedFrom{All: true}))
	approver := connectAs(t, s, "ada", domain.RoleApprover)
	_, err = approver.Query(within(t, 10*time.Second), "feed", schemas.Query{}, nil)
	require.ErrorIs(t, err, client.ErrForbidden)
}

// receive returns the next id from got, within 10 s.
func receive(t *testing.T, got <-chan string) string {
	t.Helper()
	select {
	case id := <-got:
		return id
	case <-time.After(10 * time.Second):
		t.Fatal("no event delivered in 10 s")
		return ""
	}
}

// feedWithATask starts an open service, connects a Client to it over a
// connection with opts, and creates a task, returned once the feed's
// stream holds its event.
func feedWithATask(t *testing.T, opts ...nats.Option) (*nats.Conn, *client.Client, *client.Result) {
	t.Helper()
	s := servicetest.Start(t, t.TempDir(), servicetest.Options{Listen: "127.0.0.1:0"})
	nc, err := nats.Connect(s.URL, opts...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	c := client.New(nc)
	r, err := c.CreateTask(within(t, 10*time.Second), schemas.TaskSpec{Queue: "feed"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return slices.Contains(feedTypes(t, c, "task.>", client.FeedFrom{All: true}), "task.created "+r.ID)
	}, 10*time.Second, 20*time.Millisecond)
	return nc, c, r
}

// An event that the feed's stream stores only after FollowFeed's first
// replay listed it, and that its live subscription never received (the
// service published it before FollowFeed subscribed), is delivered by the
// listing that follows the replay — once; and while such listings find
// events, another follows.
func TestFollowFeedDeliversWhatTheFeedStoredAfterItsReplay(t *testing.T) {
	// What this connection publishes reaches the feed's stream but none of
	// its own subscriptions: an event stored after the replay, never live.
	nc, c, r := feedWithATask(t, nats.NoEcho())
	ctx := within(t, 30*time.Second)

	got := make(chan string, 16)
	go func() {
		_ = c.FollowFeed(ctx, "task.>", client.FeedFrom{Since: time.Now().Add(-time.Hour)}, func(raw json.RawMessage) error {
			var e schemas.Event
			require.NoError(t, json.Unmarshal(raw, &e))
			got <- e.AggregateID
			return nil
		}, nil)
	}()
	next := func() string { return receive(t, got) }
	require.Equal(t, r.ID, next(), "the replay")

	storeOnly := func(id string) {
		t.Helper()
		e := schemas.Event{ID: ulid.Make().String(), Type: "task.created", Workspace: client.DefaultWorkspace,
			AggregateType: "task", AggregateID: id, Time: time.Now()}
		data, err := json.Marshal(e)
		require.NoError(t, err)
		require.NoError(t, nc.Publish(client.DefaultPrefix+".ev."+e.Workspace+".task."+id+".created", data))
	}
	storeOnly("late")
	require.Equal(t, "late", next(), "the listing after the replay")
	// That listing found one: another follows (a feed that lagged so far
	// may lag further).
	storeOnly("later")
	require.Equal(t, "later", next(), "the listing after that")
	r2, err := c.CreateTask(ctx, schemas.TaskSpec{Queue: "feed"})
	require.NoError(t, err)
	require.Equal(t, r2.ID, next(), "live, and nothing delivered twice before it")
}

// After a reconnection, a FollowFeed that has delivered nothing yet lists
// the feed from where it was told to start, not from the feed's oldest.
func TestFollowFeedCatchesUpFromItsStartWhenNothingWasDelivered(t *testing.T) {
	nc, c, _ := feedWithATask(t)
	ctx := within(t, 30*time.Second)
	since := time.Now()

	// The feed's queries, as the service receives them: the second is the
	// listing a second after the replay, which has ended by then.
	queries := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe(client.DefaultPrefix+".q."+client.DefaultWorkspace+".feed", queries)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, nc.Flush())

	got, caught, ended := make(chan string, 16), make(chan int, 16), make(chan error, 1)
	go func() {
		ended <- c.FollowFeed(ctx, "task.>", client.FeedFrom{Since: since}, func(raw json.RawMessage) error {
			var e schemas.Event
			require.NoError(t, json.Unmarshal(raw, &e))
			got <- e.AggregateID
			return nil
		}, func(n int, err error) {
			if err == nil {
				caught <- n
			}
		})
	}()
	for range 2 {
		select {
		case <-queries:
		case err := <-ended:
			t.Fatalf("FollowFeed returned: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatal("no feed query in 10 s")
		}
	}
	// A reconnection: what its catch-up delivers comes before its report.
	require.NoError(t, nc.ForceReconnect())
	var n int
	select {
	case n = <-caught:
	case err := <-ended:
		t.Fatalf("FollowFeed returned: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no catch-up reported in 10 s")
	}
	require.Zero(t, n, "the task created before the start is not caught up")
	require.Empty(t, got)
	r, err := c.CreateTask(ctx, schemas.TaskSpec{Queue: "feed"})
	require.NoError(t, err)
	require.Equal(t, r.ID, receive(t, got))
}
