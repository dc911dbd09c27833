package executors

import (
	"fmt"
	"strings"

	"github.com/dwr-run/dwr/schemas"
)

// The SDK speaks the wire contract through schemas' Go types: work items,
// command bodies, replies and the task a claim returns are schemas.WorkItem,
// schemas.ClaimTask, schemas.Reply, schemas.Task... This file holds the
// names the SDK's API hands a handler, and what the SDK reads off them.

// The wire data a Job carries, by its names in this package.
type (
	// ErrorInfo is an attempt's error as its executor reported it (or as
	// the runtime recorded it, for example code "timeout").
	ErrorInfo = schemas.ErrorInfo
	// PriorAttempt is an earlier attempt of the same task, handed to a job
	// so it can reconcile with what that attempt may have done (its side
	// effects were made under the same operation key).
	PriorAttempt = schemas.Attempt
	// Verification is a verifier's recorded judgement of an earlier
	// attempt's result. A job is handed the FAIL verifications of its task:
	// the evidence of why an earlier result was not accepted.
	Verification = schemas.Verification
	// Artifact references an output stored by its content hash (in the
	// object store dwr-artifacts), reported with a result.
	Artifact = schemas.ArtifactRef
	// ModelStep records one consequential model call of an attempt; its
	// tokens and cost are charged to the goal's budget.
	ModelStep = schemas.ModelStep
	// Signal is a named signal a task received, with its payload.
	Signal = schemas.Signal
	// Dependency is the accepted outcome of a task the job's task depends
	// on: its result and artifacts (Job.Dependencies).
	Dependency = schemas.Dependency
)

// Limits of the wire contract the SDK checks before it sends.
const (
	// MaxPayloadBytes bounds a result or a checkpoint: 256 KiB of JSON.
	// Store anything larger as an artifact and report its reference.
	MaxPayloadBytes = 256 << 10
	maxLabel        = 200    // executor names, versions, error codes
	maxMessage      = 10_000 // an error message, in bytes
)

// checkItem returns an error naming every reason why this worker (of
// workspace and queue, running items of kind) cannot run it, or nil.
func checkItem(it *schemas.WorkItem, workspace, queue, kind string) error {
	var problems []string
	if it.Kind != kind {
		problems = append(problems, fmt.Sprintf("kind %q is not %q", it.Kind, kind))
	}
	if it.TaskID == "" {
		problems = append(problems, "task_id is missing")
	}
	if it.Workspace != workspace {
		problems = append(problems, fmt.Sprintf("workspace %q is not this worker's %q", it.Workspace, workspace))
	}
	if it.Queue != queue {
		problems = append(problems, fmt.Sprintf("queue %q is not this worker's %q", it.Queue, queue))
	}
	if it.Attempt < 1 {
		problems = append(problems, fmt.Sprintf("attempt %d is not positive", it.Attempt))
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("executors: work item: %s", strings.Join(problems, "; "))
}

// decisionsOf returns the decisions taken on the task's approvals, and their
// expiries (ResponseExpired), in the order the approvals were requested,
// each with the role its request asked (schemas.Approval.AskedRole). An
// approval without escalated_from asked its own role: so does every one of
// a service that does not record them, where an escalation's decision
// counts for the role escalated to only (the job asking the first role gets
// the decision that escalated: not an approval).
func decisionsOf(t *schemas.Task) []Decision {
	var ds []Decision
	for i := range t.Approvals {
		a := &t.Approvals[i]
		asked := a.AskedRole
		if a.EscalatedFrom == "" {
			asked = a.Role
		}
		switch d := a.Decision; {
		case d != nil:
			var approvers []string
			if len(a.SignOffs) > 0 && d.Response == ResponseApprove {
				for _, s := range a.SignOffs {
					approvers = append(approvers, s.Approver)
				}
				approvers = append(approvers, d.Approver)
			}
			ds = append(ds, Decision{ApprovalID: a.ID, ActionDigest: a.ActionDigest, Action: a.Action,
				Response: d.Response, Comment: d.Comment, Approver: d.Approver, Role: d.Role, DecidedAt: d.DecidedAt, AskedRole: asked,
				Approvers: approvers})
		case a.State == schemas.ApprovalStateExpired && a.ExpiresAt != nil:
			ds = append(ds, Decision{ApprovalID: a.ID, ActionDigest: a.ActionDigest, Action: a.Action,
				Response: ResponseExpired, DecidedAt: *a.ExpiresAt, AskedRole: asked})
		}
	}
	return ds
}

// running returns the attempt that holds the task now, or nil.
func running(t *schemas.Task) *schemas.Attempt {
	if t.State != schemas.StateRunning {
		return nil
	}
	return t.Running()
}

// runningFromItem returns the task's running attempt when it was started
// from the work item whose first claim starts attempt itemAttempt: by its
// first delivery, or by a redelivery that superseded the attempt of an
// earlier delivery whose lease lapsed (every attempt from itemAttempt up to
// the running one was abandoned). An attempt that followed a failure came
// from another work item, and is not this item's to supersede.
func runningFromItem(t *schemas.Task, itemAttempt int) (*schemas.Attempt, bool) {
	r := running(t)
	if r == nil || r.N < itemAttempt {
		return nil, false
	}
	for _, a := range t.Attempts {
		if a.N >= itemAttempt && a.N < r.N && a.State != schemas.AttemptStateAbandoned {
			return nil, false
		}
	}
	return r, true
}
