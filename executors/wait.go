package executors

import (
	"errors"
	"fmt"
	"time"

	"github.com/dwr-run/dwr/schemas"
)

// Sleep parks the task until t, holding no process: return it from a handler
// (return executors.Result{}, executors.Sleep(t)) after saving what the next
// attempt needs with Job.SaveCheckpoint. The attempt ends parked; when t
// comes, the service's durable timer makes the task ready and a new attempt
// runs, handed the last checkpoint — also if the service was down at t. A
// parked attempt does not count against the retry policy.
func Sleep(until time.Time) error { return &WaitError{Until: until.UTC()} }

// AwaitSignal parks the task until the signal named name arrives (`dwr signal
// TASK NAME`, or the task.signal command from any service), holding no
// process; then a new attempt runs, handed the last checkpoint.
func AwaitSignal(name string) error { return &WaitError{Signal: name} }

// WaitError is what Sleep, AwaitSignal and RequestApproval return: a
// request to park the task, which the worker reports as task.wait instead of
// a failure — or, for an approval, nothing more: the request recorded by
// RequestApproval parked the task already.
type WaitError struct {
	Until  time.Time // a timed wait, when Signal and Approval are unset
	Signal string    // the signal waited for

	// Approval is the request of a RequestApproval, ActionDigest the digest
	// of its action, and ApprovalID the id the service gave the approval
	// ("<task id>-<n>"). ApprovalID is empty when the request was not sent:
	// the job was built by NewJob (executortest), or the handler built the
	// WaitError itself — a worker then sends the request when the handler
	// returns.
	Approval     *ApprovalRequest
	ActionDigest string
	ApprovalID   string

	// Delegation is the delegation of a Delegate, and GoalID the child
	// goal the service created for it; GoalID is empty when it was not
	// sent (a job built by NewJob, or a WaitError the handler built): a
	// worker then sends it when the handler returns.
	Delegation *Delegation
	GoalID     string
}

func (e *WaitError) Error() string {
	if e.Delegation != nil {
		if e.GoalID == "" {
			return fmt.Sprintf("executors: waiting for the goal delegated as %q", e.Delegation.Key)
		}
		return fmt.Sprintf("executors: waiting for goal %s, delegated as %q", e.GoalID, e.Delegation.Key)
	}
	if e.Approval != nil {
		if e.ApprovalID == "" {
			return "executors: waiting for approval of action " + e.ActionDigest
		}
		return "executors: waiting for approval " + e.ApprovalID + " of action " + e.ActionDigest
	}
	if e.Signal != "" {
		return fmt.Sprintf("executors: waiting for signal %q", e.Signal)
	}
	return "executors: sleeping until " + e.Until.Format(time.RFC3339Nano)
}

// waitOf returns the wait err asks for, or nil.
func waitOf(err error) *WaitError {
	var w *WaitError
	if errors.As(err, &w) {
		return w
	}
	return nil
}

// waitBodyOf returns the task.wait command that parks j's task as w asks.
func waitBodyOf(j *Job, w *WaitError) schemas.WaitTask {
	if w.Signal != "" {
		return schemas.WaitTask{TaskID: j.TaskID, Attempt: j.Attempt, Token: j.Token, Kind: schemas.WaitSignal, Signal: w.Signal}
	}
	until := w.Until
	return schemas.WaitTask{TaskID: j.TaskID, Attempt: j.Attempt, Token: j.Token, Kind: schemas.WaitTimer, Until: &until}
}
