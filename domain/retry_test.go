package domain

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/schemas"
)

func TestRetryReopensTheGoalAndItsDependentsWaitAgain(t *testing.T) {
	w := setup(t)
	g := w.createGoal(Envelope{})
	a := spec("a")
	a.Retry = &RetryPolicy{MaxAttempts: 2, InitialBackoff: Duration(time.Second), Multiplier: 2, MaxBackoff: Duration(time.Second)}
	ids, _ := w.plan(g, a, spec("b", "a"), spec("c", "b"), spec("d", "a", "c"), spec("other"))
	w.fail(ids["a"], w.claim(ids["a"]), false)
	w.succeed(ids["other"], w.claim(ids["other"]))
	require.Equal(t, GoalStateFailed, w.goal(g).State)

	// The dependents are retried through a.
	de := w.refused(&RetryTask{TaskID: ids["c"]}, CodeConflict)
	require.Contains(t, de.Message, ids["b"], "the refusal names the dependency to retry")
	_ = w.refused(&RetryTask{TaskID: ids["other"]}, CodeConflict) // accepted: nothing to retry

	out := w.must(&RetryTask{TaskID: ids["a"], Reason: "the API is back"})
	require.Equal(t, []string{"task.retried"}, events(out, ids["a"]))
	require.Equal(t, StateReady, out.Reply.State)
	for _, k := range []string{"b", "c", "d"} {
		require.Equal(t, []string{"task.retried"}, events(out, ids[k]), k)
		require.Equal(t, StatePending, w.state(ids[k]), k)
		require.Equal(t, ids["a"], eventOf[*TaskRetried](t, out, ids[k]).Retried)
	}
	require.Equal(t, []string{"goal.reopened"}, events(out, g))
	require.Equal(t, GoalStateOpen, w.goal(g).State)
	require.Empty(t, w.task(ids["a"]).Reason, "the failure is behind it")

	// Its retry policy is afresh: attempt 2 fails retryably and backs off,
	// although the policy's two attempts were counted from attempt 1.
	n := w.claim(ids["a"])
	require.Equal(t, 2, n, "attempts keep their numbers")
	out = w.fail(ids["a"], n, true)
	require.Equal(t, []string{"task.attempt_failed", "task.backoff_scheduled"}, events(out, ids["a"]))
	w.advance(time.Second)
	w.must(&FireTimer{TaskID: ids["a"], Kind: TimerBackoff, Due: w.now})
	out = w.succeed(ids["a"], w.claim(ids["a"]))
	require.Equal(t, []string{"task.ready"}, events(out, ids["b"]))
	for _, k := range []string{"b", "c", "d"} {
		w.succeed(ids[k], w.claim(ids[k]))
	}
	require.Equal(t, GoalStateAchieved, w.goal(g).State)
	w.requireReplays()
	w.requireReplaysFromWire()
}

func TestRetryLeavesADependentWithAnotherFailedDependency(t *testing.T) {
	w := setup(t)
	g := w.createGoal(Envelope{})
	ids, _ := w.plan(g, spec("a"), spec("b"), spec("join", "a", "b"))
	w.fail(ids["a"], w.claim(ids["a"]), false)
	w.fail(ids["b"], w.claim(ids["b"]), false)
	require.Equal(t, GoalStateFailed, w.goal(g).State)

	out := w.must(&RetryTask{TaskID: ids["a"]})
	require.Empty(t, events(out, ids["join"]), "b still failed: join could never run")
	require.Equal(t, StateFailed, w.state(ids["join"]))
	out = w.must(&RetryTask{TaskID: ids["b"]})
	require.Equal(t, []string{"task.retried"}, events(out, ids["join"]))
	require.Empty(t, events(out, g), "the first retry reopened the goal")
	w.requireReplays()
}

