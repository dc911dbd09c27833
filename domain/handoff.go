package domain

import (
	"slices"

	"github.com/dwr-run/dwr/schemas"
)

// handoff starts, for the sender of a report that asked for it
// (schemas.Handoff), the next attempt of a task the report left ready: a
// dependent of the reported task, on the same queue, in the same
// workspace, that the sender may work and that a claim would start (its
// goal's envelope and its retry policy allow another attempt). The attempt
// is recorded as handed, with the token hash the service derived for the
// report, and reply names it. It does nothing for any other command, for
// a report that was not recorded (a duplicate, or one whose lazy claim
// failed the task instead), or when no dependent qualifies: the tasks the
// report left ready then go out as work items, as ever.
func (x *tx) handoff(cmd Command, reply *Reply) error {
	var (
		taskID, hash string
		attempt      int
		next         bool
	)
	switch c := cmd.(type) {
	case *ReportSuccess:
		taskID, attempt, next, hash = c.TaskID, c.Attempt, c.Next, c.NextTokenHash
	case *ReportFailure:
		taskID, attempt, next, hash = c.TaskID, c.Attempt, c.Next, c.NextTokenHash
	default:
		return nil
	}
	if !next || hash == "" || reply.Duplicate {
		return nil
	}
	t, err := x.o.Task(taskID)
	if err != nil || t == nil {
		return err
	}
	if a := t.Attempt(attempt); a == nil || a.ClaimedBy != x.m.Actor || a.State == AttemptStateRunning {
		return nil // not this sender's report, or not recorded
	}
	deps, err := x.o.Dependents(taskID)
	if err != nil {
		return err
	}
	for _, id := range deps {
		d, err := x.o.Task(id)
		if err != nil {
			return err
		}
		if d == nil || d.State != StateReady || d.Workspace != t.Workspace || d.Spec.Queue != t.Spec.Queue {
			continue
		}
		if x.m.Executor && !slices.Contains(x.m.Queues, d.Spec.Queue) {
			continue
		}
		if why, _, err := x.overBudget(d); err != nil {
			return err
		} else if why != "" || spent(d) >= retryOf(d).MaxAttempts {
			continue // a claim would fail it: leave that to the claim
		}
		a := t.Attempt(attempt)
		if err := x.startAttempt(d, a.Executor, a.ExecutorVersion, hash, true); err != nil {
			return err
		}
		reply.Next = &schemas.Handoff{TaskID: d.ID, Attempt: len(d.Attempts) + 1, TokenHash: hash}
		return nil
	}
	return nil
}
