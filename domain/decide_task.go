package domain

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dwr-run/dwr/schemas"
)

func (x *tx) createTask(c *CreateTask) (Reply, error) {
	if !ValidID(c.TaskID) {
		return Reply{}, invalid("/task_id", "task id %q is not a ULID", c.TaskID)
	}
	if err := ValidateSpec("/spec", c.Spec, nil); err != nil {
		return Reply{}, err
	}
	if err := CheckLabels("/labels", c.Labels); err != nil {
		return Reply{}, err
	}
	t, err := x.o.Task(c.TaskID)
	if err != nil {
		return Reply{}, err
	}
	if t != nil {
		if t.HasCommand(x.m.Key()) {
			return duplicateTask(t), nil
		}
		return Reply{}, conflict("task %s already exists", c.TaskID)
	}
	if err := x.openQueues(x.m.Workspace, "/spec", c.Spec); err != nil {
		return Reply{}, err
	}
	open := false
	for i, d := range c.Spec.DependsOn {
		dt, err := x.task(d, fmt.Sprintf("/spec/depends_on/%d", i))
		if err != nil {
			return Reply{}, err
		}
		switch {
		case dt.State == StateAccepted:
		case Terminal(dt.State):
			return Reply{}, &Error{Code: CodeConflict, Field: fmt.Sprintf("/spec/depends_on/%d", i),
				Message: fmt.Sprintf("dependency %s already ended %s; the task could never run", d, dt.State)}
		default:
			open = true
		}
	}
	if err := x.create(c.TaskID, &TaskCreated{Spec: c.Spec, DependsOn: slices.Clone(c.Spec.DependsOn), Labels: c.Labels}, open); err != nil {
		return Reply{}, err
	}
	return x.after(c.TaskID)
}

func (x *tx) cancelTask(c *CancelTask) (Reply, error) {
	t, dup, err := x.commandTask(c.TaskID)
	if err != nil || dup {
		return duplicateOr(t, err)
	}
	if err := checkText("/reason", c.Reason, MaxReason, false); err != nil {
		return Reply{}, err
	}
	if Terminal(t.State) {
		return Reply{}, conflict("task %s is already %s", t.ID, t.State)
	}
	return x.emitReply(t.ID, &TaskCancelled{Reason: c.Reason})
}

// retryTask gives a failed or rejected task a new attempt (its retry
// policy afresh), waits its dependents that failed because of it for it
// again, and reopens its goal when that had failed. A task that failed
// because a dependency did not succeed is retried through that dependency;
// a goal that was cancelled, shredded or is over its budget (its deadline
// among it) is not reopened.
func (x *tx) retryTask(c *RetryTask) (Reply, error) {
	t, dup, err := x.commandTask(c.TaskID)
	if err != nil || dup {
		return duplicateOr(t, err)
	}
	if err := checkText("/reason", c.Reason, MaxReason, false); err != nil {
		return Reply{}, err
	}
	if t.State != StateFailed && t.State != StateRejected {
		return Reply{}, conflict("task %s is %s: only a failed or rejected task can be retried", t.ID, t.State)
	}
	if t.Reason == ReasonDependencyFailed {
		return Reply{}, conflict("task %s failed because a dependency did not succeed: retry the dependency (%s), and this task waits for it again",
			t.ID, strings.Join(x.unaccepted(t), ", "))
	}
	if w, err := x.o.Workspace(t.Workspace); err != nil {
		return Reply{}, err
	} else if w != nil && w.Shredded {
		return Reply{}, conflict("workspace %s was shredded: its work cannot run again", t.Workspace)
	}
	// The task is given its queues again: a queue deleted meanwhile opens
	// again, within its bounds.
	if err := x.reopenQueues(t.Workspace, t.Spec); err != nil {
		return Reply{}, err
	}
	var reopen *Goal
	if t.GoalID != "" {
		g, err := x.goal(t.GoalID, "/task_id")
		if err != nil {
			return Reply{}, err
		}
		if reopen, err = x.retryableGoal(g, t); err != nil {
			return Reply{}, err
		}
	}
	if err := x.emit(t.ID, &TaskRetried{State: StateReady, Reason: c.Reason}); err != nil {
		return Reply{}, err
	}
	if err := x.waitDependentsAgain(t.ID); err != nil {
		return Reply{}, err
	}
	if reopen != nil {
		if err := x.emit(reopen.ID, &GoalReopened{TaskID: t.ID, Reason: c.Reason}); err != nil {
			return Reply{}, err
		}
	}
	return x.after(t.ID)
}

