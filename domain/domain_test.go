package domain

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/schemas"
)

func TestPlanChainRunsToGoalAchieved(t *testing.T) {
	w := setup(t)
	g := w.createGoal(Envelope{})

	ids, out := w.plan(g, chain()...)
	require.Equal(t, 1, out.Reply.PlanVersion)
	require.Equal(t, []string{"goal.plan_committed"}, events(out, g))
	pc := eventOf[*PlanCommitted](t, out, g)
	require.ElementsMatch(t, []string{"a", "b", "c"}, pc.Added)
	a, b, c := ids["a"], ids["b"], ids["c"]
	for _, id := range []string{a, b, c} {
		require.True(t, ValidID(id), "task id %q", id)
		require.Equal(t, []string{"task.created"}, events(out, id))
	}
	require.Equal(t, StateReady, w.state(a))
	require.Equal(t, StatePending, w.state(b))
	require.Equal(t, StatePending, w.state(c))
	require.Equal(t, []string{a}, w.task(b).DependsOn)
	require.Equal(t, []string{b}, w.task(c).DependsOn)

	claim := w.must(&ClaimTask{ClaimBody: ClaimBody{TaskID: a, Executor: "exec-1", ExecutorVersion: "1.0"}})
	require.Equal(t, 1, claim.Reply.Attempt)
	require.Equal(t, StateRunning, claim.Reply.State)
	require.NotNil(t, claim.Reply.Task, "a claim hands the executor the task")
	started := eventOf[*AttemptStarted](t, claim, a)
	require.Equal(t, OperationKey(a), started.OperationKey)
	require.Equal(t, "exec-1", started.Executor)
	cur := w.task(a).Running()
	require.NotNil(t, cur)
	require.Equal(t, 1, cur.N)
	require.Equal(t, OperationKey(a), cur.OperationKey)

	out = w.succeed(a, 1)
	require.Equal(t, []string{"task.attempt_succeeded", "task.accepted"}, events(out, a))
	require.Equal(t, []string{"task.ready"}, events(out, b), "the dependent is made ready in the same outcome")
	require.Empty(t, events(out, c))
	require.Empty(t, events(out, g), "the goal is not done yet")
	require.Equal(t, StateAccepted, w.state(a))
	require.Equal(t, StateReady, w.state(b))
	require.Equal(t, StatePending, w.state(c))

	w.succeed(b, w.claim(b))
	require.Equal(t, StateReady, w.state(c))
	out = w.succeed(c, w.claim(c))
	require.Equal(t, []string{"task.attempt_succeeded", "task.accepted"}, events(out, c))
	require.Equal(t, []string{"goal.achieved"}, events(out, g), "the goal is achieved in the same outcome")
	require.Equal(t, GoalStateAchieved, w.goal(g).State)
	w.requireReplays()
	w.requireReplaysFromWire()
}

// goal.create with tasks commits the goal and its first plan in one
// outcome, as goal.create then plan.submit would; a plan it refuses
// refuses the goal too, and its retry answers with the same tasks.
func TestCreateGoalWithItsPlan(t *testing.T) {
	w := setup(t)
	g := w.newID()
	create := &CreateGoal{GoalID: g, Title: "chain", Tasks: chain()}
	out, err := w.runID("create-with-plan", create)
	require.NoError(t, err)
	require.Nil(t, out.Refusal)
	require.Equal(t, []string{"goal.created", "goal.plan_committed"}, events(out, g))
	require.Equal(t, 1, out.Reply.PlanVersion)
	require.Equal(t, GoalStateOpen, out.Reply.State)
	require.Len(t, out.Reply.Tasks, 3)
	ids := map[string]string{}
	for _, pt := range out.Reply.Tasks {
		ids[pt.Key] = pt.TaskID
		require.Equal(t, []string{"task.created"}, events(out, pt.TaskID))
	}
	require.Equal(t, StateReady, w.state(ids["a"]))
	require.Equal(t, StatePending, w.state(ids["b"]))
	require.Equal(t, []string{ids["b"]}, w.task(ids["c"]).DependsOn)

	again := w.duplicate("create-with-plan", create)
	require.Equal(t, out.Reply.Tasks, again.Reply.Tasks, "a retry answers with the plan's tasks")

	w.succeed(ids["a"], w.claim(ids["a"]))
	w.succeed(ids["b"], w.claim(ids["b"]))
	w.succeed(ids["c"], w.claim(ids["c"]))
	require.Equal(t, GoalStateAchieved, w.goal(g).State)

	cyclic := &CreateGoal{GoalID: w.newID(), Title: "cycle", Tasks: []TaskSpec{spec("a", "b"), spec("b", "a")}}
	de := w.refused(cyclic, CodeInvalid)
	require.Contains(t, de.Field, "/tasks", "the refusal names the plan's field")
	require.Empty(t, w.aggregates(AggGoal)[1:], "a refused plan leaves no goal behind")
	w.requireReplays()
	w.requireReplaysFromWire()
}

func TestDependentWaitsForEveryDependency(t *testing.T) {
	w := setup(t)
	g := w.createGoal(Envelope{})
	ids, _ := w.plan(g, spec("join", "a", "b"), spec("a"), spec("b"))
	require.Equal(t, StatePending, w.state(ids["join"]))
	out := w.succeed(ids["a"], w.claim(ids["a"]))
	require.Empty(t, events(out, ids["join"]), "one dependency of two is not enough")
	require.Equal(t, StatePending, w.state(ids["join"]))
	out = w.succeed(ids["b"], w.claim(ids["b"]))
	require.Equal(t, []string{"task.ready"}, events(out, ids["join"]))
	require.Equal(t, "dependencies_accepted", eventOf[*TaskReady](t, out, ids["join"]).Reason)
}

func TestRetryBackoffThenAttemptsExhausted(t *testing.T) {
	w := setup(t)
	g := w.createGoal(Envelope{})
	a := spec("a")
	a.Retry = &RetryPolicy{MaxAttempts: 4, InitialBackoff: Duration(time.Second), Multiplier: 2, MaxBackoff: Duration(3 * time.Second)}
	ids, _ := w.plan(g, a, spec("b", "a"), spec("c", "b"))
	id := ids["a"]

	// The delays follow the policy: 1s, 2s, then 4s capped at 3s.
	for n, delay := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second} {
		attempt := w.claim(id)
		require.Equal(t, n+1, attempt)
		out := w.fail(id, attempt, true)
		require.Equal(t, []string{"task.attempt_failed", "task.backoff_scheduled"}, events(out, id))
		bs := eventOf[*BackoffScheduled](t, out, id)
		require.Equal(t, attempt, bs.Attempt)
		require.Equal(t, w.now.Add(delay), bs.Until, "backoff after attempt %d", attempt)
		require.Equal(t, StateBackoff, w.state(id))

		fire := &FireTimer{TaskID: id, Kind: TimerBackoff, Due: bs.Until}
		_ = w.refused(fire, CodeConflict)
		w.advance(delay - time.Millisecond)
		_ = w.refused(fire, CodeConflict)
		require.Equal(t, StateBackoff, w.state(id))
		w.advance(time.Millisecond)
		out = w.must(fire)
		require.Equal(t, []string{"task.ready"}, events(out, id))
		require.Equal(t, StateReady, w.state(id))
		require.Nil(t, w.task(id).BackoffUntil)

		// The same timer again is stale: it changes nothing.
		stale := w.must(fire)
		require.Empty(t, stale.Changes)
	}

	attempt := w.claim(id)
	require.Equal(t, 4, attempt)
	out := w.fail(id, attempt, true)
	require.Equal(t, []string{"task.attempt_failed", "task.failed"}, events(out, id))
	tf := eventOf[*TaskFailed](t, out, id)
	require.Equal(t, ReasonAttemptsSpent, tf.Reason)
	require.Equal(t, "boom", tf.Error.Code)
	for _, k := range []string{"b", "c"} {
		require.Equal(t, []string{"task.failed"}, events(out, ids[k]), "dependent %s", k)
		require.Equal(t, ReasonDependencyFailed, eventOf[*TaskFailed](t, out, ids[k]).Reason)
		require.Equal(t, StateFailed, w.state(ids[k]))
	}
	require.Equal(t, []string{"goal.failed"}, events(out, g), "the goal fails in the same outcome")
	require.Equal(t, GoalStateFailed, w.goal(g).State)
	require.Len(t, w.task(id).Attempts, 4)
	w.requireReplays()
}

func TestRetryPolicyBackoff(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy RetryPolicy
		want   []time.Duration // after attempts 1, 2, 3, ...
	}{
		{"defaults", RetryPolicy{}, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}},
		{"capped", RetryPolicy{InitialBackoff: Duration(time.Second), Multiplier: 3, MaxBackoff: Duration(5 * time.Second)},
			[]time.Duration{time.Second, 3 * time.Second, 5 * time.Second, 5 * time.Second}},
		{"constant", RetryPolicy{InitialBackoff: Duration(2 * time.Second), Multiplier: 1}, []time.Duration{2 * time.Second, 2 * time.Second}},
		{"initial above max", RetryPolicy{InitialBackoff: Duration(time.Hour), MaxBackoff: Duration(time.Minute)}, []time.Duration{time.Minute}},
		{"default max", RetryPolicy{InitialBackoff: Duration(time.Minute), Multiplier: 10}, []time.Duration{time.Minute, DefaultMaxBackoff}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i, want := range tc.want {
				require.Equal(t, want, Backoff(tc.policy, i+1), "after attempt %d", i+1)
			}
		})
	}
	require.Equal(t, DefaultMaxAttempts, RetryWithDefaults(RetryPolicy{}).MaxAttempts)
}

func TestNonRetryableFailsAtOnce(t *testing.T) {
	t.Run("reported not retryable", func(t *testing.T) {
		w := setup(t)
		g := w.createGoal(Envelope{})
		ids, _ := w.plan(g, spec("a"), spec("b", "a"))
		out := w.fail(ids["a"], w.claim(ids["a"]), false)
		require.Equal(t, []string{"task.attempt_failed", "task.failed"}, events(out, ids["a"]))
		require.Equal(t, ReasonNotRetryable, w.task(ids["a"]).Reason)
		require.Equal(t, &ErrorInfo{Code: "boom", Message: "it broke"}, w.task(ids["a"]).Error)
		require.Equal(t, StateFailed, w.state(ids["b"]))
		require.Equal(t, GoalStateFailed, w.goal(g).State)
	})
	t.Run("code listed by the policy", func(t *testing.T) {
		w := setup(t)
		g := w.createGoal(Envelope{})
		s := spec("a")
		s.Retry = &RetryPolicy{NonRetryable: []string{"boom"}}
		ids, _ := w.plan(g, s)
		out := w.fail(ids["a"], w.claim(ids["a"]), true)
		require.Equal(t, []string{"task.attempt_failed", "task.failed"}, events(out, ids["a"]))
		require.Equal(t, ReasonNotRetryable, w.task(ids["a"]).Reason)
	})
}

