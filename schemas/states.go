package schemas

// The values of the contract's enumerations (common.json): what a task, an
// attempt, an approval or a work item is, as replies, work items and events
// carry it.

// Task states (common.json#/$defs/TaskState).
const (
	StatePending     = "pending"
	StateReady       = "ready"
	StateRunning     = "running"
	StateWaiting     = "waiting"
	StateVerifying   = "verifying"
	StateNeedsReview = "needs_review"
	StateBackoff     = "backoff"
	StateAccepted    = "accepted"
	StateRejected    = "rejected"
	StateFailed      = "failed"
	StateCancelled   = "cancelled"
)

// Terminal reports whether a task in state s can never change again:
// accepted, rejected, failed or cancelled.
func Terminal(s string) bool {
	switch s {
	case StateAccepted, StateRejected, StateFailed, StateCancelled:
		return true
	}
	return false
}

// Attempt states (Attempt.State).
const (
	AttemptStateRunning   = "running"
	AttemptStateSucceeded = "succeeded"
	AttemptStateFailed    = "failed"
	AttemptStateAbandoned = "abandoned"
	AttemptStateParked    = "parked"
	AttemptStateCancelled = "cancelled"
)

// Approval states (Approval.State).
const (
	ApprovalStatePending   = "pending"
	ApprovalStateDecided   = "decided"
	ApprovalStateExpired   = "expired"
	ApprovalStateWithdrawn = "withdrawn" // the task ended before anyone decided
)

// ApprovalStates are the approval states, in their order of life: the
// states approval.list lists approvals by.
var ApprovalStates = []string{ApprovalStatePending, ApprovalStateDecided, ApprovalStateExpired, ApprovalStateWithdrawn}

// Wait kinds (Wait.Kind, and the kind of task.wait).
const (
	WaitApproval = "approval"
	WaitSignal   = "signal"
	WaitTimer    = "timer"
	// WaitBudget: the task's goal waits on a budget approval another task
	// asked (Wait.ApprovalID names it); its decision resumes or fails this
	// task too.
	WaitBudget = "budget"
	// WaitDelegation: an attempt of the task delegated work to a child goal
	// (task.delegate; Wait.GoalID names it); the goal's end resumes, fails
	// or puts up for review the task, as the delegation's OnFailure says.
	WaitDelegation = "delegation"
)

// What a task does when the goal it delegated to fails or is cancelled
// (Delegation.OnFailure).
const (
	// DelegationFail fails the task, reason delegation_failed (the default).
	DelegationFail = "fail"
	// DelegationReview puts the task up for review: retry runs a new
	// attempt, handed the failed delegation; reject ends it.
	DelegationReview = "review"
	// DelegationResume makes the task ready again: a new attempt is handed
	// the failed delegation and decides what to do.
	DelegationResume = "resume"
)

// Verification outcomes (Verification.Outcome, and the outcome of
// task.verify).
const (
	OutcomePass         = "PASS"
	OutcomeFail         = "FAIL"
	OutcomeInconclusive = "INCONCLUSIVE"
)
