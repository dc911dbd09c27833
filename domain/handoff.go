package domain

import (
	"slices"

	"github.com/dwr-run/dwr/schemas"
)

// ReportParts are what task.succeed and task.fail both carry, for the code
// that treats them alike: NextTokenHash points into the command, for the
// service to set.
type ReportParts struct {
	TaskID        string
	Attempt       int
	Claim         *ReportClaim
	Next          bool
	NextTokenHash *string
}

// Report returns the parts of report cmd, or false when cmd is no report.
func Report(cmd Command) (ReportParts, bool) {
	switch c := cmd.(type) {
	case *ReportSuccess:
		return ReportParts{c.TaskID, c.Attempt, c.Claim, c.Next, &c.NextTokenHash}, true
	case *ReportFailure:
		return ReportParts{c.TaskID, c.Attempt, c.Claim, c.Next, &c.NextTokenHash}, true
	}
	return ReportParts{}, false
}

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
	r, ok := Report(cmd)
	if !ok || !r.Next || *r.NextTokenHash == "" || reply.Duplicate {
		return nil
	}
	t, err := x.o.Task(r.TaskID)
	if err != nil || t == nil {
		return err
	}
	reported := t.Attempt(r.Attempt)
	if reported == nil || reported.ClaimedBy != x.m.Actor || reported.State == AttemptStateRunning {
		return nil // not this sender's report, or not recorded
	}
	if held, err := x.holdsBack(t.Spec.Queue); err != nil || held {
		// A handed attempt holds no work item, which the queue's consumer
		// counts its running jobs by; a paused queue hands out nothing.
		return err
	}
	return x.forDependentsIn(r.TaskID, StateReady, func(_ string, d *Task) error {
		if d.Workspace != t.Workspace || d.Spec.Queue != t.Spec.Queue || x.m.Executor && !slices.Contains(x.m.Queues, d.Spec.Queue) {
			return nil
		}
		if why, _, err := x.overBudget(d); err != nil || why != "" || spent(d) >= retryOf(d).MaxAttempts {
			return err // a claim would fail it: leave that to the claim
		}
		hash := *r.NextTokenHash
		if err := x.startAttempt(d, reported.Executor, reported.ExecutorVersion, hash, true); err != nil {
			return err
		}
		reply.Next = &schemas.Handoff{TaskID: d.ID, Attempt: d.AttemptCount() + 1, TokenHash: hash}
		return errEnough
	})
}

// holdsBack reports whether queue, in this workspace, holds its jobs back
// from a report's handoff: it limits how many of them run at once
// (QueueConfig.MaxRunning), which only its consumer counts, or how many
// it hands out in a period (QueueConfig.RateLimit), or it hands them out
// by priority (QueueConfig.Order) — which only the service's dispatcher
// follows, holding the items — or it is paused.
func (x *tx) holdsBack(queue string) (bool, error) {
	w, err := x.o.Workspace(x.m.Workspace)
	if err != nil || w == nil {
		return false, err
	}
	q := w.Queue(queue)
	return q != nil && (q.MaxRunning > 0 || q.RateLimit > 0 || q.Order == QueueOrderPriority || q.Paused), nil
}