func TestAttemptTimeout(t *testing.T) {
	w := setup(t)
	id := w.newID()
	s := spec("")
	s.Timeout = Duration(30 * time.Second)
	w.must(&CreateTask{TaskID: id, Spec: s})
	n := w.claim(id)
	deadline := w.task(id).Running().Deadline
	require.NotNil(t, deadline)
	require.Equal(t, w.now.Add(30*time.Second), *deadline)

	fire := &FireTimer{TaskID: id, Kind: TimerAttempt, Attempt: n, Due: *deadline}
	w.advance(29 * time.Second)
	_ = w.refused(fire, CodeConflict)
	w.advance(time.Second)
	out := w.must(fire)
	require.Equal(t, []string{"task.attempt_failed", "task.backoff_scheduled"}, events(out, id))
	require.Equal(t, ReasonTimeout, eventOf[*AttemptFailed](t, out, id).Error.Code)
	// A timer for an attempt that is no longer running is stale.
	require.Empty(t, w.must(fire).Changes)
}

func TestFencing(t *testing.T) {
	w := setup(t)
	id := w.newTask()
	require.Equal(t, 1, w.claim(id))
	w.must(&SaveCheckpoint{TaskID: id, Attempt: 1, Checkpoint: json.RawMessage(`{"page":7}`)})

	// A running attempt is not claimed again unless the claim supersedes it.
	_ = w.refused(&ClaimTask{ClaimBody: ClaimBody{TaskID: id, Executor: "exec-2"}}, CodeConflict)
	_ = w.refused(&ClaimTask{ClaimBody: ClaimBody{TaskID: id, Executor: "exec-2", Supersedes: 2}}, CodeConflict)

	out := w.must(&ClaimTask{ClaimBody: ClaimBody{TaskID: id, Executor: "exec-2", Supersedes: 1}})
	require.Equal(t, []string{"task.attempt_abandoned", "task.attempt_started"}, events(out, id))
	ab := eventOf[*AttemptAbandoned](t, out, id)
	require.Equal(t, AttemptAbandoned{Attempt: 1, Reason: ReasonLeaseLost}, *ab)
	require.Equal(t, 2, out.Reply.Attempt)
	require.Equal(t, json.RawMessage(`{"page":7}`), out.Reply.Task.Checkpoint, "the new attempt is handed the last checkpoint")
	require.Equal(t, OperationKey(id), out.Reply.Task.Running().OperationKey, "the operation key is stable across attempts")
	require.Equal(t, AttemptStateAbandoned, w.task(id).Attempts[0].State)

	before := w.task(id)
	for _, stale := range []Command{
		&ReportSuccess{TaskID: id, Attempt: 1},
		&ReportFailure{TaskID: id, Attempt: 1, Retryable: true, Error: ErrorInfo{Message: "late"}},
		&SaveCheckpoint{TaskID: id, Attempt: 1, Checkpoint: json.RawMessage(`{}`)},
		&WaitTask{TaskID: id, Attempt: 1, Kind: WaitSignal, Signal: "s"},
		&ReportSuccess{TaskID: id, Attempt: 3},
		&ReportSuccess{TaskID: id, Attempt: 0},
	} {
		de := w.refused(stale, CodeConflict)
		require.Equal(t, "/attempt", de.Field)
		require.True(t, errors.Is(de, ErrConflict))
	}
	require.Equal(t, before, w.task(id), "refused reports change nothing")

	out = w.succeed(id, 2)
	require.Equal(t, StateAccepted, out.Reply.State)
	_ = w.refused(&ReportSuccess{TaskID: id, Attempt: 2}, CodeConflict)
	w.requireReplays()
}

func TestSupersedingClaimWhenAttemptsAreSpent(t *testing.T) {
	w := setup(t)
	id := w.newID()
	s := spec("")
	s.Retry = &RetryPolicy{MaxAttempts: 1}
	w.must(&CreateTask{TaskID: id, Spec: s})
	w.claim(id)
	out := w.must(&ClaimTask{ClaimBody: ClaimBody{TaskID: id, Executor: "exec-2", Supersedes: 1}})
	require.Equal(t, []string{"task.attempt_abandoned", "task.failed"}, events(out, id))
	require.Equal(t, StateFailed, out.Reply.State)
	require.Equal(t, ReasonAttemptsSpent, w.task(id).Reason)
}

// verified creates a standalone task with a verifier and the retry policy,
// runs attempt 1 to success and returns its id.
func verified(w *world, retry *RetryPolicy) string {
	w.t.Helper()
	id := w.newID()
	s := spec("")
	s.Verification = &VerificationSpec{Queue: "verify"}
	s.Retry = retry
	w.must(&CreateTask{TaskID: id, Spec: s})
	out := w.succeed(id, w.claim(id))
	require.Equal(w.t, []string{"task.attempt_succeeded"}, events(out, id))
	require.Equal(w.t, StateVerifying, w.state(id))
	return id
}

func TestVerification(t *testing.T) {
	t.Run("PASS accepts", func(t *testing.T) {
		w := setup(t)
		id := verified(w, nil)
		out := w.verify(id, 1, OutcomePass)
		require.Equal(t, []string{"task.verification_recorded", "task.accepted"}, events(out, id))
		require.Equal(t, StateAccepted, w.state(id))
	})
	t.Run("PASS makes dependents ready", func(t *testing.T) {
		w := setup(t)
		g := w.createGoal(Envelope{})
		a := spec("a")
		a.Verification = &VerificationSpec{Queue: "verify"}
		ids, _ := w.plan(g, a, spec("b", "a"))
		w.succeed(ids["a"], w.claim(ids["a"]))
		require.Equal(t, StatePending, w.state(ids["b"]), "completion is not acceptance")
		out := w.verify(ids["a"], 1, OutcomePass)
		require.Equal(t, []string{"task.ready"}, events(out, ids["b"]))
	})
	t.Run("FAIL starts a new attempt with the evidence", func(t *testing.T) {
		w := setup(t)
		id := verified(w, nil)
		out := w.verify(id, 1, OutcomeFail)
		require.Equal(t, []string{"task.verification_recorded", "task.ready"}, events(out, id))
		require.Equal(t, ReasonVerification, eventOf[*TaskReady](t, out, id).Reason)
		claim := w.must(&ClaimTask{ClaimBody: ClaimBody{TaskID: id, Executor: "exec-1"}})
		require.Equal(t, 2, claim.Reply.Attempt)
		vs := claim.Reply.Task.Verifications
		require.Len(t, vs, 1)
		require.Equal(t, OutcomeFail, vs[0].Outcome)
		require.JSONEq(t, `{"checked":"FAIL"}`, string(vs[0].Evidence))
		w.succeed(id, 2)
		w.verify(id, 2, OutcomePass)
		require.Equal(t, StateAccepted, w.state(id))
	})
	t.Run("the evidence a task keeps is bounded", func(t *testing.T) {
		// A verdict per attempt, up to 1,000 attempts, each with 256 KiB of
		// evidence, would make one task of 256 MiB that every event rewrites.
		w := setup(t)
		id := verified(w, &RetryPolicy{MaxAttempts: 1000})
		big := json.RawMessage(`"` + strings.Repeat("e", MaxInputBytes-16) + `"`)
		held := 0
		for n := 1; ; n++ {
			v := verification(id, n, OutcomeFail)
			v.Evidence = big
			if held+len(big) > schemas.MaxTaskEvidenceBytes {
				e := w.refused(v, CodeConflict)
				require.Equal(t, "/evidence", e.Field)
				require.Contains(t, e.Message, "evidence_refs", "the refusal says what to do")
				v.Evidence, v.EvidenceRefs = nil, []ArtifactRef{{Name: "evidence", SHA256: strings.Repeat("0", 64), Size: int64(len(big))}}
				w.must(v) // named by reference, it is taken
				break
			}
			w.must(v)
			held += len(big)
			w.succeed(id, w.claim(id))
		}
		require.Len(t, w.task(id).Verifications, schemas.MaxTaskEvidenceBytes/len(big)+1)
		w.requireReplays()
	})
	t.Run("FAIL until attempts are spent rejects", func(t *testing.T) {
		w := setup(t)
		id := verified(w, &RetryPolicy{MaxAttempts: 2})
		w.verify(id, 1, OutcomeFail)
		w.succeed(id, w.claim(id))
		out := w.verify(id, 2, OutcomeFail)
		require.Equal(t, []string{"task.verification_recorded", "task.rejected"}, events(out, id))
		require.Equal(t, ReasonVerification, w.task(id).Reason)
		require.Equal(t, StateRejected, w.state(id))
	})
	t.Run("INCONCLUSIVE then review", func(t *testing.T) {
		for _, tc := range []struct {
			decision string
			state    string
			events   []string
		}{
			{ReviewAccept, StateAccepted, []string{"task.review_decided", "task.accepted"}},
			{ReviewReject, StateRejected, []string{"task.review_decided", "task.rejected"}},
			{ReviewRetry, StateReady, []string{"task.review_decided", "task.ready"}},
		} {
			t.Run(tc.decision, func(t *testing.T) {
				w := setup(t)
				id := verified(w, nil)
				out := w.verify(id, 1, OutcomeInconclusive)
				require.Equal(t, []string{"task.verification_recorded"}, events(out, id))
				require.Equal(t, StateNeedsReview, w.state(id))
				_ = w.refused(&ClaimTask{ClaimBody: ClaimBody{TaskID: id, Executor: "e"}}, CodeConflict)
				out = w.must(&ReviewTask{TaskID: id, Decision: tc.decision, Reason: "looked at it"})
				require.Equal(t, tc.events, events(out, id))
				require.Equal(t, tc.state, w.state(id))
				if tc.decision == ReviewRetry {
					require.Equal(t, 2, w.claim(id))
				}
				if tc.decision == ReviewAccept {
					require.Equal(t, 1, eventOf[*TaskAccepted](t, out, id).Attempt)
				}
			})
		}
	})
	t.Run("same identity twice is a no-op", func(t *testing.T) {
		w := setup(t)
		id := verified(w, nil)
		w.verify(id, 1, OutcomeInconclusive)
		// A redelivered verification under a new command id is still the same verification.
		out, err := w.run(verification(id, 1, OutcomeInconclusive))
		require.NoError(t, err)
		require.Empty(t, out.Changes)
		require.True(t, out.Reply.Duplicate)
		require.Len(t, w.task(id).Verifications, 1)
		// ... even after the task moved on.
		w.must(&ReviewTask{TaskID: id, Decision: ReviewAccept})
		out, err = w.run(verification(id, 1, OutcomeInconclusive))
		require.NoError(t, err)
		require.Empty(t, out.Changes)
	})
	t.Run("different outcome under the same identity is a conflict", func(t *testing.T) {
		w := setup(t)
		id := verified(w, nil)
		w.verify(id, 1, OutcomeInconclusive)
		de := w.refused(verification(id, 1, OutcomePass), CodeConflict)
		require.Equal(t, "/outcome", de.Field)
		require.Equal(t, StateNeedsReview, w.state(id))
	})
	t.Run("identity covers the verifier version and the digest", func(t *testing.T) {
		require.NotEqual(t, VerificationID("t", 1, "d", "v", "1"), VerificationID("t", 1, "d", "v", "2"))
		require.NotEqual(t, VerificationID("t", 1, "d", "v", "1"), VerificationID("t", 1, "e", "v", "1"))
		require.NotEqual(t, VerificationID("t", 1, "d", "v", "1"), VerificationID("t", 2, "d", "v", "1"))
		require.Equal(t, VerificationID("t", 1, "d", "v", "1"), VerificationID("t", 1, "d", "v", "1"))
	})
	t.Run("only the attempt awaiting verification", func(t *testing.T) {
		w := setup(t)
		id := verified(w, nil)
		_ = w.refused(verification(id, 2, OutcomePass), CodeConflict)
		w.verify(id, 1, OutcomeFail)
		// Verifying attempt 1 again under another verifier: the task is no longer verifying.
		v := verification(id, 1, OutcomePass)
		v.Verifier = "other"
		_ = w.refused(v, CodeConflict)
		_ = w.refused(&RecordVerification{TaskID: id, Verdict: Verdict{Attempt: 1, Outcome: "MAYBE", Verifier: "v", ResultDigest: "d"}}, CodeInvalid)
	})
	t.Run("a task without a verifier is never verifying", func(t *testing.T) {
		w := setup(t)
		id := w.newTask()
		w.succeed(id, w.claim(id))
		_ = w.refused(verification(id, 1, OutcomeFail), CodeConflict)
		require.Equal(t, StateAccepted, w.state(id))
	})
}

