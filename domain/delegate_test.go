package domain

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// delegate has attempt n of task id hand work on to a new child goal with
// the plan specs, under key, and returns the child goal's id.
func (w *world) delegate(id string, n int, key, onFailure string, specs ...TaskSpec) string {
	w.t.Helper()
	child := w.newID()
	out := w.must(&DelegateTask{TaskID: id, Attempt: n, Key: key, OnFailure: onFailure,
		Goal: &CreateGoal{GoalID: child, Title: "child " + key, Tasks: specs}})
	require.Equal(w.t, child, out.Reply.GoalID)
	require.Equal(w.t, StateWaiting, out.Reply.State)
	return child
}

// only returns the one task of goal id's plan.
func (w *world) only(goalID string) string {
	w.t.Helper()
	g := w.goal(goalID)
	require.Len(w.t, g.Plan, 1)
	return g.Plan[0].TaskID
}

// Three levels of delegation: each goal is achieved only once its child is,
// each parent resumes (a new attempt) with its delegation recorded, and
// each child task is accepted once.
func TestDelegationThreeLevelsDeep(t *testing.T) {
	w := setup(t)
	top := w.createGoal(Envelope{})
	ids, _ := w.plan(top, spec("lead"))
	lead := ids["lead"]

	// Level 1 delegates to level 2, which delegates to level 3.
	g2 := w.delegate(lead, w.claim(lead), "research", "", spec("dig"))
	require.Equal(t, StateWaiting, w.state(lead))
	require.Equal(t, &Wait{Kind: WaitDelegation, GoalID: g2}, w.task(lead).Wait)
	require.Equal(t, AttemptStateParked, w.task(lead).Current().State)
	require.Equal(t, &ParentRef{TaskID: lead, GoalID: top, Key: "research", Depth: 1}, w.goal(g2).Parent)
	dig := w.only(g2)
	g3 := w.delegate(dig, w.claim(dig), "deeper", "", spec("leaf"))
	require.Equal(t, 2, w.goal(g3).Parent.Depth)
	leaf := w.only(g3)

	// The leaf is accepted: level 3 is achieved and level 2's task is
	// ready, in the same outcome; level 1 still waits.
	out := w.must(&ReportSuccess{TaskID: leaf, Attempt: w.claim(leaf), Result: json.RawMessage(`{"leaf":1}`)})
	require.Equal(t, []string{"goal.achieved"}, events(out, g3))
	require.Equal(t, []string{"task.delegation_ended", "task.ready"}, events(out, dig))
	ended := eventOf[*TaskDelegationEnded](t, out, dig)
	require.Equal(t, &TaskDelegationEnded{Key: "deeper", GoalID: g3, State: GoalStateAchieved,
		Tasks: []PlanTask{{Key: "leaf", TaskID: leaf}}}, ended)
	require.Empty(t, events(out, lead))

	// Level 2 resumes as a new attempt, which reads its delegation, and
	// succeeds: level 2 is achieved and level 1 resumes; then it ends.
	n := w.claim(dig)
	require.Equal(t, 2, n)
	require.Equal(t, GoalStateAchieved, w.task(dig).Delegation("deeper").State)
	out = w.succeed(dig, n)
	require.Equal(t, []string{"goal.achieved"}, events(out, g2))
	require.Equal(t, []string{"task.delegation_ended", "task.ready"}, events(out, lead))
	out = w.succeed(lead, w.claim(lead))
	require.Equal(t, []string{"goal.achieved"}, events(out, top))

	for _, id := range []string{leaf, dig, lead} {
		accepted := 0
		for _, e := range w.historyOf(id) {
			if _, ok := e.(*TaskAccepted); ok {
				accepted++
			}
		}
		require.Equal(t, 1, accepted, "task %s accepted once", id)
	}
	w.requireReplays()
	w.requireReplaysFromWire()
}

// A retried delegation (the same command id) is answered with the goal
// the first made; a second delegation under the same key is refused.
func TestDelegationIsIdempotent(t *testing.T) {
	w := setup(t)
	top := w.createGoal(Envelope{})
	ids, _ := w.plan(top, spec("lead"))
	lead := ids["lead"]
	n := w.claim(lead)
	child := w.newID()
	cmd := &DelegateTask{TaskID: lead, Attempt: n, Key: "k", Goal: &CreateGoal{GoalID: child, Title: "c", Tasks: []TaskSpec{spec("x")}}}
	_, err := w.runID("delegate-1", cmd)
	require.NoError(t, err)
	again := *cmd
	again.Goal = &CreateGoal{GoalID: w.newID(), Title: "c", Tasks: []TaskSpec{spec("x")}}
	out := w.duplicate("delegate-1", &again)
	require.Equal(t, child, out.Reply.GoalID, "the retry names the goal the first made")
	require.Len(t, w.aggregates(AggGoal), 2, "one child goal")

	// Resumed by a failure (on_failure resume), the next attempt may not
	// delegate under the same key again.
	x := w.only(child)
	w.fail(x, w.claim(x), false)
	require.Equal(t, StateFailed, w.task(x).State)
	require.Equal(t, StateFailed, w.state(lead), "on_failure fail by default")
	require.Equal(t, ReasonDelegation, w.task(lead).Reason)
	require.Contains(t, w.task(lead).Error.Message, `delegation "k": goal `+child+" failed")
}

