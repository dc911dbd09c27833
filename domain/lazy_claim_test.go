package domain

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The lazy claim: a report that carries a claim starts its attempt and ends
// it in one commit, when the task is still ready for exactly that attempt.

func lazySuccess(id string, n int) *ReportSuccess {
	return &ReportSuccess{TaskID: id, Attempt: n, Result: json.RawMessage(`{"ok":true}`),
		Claim: &ReportClaim{Executor: "exec-1", ExecutorVersion: "1.0"}}
}

func lazyFailure(id string, n int, retryable bool) *ReportFailure {
	return &ReportFailure{TaskID: id, Attempt: n, Retryable: retryable, Error: ErrorInfo{Code: "boom", Message: "it broke"},
		Claim: &ReportClaim{Executor: "exec-1", ExecutorVersion: "1.0"}}
}

func TestAReportWithAClaimStartsAndEndsItsAttemptInOneCommit(t *testing.T) {
	w := setup(t)
	w.actor = "exec-a"
	id := standalone(w, func(s *TaskSpec) { s.Timeout = Duration(time.Minute) })
	out := w.must(lazySuccess(id, 1))
	require.Equal(t, []string{"task.attempt_started", "task.attempt_succeeded", "task.accepted"}, events(out, id))
	started := eventOf[*AttemptStarted](t, out, id)
	require.Equal(t, 1, started.Attempt)
	require.Equal(t, OperationKey(id), started.OperationKey)
	require.NotEmpty(t, started.TokenHash, "the attempt is recorded with a token hash, as a claim's")
	require.Equal(t, w.now.Add(time.Minute), *started.Deadline, "the per-attempt deadline, as a claim's")
	tk := w.task(id)
	require.Equal(t, StateAccepted, tk.State)
	a := tk.Attempt(1)
	require.Equal(t, "exec-a", a.ClaimedBy)
	require.Equal(t, "exec-1", a.Executor)
	require.Equal(t, "1.0", a.ExecutorVersion)
	require.Equal(t, AttemptStateSucceeded, a.State)
	require.Nil(t, out.Reply.Task, "a report's reply carries no task")
	w.requireReplays()
	w.requireReplaysFromWire()
}

// TestAMergedReportLeavesWhatClaimThenReportLeaves: bar the one commit (and
// the command ids the task remembers), a report with a claim leaves the task
// exactly as task.claim followed by the report does.
func TestAMergedReportLeavesWhatClaimThenReportLeaves(t *testing.T) {
	verified := func(s *TaskSpec) {
		s.Timeout = Duration(time.Minute)
		s.Verification = &VerificationSpec{Queue: "check"}
	}
	timed := func(s *TaskSpec) { s.Timeout = Duration(time.Minute) }
	for name, tc := range map[string]struct {
		report func(id string) Command
		edit   func(*TaskSpec)
	}{
		"success":           {func(id string) Command { return lazySuccess(id, 1) }, timed},
		"success, verified": {func(id string) Command { return lazySuccess(id, 1) }, verified},
		"retryable failure": {func(id string) Command { return lazyFailure(id, 1, true) }, timed},
		"permanent failure": {func(id string) Command { return lazyFailure(id, 1, false) }, timed},
	} {
		report := tc.report
		t.Run(name, func(t *testing.T) {
			merged, twoStep := setup(t), setup(t)
			for _, w := range []*world{merged, twoStep} {
				w.actor = "exec-a"
			}
			a := standalone(merged, tc.edit)
			b := standalone(twoStep, tc.edit)
			require.Equal(t, a, b, "both worlds made the same task")

			const token = "the-attempts-token"
			cmd := report(a)
			claimOf(cmd).TokenHash = TokenHash(token)
			merged.must(cmd)

			twoStep.must(&ClaimTask{ClaimBody: ClaimBody{TaskID: b, Executor: "exec-1", ExecutorVersion: "1.0"}, TokenHash: TokenHash(token)})
			plain := report(b)
			switch c := plain.(type) {
			case *ReportSuccess:
				c.Claim, c.Token = nil, token
			case *ReportFailure:
				c.Claim, c.Token = nil, token
			}
			twoStep.must(plain)

			got, want := merged.task(a).Clone(), twoStep.task(b).Clone()
			got.Commands, want.Commands = nil, nil
			require.Equal(t, want, got)
		})
	}
}

func claimOf(cmd Command) *ReportClaim {
	switch c := cmd.(type) {
	case *ReportSuccess:
		return c.Claim
	case *ReportFailure:
		return c.Claim
	}
	return nil
}