func TestVerificationPolicy(t *testing.T) {
	for _, tc := range []struct {
		onFail, onInconclusive, outcome string
		events                          []string
		state                           string
	}{
		{"", "", OutcomeFail, []string{"task.verification_recorded", "task.ready"}, StateReady},
		{VerdictReject, "", OutcomeFail, []string{"task.verification_recorded", "task.rejected"}, StateRejected},
		{VerdictReview, "", OutcomeFail, []string{"task.verification_recorded"}, StateNeedsReview},
		{"", "", OutcomeInconclusive, []string{"task.verification_recorded"}, StateNeedsReview},
		{"", VerdictRetry, OutcomeInconclusive, []string{"task.verification_recorded", "task.ready"}, StateReady},
		{"", VerdictReject, OutcomeInconclusive, []string{"task.verification_recorded", "task.rejected"}, StateRejected},
		{VerdictReject, VerdictReject, OutcomePass, []string{"task.verification_recorded", "task.accepted"}, StateAccepted},
	} {
		t.Run(fmt.Sprintf("on_fail=%s,on_inconclusive=%s,%s", tc.onFail, tc.onInconclusive, tc.outcome), func(t *testing.T) {
			w := setup(t)
			id := w.newID()
			s := spec("")
			s.Verification = &VerificationSpec{Queue: "verify", OnFail: tc.onFail, OnInconclusive: tc.onInconclusive}
			w.must(&CreateTask{TaskID: id, Spec: s})
			w.succeed(id, w.claim(id))
			out := w.verify(id, 1, tc.outcome)
			require.Equal(t, tc.events, events(out, id))
			require.Equal(t, tc.state, w.state(id))
			if tc.state == StateNeedsReview {
				w.must(&ReviewTask{TaskID: id, Decision: ReviewAccept, Reason: "a person looked"})
				require.Equal(t, StateAccepted, w.state(id))
			}
			w.requireReplays()
		})
	}
	w := setup(t)
	for field, v := range map[string]*VerificationSpec{
		"/spec/verification/on_fail":         {Queue: "v", OnFail: "accept"},
		"/spec/verification/on_inconclusive": {Queue: "v", OnInconclusive: "maybe"},
	} {
		s := spec("")
		s.Verification = v
		require.Equal(t, field, w.refused(&CreateTask{TaskID: w.newID(), Spec: s}, CodeInvalid).Field)
	}
}

func TestReviewOnlyInNeedsReview(t *testing.T) {
	for _, decision := range []string{ReviewAccept, ReviewReject, ReviewRetry} {
		t.Run(decision, func(t *testing.T) {
			w := setup(t)
			id := w.newID()
			s := spec("")
			s.Verification = &VerificationSpec{Queue: "verify"}
			w.must(&CreateTask{TaskID: id, Spec: s})
			// Ready, with no attempt yet.
			_ = w.refused(&ReviewTask{TaskID: id, Decision: decision}, CodeConflict)
			w.claim(id)
			_ = w.refused(&ReviewTask{TaskID: id, Decision: decision}, CodeConflict)
			w.succeed(id, 1)
			_ = w.refused(&ReviewTask{TaskID: id, Decision: decision}, CodeConflict)
			require.Equal(t, StateVerifying, w.state(id))
		})
	}
	w := setup(t)
	id := verified(w, nil)
	w.verify(id, 1, OutcomeInconclusive)
	require.Equal(t, "/decision", w.refused(&ReviewTask{TaskID: id, Decision: "maybe"}, CodeInvalid).Field)
}

func TestWaitSignal(t *testing.T) {
	w := setup(t)
	id := w.newTask()
	n := w.claim(id)
	out := w.must(&WaitTask{TaskID: id, Attempt: n, Kind: WaitSignal, Signal: "payment.settled"})
	require.Equal(t, []string{"task.waiting"}, events(out, id))
	task := w.task(id)
	require.Equal(t, StateWaiting, task.State)
	require.Equal(t, &Wait{Kind: WaitSignal, Signal: "payment.settled"}, task.Wait)
	require.Nil(t, task.Running(), "a waiting task holds no process")
	require.Equal(t, AttemptStateParked, task.Attempts[0].State)

	// Another signal is kept for a later wait; the task keeps waiting.
	require.Equal(t, []string{"task.signal_buffered"}, events(w.must(&SendSignal{TaskID: id, Name: "vendor.answered"}), id))
	_ = w.refused(&ReportSuccess{TaskID: id, Attempt: n}, CodeConflict)
	_ = w.refused(&ClaimTask{ClaimBody: ClaimBody{TaskID: id, Executor: "e"}}, CodeConflict)
	require.Empty(t, w.must(&FireTimer{TaskID: id, Kind: TimerWait}).Changes, "a waiting task's timer is stale when it waits on a signal")
	require.Equal(t, StateWaiting, w.state(id))

	out = w.must(&SendSignal{TaskID: id, Name: "payment.settled", Payload: json.RawMessage(`{"amount":3}`)})
	require.Equal(t, []string{"task.signal_received", "task.ready"}, events(out, id))
	require.Equal(t, StateReady, w.state(id))
	require.Nil(t, w.task(id).Wait)
	require.Equal(t, 2, w.claim(id))
	require.Equal(t, []Signal{{Name: "vendor.answered"}}, w.task(id).PendingSignals)
	w.requireReplays()
}

// A signal sent before its task waits for it is kept (up to a bound) and
// taken by the task's next wait for its name, which then resumes at once;
// a signal to a task that has ended is refused.
func TestASignalSentBeforeItsWaitIsKept(t *testing.T) {
	w := setup(t)
	id := w.newTask()
	n := w.claim(id)
	w.must(&SendSignal{TaskID: id, Name: "payment.settled", Payload: json.RawMessage(`{"n":1}`)})
	w.must(&SendSignal{TaskID: id, Name: "payment.settled", Payload: json.RawMessage(`{"n":2}`)})
	w.must(&SendSignal{TaskID: id, Name: "other"})
	require.Equal(t, StateRunning, w.state(id), "a kept signal does not disturb the attempt")
	require.Len(t, w.task(id).PendingSignals, 3)

	out := w.must(&WaitTask{TaskID: id, Attempt: n, Kind: WaitSignal, Signal: "payment.settled"})
	require.Equal(t, []string{"task.waiting", "task.signal_received", "task.ready"}, events(out, id))
	tk := w.task(id)
	require.Equal(t, StateReady, tk.State, "the wait took the first kept signal at once")
	require.JSONEq(t, `{"n":1}`, string(tk.Signal.Payload))
	require.Equal(t, []Signal{{Name: "payment.settled", Payload: json.RawMessage(`{"n":2}`)}, {Name: "other"}}, tk.PendingSignals)

	// The next attempt's wait takes the second.
	n = w.claim(id)
	w.must(&WaitTask{TaskID: id, Attempt: n, Kind: WaitSignal, Signal: "payment.settled"})
	require.JSONEq(t, `{"n":2}`, string(w.task(id).Signal.Payload))
	require.Equal(t, []Signal{{Name: "other"}}, w.task(id).PendingSignals)

	// Bounded: the kept signals stay, the one beyond is refused — by bytes,
	// then by count.
	n = w.claim(id)
	payload := func(kb int) json.RawMessage { return json.RawMessage(`"` + strings.Repeat("x", kb<<10) + `"`) }
	w.must(&SendSignal{TaskID: id, Name: "big", Payload: payload(200)})
	require.Equal(t, "/payload", w.refused(&SendSignal{TaskID: id, Name: "big", Payload: payload(100)}, CodeConflict).Field)
	for i := len(w.task(id).PendingSignals); i < MaxPendingSignals; i++ {
		w.must(&SendSignal{TaskID: id, Name: "other"})
	}
	de := w.refused(&SendSignal{TaskID: id, Name: "other"}, CodeConflict)
	require.Equal(t, "/name", de.Field)
	require.Contains(t, de.Message, "at most 16")
	require.Len(t, w.task(id).PendingSignals, MaxPendingSignals)
	w.must(&WaitTask{TaskID: id, Attempt: n, Kind: WaitSignal, Signal: "big"})
	require.Len(t, w.task(id).PendingSignals, MaxPendingSignals-1, "a wait makes room")

	// Ended: refused.
	w.succeed(id, w.claim(id))
	require.Equal(t, "/task_id", w.refused(&SendSignal{TaskID: id, Name: "other"}, CodeConflict).Field)
	w.requireReplays()
}