// retryableGoal refuses a retry of task t that goal g cannot take, and
// returns g when the retry reopens it (it had failed).
func (x *tx) retryableGoal(g *Goal, t *Task) (*Goal, error) {
	switch {
	case g.Shredded:
		return nil, conflict("goal %s was shredded: its work cannot run again", g.ID)
	case g.State == GoalStateCancelled:
		return nil, conflict("goal %s was cancelled: its tasks cannot be retried", g.ID)
	case !slices.ContainsFunc(g.Plan, func(pt PlanTask) bool { return pt.TaskID == t.ID }):
		return nil, conflict("task %s is no longer in goal %s's plan (version %d): submit a plan that has it again", t.ID, g.ID, g.PlanVersion)
	}
	why, err := x.goalOverBudget(g)
	if err != nil {
		return nil, err
	}
	if why != "" {
		return nil, conflict("goal %s cannot run more work: %s", g.ID, why)
	}
	if g.State != GoalStateFailed {
		return nil, nil
	}
	if g.Key != "" {
		// A key names one open goal: not this one again while another
		// holds it.
		if open, err := x.openGoalOfKey(g.Key); err != nil || open != nil {
			if err == nil {
				err = conflict("goal %s's key %q is held by goal %s, which is open: a key names one open goal, and reopening goal %s would make two",
					g.ID, g.Key, open.ID, g.ID)
			}
			return nil, err
		}
	}
	return g, nil
}

// unaccepted returns the dependencies of t that have ended without being
// accepted.
func (x *tx) unaccepted(t *Task) []string {
	var ids []string
	for _, d := range t.DependsOn {
		if dt, err := x.o.Task(d); err == nil && dt != nil && Terminal(dt.State) && dt.State != StateAccepted {
			ids = append(ids, d)
		}
	}
	return ids
}

// waitDependentsAgain makes pending again each task that failed because task
// id, or a task so made pending, did not succeed — once none of its
// dependencies has ended unaccepted, so that it can still run.
func (x *tx) waitDependentsAgain(id string) error {
	frontier := []string{id}
	for changed := true; changed; {
		changed = false
		for i := 0; i < len(frontier); i++ {
			deps, err := x.o.Dependents(frontier[i])
			if err != nil {
				return err
			}
			for _, d := range deps {
				dt, err := x.o.Task(d)
				if err != nil {
					return err
				}
				if dt == nil || dt.State != StateFailed || dt.Reason != ReasonDependencyFailed || len(x.unaccepted(dt)) > 0 {
					continue
				}
				if err := x.reopenQueues(dt.Workspace, dt.Spec); err != nil {
					return err
				}
				if err := x.emit(d, &TaskRetried{State: StatePending, Retried: id}); err != nil {
					return err
				}
				frontier = append(frontier, d)
				changed = true
			}
		}
	}
	return nil
}

func (x *tx) claimTask(c *ClaimTask) (Reply, error) {
	t, dup, err := x.commandTask(c.TaskID)
	if err != nil {
		return Reply{}, err
	}
	if dup {
		r := duplicateTask(t)
		if c.Supersedes > 0 || !c.OmitTask {
			r.Task = replyTask(t)
		}
		if a := t.Attempt(r.Attempt); a != nil && a.ClaimedBy == x.m.Actor {
			r.TokenHash = a.TokenHash
		}
		return r, nil
	}
	if err := checkText("/executor", c.Executor, MaxTitle, true); err != nil {
		return Reply{}, err
	}
	switch {
	case t.State == StateReady:
	case t.State == StateRunning && c.Supersedes > 0 && t.Running().N == c.Supersedes:
		if c.SupersedeAfter.IsZero() || x.m.Now.Before(c.SupersedeAfter) {
			return Reply{}, leaseHeld(t, c.Supersedes, c.SupersedeAfter)
		}
		if err := x.emit(t.ID, &AttemptAbandoned{Attempt: c.Supersedes, Reason: ReasonLeaseLost}); err != nil {
			return Reply{}, err
		}
		t, _ = x.o.Task(t.ID)
	case t.State == StateRunning:
		return Reply{}, conflict("task %s is running attempt %d; a claim may supersede it only when its lease has lapsed", t.ID, t.Running().N)
	default:
		return Reply{}, conflict("task %s is %s, not ready; it cannot be claimed", t.ID, t.State)
	}
	if failed, err := x.refuseToStart(t); err != nil {
		return Reply{}, err
	} else if failed {
		return x.after(t.ID)
	}
	if err := x.startAttempt(t, c.Executor, c.ExecutorVersion, c.TokenHash, false); err != nil {
		return Reply{}, err
	}
	r, err := x.after(t.ID)
	if c.Supersedes > 0 || !c.OmitTask {
		if t, _ := x.o.Task(t.ID); t != nil {
			r.Task = replyTask(t)
		}
	}
	r.TokenHash = c.TokenHash
	return r, err
}