func TestRetryRefusals(t *testing.T) {
	w := setup(t)

	// A running task, and a retry by the same command id twice.
	g := w.createGoal(Envelope{})
	ids, _ := w.plan(g, spec("a"))
	n := w.claim(ids["a"])
	de := w.refused(&RetryTask{TaskID: ids["a"]}, CodeConflict)
	require.Contains(t, de.Message, "is running")
	w.fail(ids["a"], n, false)
	retry := &RetryTask{TaskID: ids["a"]}
	id := w.nextCommandID()
	first, err := w.runID(id, retry)
	require.NoError(t, err)
	require.Equal(t, StateReady, first.Reply.State)
	again := w.duplicate(id, retry)
	require.Empty(t, again.Changes, "a retry sent again is answered, not applied twice")

	// A cancelled goal.
	g2 := w.createGoal(Envelope{})
	ids2, _ := w.plan(g2, spec("a"), spec("b"))
	w.fail(ids2["a"], w.claim(ids2["a"]), false)
	w.must(&CancelGoal{GoalID: g2})
	de = w.refused(&RetryTask{TaskID: ids2["a"]}, CodeConflict)
	require.Contains(t, de.Message, "cancelled")

	// A goal whose budget is spent.
	g3 := w.createGoal(Envelope{Budget: Budget{Attempts: 1}})
	ids3, _ := w.plan(g3, spec("a"))
	w.fail(ids3["a"], w.claim(ids3["a"]), false)
	de = w.refused(&RetryTask{TaskID: ids3["a"]}, CodeConflict)
	require.Contains(t, de.Message, "budget of 1 attempts is used up")
	require.Equal(t, GoalStateFailed, w.goal(g3).State, "a refusal changes nothing")

	// A task a revision removed from the plan.
	g4 := w.createGoal(Envelope{})
	ids4, _ := w.plan(g4, spec("a"))
	w.fail(ids4["a"], w.claim(ids4["a"]), false)
	w.plan(g4, spec("z"))
	de = w.refused(&RetryTask{TaskID: ids4["a"]}, CodeConflict)
	require.Contains(t, de.Message, "no longer in goal")

	// No such task; a reason too long.
	de = w.refused(&RetryTask{TaskID: w.newID()}, CodeNotFound)
	require.Equal(t, "/task_id", de.Field)
	long := make([]byte, MaxReason+1)
	for i := range long {
		long[i] = 'x'
	}
	de = w.refused(&RetryTask{TaskID: ids3["a"], Reason: string(long)}, CodeInvalid)
	require.Equal(t, "/reason", de.Field)
}

// A task that waits again and again — each resumption a new attempt — lists
// its latest attempts only and tallies the rest: their numbers go on, the
// retry budget still counts the failures it no longer lists, and the goal's
// spend every attempt.
func TestATaskListsItsLatestAttemptsAndTalliesTheRest(t *testing.T) {
	w := setup(t)
	g := w.createGoal(Envelope{})
	a := spec("poller")
	a.Retry = &RetryPolicy{MaxAttempts: 3, InitialBackoff: Duration(time.Second), MaxBackoff: Duration(time.Second)}
	ids, _ := w.plan(g, a)
	id := ids["poller"]
	for range 2 { // two failures: one more is the budget
		w.fail(id, w.claim(id), true)
		w.advance(time.Second)
		w.must(&FireTimer{TaskID: id, Kind: TimerBackoff, Due: w.now})
	}
	const polls = 150
	for range polls {
		n := w.claim(id)
		w.advance(time.Second)
		w.must(&WaitTask{TaskID: id, Attempt: n, Kind: WaitSignal, Signal: "tick"})
		w.must(&SendSignal{TaskID: id, Name: "tick"})
	}
	tk := w.task(id)
	require.Len(t, tk.Attempts, schemas.MaxListedAttempts)
	require.Equal(t, 2+polls, tk.AttemptCount())
	require.Equal(t, schemas.EarlierAttempts{Count: 2 + polls - schemas.MaxListedAttempts, Spent: 2, WallMS: (polls - schemas.MaxListedAttempts) * 1000}, *tk.Earlier)
	require.Equal(t, tk.Earlier.Count+1, tk.Attempts[0].N, "the listed attempts are the latest")

	n := w.claim(id)
	require.Equal(t, 2+polls+1, n, "attempts keep their numbers")
	sp, err := GoalSpend(w.goal(g), w.now, w.o.Task, w.o.Goal)
	require.NoError(t, err)
	require.Equal(t, 2+polls+1, sp.Attempts, "the goal's spend counts every attempt")
	require.Equal(t, int64(polls*1000), sp.WallMS)
	out := w.fail(id, n, true)
	require.Equal(t, StateFailed, w.state(id), "the third failure uses up the budget, the first two unlisted: %v", events(out, id))

	// A retry starts the budget afresh, tally included.
	w.must(&RetryTask{TaskID: id, Reason: "again"})
	require.Zero(t, w.task(id).Earlier.Spent)
	w.fail(id, w.claim(id), true)
	require.Equal(t, StateBackoff, w.state(id))
	w.requireReplays()
	w.requireReplaysFromWire()
}