func TestWaitTimer(t *testing.T) {
	w := setup(t)
	id := w.newTask()
	n := w.claim(id)

	require.Equal(t, "/until", w.refused(&WaitTask{TaskID: id, Attempt: n, Kind: WaitTimer}, CodeInvalid).Field)
	require.Equal(t, "/kind", w.refused(&WaitTask{TaskID: id, Attempt: n, Kind: WaitApproval}, CodeInvalid).Field)
	require.Equal(t, "/signal", w.refused(&WaitTask{TaskID: id, Attempt: n, Kind: WaitSignal, Signal: "no spaces"}, CodeInvalid).Field)

	// A time already passed (the wait took longer to arrive than the sleep
	// it asks for): the wait ends at once, in the same record.
	past := w.now.Add(-time.Millisecond)
	out := w.must(&WaitTask{TaskID: id, Attempt: n, Kind: WaitTimer, Until: &past})
	require.Equal(t, []string{"task.waiting", "task.ready"}, events(out, id))
	require.Equal(t, StateReady, w.state(id))
	require.Equal(t, AttemptStateParked, w.task(id).Current().State)
	n = w.claim(id)
	require.Equal(t, 2, n)

	until := w.now.Add(time.Hour)
	w.must(&WaitTask{TaskID: id, Attempt: n, Kind: WaitTimer, Until: &until})
	require.Equal(t, StateWaiting, w.state(id))
	fire := &FireTimer{TaskID: id, Kind: TimerWait, Due: until}
	_ = w.refused(fire, CodeConflict)
	w.advance(time.Hour - time.Nanosecond)
	_ = w.refused(fire, CodeConflict)
	require.Equal(t, StateWaiting, w.state(id))
	require.Equal(t, []string{"task.signal_buffered"}, events(w.must(&SendSignal{TaskID: id, Name: "x"}), id), "kept for a wait for it")
	require.Equal(t, StateWaiting, w.state(id))
	w.advance(time.Nanosecond)
	out = w.must(fire)
	require.Equal(t, []string{"task.ready"}, events(out, id))
	require.Empty(t, w.must(fire).Changes, "a timer fires once")
	w.requireReplays()
}

func TestStartAt(t *testing.T) {
	w := setup(t)
	g := w.createGoal(Envelope{})
	later := w.now.Add(10 * time.Minute)
	earlier := w.now.Add(-time.Minute)
	s, p := spec("later"), spec("past")
	s.StartAt, p.StartAt = &later, &earlier
	ids, out := w.plan(g, s, p, spec("after", "later"))
	id := ids["later"]
	require.Equal(t, StateWaiting, eventOf[*TaskCreated](t, out, id).State)
	require.Equal(t, &Wait{Kind: WaitTimer, Until: &later}, w.task(id).Wait)
	require.Equal(t, StateReady, w.state(ids["past"]), "a start time already passed does not wait")

	fire := &FireTimer{TaskID: id, Kind: TimerWait, Due: later}
	w.advance(9 * time.Minute)
	_ = w.refused(fire, CodeConflict)
	_ = w.refused(&ClaimTask{ClaimBody: ClaimBody{TaskID: id, Executor: "e"}}, CodeConflict)
	w.advance(time.Minute)
	out = w.must(fire)
	require.Equal(t, []string{"task.ready"}, events(out, id))
	w.succeed(id, w.claim(id))
	require.Equal(t, StateReady, w.state(ids["after"]))
}

func TestCancelTask(t *testing.T) {
	t.Run("running", func(t *testing.T) {
		w := setup(t)
		g := w.createGoal(Envelope{})
		ids, _ := w.plan(g, spec("a"), spec("b", "a"), spec("x"))
		a := ids["a"]
		n := w.claim(a)
		out := w.must(&CancelTask{TaskID: a, Reason: "not needed"})
		require.Equal(t, []string{"task.cancelled"}, events(out, a))
		task := w.task(a)
		require.Equal(t, StateCancelled, task.State)
		require.Equal(t, "not needed", task.Reason)
		require.Equal(t, AttemptStateCancelled, task.Attempts[0].State)
		require.NotNil(t, task.Attempts[0].EndedAt)
		require.Equal(t, ReasonDependencyFailed, eventOf[*TaskFailed](t, out, ids["b"]).Reason)
		require.Empty(t, events(out, g), "x has not ended yet")

		_ = w.refused(&ReportSuccess{TaskID: a, Attempt: n}, CodeConflict)
		_ = w.refused(&ReportFailure{TaskID: a, Attempt: n, Error: ErrorInfo{Message: "x"}}, CodeConflict)
		_ = w.refused(&ClaimTask{ClaimBody: ClaimBody{TaskID: a, Executor: "e", Supersedes: n}}, CodeConflict)
		_ = w.refused(&CancelTask{TaskID: a}, CodeConflict)
		_ = w.refused(&CancelTask{TaskID: ids["b"]}, CodeConflict)

		out = w.succeed(ids["x"], w.claim(ids["x"]))
		require.Equal(t, []string{"goal.failed"}, events(out, g))
		require.Contains(t, w.goal(g).Reason, "cancelled")
	})
	t.Run("every terminal state", func(t *testing.T) {
		w := setup(t)
		mk := func() string {
			id := w.newID()
			s := spec("")
			s.Approval = &ApprovalSpec{}
			w.must(&CreateTask{TaskID: id, Spec: s})
			return id
		}
		k := w.approver("alice", "owner")
		decide := func(id, response string) { w.must(decision(w.pending(id), "alice", k, response)) }
		acc, rej, fail, can := mk(), mk(), mk(), mk()
		decide(acc, ResponseApprove)
		w.succeed(acc, w.claim(acc))
		decide(rej, ResponseReject)
		decide(fail, ResponseApprove)
		w.fail(fail, w.claim(fail), false)
		w.must(&CancelTask{TaskID: can})
		for _, id := range []string{acc, rej, fail, can} {
			require.True(t, Terminal(w.state(id)))
			_ = w.refused(&CancelTask{TaskID: id}, CodeConflict)
		}
	})
}

func TestCancelGoal(t *testing.T) {
	w := setup(t)
	g := w.createGoal(Envelope{})
	ids, _ := w.plan(g, chain()...)
	w.succeed(ids["a"], w.claim(ids["a"]))
	n := w.claim(ids["b"])

	out := w.must(&CancelGoal{GoalID: g, Reason: "changed our minds"})
	require.Equal(t, []string{"goal.cancelled"}, events(out, g))
	require.Empty(t, events(out, ids["a"]), "accepted work stays accepted")
	require.Equal(t, []string{"task.cancelled"}, events(out, ids["b"]))
	require.Equal(t, []string{"task.cancelled"}, events(out, ids["c"]))
	require.Equal(t, GoalStateCancelled, w.goal(g).State)
	require.Equal(t, "changed our minds", w.goal(g).Reason)
	require.Equal(t, StateAccepted, w.state(ids["a"]))
	for _, k := range []string{"b", "c"} {
		require.Equal(t, StateCancelled, w.state(ids[k]))
		require.Equal(t, ReasonGoalCancelled, w.task(ids[k]).Reason)
	}
	_ = w.refused(&ReportSuccess{TaskID: ids["b"], Attempt: n}, CodeConflict)
	_ = w.refused(&CancelGoal{GoalID: g}, CodeConflict)
	_ = w.refused(&SubmitPlan{GoalID: g, Tasks: chain()}, CodeConflict)
	w.requireReplays()
}

func TestPlanRevision(t *testing.T) {
	t.Run("keep, replace, add, remove", func(t *testing.T) {
		w := setup(t)
		g := w.createGoal(Envelope{})
		v1, _ := w.plan(g, spec("a"), spec("b", "a"), spec("c", "b"), spec("d"))
		w.succeed(v1["a"], w.claim(v1["a"]))
		w.claim(v1["b"])

		c2 := spec("c", "b")
		c2.Input = json.RawMessage(`{"v":2}`)
		v2, out := w.plan(g, spec("a"), spec("b", "a"), c2, spec("e", "c"))
		require.Equal(t, 2, out.Reply.PlanVersion)
		pc := eventOf[*PlanCommitted](t, out, g)
		require.Equal(t, 2, pc.Version)
		require.Equal(t, []string{"a", "b"}, pc.Kept)
		require.Equal(t, []string{"c"}, pc.Replaced)
		require.Equal(t, []string{"e"}, pc.Added)
		require.Equal(t, []string{"d"}, pc.Removed)

		require.Equal(t, v1["a"], v2["a"], "accepted unchanged task kept")
		require.Equal(t, v1["b"], v2["b"], "unfinished unchanged task kept")
		require.Empty(t, events(out, v1["b"]), "the kept running task is untouched")
		require.Equal(t, StateRunning, w.state(v2["b"]))
		require.NotEqual(t, v1["c"], v2["c"])
		require.Equal(t, ReasonReplaced, eventOf[*TaskCancelled](t, out, v1["c"]).Reason)
		require.Equal(t, ReasonRemoved, eventOf[*TaskCancelled](t, out, v1["d"]).Reason)
		require.Equal(t, StatePending, w.state(v2["c"]))
		require.Equal(t, []string{v2["b"]}, w.task(v2["c"]).DependsOn)
		require.Equal(t, 2, w.task(v2["c"]).PlanVersion)
		require.Equal(t, StatePending, w.state(v2["e"]))
		require.Empty(t, events(out, v1["e"]))
		require.Equal(t, GoalStateOpen, w.goal(g).State, "replacing and removing tasks does not fail the goal")

		w.succeed(v2["b"], 1)
		require.Equal(t, StateReady, w.state(v2["c"]))
		require.Equal(t, StateCancelled, w.state(v1["c"]))
		w.succeed(v2["c"], w.claim(v2["c"]))
		out = w.succeed(v2["e"], w.claim(v2["e"]))
		require.Equal(t, []string{"goal.achieved"}, events(out, g))
		w.requireReplays()
	})
	t.Run("an accepted key with a changed spec is a conflict", func(t *testing.T) {
		w := setup(t)
		g := w.createGoal(Envelope{})
		v1, _ := w.plan(g, spec("a"), spec("b"))
		w.succeed(v1["a"], w.claim(v1["a"]))
		a2 := spec("a")
		a2.Queue = "other"
		_ = w.refused(&SubmitPlan{GoalID: g, Tasks: []TaskSpec{a2, spec("b")}}, CodeConflict)
		_ = w.refused(&SubmitPlan{GoalID: g, Tasks: []TaskSpec{spec("a", "b"), spec("b")}}, CodeConflict)
		require.Equal(t, 1, w.goal(g).PlanVersion)
	})
	t.Run("a replaced dependency replaces its dependents", func(t *testing.T) {
		w := setup(t)
		g := w.createGoal(Envelope{})
		v1, _ := w.plan(g, chain()...)
		a2 := spec("a")
		a2.Title = "renamed"
		v2, out := w.plan(g, a2, spec("b", "a"), spec("c", "b"))
		pc := eventOf[*PlanCommitted](t, out, g)
		require.Empty(t, pc.Kept)
		require.ElementsMatch(t, []string{"a", "b", "c"}, pc.Replaced)
		for _, k := range []string{"a", "b", "c"} {
			require.NotEqual(t, v1[k], v2[k])
			require.Equal(t, StateCancelled, w.state(v1[k]))
			require.Equal(t, ReasonReplaced, w.task(v1[k]).Reason, k)
		}
		require.Equal(t, StateReady, w.state(v2["a"]))
		require.Equal(t, StatePending, w.state(v2["b"]))
	})
	t.Run("a failed task is replaced and the goal goes on", func(t *testing.T) {
		w := setup(t)
		g := w.createGoal(Envelope{})
		v1, _ := w.plan(g, spec("a"), spec("b", "a"), spec("x"))
		w.claim(v1["x"])
		w.fail(v1["a"], w.claim(v1["a"]), false)
		require.Equal(t, StateFailed, w.state(v1["b"]))
		require.Equal(t, GoalStateOpen, w.goal(g).State, "x is still running")
		v2, out := w.plan(g, spec("a"), spec("b", "a"), spec("x"))
		pc := eventOf[*PlanCommitted](t, out, g)
		require.Equal(t, []string{"x"}, pc.Kept)
		require.Equal(t, []string{"a", "b"}, pc.Replaced)
		require.Empty(t, events(out, v1["a"]), "a terminal task is not cancelled again")
		w.succeed(v2["a"], w.claim(v2["a"]))
		w.succeed(v2["b"], w.claim(v2["b"]))
		out = w.succeed(v2["x"], 1)
		require.Equal(t, []string{"goal.achieved"}, events(out, g))
	})
	t.Run("removing the unfinished work achieves the goal", func(t *testing.T) {
		w := setup(t)
		g := w.createGoal(Envelope{})
		v1, _ := w.plan(g, spec("a"), spec("b"))
		w.succeed(v1["a"], w.claim(v1["a"]))
		_, out := w.plan(g, spec("a"))
		require.Equal(t, []string{"goal.plan_committed", "goal.achieved"}, events(out, g))
		require.Equal(t, StateCancelled, w.state(v1["b"]))
	})
	t.Run("a new task after an accepted one is ready", func(t *testing.T) {
		w := setup(t)
		g := w.createGoal(Envelope{})
		v1, _ := w.plan(g, spec("a"), spec("b"))
		w.succeed(v1["a"], w.claim(v1["a"]))
		v2, _ := w.plan(g, spec("a"), spec("b"), spec("n", "a"))
		require.Equal(t, StateReady, w.state(v2["n"]))
		require.Equal(t, []string{v1["a"]}, w.task(v2["n"]).DependsOn)
	})
}