// replyTask returns the task as a claim's reply carries it: without the
// ids of the commands it applied (an executor has no use for them, and an
// item carries none either), fitted to schemas.MaxReplyTaskBytes, so that
// a task with a long history can still be claimed.
func replyTask(t *Task) *Task {
	c := *t
	c.Commands = nil
	if f, _, err := schemas.FitTask(&c, schemas.MaxReplyTaskBytes); err == nil {
		return f
	}
	return &c
}

// refuseToStart fails t instead of starting an attempt when its goal's
// envelope or its retry policy allows no further attempt, as a claim does;
// it reports whether it did.
func (x *tx) refuseToStart(t *Task) (bool, error) {
	if why, of, err := x.overBudget(t); err != nil {
		return false, err
	} else if why != "" {
		return true, x.exhausted(t, 0, why, of)
	}
	if spent(t) >= retryOf(t).MaxAttempts {
		return true, x.emit(t.ID, &TaskFailed{Reason: ReasonAttemptsSpent,
			Error: &ErrorInfo{Code: ReasonAttemptsSpent, Message: fmt.Sprintf("%d attempts used", spent(t))}})
	}
	return false, nil
}

// startAttempt starts t's next attempt, claimed by the command's sender
// with the token whose hash is tokenHash.
func (x *tx) startAttempt(t *Task, executor, version, tokenHash string, handed bool) error {
	started := &AttemptStarted{Attempt: t.AttemptCount() + 1, Executor: executor,
		ExecutorVersion: version, OperationKey: OperationKey(t.ID), TokenHash: tokenHash, Handed: handed}
	if t.Spec.Timeout > 0 {
		d := x.m.Now.Add(t.Spec.Timeout.D())
		started.Deadline = &d
	}
	return x.emit(t.ID, started)
}

// reporter returns the task a report of attempt n is for. A report with a
// token is the running attempt's (holder). A report with a claim (the lazy
// claim: its job ran without claiming first) starts attempt n for the
// sender, exactly as task.claim would, but only when the task is still
// ready for exactly attempt n; otherwise it is refused as a conflict on
// /attempt and nothing is recorded. check validates the report's body
// before anything is started. t is nil when the claim failed the task
// instead (budget or attempts spent, as a claim would): the report is then
// not recorded, and its reply says the task failed.
func (x *tx) reporter(taskID string, n int, token string, cl *ReportClaim, check func() error) (t *Task, dup bool, err error) {
	if cl == nil {
		if t, dup, err = x.holder(taskID, n, token); err != nil || dup {
			return t, dup, err
		}
		return t, false, check()
	}
	if token != "" {
		return nil, false, invalid("/claim", "a report carries either its attempt's token or a claim, never both")
	}
	// The command key names its sender, so a retry is this sender's own.
	if t, dup, err = x.commandTask(taskID); err != nil || dup {
		return t, dup, err
	}
	if err := checkText("/claim/executor", cl.Executor, MaxTitle, true); err != nil {
		return nil, false, err
	}
	if err := checkText("/claim/executor_version", cl.ExecutorVersion, MaxTitle, false); err != nil {
		return nil, false, err
	}
	if err := check(); err != nil {
		return nil, false, err
	}
	if t.State != StateReady || t.AttemptCount()+1 != n {
		return nil, false, &Error{Code: CodeConflict, Field: "/attempt", Message: fmt.Sprintf(
			"task %s is %s after %d attempts, not ready for attempt %d: the report's claim is not taken, and nothing is recorded",
			t.ID, t.State, t.AttemptCount(), n)}
	}
	if failed, err := x.refuseToStart(t); err != nil || failed {
		return nil, false, err
	}
	if err := x.startAttempt(t, cl.Executor, cl.ExecutorVersion, cl.TokenHash, false); err != nil {
		return nil, false, err
	}
	t, err = x.o.Task(t.ID)
	return t, false, err
}

