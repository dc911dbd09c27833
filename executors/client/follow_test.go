package client_test

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/executors/client"
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