func TestStandaloneTaskDependencies(t *testing.T) {
	w := setup(t)
	a, b := w.newID(), w.newID()
	w.must(&CreateTask{TaskID: a, Spec: spec("")})
	w.must(&CreateTask{TaskID: b, Spec: spec("", a)})
	require.Equal(t, StatePending, w.state(b))
	w.succeed(a, w.claim(a))
	require.Equal(t, StateReady, w.state(b))

	c, d := w.newID(), w.newID()
	w.must(&CreateTask{TaskID: c, Spec: spec("", a)})
	require.Equal(t, StateReady, w.state(c), "an accepted dependency is met")
	w.must(&CancelTask{TaskID: c})
	de := w.refused(&CreateTask{TaskID: d, Spec: spec("", c)}, CodeConflict)
	require.Equal(t, "/spec/depends_on/0", de.Field)
	_ = w.refused(&CreateTask{TaskID: a, Spec: spec("")}, CodeConflict)
}

func TestValidation(t *testing.T) {
	goal := DeriveID(epoch, "the-goal")
	plan := func(tasks ...TaskSpec) Command { return &SubmitPlan{GoalID: goal, Tasks: tasks} }
	with := func(s TaskSpec, f func(*TaskSpec)) TaskSpec { f(&s); return s }
	for _, tc := range []struct {
		name  string
		cmd   Command
		code  Code
		field string
	}{
		{"unknown dependency", plan(spec("a"), spec("b", "a", "zz")), CodeInvalid, "/tasks/1/depends_on/1"},
		{"unknown first dependency", plan(spec("a"), spec("b", "nope")), CodeInvalid, "/tasks/1/depends_on/0"},
		{"self dependency", plan(spec("a", "a")), CodeInvalid, "/tasks/0/depends_on/0"},
		{"cycle", plan(spec("a", "b"), spec("b", "a")), CodeInvalid, "/tasks/0/depends_on"},
		{"cycle after a task that depends on it", plan(spec("x", "b"), spec("a", "b"), spec("b", "a")), CodeInvalid, "/tasks/1/depends_on"},
		{"long cycle", plan(spec("a", "c"), spec("b", "a"), spec("c", "b")), CodeInvalid, "/tasks/0/depends_on"},
		{"duplicate key", plan(spec("a"), spec("b"), spec("a")), CodeInvalid, "/tasks/2/key"},
		{"missing key", plan(spec("a"), spec("")), CodeInvalid, "/tasks/1/key"},
		{"bad key", plan(spec("a b")), CodeInvalid, "/tasks/0/key"},
		{"empty plan", plan(), CodeInvalid, "/tasks"},
		{"bad queue", plan(spec("a"), with(spec("b"), func(s *TaskSpec) { s.Queue = "Bad Queue" })), CodeInvalid, "/tasks/1/queue"},
		{"missing queue", plan(with(spec("a"), func(s *TaskSpec) { s.Queue = "" })), CodeInvalid, "/tasks/0/queue"},
		{"queue with a dot", plan(with(spec("a"), func(s *TaskSpec) { s.Queue = "a.b" })), CodeInvalid, "/tasks/0/queue"},
		{"bad verification queue", plan(with(spec("a"), func(s *TaskSpec) { s.Verification = &VerificationSpec{Queue: "*"} })), CodeInvalid, "/tasks/0/verification/queue"},
		{"negative max attempts", plan(with(spec("a"), func(s *TaskSpec) { s.Retry = &RetryPolicy{MaxAttempts: -1} })), CodeInvalid, "/tasks/0/retry/max_attempts"},
		{"multiplier below one", plan(with(spec("a"), func(s *TaskSpec) { s.Retry = &RetryPolicy{Multiplier: 0.5} })), CodeInvalid, "/tasks/0/retry/multiplier"},
		{"negative backoff", plan(with(spec("a"), func(s *TaskSpec) { s.Retry = &RetryPolicy{InitialBackoff: -1} })), CodeInvalid, "/tasks/0/retry/initial_backoff"},
		{"negative timeout", plan(with(spec("a"), func(s *TaskSpec) { s.Timeout = -1 })), CodeInvalid, "/tasks/0/timeout"},
		{"bad approval response", plan(with(spec("a"), func(s *TaskSpec) { s.Approval = &ApprovalSpec{Responses: []string{"approve", "maybe"}} })), CodeInvalid, "/tasks/0/approval/responses/1"},
		{"title too long", plan(with(spec("a"), func(s *TaskSpec) { s.Title = string(make([]byte, MaxTitle+1)) })), CodeInvalid, "/tasks/0/title"},
		{"input too large", plan(with(spec("a"), func(s *TaskSpec) { s.Input = make(json.RawMessage, MaxInputBytes+1) })), CodeInvalid, "/tasks/0/input"},
		{"unknown goal", &SubmitPlan{GoalID: DeriveID(epoch, "other"), Tasks: chain()}, CodeNotFound, "/goal_id"},
		{"goal id not a ULID", &CreateGoal{GoalID: "goal-1", Title: "t"}, CodeInvalid, "/goal_id"},
		{"goal id lower case", &CreateGoal{GoalID: "01arz3ndektsv4rrffq69g5fav", Title: "t"}, CodeInvalid, "/goal_id"},
		{"missing goal title", &CreateGoal{GoalID: DeriveID(epoch, "g2")}, CodeInvalid, "/title"},
		{"negative budget", &CreateGoal{GoalID: DeriveID(epoch, "g2"), Title: "t", Envelope: Envelope{Budget: Budget{Cost: -1}}}, CodeInvalid, "/envelope/budget/cost"},
		{"bad permitted queue", &CreateGoal{GoalID: DeriveID(epoch, "g2"), Title: "t", Envelope: Envelope{Permissions: Permissions{Queues: []string{"ok", "NO"}}}}, CodeInvalid, "/envelope/permissions/queues/1"},
		{"empty success criterion", &CreateGoal{GoalID: DeriveID(epoch, "g2"), Title: "t", SuccessCriteria: []string{"x", ""}}, CodeInvalid, "/success_criteria/1"},
		{"task id not a ULID", &CreateTask{TaskID: "t1", Spec: spec("")}, CodeInvalid, "/task_id"},
		{"task bad queue", &CreateTask{TaskID: DeriveID(epoch, "t"), Spec: TaskSpec{Queue: "Q"}}, CodeInvalid, "/spec/queue"},
		{"task unknown dependency", &CreateTask{TaskID: DeriveID(epoch, "t"), Spec: spec("", DeriveID(epoch, "nope"))}, CodeNotFound, "/spec/depends_on/0"},
		{"task dependency not an id", &CreateTask{TaskID: DeriveID(epoch, "t"), Spec: spec("", "a")}, CodeNotFound, "/spec/depends_on/0"},
		{"workspace name", &CreateWorkspace{Name: "Acme"}, CodeInvalid, "/name"},
		{"workspace name differs from the subject", &CreateWorkspace{Name: "other"}, CodeInvalid, "/name"},
		{"unknown task", &ClaimTask{ClaimBody: ClaimBody{TaskID: DeriveID(epoch, "nope"), Executor: "e"}}, CodeNotFound, "/task_id"},
		{"timer of an unknown task", &FireTimer{TaskID: DeriveID(epoch, "nope"), Kind: TimerBackoff}, CodeNotFound, "/task_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := setup(t)
			w.must(&CreateGoal{GoalID: goal, Title: "the goal"})
			de := w.refused(tc.cmd, tc.code)
			require.Equal(t, tc.field, de.Field, de.Error())
			require.NotEmpty(t, de.Message)
			require.True(t, errors.Is(de, &Error{Code: tc.code}))
			require.Equal(t, tc.code, CodeOf(fmt.Errorf("wrapped: %w", de)))
		})
	}
}