func (x *tx) saveCheckpoint(c *SaveCheckpoint) (Reply, error) {
	t, dup, err := x.holder(c.TaskID, c.Attempt, c.Token)
	if err != nil || dup {
		return duplicateOr(t, err)
	}
	if schemas.PayloadSize(c.Checkpoint) > MaxInputBytes {
		return Reply{}, invalid("/checkpoint", "is %d bytes; at most %d are allowed", schemas.PayloadSize(c.Checkpoint), MaxInputBytes)
	}
	return x.emitReply(t.ID, &CheckpointSaved{Attempt: c.Attempt, Checkpoint: c.Checkpoint})
}

func (x *tx) reportSuccess(c *ReportSuccess) (Reply, error) {
	t, dup, err := x.reporter(c.TaskID, c.Attempt, c.Token, c.Claim, func() error {
		if schemas.PayloadSize(c.Result) > MaxInputBytes {
			return invalid("/result", "is %d bytes; at most %d are allowed (store larger results as artifacts)", schemas.PayloadSize(c.Result), MaxInputBytes)
		}
		return nil
	})
	if err != nil || dup {
		return duplicateOr(t, err)
	}
	if t == nil { // the claim failed the task instead
		return x.after(c.TaskID)
	}
	if err := x.emit(t.ID, &AttemptSucceeded{Attempt: c.Attempt, Result: c.Result, Artifacts: c.Artifacts, ModelSteps: c.ModelSteps}); err != nil {
		return Reply{}, err
	}
	if t.Spec.Verification == nil {
		if err := x.emit(t.ID, &TaskAccepted{Attempt: c.Attempt}); err != nil {
			return Reply{}, err
		}
	}
	return x.after(t.ID)
}

func (x *tx) reportFailure(c *ReportFailure) (Reply, error) {
	t, dup, err := x.reporter(c.TaskID, c.Attempt, c.Token, c.Claim, func() error {
		return checkText("/error/message", c.Error.Message, MaxText, true)
	})
	if err != nil || dup {
		return duplicateOr(t, err)
	}
	if t == nil { // the claim failed the task instead
		return x.after(c.TaskID)
	}
	if err := x.failAttempt(t, c.Attempt, c.Error, c.Retryable, c.ModelSteps); err != nil {
		return Reply{}, err
	}
	return x.after(t.ID)
}

// failAttempt records attempt n's failure (with the model steps it made,
// which count against the goal's budget) and what follows it: a backoff, or
// the task's failure when the error is not retryable or attempts are spent.
func (x *tx) failAttempt(t *Task, n int, e ErrorInfo, retryable bool, steps []ModelStep) error {
	if err := x.emit(t.ID, &AttemptFailed{Attempt: n, Error: e, Retryable: retryable, ModelSteps: steps}); err != nil {
		return err
	}
	t, err := x.o.Task(t.ID)
	if err != nil {
		return err
	}
	policy := retryOf(t)
	switch {
	case !retryable || (e.Code != "" && slices.Contains(policy.NonRetryable, e.Code)):
		return x.emit(t.ID, &TaskFailed{Reason: ReasonNotRetryable, Error: &e})
	case spent(t) >= policy.MaxAttempts:
		return x.emit(t.ID, &TaskFailed{Reason: ReasonAttemptsSpent, Error: &e})
	}
	if why, of, err := x.overBudget(t); err != nil {
		return err
	} else if why != "" {
		return x.exhausted(t, n, why, of)
	}
	return x.emit(t.ID, &BackoffScheduled{Attempt: n, Until: x.m.Now.Add(Backoff(policy, spent(t)))})
}