func TestDelegationFailurePolicies(t *testing.T) {
	for _, policy := range []string{DelegationReview, DelegationResume} {
		t.Run(policy, func(t *testing.T) {
			w := setup(t)
			top := w.createGoal(Envelope{})
			ids, _ := w.plan(top, spec("lead"))
			lead := ids["lead"]
			child := w.delegate(lead, w.claim(lead), "k", policy, spec("x"))
			out := w.must(&CancelGoal{GoalID: child, Reason: "not needed"})
			d := w.task(lead).Delegation("k")
			require.Equal(t, GoalStateCancelled, d.State)
			require.Equal(t, "not needed", d.Reason)
			if policy == DelegationResume {
				require.Equal(t, []string{"task.delegation_ended", "task.ready"}, events(out, lead))
				require.Equal(t, 2, w.claim(lead))
				return
			}
			require.Equal(t, []string{"task.delegation_ended", "task.review_requested"}, events(out, lead))
			require.Equal(t, StateNeedsReview, w.state(lead))
			e := w.refused(&ReviewTask{TaskID: lead, Decision: ReviewAccept}, CodeConflict)
			require.Equal(t, "/decision", e.Field)
			require.Contains(t, e.Message, "no result to accept")
			w.must(&ReviewTask{TaskID: lead, Decision: ReviewRetry})
			n := w.claim(lead)
			w.succeed(lead, n)
			require.Equal(t, GoalStateAchieved, w.goal(top).State)
		})
	}
}

// Ending the parent ends its children, down the tree, with reasons that
// name why; each parent records its child's end.
func TestCancellingTheParentCancelsTheTree(t *testing.T) {
	w := setup(t)
	top := w.createGoal(Envelope{})
	ids, _ := w.plan(top, spec("lead"))
	lead := ids["lead"]
	g2 := w.delegate(lead, w.claim(lead), "a", "", spec("mid"), spec("side"))
	mid := w.goal(g2).Plan[0].TaskID
	g3 := w.delegate(mid, w.claim(mid), "b", "", spec("leaf"))
	leaf := w.only(g3)
	w.claim(leaf)

	out := w.must(&CancelGoal{GoalID: top, Reason: "wrong quarter"})
	for _, g := range []string{top, g2, g3} {
		require.Equal(t, GoalStateCancelled, w.goal(g).State, g)
	}
	for _, id := range []string{lead, mid, leaf, w.goal(g2).Plan[1].TaskID} {
		require.Equal(t, StateCancelled, w.state(id), id)
	}
	require.Contains(t, w.goal(g2).Reason, ReasonParentEnded)
	require.Contains(t, w.goal(g2).Reason, lead)
	require.Equal(t, GoalStateCancelled, w.task(lead).Delegation("a").State)
	require.Equal(t, GoalStateCancelled, w.task(mid).Delegation("b").State)
	require.Equal(t, AttemptStateCancelled, w.task(leaf).Current().State, "the running leaf attempt is cancelled")
	require.Equal(t, []string{"goal.cancelled"}, events(out, g3))
	w.requireReplays()
}