func TestValidationOfReports(t *testing.T) {
	w := setup(t)
	id := w.newTask()
	require.Equal(t, "/executor", w.refused(&ClaimTask{ClaimBody: ClaimBody{TaskID: id}}, CodeInvalid).Field)
	n := w.claim(id)
	require.Equal(t, "/error/message", w.refused(&ReportFailure{TaskID: id, Attempt: n}, CodeInvalid).Field)
	require.Equal(t, "/result", w.refused(&ReportSuccess{TaskID: id, Attempt: n, Result: make(json.RawMessage, MaxInputBytes+1)}, CodeInvalid).Field)
	require.Equal(t, "/kind", w.refused(&FireTimer{TaskID: id, Kind: "nap"}, CodeInvalid).Field)
	w.succeed(id, n)

	v := verified(w, nil)
	require.Equal(t, "/verifier", w.refused(&RecordVerification{TaskID: v, Verdict: Verdict{Attempt: 1, Outcome: OutcomePass, ResultDigest: "d"}}, CodeInvalid).Field)
	require.Equal(t, "/result_digest", w.refused(&RecordVerification{TaskID: v, Verdict: Verdict{Attempt: 1, Outcome: OutcomePass, Verifier: "v"}}, CodeInvalid).Field)
}

func TestPermissions(t *testing.T) {
	w := setup(t)
	g := w.createGoal(Envelope{Permissions: Permissions{Queues: []string{"work"}}})
	other := spec("b")
	other.Queue = "elsewhere"
	de := w.refused(&SubmitPlan{GoalID: g, Tasks: []TaskSpec{spec("a"), other}}, CodeForbidden)
	require.Equal(t, "/tasks/1/queue", de.Field)
	w.plan(g, spec("a"))
}

func TestUnknownWorkspace(t *testing.T) {
	id := DeriveID(epoch, "x")
	for _, cmd := range []Command{
		&CreateGoal{GoalID: id, Title: "t"},
		&CancelGoal{GoalID: id},
		&SubmitPlan{GoalID: id, Tasks: chain()},
		&CreateTask{TaskID: id, Spec: spec("")},
		&CancelTask{TaskID: id},
		&ClaimTask{ClaimBody: ClaimBody{TaskID: id, Executor: "e"}},
		&SaveCheckpoint{TaskID: id, Attempt: 1},
		&ReportSuccess{TaskID: id, Attempt: 1},
		&ReportFailure{TaskID: id, Attempt: 1, Error: ErrorInfo{Message: "m"}},
		&RecordVerification{TaskID: id, Verdict: Verdict{Attempt: 1, Outcome: OutcomePass, Verifier: "v", ResultDigest: "d"}},
		&ReviewTask{TaskID: id, Decision: ReviewAccept},
		&DecideApproval{ApprovalID: ApprovalID(id, 1), Approver: "a", Response: "approve", ActionDigest: "d", Signature: SignDecision(keyOf("a"), ApprovalID(id, 1), "approve", "d")},
		&RegisterApprover{Name: "a", Role: "r", PublicKey: pubOf(keyOf("a"))},
		&RequestApproval{TaskID: id, Attempt: 1, ApprovalRequest: ApprovalRequest{Action: json.RawMessage(`1`)}},
		&WaitTask{TaskID: id, Attempt: 1, Kind: WaitSignal, Signal: "s"},
		&SendSignal{TaskID: id, Name: "s"},
		&FireTimer{TaskID: id, Kind: TimerBackoff},
	} {
		t.Run(cmd.CommandName(), func(t *testing.T) {
			w := newWorld(t)
			_ = w.refused(cmd, CodeNotFound)
			require.True(t, errors.Is(w.refused(cmd, CodeNotFound), ErrNotFound))
		})
	}
}

func TestOtherWorkspaceIsNotFound(t *testing.T) {
	w := setup(t)
	g := w.createGoal(Envelope{})
	ids, _ := w.plan(g, spec("a"))
	w.ws = "other"
	w.must(&CreateWorkspace{Name: "other"})
	require.Equal(t, "/goal_id", w.refused(&CancelGoal{GoalID: g}, CodeNotFound).Field)
	require.Equal(t, "/task_id", w.refused(&ClaimTask{ClaimBody: ClaimBody{TaskID: ids["a"], Executor: "e"}}, CodeNotFound).Field)
	_ = w.refused(&ReportSuccess{TaskID: ids["a"], Attempt: 1}, CodeNotFound)
}

func TestExecuteNeedsTime(t *testing.T) {
	_, err := Execute(NewOverlay(Empty{}), &CreateWorkspace{Name: "acme"}, Meta{Workspace: "acme"})
	require.Error(t, err)
}

func TestIdempotency(t *testing.T) {
	// Each case brings a world to the point where cmd can be decided and
	// returns it; the case then runs cmd twice under the same command id.
	for _, tc := range []struct {
		name    string
		prepare func(w *world) Command
	}{
		{"workspace.create", func(w *world) Command {
			w.ws = "fresh"
			return &CreateWorkspace{Name: "fresh"}
		}},
		{"goal.create", func(w *world) Command { return &CreateGoal{GoalID: w.newID(), Title: "t"} }},
		{"goal.cancel", func(w *world) Command { return &CancelGoal{GoalID: w.createGoal(Envelope{})} }},
		{"plan.submit", func(w *world) Command { return &SubmitPlan{GoalID: w.createGoal(Envelope{}), Tasks: chain()} }},
		{"task.create", func(w *world) Command { return &CreateTask{TaskID: w.newID(), Spec: spec("")} }},
		{"task.cancel", func(w *world) Command { return &CancelTask{TaskID: standalone(w, nil)} }},
		{"task.claim", func(w *world) Command {
			return &ClaimTask{ClaimBody: ClaimBody{TaskID: standalone(w, nil), Executor: "e"}}
		}},
		{"task.checkpoint", func(w *world) Command {
			id := standalone(w, nil)
			return &SaveCheckpoint{TaskID: id, Attempt: w.claim(id), Checkpoint: json.RawMessage(`1`)}
		}},
		{"task.succeed", func(w *world) Command {
			id := standalone(w, nil)
			return &ReportSuccess{TaskID: id, Attempt: w.claim(id)}
		}},
		{"task.fail", func(w *world) Command {
			id := standalone(w, nil)
			return &ReportFailure{TaskID: id, Attempt: w.claim(id), Retryable: true, Error: ErrorInfo{Message: "m"}}
		}},
		{"task.verify", func(w *world) Command { return verification(verified(w, nil), 1, OutcomeFail) }},
		{"task.review", func(w *world) Command {
			id := verified(w, nil)
			w.verify(id, 1, OutcomeInconclusive)
			return &ReviewTask{TaskID: id, Decision: ReviewRetry}
		}},
		{"approval.decide", func(w *world) Command {
			k := w.approver("alice", "owner")
			return decision(w.pending(standalone(w, func(s *TaskSpec) { s.Approval = &ApprovalSpec{} })), "alice", k, ResponseApprove)
		}},
		{"approver.register", func(w *world) Command {
			return &RegisterApprover{Name: "alice", Role: "owner", PublicKey: pubOf(keyOf("alice"))}
		}},
		{"task.request_approval", func(w *world) Command {
			id := standalone(w, nil)
			return &RequestApproval{TaskID: id, Attempt: w.claim(id), ApprovalRequest: ApprovalRequest{Action: json.RawMessage(`{"x":1}`)}}
		}},
		{"task.wait", func(w *world) Command {
			id := standalone(w, nil)
			return &WaitTask{TaskID: id, Attempt: w.claim(id), Kind: WaitSignal, Signal: "go"}
		}},
		{"task.signal", func(w *world) Command {
			id := standalone(w, nil)
			w.must(&WaitTask{TaskID: id, Attempt: w.claim(id), Kind: WaitSignal, Signal: "go"})
			return &SendSignal{TaskID: id, Name: "go"}
		}},
		{"timer.fire", func(w *world) Command {
			id := standalone(w, nil)
			w.fail(id, w.claim(id), true)
			w.advance(time.Hour)
			return &FireTimer{TaskID: id, Kind: TimerBackoff}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := setup(t)
			cmd := tc.prepare(w)
			first, err := w.runID("the-command", cmd)
			require.NoError(t, err)
			require.NotEmpty(t, first.Changes)
			require.False(t, first.Reply.Duplicate)
			// The retry may come later, after the clock moved.
			w.advance(time.Minute)
			again := w.duplicate("the-command", cmd)
			require.Equal(t, first.Reply.ID, again.Reply.ID)
			w.requireReplays()
		})
	}
}

func TestCommandIDsBelongToTheirSender(t *testing.T) {
	// An id one identity used on a task does not make another identity's
	// command on it a duplicate: it is decided on its own.
	w := setup(t)
	id := standalone(w, nil)
	w.actor = "client-a"
	_, err := w.runID("the-id", &CancelTask{TaskID: id, Reason: "a"})
	require.NoError(t, err)
	w.actor = "client-b"
	_, err = w.runID("the-id", &CancelTask{TaskID: id, Reason: "b"})
	require.Equal(t, CodeConflict, CodeOf(err), "b's cancel is decided (the task is cancelled already), not answered with a's outcome")
	w.actor = "client-a"
	w.duplicate("the-id", &CancelTask{TaskID: id, Reason: "a"})

	other := standalone(w, nil)
	w.actor = "client-b"
	out, err := w.runID("the-id", &CancelTask{TaskID: other})
	require.NoError(t, err)
	require.False(t, out.Reply.Duplicate)
	require.Equal(t, StateCancelled, out.Reply.State)
	w.requireReplays()
	w.requireReplaysFromWire()
}

func TestCommandKey(t *testing.T) {
	require.Equal(t, "c1", CommandKey("", "c1"), "no identity: the bare id")
	require.Empty(t, CommandKey("alice", ""), "no id: no key")
	require.Equal(t, "5:alice:c1", CommandKey("alice", "c1"))
	// Keys never collide across identities, whatever the ids hold.
	require.NotEqual(t, CommandKey("a:b", "c"), CommandKey("a", "b:c"))
	require.NotEqual(t, CommandKey("a", "1:b:c"), CommandKey("1:a:b", "c"))
}

// standalone creates a ready standalone task and returns its id.
func standalone(w *world, edit func(*TaskSpec)) string {
	w.t.Helper()
	id := w.newID()
	s := spec("")
	if edit != nil {
		edit(&s)
	}
	w.must(&CreateTask{TaskID: id, Spec: s})
	return id
}

