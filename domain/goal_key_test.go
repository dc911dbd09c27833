package domain

import (
	"encoding/json"
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

// A ritual's goal template may carry a key, rendered with the run's params
// ("onboard-${customer}": one open onboarding per customer); a run's key
// goes over it, and its if_open says what a run does while the key is held.
func TestGoalKeyFromARitual(t *testing.T) {
	w := setup(t)
	def := onboard()
	def.Goal = json.RawMessage(`{"title": "Onboard ${customer}", "key": "onboard-${customer}", "priority": 2}`)
	w.must(def)
	run := func(customer string, more func(*RunRitual)) *RunRitual {
		r := &RunRitual{Name: "onboard", Params: json.RawMessage(`{"customer": "` + customer + `"}`), GoalID: w.newID()}
		if more != nil {
			more(r)
		}
		return r
	}
	acme := run("ACME", nil)
	w.must(acme)
	require.Equal(t, "onboard-ACME", w.goal(acme.GoalID).Key)
	require.Equal(t, 2, w.goal(acme.GoalID).Priority, "a template's priority")
	e := w.refused(run("ACME", nil), CodeConflict)
	require.Equal(t, "/key", e.Field)
	require.Contains(t, e.Message, acme.GoalID)
	out := w.must(run("ACME", func(r *RunRitual) { r.IfOpen = "use" }))
	require.Equal(t, acme.GoalID, out.Reply.ID)
	require.True(t, out.Reply.Duplicate)
	w.must(run("Initech", nil))

	own := run("ACME", func(r *RunRitual) { r.Key = "onboard-acme-eu" })
	w.must(own)
	require.Equal(t, "onboard-acme-eu", w.goal(own.GoalID).Key, "the run's key over the template's")
	require.Equal(t, "/key", w.refused(run("ACME", func(r *RunRitual) { r.Key = "bad key" }), CodeInvalid).Field)
	require.Equal(t, "/if_open", w.refused(run("ACME", func(r *RunRitual) { r.IfOpen = "later" }), CodeInvalid).Field)
	w.requireReplays()
	w.requireReplaysFromWire()
}

// A delegated goal may hold a key, refused while another open goal holds
// it; a delegation does not take that goal instead (if_open use).
func TestAKeyedDelegation(t *testing.T) {
	w := setup(t)
	w.must(&CreateGoal{GoalID: w.newID(), Title: "Order 1042", Key: "order-1042"})
	parent := w.createGoal(Envelope{})
	ids, _ := w.plan(parent, spec("lead"))
	n := w.claim(ids["lead"])
	e := w.refused(&DelegateTask{TaskID: ids["lead"], Attempt: n, Key: "sub",
		Goal: &CreateGoal{GoalID: w.newID(), Title: "child", Key: "order-1042", Tasks: []TaskSpec{spec("step")}}}, CodeConflict)
	require.Equal(t, "/goal/key", e.Field)
	require.Equal(t, "/goal/if_open", w.refused(&DelegateTask{TaskID: ids["lead"], Attempt: n, Key: "sub",
		Goal: &CreateGoal{GoalID: w.newID(), Title: "child", Key: "order-1042", IfOpen: "use", Tasks: []TaskSpec{spec("step")}}}, CodeInvalid).Field)
	child := w.newID()
	w.must(&DelegateTask{TaskID: ids["lead"], Attempt: n, Key: "sub",
		Goal: &CreateGoal{GoalID: child, Title: "child", Key: "order-1043", Tasks: []TaskSpec{spec("step")}}})
	require.Equal(t, "order-1043", w.goal(child).Key)
	w.requireReplays()
}