func (x *tx) recordVerification(c *RecordVerification) (Reply, error) {
	t, dup, err := x.commandTask(c.TaskID)
	if err != nil || dup {
		return duplicateOr(t, err)
	}
	if !slices.Contains([]string{OutcomePass, OutcomeFail, OutcomeInconclusive}, c.Outcome) {
		return Reply{}, invalid("/outcome", "outcome %q is not one of PASS, FAIL, INCONCLUSIVE", c.Outcome)
	}
	if err := checkText("/verifier", c.Verifier, MaxTitle, true); err != nil {
		return Reply{}, err
	}
	if err := checkText("/result_digest", c.ResultDigest, MaxTitle, true); err != nil {
		return Reply{}, err
	}
	if schemas.PayloadSize(c.Evidence) > MaxInputBytes {
		return Reply{}, invalid("/evidence", "is %d bytes; at most %d are allowed (store larger evidence as artifacts)", schemas.PayloadSize(c.Evidence), MaxInputBytes)
	}
	if len(c.EvidenceRefs) > MaxArtifacts {
		return Reply{}, invalid("/evidence_refs", "has %d entries; at most %d are allowed", len(c.EvidenceRefs), MaxArtifacts)
	}
	id := VerificationID(t.ID, c.Attempt, c.ResultDigest, c.Verifier, c.VerifierVersion)
	for _, v := range t.Verifications {
		if v.VerificationID == id {
			if v.Outcome == c.Outcome {
				return duplicateTask(t), nil
			}
			return Reply{}, &Error{Code: CodeConflict, Field: "/outcome", Message: fmt.Sprintf(
				"verification %s was already recorded as %s; a different outcome under the same identity is refused", id, v.Outcome)}
		}
	}
	if t.State != StateVerifying || t.Current() == nil || t.Current().N != c.Attempt {
		return Reply{}, &Error{Code: CodeConflict, Field: "/attempt", Message: fmt.Sprintf(
			"task %s is %s; attempt %d is not awaiting verification", t.ID, t.State, c.Attempt)}
	}
	if want := ResultDigest(t.Current().Result); c.ResultDigest != want {
		return Reply{}, &Error{Code: CodeConflict, Field: "/result_digest", Message: fmt.Sprintf(
			"the verdict names result %s, but attempt %d's result is %s: a verdict on another result cannot decide this one", c.ResultDigest, c.Attempt, want)}
	}
	n := schemas.PayloadSize(c.Evidence)
	for i := range t.Verifications {
		n += schemas.PayloadSize(t.Verifications[i].Evidence)
	}
	if n > schemas.MaxTaskEvidenceBytes {
		return Reply{}, &Error{Code: CodeConflict, Field: "/evidence", Message: fmt.Sprintf(
			"task %s's verifications would hold %d bytes of evidence, more than the %d a task may: store the evidence as artifacts and name them in evidence_refs",
			t.ID, n, schemas.MaxTaskEvidenceBytes)}
	}
	if err := x.emit(t.ID, &VerificationRecorded{VerificationID: id, Verdict: c.Verdict}); err != nil {
		return Reply{}, err
	}
	t, _ = x.o.Task(t.ID)
	var next Event // review needs none: the verdict put the task in needs_review
	switch {
	case c.Outcome == OutcomePass:
		next = &TaskAccepted{Attempt: c.Attempt}
	case onVerdict(t.Spec.Verification, c.Outcome) == VerdictReject:
		next = &TaskRejected{Reason: ReasonVerification}
	case onVerdict(t.Spec.Verification, c.Outcome) == VerdictRetry:
		if spent(t) >= retryOf(t).MaxAttempts {
			next = &TaskRejected{Reason: ReasonVerification}
		} else {
			next = &TaskReady{Reason: ReasonVerification}
		}
	}
	if next == nil {
		return x.after(t.ID)
	}
	return x.emitReply(t.ID, next)
}

func (x *tx) reviewTask(c *ReviewTask) (Reply, error) {
	t, dup, err := x.commandTask(c.TaskID)
	if err != nil || dup {
		return duplicateOr(t, err)
	}
	if err := checkText("/reason", c.Reason, MaxReason, false); err != nil {
		return Reply{}, err
	}
	if !slices.Contains([]string{ReviewAccept, ReviewReject, ReviewRetry}, c.Decision) {
		return Reply{}, invalid("/decision", "decision %q is not one of accept, reject, retry", c.Decision)
	}
	// Check the state before building the consequence: only a task in
	// needs_review is sure to have a current attempt.
	if t.State != StateNeedsReview {
		return Reply{}, conflict("task %s is %s, not needs_review", t.ID, t.State)
	}
	var next Event
	switch c.Decision {
	case ReviewAccept:
		a := t.Current()
		if a == nil || a.State != AttemptStateSucceeded {
			return Reply{}, &Error{Code: CodeConflict, Field: "/decision", Message: fmt.Sprintf(
				"task %s has no result to accept (the goal it delegated to failed): retry it (a new attempt, handed the failed delegation) or reject it", t.ID)}
		}
		next = &TaskAccepted{Attempt: a.N}
	case ReviewReject:
		next = &TaskRejected{Reason: "review: " + c.Reason}
	case ReviewRetry:
		next = &TaskReady{Reason: "review_retry"}
	}
	return x.emitReply(t.ID, &ReviewDecided{Decision: c.Decision, Reason: c.Reason}, next)
}

