package projections_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/projections"
)

// pageThrough lists with each, limit items a page, each page continuing
// after the cursor of the last item of the one before, and returns every
// item in order.
func pageThrough[T any](t *testing.T, limit int, each func(after string, fn func(T) bool) error, cursor func(T) string) []T {
	t.Helper()
	var all []T
	after := ""
	for range 1000 {
		var page []T
		require.NoError(t, each(after, func(v T) bool {
			page = append(page, v)
			return len(page) < limit
		}))
		all = append(all, page...)
		if len(page) < limit {
			return all
		}
		after = cursor(page[len(page)-1])
	}
	t.Fatal("paging does not end")
	return nil
}

func taskIDs(ts []*domain.Task) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}

// Paging through tasks with the cursors the listing gives lists every task
// once, in the listing's order: by goal, by state, and across every state
// (where a cursor names the state as well as the task).
func TestTasksPageThroughEveryTask(t *testing.T) {
	s, h := setup(t)
	goal := domain.DeriveID(h.d.now, "g")
	h.batch(cmd{&domain.CreateGoal{GoalID: goal, Title: "g"}, "g"})
	var specs []domain.TaskSpec
	for i := range 7 {
		specs = append(specs, domain.TaskSpec{Key: fmt.Sprint("ready-", i), Queue: "q"})
		specs = append(specs, domain.TaskSpec{Key: fmt.Sprint("pending-", i), Queue: "q", DependsOn: []string{fmt.Sprint("ready-", i)}})
	}
	h.batch(cmd{&domain.SubmitPlan{GoalID: goal, Tasks: specs}, "plan"})
	ready, err := s.ListTasks("w", projections.TaskFilter{State: domain.StateReady})
	require.NoError(t, err)
	require.Len(t, ready, 7)
	for i, tk := range ready[:3] {
		h.batch(cmd{&domain.ClaimTask{ClaimBody: domain.ClaimBody{TaskID: tk.ID, Executor: "e"}}, fmt.Sprint("claim-", i)})
	}

	for _, f := range []projections.TaskFilter{{}, {State: domain.StateReady}, {State: domain.StatePending}, {GoalID: goal}} {
		want, err := s.ListTasks("w", f)
		require.NoError(t, err)
		for _, limit := range []int{1, 2, 3, 5, 100} {
			got := pageThrough(t, limit, func(after string, fn func(*domain.Task) bool) error {
				g := f
				g.After = after
				return s.EachTask("w", g, fn)
			}, f.Cursor)
			require.Equal(t, taskIDs(want), taskIDs(got), "filter %+v, %d a page", f, limit)
		}
	}
	all, err := s.ListTasks("w", projections.TaskFilter{})
	require.NoError(t, err)
	require.Len(t, all, 14)
	require.Equal(t, domain.StatePending, all[0].State, "every state: by state, then id")
	require.Equal(t, domain.StateRunning, all[len(all)-1].State)

	// A cursor that no listing of the kind gives is refused.
	for _, f := range []projections.TaskFilter{{After: "nostate/" + all[0].ID}, {State: domain.StateReady, After: "ready/" + all[0].ID}} {
		err := s.EachTask("w", f, func(*domain.Task) bool { return true })
		require.ErrorIs(t, err, projections.ErrCursor)
	}
}

// Paging through an aggregate's events after the version of the last one
// listed gives the whole history, every link of the chain checked.
func TestEventsPageThroughAHistory(t *testing.T) {
	s, h := setup(t)
	task := domain.DeriveID(h.d.now, "t")
	h.batch(cmd{&domain.CreateTask{TaskID: task, Spec: domain.TaskSpec{Queue: "q"}}, "create"})
	h.batch(cmd{&domain.ClaimTask{ClaimBody: domain.ClaimBody{TaskID: task, Executor: "e"}}, "claim"})
	for n := range 8 {
		h.batch(cmd{&domain.SaveCheckpoint{TaskID: task, Attempt: 1, Token: tokenOf(task, 1),
			Checkpoint: json.RawMessage(fmt.Sprint(n))}, fmt.Sprint("checkpoint-", n)})
	}
	want, err := s.History(context.Background(), h.log, "task", task)
	require.NoError(t, err)
	require.Greater(t, len(want), 6)
	for _, limit := range []int{1, 2, 4, 100} {
		got := pageThrough(t, limit, func(after string, fn func(eventstore.Event) bool) error {
			v, _ := strconv.ParseUint(after, 10, 64)
			return s.EachEvent(context.Background(), h.log, "task", task, v, fn)
		}, func(e eventstore.Event) string { return fmt.Sprint(e.Version) })
		require.Equal(t, want, got, "%d a page", limit)
	}
	ws, ok, err := s.HistoryWorkspace("task", task)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "w", ws)
	_, ok, err = s.HistoryWorkspace("task", "nothing")
	require.NoError(t, err)
	require.False(t, ok)
}
