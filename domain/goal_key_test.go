package domain

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A goal's key names at most one open goal of a workspace: another
// goal.create with it is refused, naming the open goal, or with if_open use
// answered with that goal, creating nothing; once the goal has ended, a new
// goal takes the key. A retry of a create answers as the first did.
func TestGoalKey(t *testing.T) {
	w := setup(t)
	first := w.newID()
	out := w.must(&CreateGoal{GoalID: first, Title: "Order 1042", Key: "order-1042", Tasks: []TaskSpec{spec("ship")}})
	require.Equal(t, "order-1042", eventOf[*GoalCreated](t, out, first).Key)
	require.Equal(t, "order-1042", w.goal(first).Key)
	plan := out.Reply.Tasks

	e := w.refused(&CreateGoal{GoalID: w.newID(), Title: "Order 1042 again", Key: "order-1042"}, CodeConflict)
	require.Equal(t, "/key", e.Field)
	require.Contains(t, e.Message, first)
	out = w.must(&CreateGoal{GoalID: w.newID(), Title: "Order 1042 again", Key: "order-1042", IfOpen: "use", Tasks: []TaskSpec{spec("other")}})
	require.Empty(t, out.Changes, "the open goal is answered, nothing is made")
	require.True(t, out.Reply.Duplicate)
	require.Equal(t, first, out.Reply.ID)
	require.Equal(t, plan, out.Reply.Tasks, "with its plan")
	require.Len(t, w.must(&CreateGoal{GoalID: w.newID(), Title: "another order", Key: "order-1043"}).Changes, 1, "another key")

	// A retry of the first create answers it again, not a conflict.
	id := w.nextCommandID()
	again := w.newID()
	_, err := w.runID(id, &CreateGoal{GoalID: again, Title: "retried", Key: "order-7"})
	require.NoError(t, err)
	require.Equal(t, again, w.duplicate(id, &CreateGoal{GoalID: again, Title: "retried", Key: "order-7"}).Reply.ID)

	// Ended, the key is free: the new goal holds it. A failed goal that
	// held it is not reopened by a retry meanwhile.
	w.must(&CancelGoal{GoalID: first})
	failed := w.newID()
	out = w.must(&CreateGoal{GoalID: failed, Title: "Order 1042, tried", Key: "order-1042", Tasks: []TaskSpec{{Key: "pay", Queue: "q", Retry: &RetryPolicy{MaxAttempts: 1}}}})
	pay := out.Reply.Tasks[0].TaskID
	w.fail(pay, w.claim(pay), false)
	require.Equal(t, GoalStateFailed, w.goal(failed).State)
	second := w.newID()
	w.must(&CreateGoal{GoalID: second, Title: "Order 1042, a new try", Key: "order-1042"})
	require.Equal(t, "/key", w.refused(&CreateGoal{GoalID: w.newID(), Title: "x", Key: "order-1042"}, CodeConflict).Field)
	got, err := w.o.GoalByKey(w.ws, "order-1042")
	require.NoError(t, err)
	require.Equal(t, second, got)
	e = w.refused(&RetryTask{TaskID: pay}, CodeConflict)
	require.Contains(t, e.Message, "held by goal "+second)
	w.must(&CancelGoal{GoalID: second})
	w.must(&RetryTask{TaskID: pay})
	require.Equal(t, GoalStateOpen, w.goal(failed).State, "once the key is free")
	got, err = w.o.GoalByKey(w.ws, "order-1042")
	require.NoError(t, err)
	require.Equal(t, failed, got, "the reopened goal holds the key again")
	require.Equal(t, "/key", w.refused(&CreateGoal{GoalID: w.newID(), Title: "x", Key: "order-1042"}, CodeConflict).Field)

	for field, c := range map[string]*CreateGoal{
		"/key":     {GoalID: w.newID(), Title: "x", Key: "order 1042"},
		"/if_open": {GoalID: w.newID(), Title: "x", IfOpen: "use"},
	} {
		require.Equal(t, field, w.refused(c, CodeInvalid).Field)
	}
	require.Equal(t, "/if_open", w.refused(&CreateGoal{GoalID: w.newID(), Title: "x", Key: "k", IfOpen: "replace"}, CodeInvalid).Field)
	w.requireReplays()
	w.requireReplaysFromWire()
}