func (x *tx) waitTask(c *WaitTask) (Reply, error) {
	t, dup, err := x.holder(c.TaskID, c.Attempt, c.Token)
	if err != nil || dup {
		return duplicateOr(t, err)
	}
	w := &TaskWaiting{Kind: c.Kind}
	switch c.Kind {
	case WaitSignal:
		if !ValidKey(c.Signal) {
			return Reply{}, invalid("/signal", "signal name %q is not valid", c.Signal)
		}
		w.Signal = c.Signal
		// A signal sent before the wait: the wait takes it at once, and
		// the task is ready again to resume with it.
		if i := slices.IndexFunc(t.PendingSignals, func(p Signal) bool { return p.Name == c.Signal }); i >= 0 {
			p := t.PendingSignals[i]
			return x.emitReply(t.ID, w, &SignalReceived{Name: p.Name, Payload: p.Payload}, &TaskReady{Reason: "signal"})
		}
	case WaitTimer:
		if c.Until == nil {
			return Reply{}, invalid("/until", "a timer wait needs the time it ends")
		}
		w.Until = c.Until
		// A time that passed before the wait was decided (a job's
		// "sleep one second" that took longer to arrive): the wait ends
		// at once, as its timer would fire at once.
		if !c.Until.After(x.m.Now) {
			return x.emitReply(t.ID, w, &TaskReady{Reason: "timer"})
		}
	default:
		return Reply{}, invalid("/kind", "kind %q is not one of signal, timer", c.Kind)
	}
	return x.emitReply(t.ID, w)
}

func (x *tx) sendSignal(c *SendSignal) (Reply, error) {
	t, dup, err := x.commandTask(c.TaskID)
	if err != nil || dup {
		return duplicateOr(t, err)
	}
	if schemas.PayloadSize(c.Payload) > MaxInputBytes {
		return Reply{}, invalid("/payload", "is %d bytes; at most %d are allowed", schemas.PayloadSize(c.Payload), MaxInputBytes)
	}
	if Terminal(t.State) {
		return Reply{}, &Error{Code: CodeConflict, Field: "/task_id", Message: fmt.Sprintf("task %s has ended (%s): it takes no more signals", t.ID, t.State)}
	}
	if t.State == StateWaiting && t.Wait != nil && t.Wait.Kind == WaitSignal && t.Wait.Signal == c.Name {
		return x.emitReply(t.ID, &SignalReceived{Name: c.Name, Payload: c.Payload}, &TaskReady{Reason: "signal"})
	}
	// Not waiting for it (yet): the task keeps it for its next wait.
	if len(t.PendingSignals) >= MaxPendingSignals {
		return Reply{}, &Error{Code: CodeConflict, Field: "/name", Message: fmt.Sprintf(
			"task %s already keeps %d signals it has not waited for (at most %d): this one is refused; the task must wait for one first", t.ID, len(t.PendingSignals), MaxPendingSignals)}
	}
	kept := schemas.PayloadSize(c.Payload)
	for _, p := range t.PendingSignals {
		kept += schemas.PayloadSize(p.Payload)
	}
	if kept > MaxPendingSignalBytes {
		return Reply{}, &Error{Code: CodeConflict, Field: "/payload", Message: fmt.Sprintf(
			"task %s would keep %d bytes of signal payloads it has not waited for (at most %d): this one is refused", t.ID, kept, MaxPendingSignalBytes)}
	}
	return x.emitReply(t.ID, &SignalBuffered{Name: c.Name, Payload: c.Payload})
}