func TestAMergedReportIsTakenOnlyForTheReadyAttempt(t *testing.T) {
	w := setup(t)
	id := standalone(w, nil)

	// The wrong attempt number: refused, nothing recorded.
	de := w.refused(lazySuccess(id, 2), CodeConflict)
	require.Equal(t, "/attempt", de.Field)

	// Claimed by someone else meanwhile: refused, nothing recorded.
	w.actor = "exec-b"
	n := w.claim(id)
	w.actor = "exec-a"
	de = w.refused(lazySuccess(id, n), CodeConflict)
	require.Equal(t, "/attempt", de.Field)
	de = w.refused(lazyFailure(id, n, true), CodeConflict)
	require.Equal(t, "/attempt", de.Field)

	// Ended: refused.
	w.actor = "exec-b"
	w.succeed(id, n)
	w.actor = "exec-a"
	_ = w.refused(lazySuccess(id, n+1), CodeConflict)

	// A cancelled task takes no merged report.
	c := standalone(w, nil)
	w.must(&CancelTask{TaskID: c})
	_ = w.refused(lazySuccess(c, 1), CodeConflict)

	// After a retryable failure, the next attempt is lazily claimable once
	// the task is ready again, and only that one.
	r := standalone(w, nil)
	w.must(lazyFailure(r, 1, true))
	require.Equal(t, StateBackoff, w.state(r))
	_ = w.refused(lazySuccess(r, 2), CodeConflict)
	w.advance(time.Hour)
	w.must(&FireTimer{TaskID: r, Kind: TimerBackoff})
	_ = w.refused(lazySuccess(r, 1), CodeConflict)
	w.must(lazySuccess(r, 2))
	require.Equal(t, StateAccepted, w.state(r))
	w.requireReplays()
}

func TestAMergedReportWithATokenIsInvalid(t *testing.T) {
	w := setup(t)
	id := standalone(w, nil)
	c := lazySuccess(id, 1)
	c.Token = "some-token"
	de := w.refused(c, CodeInvalid)
	require.Equal(t, "/claim", de.Field)
	de = w.refused(&ReportSuccess{TaskID: id, Attempt: 1, Claim: &ReportClaim{}}, CodeInvalid)
	require.Equal(t, "/claim/executor", de.Field)
	// The body is checked before anything starts.
	big := lazySuccess(id, 1)
	big.Result = json.RawMessage(`"` + string(make([]byte, MaxInputBytes)) + `"`)
	_ = w.refused(big, CodeInvalid)
	require.Equal(t, StateReady, w.state(id))
}

func TestARetriedMergedReportGetsTheFirstOutcome(t *testing.T) {
	w := setup(t)
	w.actor = "exec-a"
	id := standalone(w, nil)
	w.must(&ReportSuccess{TaskID: id, Attempt: 1, Claim: &ReportClaim{Executor: "e"}, Result: json.RawMessage(`1`)}) // cmd id of seq
	first := w.history[len(w.history)-1].CommandID
	w.duplicate(first, lazySuccess(id, 1))
	// Another identity cannot squat the id: its command is its own, and
	// finds the task no longer ready.
	w.actor = "exec-b"
	_, err := w.runID(first, lazySuccess(id, 1))
	require.Equal(t, CodeConflict, CodeOf(err))
}

func TestAMergedReportKeepsTheClaimsBudgetChecks(t *testing.T) {
	w := setup(t)
	g := w.createGoal(Envelope{Budget: Budget{Attempts: 1}})
	ids, _ := w.plan(g, spec("a"), spec("b"))
	w.must(lazySuccess(ids["a"], 1))
	// The goal's one attempt is used: the claim the report carries fails the
	// task instead, as task.claim would, and the report is not recorded.
	out := w.must(lazySuccess(ids["b"], 1))
	require.Equal(t, []string{"task.failed"}, events(out, ids["b"]))
	require.Equal(t, StateFailed, out.Reply.State)
	require.Empty(t, w.task(ids["b"]).Attempts)

	// Attempts spent by the task's retry policy.
	s := standalone(w, func(s *TaskSpec) { s.Retry = &RetryPolicy{MaxAttempts: 1} })
	w.must(lazyFailure(s, 1, true))
	require.Equal(t, StateFailed, w.state(s), "the one attempt failed")
}

func TestAClaimOmitsTheTaskItsClaimerHolds(t *testing.T) {
	w := setup(t)
	id := standalone(w, nil)
	out := w.must(&ClaimTask{ClaimBody: ClaimBody{TaskID: id, Executor: "e", OmitTask: true}})
	require.Nil(t, out.Reply.Task, "the item carried the task")
	require.Equal(t, StateRunning, out.Reply.State)
	// A claim that supersedes gets the task all the same.
	w.advance(time.Hour)
	out = w.must(&ClaimTask{ClaimBody: ClaimBody{TaskID: id, Executor: "e", OmitTask: true, Supersedes: 1}})
	require.NotNil(t, out.Reply.Task)
	require.Equal(t, 2, out.Reply.Task.Running().N)
	// An older claimer, which sends no omit_task, gets it.
	other := standalone(w, nil)
	out = w.must(&ClaimTask{ClaimBody: ClaimBody{TaskID: other, Executor: "e"}})
	require.NotNil(t, out.Reply.Task)
}

// An executor's commands are judged against its queues on the state they are
// decided on — a claim, a merged report and an attempt's command for a task
// of another queue are refused, and nothing is recorded; on its own queue
// they are taken.
func TestAnExecutorWorksOnlyItsQueues(t *testing.T) {
	w := setup(t)
	pay := standalone(w, func(s *TaskSpec) { s.Queue = "pay" })
	w.actor, w.queues = "mailer", []string{"mail"}
	for _, cmd := range []Command{lazySuccess(pay, 1), lazyFailure(pay, 1, true), &ClaimTask{ClaimBody: ClaimBody{TaskID: pay, Executor: "x"}},
		&ConfigureQueue{Queue: "pay"}} {
		e := w.refused(cmd, CodeForbidden)
		require.Contains(t, e.Message, `may not work queue "pay"`)
	}
	w.queues = []string{"mail", "pay"}
	w.must(lazySuccess(pay, 1))
	require.Equal(t, StateAccepted, w.task(pay).State)
}
