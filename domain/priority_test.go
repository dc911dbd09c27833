package domain

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A goal's priority: given at creation, changed by goal.prioritize (the
// same priority again records nothing), bounded; a goal delegated by a
// task takes the task's priority, or its goal's, when it gives none.
func TestGoalPriority(t *testing.T) {
	w := setup(t)
	id := w.newID()
	out := w.must(&CreateGoal{GoalID: id, Title: "Urgent", Priority: 2})
	require.Equal(t, 2, eventOf[*GoalCreated](t, out, id).Priority)
	require.Equal(t, 2, w.goal(id).Priority)
	for _, p := range []int{-1, 6} {
		require.Equal(t, "/priority", w.refused(&CreateGoal{GoalID: w.newID(), Title: "x", Priority: p}, CodeInvalid).Field)
	}

	out = w.must(&PrioritizeGoal{GoalID: id, Priority: 1})
	require.Equal(t, []string{"goal.prioritized"}, events(out, id))
	require.Equal(t, &GoalPrioritized{Priority: 1}, out.Changes[0].Event)
	require.Equal(t, 1, w.goal(id).Priority)
	out = w.must(&PrioritizeGoal{GoalID: id, Priority: 1})
	require.Empty(t, out.Changes, "as it is: nothing recorded")
	require.True(t, out.Reply.Duplicate)
	for _, p := range []int{0, 6} {
		require.Equal(t, "/priority", w.refused(&PrioritizeGoal{GoalID: id, Priority: p}, CodeInvalid).Field)
	}
	other := w.createGoal(Envelope{})
	require.True(t, w.must(&PrioritizeGoal{GoalID: other, Priority: DefaultPriority}).Reply.Duplicate,
		"a goal without a priority has the default's")
	require.Equal(t, "/goal_id", w.refused(&PrioritizeGoal{GoalID: w.newID(), Priority: 1}, CodeNotFound).Field)

	// A delegated goal takes its task's priority, else its task's goal's.
	ids, _ := w.plan(id, TaskSpec{Key: "own", Queue: "q", Priority: 4}, TaskSpec{Key: "inherits", Queue: "q"})
	for key, want := range map[string]int{"own": 4, "inherits": 1} {
		n := w.claim(ids[key])
		child := w.delegate(ids[key], n, "sub", "", spec("step"))
		require.Equal(t, want, w.goal(child).Priority, key)
	}
	w.requireReplays()
	w.requireReplaysFromWire()
}