// fireTimer moves a task whose moment has come. A timer that is stale (the
// task moved on) changes nothing; one that is early is refused.
func (x *tx) fireTimer(c *FireTimer) (Reply, error) {
	if c.Kind == TimerSchedule {
		return x.fireSchedule(c)
	}
	if c.Kind == TimerGoal {
		return x.goalDeadline(c)
	}
	t, dup, err := x.commandTask(c.TaskID)
	if err != nil || dup {
		return duplicateOr(t, err)
	}
	stale := func() (Reply, error) { return duplicateTask(t), nil }
	early := func(due fmt.Stringer) (Reply, error) {
		return Reply{}, conflict("timer for task %s is not due until %s", t.ID, due)
	}
	switch c.Kind {
	case TimerBackoff:
		if t.State != StateBackoff || t.BackoffUntil == nil {
			return stale()
		}
		if x.m.Now.Before(*t.BackoffUntil) {
			return early(*t.BackoffUntil)
		}
		err = x.emit(t.ID, &TaskReady{Reason: "backoff_elapsed"})
	case TimerWait:
		if t.State != StateWaiting || t.Wait == nil || t.Wait.Kind != WaitTimer || t.Wait.Until == nil {
			return stale()
		}
		if x.m.Now.Before(*t.Wait.Until) {
			return early(*t.Wait.Until)
		}
		err = x.emit(t.ID, &TaskReady{Reason: "timer"})
	case TimerApproval:
		return x.expireApproval(t, c)
	case TimerTask:
		if Terminal(t.State) || t.Spec.Deadline == nil {
			return stale()
		}
		if x.m.Now.Before(*t.Spec.Deadline) {
			return early(*t.Spec.Deadline)
		}
		why := fmt.Sprintf("the task's deadline %s passed", t.Spec.Deadline.UTC().Format(time.RFC3339))
		err = x.emit(t.ID, &TaskFailed{Reason: ReasonDeadline, Error: &ErrorInfo{Code: ReasonDeadline, Message: why}})
	case TimerLease:
		a := t.Running()
		if a == nil || a.N != c.Attempt || !a.Handed {
			return stale()
		}
		if x.m.Now.Before(c.Due) {
			return early(c.Due)
		}
		err = x.emit(t.ID, &AttemptAbandoned{Attempt: a.N, Reason: ReasonLeaseLost})
	case TimerAttempt:
		a := t.Running()
		if a == nil || a.N != c.Attempt || a.Deadline == nil {
			return stale()
		}
		if x.m.Now.Before(*a.Deadline) {
			return early(*a.Deadline)
		}
		err = x.failAttempt(t, a.N, ErrorInfo{Code: ReasonTimeout, Message: fmt.Sprintf("attempt %d passed its deadline", a.N)}, true, nil)
	default:
		return Reply{}, invalid("/kind", "timer kind %q is not one of backoff, wait, attempt_timeout, attempt_lease, task_deadline, approval_expiry", c.Kind)
	}
	if err != nil {
		return Reply{}, err
	}
	return x.after(t.ID)
}

// overBudget says why the envelope of t's goal, or of a goal up the tree
// that delegated the work to it, allows no further attempt (its attempts,
// tokens or cost are used up, counting what the goals it delegated to
// spent, or its deadline has passed), and which goal's it is. It returns
// "" when another attempt is allowed (and for standalone tasks).
func (x *tx) overBudget(t *Task) (why, goalID string, err error) {
	for id := t.GoalID; id != ""; {
		g, err := x.o.Goal(id)
		if err != nil || g == nil {
			return "", "", err
		}
		why, err := x.goalOverBudget(g)
		if err != nil || why != "" {
			if why != "" && g.ID != t.GoalID {
				why = fmt.Sprintf("%s (goal %s, which delegated this work)", why, g.ID)
			}
			return why, g.ID, err
		}
		if g.Parent == nil {
			break
		}
		id = g.Parent.GoalID
	}
	return "", "", nil
}

// goalOverBudget says why goal g's envelope allows no further attempt, or
// "".
func (x *tx) goalOverBudget(g *Goal) (string, error) {
	b := g.Envelope.Budget
	if b.Deadline != nil && !x.m.Now.Before(*b.Deadline) {
		return fmt.Sprintf("the goal's deadline %s has passed", b.Deadline.Format(time.RFC3339)), nil
	}
	if b.Attempts == 0 && b.Tokens == 0 && b.Cost == 0 {
		return "", nil
	}
	sp, err := GoalSpend(g, x.m.Now, x.o.Task, x.o.Goal)
	if err != nil {
		return "", err
	}
	attempts, tokens, cost := sp.Attempts, sp.Tokens, sp.Cost
	switch {
	case b.Attempts > 0 && attempts >= b.Attempts:
		return fmt.Sprintf("the goal's budget of %d attempts is used up", b.Attempts), nil
	case b.Tokens > 0 && tokens >= b.Tokens:
		return fmt.Sprintf("the goal's budget of %d tokens is used up (%d used)", b.Tokens, tokens), nil
	case b.Cost > 0 && cost >= b.Cost:
		return fmt.Sprintf("the goal's budget of cost %g is used up (%g used)", b.Cost, cost), nil
	}
	return "", nil
}