func TestCommandAndEventTables(t *testing.T) {
	for _, name := range CommandNames() {
		cmd, ok := NewCommand(name)
		require.True(t, ok, name)
		require.Equal(t, name, cmd.CommandName())
	}
	_, ok := NewCommand("nope")
	require.False(t, ok)
	for _, typ := range EventTypes() {
		e, err := NewEvent(typ)
		require.NoError(t, err)
		require.Equal(t, typ, e.EventType())
		b, err := json.Marshal(e)
		require.NoError(t, err)
		_, err = DecodeEvent(typ, b)
		require.NoError(t, err, typ)
	}
	_, err := DecodeEvent("task.exploded", []byte(`{}`))
	require.Error(t, err)
}

func TestDeriveID(t *testing.T) {
	id := DeriveID(epoch, "seed")
	require.True(t, ValidID(id))
	require.Equal(t, id, DeriveID(epoch, "seed"))
	require.NotEqual(t, id, DeriveID(epoch, "seed2"))
	require.False(t, ValidID("nope"))
}

func TestRedeliveredTimerIsANoOp(t *testing.T) {
	w := setup(t)
	id := standalone(w, nil)
	fire := &FireTimer{TaskID: id, Kind: TimerBackoff}
	w.fail(id, w.claim(id), true)
	w.advance(time.Minute)
	_, err := w.runID("timer-of-backoff-1", fire)
	require.NoError(t, err)
	require.Equal(t, StateReady, w.state(id))

	w.fail(id, w.claim(id), true)
	w.advance(time.Minute)
	// The first timer, redelivered once the second backoff is due, is still
	// the first timer: it appends nothing.
	w.duplicate("timer-of-backoff-1", fire)
	require.Equal(t, StateBackoff, w.state(id))
	w.must(fire)
	require.Equal(t, StateReady, w.state(id))
}

func TestReusedVerificationCommandIsANoOp(t *testing.T) {
	w := setup(t)
	id := verified(w, nil)
	_, err := w.runID("verify-1", verification(id, 1, OutcomeFail))
	require.NoError(t, err)
	w.succeed(id, w.claim(id))
	w.duplicate("verify-1", verification(id, 2, OutcomePass))
	require.Equal(t, StateVerifying, w.state(id))
}

func TestRevisionRepairsAFailedGoal(t *testing.T) {
	w := setup(t)
	g := w.createGoal(Envelope{})
	v1, _ := w.plan(g, spec("a"), spec("b", "a"), spec("c", "b"))
	w.succeed(v1["a"], w.claim(v1["a"]))
	w.fail(v1["b"], w.claim(v1["b"]), false)
	require.Equal(t, StateFailed, w.state(v1["c"]), "the dependent failed with its dependency")
	require.Equal(t, GoalStateFailed, w.goal(g).State)

	// A revision replaces the failed tasks, keeps the accepted one, and reopens the goal.
	v2, out := w.plan(g, spec("a"), spec("b", "a"), spec("c", "b"))
	pc := eventOf[*PlanCommitted](t, out, g)
	require.Equal(t, []string{"a"}, pc.Kept)
	require.Equal(t, []string{"b", "c"}, pc.Replaced)
	require.Equal(t, GoalStateOpen, w.goal(g).State)
	require.Equal(t, v1["a"], v2["a"])
	require.Equal(t, StateReady, w.state(v2["b"]), "its dependency is already accepted")
	require.Equal(t, StatePending, w.state(v2["c"]))
	w.succeed(v2["b"], w.claim(v2["b"]))
	out = w.succeed(v2["c"], w.claim(v2["c"]))
	require.Equal(t, []string{"goal.achieved"}, events(out, g))
	w.requireReplays()
}

func TestRevisionThatLeavesOnlyAcceptedTasksAchievesTheGoal(t *testing.T) {
	w := setup(t)
	g := w.createGoal(Envelope{})
	v1, _ := w.plan(g, spec("a"), spec("b"))
	w.succeed(v1["a"], w.claim(v1["a"]))
	_, out := w.plan(g, spec("a"))
	require.Equal(t, ReasonRemoved, eventOf[*TaskCancelled](t, out, v1["b"]).Reason)
	require.Equal(t, GoalStateAchieved, w.goal(g).State, "decided in the revision's own commit")
	w.requireReplays()
}

func TestPlanTasksListInPlanOrder(t *testing.T) {
	w := setup(t)
	g := w.createGoal(Envelope{})
	ids, out := w.plan(g, spec("z"), spec("y"), spec("x"), spec("w"))
	var prev string
	for _, pt := range out.Reply.Tasks {
		require.Greater(t, pt.TaskID, prev, "task ids sort in plan order")
		prev = pt.TaskID
	}
	require.Len(t, ids, 4)
}

// A join may wait on a whole plan: one task depending on the other 999
// becomes ready when the last of them is accepted, and the goal is achieved
// with it. One dependency more than a plan holds is refused.
func TestAJoinOverAWholePlan(t *testing.T) {
	w := setup(t)
	g := w.createGoal(Envelope{})
	specs := make([]TaskSpec, 0, MaxPlanTasks)
	var keys []string
	for i := range MaxPlanTasks - 1 {
		k := fmt.Sprintf("leaf-%d", i)
		keys = append(keys, k)
		specs = append(specs, spec(k))
	}
	specs = append(specs, spec("join", keys...))
	ids, _ := w.plan(g, specs...)
	for i, k := range keys {
		require.Equal(t, StatePending, w.state(ids["join"]), "after %d of %d", i, len(keys))
		w.succeed(ids[k], w.claim(ids[k]))
	}
	require.Equal(t, StateReady, w.state(ids["join"]))
	w.succeed(ids["join"], w.claim(ids["join"]))
	require.Equal(t, GoalStateAchieved, w.goal(g).State)

	many := make([]string, MaxDependencies+1)
	for i := range many {
		many[i] = w.newID()
	}
	de := w.refused(&CreateTask{TaskID: w.newID(), Spec: TaskSpec{Queue: "q", DependsOn: many}}, CodeInvalid)
	require.Contains(t, de.Field, "depends_on")
	require.Contains(t, de.Message, "at most 1000")
}

func TestGoalBudgetEndsItsTasks(t *testing.T) {
	t.Run("attempts", func(t *testing.T) {
		w := setup(t)
		g := w.createGoal(Envelope{Budget: Budget{Attempts: 2}})
		ids, _ := w.plan(g, spec("a"), spec("b"))
		w.succeed(ids["a"], w.claim(ids["a"]))
		out := w.fail(ids["b"], w.claim(ids["b"]), true)
		f := eventOf[*TaskFailed](t, out, ids["b"])
		require.Equal(t, ReasonBudget, f.Reason, "no backoff when the goal cannot pay for another attempt")
		require.Contains(t, f.Error.Message, "2 attempts")
		require.Equal(t, GoalStateFailed, w.goal(g).State)
	})
	t.Run("deadline", func(t *testing.T) {
		w := setup(t)
		deadline := w.now.Add(time.Minute)
		g := w.createGoal(Envelope{Budget: Budget{Deadline: &deadline}})
		ids, _ := w.plan(g, spec("a"))
		w.advance(time.Minute)
		out := w.must(&ClaimTask{ClaimBody: ClaimBody{TaskID: ids["a"], Executor: "e"}})
		require.Equal(t, []string{"task.failed"}, events(out, ids["a"]))
		require.Equal(t, ReasonBudget, w.task(ids["a"]).Reason)
	})
	t.Run("tokens", func(t *testing.T) {
		w := setup(t)
		g := w.createGoal(Envelope{Budget: Budget{Tokens: 100}})
		ids, _ := w.plan(g, spec("a"), spec("b"))
		n := w.claim(ids["a"])
		w.must(&ReportSuccess{TaskID: ids["a"], Attempt: n, ModelSteps: []ModelStep{{Model: "m", Tokens: 150}}})
		out := w.must(&ClaimTask{ClaimBody: ClaimBody{TaskID: ids["b"], Executor: "e"}})
		require.Equal(t, []string{"task.failed"}, events(out, ids["b"]))
	})
}

// A goal's spend is cumulative: a failed attempt's model steps count, and a
// plan revision that drops a task that spent does not give its spend back
// (a goal with a 1,000-token budget was once achieved at 1,800 tokens).
func TestGoalBudgetHoldsAcrossRevisionsAndFailures(t *testing.T) {
	w := setup(t)
	g := w.createGoal(Envelope{Budget: Budget{Tokens: 100}})
	ids, _ := w.plan(g, spec("a"))
	n := w.claim(ids["a"])
	w.must(&ReportFailure{TaskID: ids["a"], Attempt: n, Retryable: true, Error: ErrorInfo{Code: "boom", Message: "it broke"},
		ModelSteps: []ModelStep{{Model: "m", Tokens: 60}}})
	require.Equal(t, int64(60), w.task(ids["a"]).Attempts[0].ModelSteps[0].Tokens, "the failed attempt keeps its model steps")

	// The revision drops a, which spent 60 tokens.
	ids2, _ := w.plan(g, spec("b"), spec("c", "b"))
	require.Equal(t, StateCancelled, w.state(ids["a"]))
	require.Equal(t, &Spend{Attempts: 1, Tokens: 60}, w.goal(g).RetiredSpend, "the goal keeps what a spent, not a")
	require.Empty(t, w.goal(g).RetiredTasks)
	n = w.claim(ids2["b"])
	w.must(&ReportSuccess{TaskID: ids2["b"], Attempt: n, ModelSteps: []ModelStep{{Model: "m", Tokens: 50}}})
	require.Equal(t, StateAccepted, w.state(ids2["b"]))

	// 110 tokens spent over both versions: c gets no attempt.
	out := w.must(&ClaimTask{ClaimBody: ClaimBody{TaskID: ids2["c"], Executor: "e"}})
	require.Equal(t, []string{"task.failed"}, events(out, ids2["c"]))
	require.Equal(t, ReasonBudget, w.task(ids2["c"]).Reason)
	require.Contains(t, eventOf[*TaskFailed](t, out, ids2["c"]).Error.Message, "110 used")

	sp, err := GoalSpend(w.goal(g), w.now, w.o.Task, w.o.Goal)
	require.NoError(t, err)
	require.Equal(t, Spend{Attempts: 2, Tokens: 110}, sp)
	w.requireReplays()
	w.requireReplaysFromWire()
}