func TestDelegationRefusals(t *testing.T) {
	w := setup(t)
	top := w.createGoal(Envelope{Permissions: Permissions{Queues: []string{"work", "review"}}})
	ids, _ := w.plan(top, spec("lead"))
	lead := ids["lead"]
	n := w.claim(lead)
	goal := func(specs ...TaskSpec) *CreateGoal {
		return &CreateGoal{GoalID: w.newID(), Title: "child", Tasks: specs}
	}
	cases := []struct {
		cmd   *DelegateTask
		code  Code
		field string
	}{
		{&DelegateTask{TaskID: lead, Attempt: n, Key: "bad key", Goal: goal(spec("x"))}, CodeInvalid, "/key"},
		{&DelegateTask{TaskID: lead, Attempt: n, Key: "k", Goal: goal(spec("x")), OnFailure: "ignore"}, CodeInvalid, "/on_failure"},
		{&DelegateTask{TaskID: lead, Attempt: n, Key: "k"}, CodeInvalid, ""},
		{&DelegateTask{TaskID: lead, Attempt: n, Key: "k", Goal: goal()}, CodeInvalid, "/goal/tasks"},
		{&DelegateTask{TaskID: lead, Attempt: n, Key: "k", Goal: goal(spec("x")), Ritual: &RunRitual{Name: "r"}}, CodeInvalid, ""},
		{&DelegateTask{TaskID: lead, Attempt: n, Key: "k", Goal: &CreateGoal{GoalID: w.newID(), Tasks: []TaskSpec{spec("x")}}}, CodeInvalid, "/goal/title"},
		{&DelegateTask{TaskID: lead, Attempt: n, Key: "k", Ritual: &RunRitual{Name: "nope", GoalID: w.newID()}}, CodeNotFound, "/ritual/name"},
		{&DelegateTask{TaskID: lead, Attempt: n + 1, Key: "k", Goal: goal(spec("x"))}, CodeConflict, "/attempt"},
		{&DelegateTask{TaskID: lead, Attempt: n, Key: "k", Goal: goal(spec("x")), Token: "stolen"}, CodeForbidden, "/token"},
		// The child's queues stay within its parent goal's permissions.
		{&DelegateTask{TaskID: lead, Attempt: n, Key: "k", Goal: goal(TaskSpec{Key: "x", Queue: "payments"})}, CodeForbidden, "/goal/tasks/0/queue"},
		{&DelegateTask{TaskID: lead, Attempt: n, Key: "k", Goal: &CreateGoal{GoalID: w.newID(), Title: "c", Tasks: []TaskSpec{spec("x")},
			Envelope: Envelope{Permissions: Permissions{Queues: []string{"work", "payments"}}}}}, CodeForbidden, "/goal/envelope/permissions/queues/1"},
	}
	for i, c := range cases {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			e := w.refused(c.cmd, c.code)
			require.Equal(t, c.field, e.Field, e.Message)
		})
	}
	child := w.delegate(lead, n, "k", "", spec("x"))
	require.Equal(t, []string{"work", "review"}, w.goal(child).Envelope.Permissions.Queues)

	// Depth: a chain of delegations stops at MaxDelegationDepth.
	task := w.only(child)
	for depth := 2; depth <= MaxDelegationDepth; depth++ {
		g := w.delegate(task, w.claim(task), "k", "", spec("x"))
		require.Equal(t, depth, w.goal(g).Parent.Depth)
		task = w.only(g)
	}
	e := w.refused(&DelegateTask{TaskID: task, Attempt: w.claim(task), Key: "k", Goal: goal(spec("x"))}, CodeConflict)
	require.Contains(t, e.Message, "at most 8 deep")
}

// A task delegates under a key once, and at most MaxDelegations times.
func TestDelegationsPerTaskAreBounded(t *testing.T) {
	w := setup(t)
	task := standalone(w, nil)
	for i := range MaxDelegations {
		g := w.delegate(task, w.claim(task), fmt.Sprint("k", i), DelegationResume, spec("x"))
		if i == 0 {
			require.Equal(t, &ParentRef{TaskID: task, Key: "k0", Depth: 1}, w.goal(g).Parent, "a standalone task's child")
		}
		w.must(&CancelGoal{GoalID: g})
	}
	n := w.claim(task)
	e := w.refused(&DelegateTask{TaskID: task, Attempt: n, Key: "k0", Goal: &CreateGoal{GoalID: w.newID(), Title: "c", Tasks: []TaskSpec{spec("x")}}}, CodeConflict)
	require.Equal(t, "/key", e.Field)
	e = w.refused(&DelegateTask{TaskID: task, Attempt: n, Key: "new", Goal: &CreateGoal{GoalID: w.newID(), Title: "c", Tasks: []TaskSpec{spec("x")}}}, CodeConflict)
	require.Contains(t, e.Message, "32 times")
}

// Work handed on spends its delegating goal's budget: a child's attempts
// count against its parent goal, and a child task is stopped when a goal
// up the tree has spent its budget (failed, whatever its own envelope says:
// a goal's extension is asked where its own tasks are stopped).
func TestDelegatedWorkSpendsTheParentsBudget(t *testing.T) {
	w := setup(t)
	top := w.createGoal(Envelope{Budget: Budget{Attempts: 3}})
	ids, _ := w.plan(top, spec("lead"))
	lead := ids["lead"]
	child := w.delegate(lead, w.claim(lead), "k", "", spec("x"), spec("y"), spec("z"))
	plan := w.goal(child).Plan
	w.claim(plan[0].TaskID)
	w.claim(plan[1].TaskID)
	sp, err := GoalSpend(w.goal(top), w.now, w.o.Task, w.o.Goal)
	require.NoError(t, err)
	require.Equal(t, 3, sp.Attempts, "the lead's attempt and its child goal's two")

	out := w.must(&ClaimTask{ClaimBody: ClaimBody{TaskID: plan[2].TaskID, Executor: "exec-1"}})
	require.Equal(t, StateFailed, out.Reply.State)
	z := w.task(plan[2].TaskID)
	require.Equal(t, ReasonBudget, z.Reason)
	require.Contains(t, z.Error.Message, "the goal's budget of 3 attempts is used up (goal "+top+", which delegated this work)")

	w.succeed(plan[0].TaskID, 1)
	w.succeed(plan[1].TaskID, 1)
	require.Equal(t, GoalStateFailed, w.goal(child).State)
	require.Equal(t, StateFailed, w.state(lead), "the child goal failed: so does its parent task (on_failure fail)")
}