// exhausted ends t's way forward when the budget of goal of (its goal, or
// one up the tree) allows it no further attempt (why): it fails, or — when
// of is its own goal, whose envelope says on_exhausted approval, and the
// budget is one an approval can extend — it waits on a budget approval
// (attempt: the attempt that ended, 0 before any) whose approval doubles
// each bound of the budget. A goal up the tree asks for its extension
// where its own tasks are stopped.
func (x *tx) exhausted(t *Task, attempt int, why, of string) error {
	g, err := x.o.Goal(t.GoalID)
	if err != nil {
		return err
	}
	b := g.Envelope.Budget
	if of != g.ID || g.Envelope.OnExhausted != schemas.OnExhaustedApproval || (b.Deadline != nil && !x.m.Now.Before(*b.Deadline)) {
		return x.emit(t.ID, &TaskFailed{Reason: ReasonBudget, Error: &ErrorInfo{Code: ReasonBudget, Message: why}})
	}
	// The goal pauses on one approval: a task stopped while another's is
	// pending waits on that one.
	if asked, err := x.budgetApproval(g); err != nil || asked != nil {
		if err != nil || asked.TaskID == t.ID {
			return err
		}
		return x.emit(t.ID, &TaskWaiting{Kind: WaitBudget, ApprovalID: asked.ID})
	}
	var ext schemas.BudgetExtension
	e := &ext.ExtendBudget
	e.GoalID, e.Why, e.Budget, e.To = g.ID, why, b, b
	e.To.Attempts, e.To.Tokens, e.To.Cost = 2*b.Attempts, 2*b.Tokens, 2*b.Cost
	action, err := json.Marshal(ext)
	if err != nil {
		return err
	}
	basis := json.RawMessage(strconv.Quote(why))
	if err := approvalRoom(t, action, basis); err != nil {
		return x.emit(t.ID, &TaskFailed{Reason: ReasonBudget, Error: &ErrorInfo{Code: ReasonBudget, Message: why + "; no extension asked: " + err.Message}})
	}
	ev, err := newApproval(t, attempt, ApprovalRequest{Action: action, Summary: "extend the budget of goal " + clip(g.Title, MaxTitle/2),
		Basis: basis, Role: g.Envelope.ExtensionRole, Responses: []string{ResponseApprove, ResponseReject},
		Branches: map[string]string{ResponseApprove: BranchResume, ResponseReject: BranchFail}, OnExpiry: BranchFail}, false, x.m.Now)
	if err != nil {
		return err
	}
	ev.Kind = schemas.ApprovalKindBudget
	return x.emit(t.ID, ev)
}

// budgetApproval returns the pending budget approval of goal g's current
// plan, or nil.
func (x *tx) budgetApproval(g *Goal) (*Approval, error) {
	for _, p := range g.Plan {
		t, err := x.o.Task(p.TaskID)
		if err != nil {
			return nil, err
		}
		if a := t.PendingApproval(); a != nil && a.Kind == schemas.ApprovalKindBudget {
			return a, nil
		}
	}
	return nil, nil
}

// quarantineTask fails a task whose work item kept failing to be processed,
// so that it never blocks its queue. A task that has ended already is left as
// it is (the work item was stale).
func (x *tx) quarantineTask(c *QuarantineTask) (Reply, error) {
	t, dup, err := x.commandTask(c.TaskID)
	if err != nil || dup || Terminal(t.State) {
		return duplicateOr(t, err)
	}
	if err := checkText("/reason", c.Reason, MaxReason, false); err != nil {
		return Reply{}, err
	}
	msg := c.Reason
	if msg == "" {
		msg = "its work item could not be processed"
	}
	return x.emitReply(t.ID, &TaskFailed{Reason: ReasonQuarantined, Error: &ErrorInfo{Code: ReasonQuarantined, Message: msg}})
}

// goalDeadline fails a goal whose deadline passed, with every task of its
// plan that has not ended (a running attempt's executor is told through the
// task.failed event). A stale timer changes nothing; an early one is refused.
func (x *tx) goalDeadline(c *FireTimer) (Reply, error) {
	g, err := x.goal(c.GoalID, "/goal_id")
	if err != nil {
		return Reply{}, err
	}
	d := g.Envelope.Budget.Deadline
	if g.State != GoalStateOpen || d == nil {
		return duplicateGoal(g), nil
	}
	if x.m.Now.Before(*d) {
		return Reply{}, conflict("the deadline of goal %s is not until %s", g.ID, d)
	}
	why := fmt.Sprintf("the goal's deadline %s passed", d.UTC().Format(time.RFC3339))
	if err := x.emit(g.ID, &GoalFailed{Reason: why}); err != nil {
		return Reply{}, err
	}
	err = x.endPlan(g, func() Event { // each ends with the deadline as its reason
		return &TaskFailed{Reason: ReasonDeadline, Error: &ErrorInfo{Code: ReasonDeadline, Message: why}}
	})
	if err != nil {
		return Reply{}, err
	}
	g, _ = x.o.Goal(g.ID)
	return goalReply(g), nil
}