// A revision recorded before retired spend was tallied carries none: the
// goal lists the tasks it dropped, and counts what they spent from them.
func TestARevisionWithoutRetiredSpendListsTheDroppedTasks(t *testing.T) {
	g := &Goal{ID: "g", PlanVersion: 1, Plan: []PlanTask{{Key: "a", TaskID: "A"}, {Key: "b", TaskID: "B"}}}
	r := Recorded{CommandID: "c", Actor: "x", Time: epoch}
	old, err := ApplyGoal(g, "g", "acme", &PlanCommitted{Version: 2, Tasks: []PlanTask{{Key: "b", TaskID: "B"}}, Removed: []string{"a"}}, r)
	require.NoError(t, err)
	require.Equal(t, []string{"A"}, old.RetiredTasks)
	require.Nil(t, old.RetiredSpend)
	next, err := ApplyGoal(old, "g", "acme", &PlanCommitted{Version: 3, Tasks: []PlanTask{{Key: "c", TaskID: "C"}}, Removed: []string{"b"},
		RetiredSpend: &Spend{Attempts: 2, Tokens: 7}}, r)
	require.NoError(t, err)
	require.Equal(t, []string{"A"}, next.RetiredTasks, "a tallied revision lists nothing more")
	require.Equal(t, &Spend{Attempts: 2, Tokens: 7}, next.RetiredSpend)
	tasks := map[string]*Task{"A": {ID: "A", Attempts: []Attempt{{N: 1, StartedAt: epoch, EndedAt: &epoch}}}, "C": {ID: "C"}}
	sp, err := GoalSpend(next, epoch, func(id string) (*Task, error) { return tasks[id], nil }, func(string) (*Goal, error) { return nil, nil })
	require.NoError(t, err)
	require.Equal(t, Spend{Attempts: 3, Tokens: 7}, sp, "the listed task's attempt and the tally")
}

func TestQuarantineFailsTheTaskAndItsDependents(t *testing.T) {
	w := setup(t)
	g := w.createGoal(Envelope{})
	ids, _ := w.plan(g, spec("a"), spec("b", "a"))
	w.claim(ids["a"])
	out := w.must(&QuarantineTask{TaskID: ids["a"], Reason: "delivered 5 times"})
	f := eventOf[*TaskFailed](t, out, ids["a"])
	require.Equal(t, ReasonQuarantined, f.Reason)
	require.Equal(t, "delivered 5 times", f.Error.Message)
	require.Equal(t, StateFailed, w.state(ids["b"]))
	require.Equal(t, GoalStateFailed, w.goal(g).State)
	// A stale quarantine of an ended task changes nothing.
	again := w.must(&QuarantineTask{TaskID: ids["a"]})
	require.Empty(t, again.Changes)
	require.True(t, again.Reply.Duplicate)
	w.requireReplays()
}

func TestAVerdictOnAnotherResultIsRefused(t *testing.T) {
	w := setup(t)
	id := w.newID()
	w.must(&CreateTask{TaskID: id, Spec: TaskSpec{Queue: "q", Verification: &VerificationSpec{Queue: "checks"}}})
	w.succeed(id, w.claim(id))
	v := verification(id, 1, OutcomePass)
	v.ResultDigest = ResultDigest([]byte(`{"ok":false}`))
	de := w.refused(v, CodeConflict)
	require.Equal(t, "/result_digest", de.Field)
	require.Equal(t, StateVerifying, w.state(id), "nothing changed")
	w.verify(id, 1, OutcomePass)
	require.Equal(t, StateAccepted, w.state(id))
}

func TestAGoalsDeadlineFailsWhatOverrunsIt(t *testing.T) {
	w := setup(t)
	deadline := w.now.Add(time.Hour)
	g := w.createGoal(Envelope{Budget: Budget{Deadline: &deadline}})
	ids, _ := w.plan(g, spec("a"), spec("b", "a"), spec("c"))
	w.succeed(ids["c"], w.claim(ids["c"]))
	w.claim(ids["a"])

	fire := &FireTimer{GoalID: g, Kind: TimerGoal, Due: deadline}
	_ = w.refused(fire, CodeConflict) // early
	w.advance(time.Hour)
	out := w.must(fire)
	require.Equal(t, []string{"goal.failed"}, events(out, g))
	require.Contains(t, w.goal(g).Reason, "deadline")
	for _, k := range []string{"a", "b"} {
		tk := w.task(ids[k])
		require.Equal(t, StateFailed, tk.State, k)
		require.Equal(t, ReasonDeadline, tk.Reason, "%s ends with the deadline as its reason", k)
	}
	require.Equal(t, AttemptStateCancelled, w.task(ids["a"]).Attempts[0].State, "the running attempt ended")
	require.Equal(t, StateAccepted, w.state(ids["c"]), "accepted work stays accepted")
	again := w.must(fire)
	require.Empty(t, again.Changes, "a stale deadline changes nothing")
	w.requireReplays()
}

// A goal whose envelope says on_exhausted approval does not fail the task
// its budget stops: the task waits on a budget approval; approved, the
// budget doubles and the task goes on; rejected, it fails as the budget
// said.
func TestGoalBudgetExhaustedAsksForAnExtension(t *testing.T) {
	for _, response := range []string{ResponseApprove, ResponseReject} {
		t.Run(response, func(t *testing.T) {
			w := setup(t)
			key := w.approver("olga", "finance")
			g := w.createGoal(Envelope{Budget: Budget{Tokens: 100}, OnExhausted: schemas.OnExhaustedApproval, ExtensionRole: "finance"})
			ids, _ := w.plan(g, spec("a"))
			n := w.claim(ids["a"])
			w.must(&ReportFailure{TaskID: ids["a"], Attempt: n, Retryable: true, Error: ErrorInfo{Code: "boom", Message: "it broke"},
				ModelSteps: []ModelStep{{Model: "m", Tokens: 140}}})
			require.Equal(t, StateWaiting, w.state(ids["a"]), "the budget stops the task, which waits")
			require.Equal(t, GoalStateOpen, w.goal(g).State)
			a := w.pending(ids["a"])
			require.Equal(t, schemas.ApprovalKindBudget, a.Kind)
			require.Equal(t, "finance", a.Role)
			var ext schemas.BudgetExtension
			require.NoError(t, json.Unmarshal(a.Action, &ext))
			require.Equal(t, int64(200), ext.ExtendBudget.To.Tokens, "the approval doubles the budget")
			require.Contains(t, ext.ExtendBudget.Why, "140 used")

			w.must(decision(a, "olga", key, response))
			if response == ResponseReject {
				require.Equal(t, StateFailed, w.state(ids["a"]))
				require.Equal(t, ReasonBudget, w.task(ids["a"]).Reason)
				require.Equal(t, GoalStateFailed, w.goal(g).State)
				w.requireReplays()
				return
			}
			require.Equal(t, int64(200), w.goal(g).Envelope.Budget.Tokens)
			require.Equal(t, StateReady, w.state(ids["a"]))
			n = w.claim(ids["a"])
			require.Equal(t, 2, n, "the next attempt starts")
			w.must(&ReportSuccess{TaskID: ids["a"], Attempt: n, ModelSteps: []ModelStep{{Model: "m", Tokens: 100}}})
			require.Equal(t, GoalStateAchieved, w.goal(g).State)

			// Exhausted again before an attempt starts: the claim asks.
			g2 := w.createGoal(Envelope{Budget: Budget{Attempts: 1}, OnExhausted: schemas.OnExhaustedApproval})
			ids2, _ := w.plan(g2, spec("b"), spec("c"))
			w.succeed(ids2["b"], w.claim(ids2["b"]))
			out := w.must(&ClaimTask{ClaimBody: ClaimBody{TaskID: ids2["c"], Executor: "e"}})
			require.Equal(t, []string{"task.approval_requested"}, events(out, ids2["c"]))
			require.Equal(t, 0, w.pending(ids2["c"]).Attempt)
			w.requireReplays()
		})
	}
}

func TestGoalEnvelopeOnExhaustedIsChecked(t *testing.T) {
	w := setup(t)
	for _, c := range []struct {
		env   Envelope
		field string
	}{
		{Envelope{OnExhausted: "pray"}, "/envelope/on_exhausted"},
		{Envelope{ExtensionRole: "finance"}, "/envelope/extension_role"},
		{Envelope{OnExhausted: schemas.OnExhaustedApproval, ExtensionRole: "no spaces allowed"}, "/envelope/extension_role"},
	} {
		err := w.refused(&CreateGoal{GoalID: DeriveID(epoch, c.field+c.env.OnExhausted), Title: "t", Envelope: c.env}, CodeInvalid)
		require.Equal(t, c.field, err.Field)
	}
}

// The goal pauses on one budget approval: a second task the budget stops
// waits on the first one's approval, and follows its decision.
func TestABudgetApprovalHoldsTheGoal(t *testing.T) {
	for _, response := range []string{ResponseApprove, ResponseReject} {
		t.Run(response, func(t *testing.T) {
			w := setup(t)
			key := w.approver("olga", "finance")
			g := w.createGoal(Envelope{Budget: Budget{Attempts: 2}, OnExhausted: schemas.OnExhaustedApproval})
			ids, _ := w.plan(g, spec("a"), spec("b"), spec("c"))
			w.succeed(ids["a"], w.claim(ids["a"]))
			w.succeed(ids["b"], w.claim(ids["b"]))
			w.must(&ClaimTask{ClaimBody: ClaimBody{TaskID: ids["c"], Executor: "e"}})
			asked := w.pending(ids["c"])

			// A fourth task, added by a revision, is stopped too: it waits
			// on c's approval instead of asking again.
			ids2, _ := w.plan(g, spec("a"), spec("b"), spec("c"), spec("d"))
			out := w.must(&ClaimTask{ClaimBody: ClaimBody{TaskID: ids2["d"], Executor: "e"}})
			require.Equal(t, []string{"task.waiting"}, events(out, ids2["d"]))
			d := w.task(ids2["d"])
			require.Equal(t, WaitBudget, d.Wait.Kind)
			require.Equal(t, asked.ID, d.Wait.ApprovalID)
			require.Empty(t, d.Approvals, "one approval for the goal")

			if response == ResponseReject {
				// Before the decision, the asking task is cancelled: the
				// waiting one is ready again and asks for itself.
				ids3, _ := w.plan(g, spec("a"), spec("b"), spec("d"))
				require.Equal(t, StateCancelled, w.state(ids["c"]))
				require.Equal(t, StateReady, w.state(ids3["d"]))
				w.must(&ClaimTask{ClaimBody: ClaimBody{TaskID: ids3["d"], Executor: "e"}})
				asked = w.pending(ids3["d"])
				ids["c"] = ids3["d"]
			}
			w.must(decision(asked, "olga", key, response))
			want := StateReady
			if response == ResponseReject {
				want = StateFailed
			}
			require.Equal(t, want, w.state(ids["c"]))
			require.Equal(t, want, w.state(ids2["d"]), "the waiting task follows the decision")
			w.requireReplays()
		})
	}
}
