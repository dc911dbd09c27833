package domain

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/dwr-run/dwr/schemas"
)

// Event is a fact about one aggregate. The set of events is closed: every
// implementation is in this package, and EventType is its stable wire name.
type Event interface {
	EventType() string
	AggregateType() string
	isEvent()
}

// Task states.
const (
	StatePending     = schemas.StatePending
	StateReady       = schemas.StateReady
	StateRunning     = schemas.StateRunning
	StateWaiting     = schemas.StateWaiting
	StateVerifying   = schemas.StateVerifying
	StateNeedsReview = schemas.StateNeedsReview
	StateBackoff     = schemas.StateBackoff
	StateAccepted    = schemas.StateAccepted
	StateRejected    = schemas.StateRejected
	StateFailed      = schemas.StateFailed
	StateCancelled   = schemas.StateCancelled
)

// TaskStates lists every task state, non-terminal first.
var TaskStates = []string{StatePending, StateReady, StateRunning, StateWaiting, StateVerifying,
	StateNeedsReview, StateBackoff, StateAccepted, StateRejected, StateFailed, StateCancelled}

// Terminal reports whether a task in state s can never change again.
func Terminal(s string) bool { return schemas.Terminal(s) }

// Goal states.
const (
	GoalStateOpen      = schemas.GoalStateOpen
	GoalStateAchieved  = schemas.GoalStateAchieved
	GoalStateFailed    = schemas.GoalStateFailed
	GoalStateCancelled = schemas.GoalStateCancelled
)

// Verification outcomes.
const (
	OutcomePass         = schemas.OutcomePass
	OutcomeFail         = schemas.OutcomeFail
	OutcomeInconclusive = schemas.OutcomeInconclusive
)

// Review decisions for a task in needs_review.
const (
	ReviewAccept = "accept"
	ReviewReject = "reject"
	ReviewRetry  = "retry"
)

// Reasons recorded when a task ends or moves without an executor's report.
const (
	ReasonDependencyFailed = "dependency_failed"
	ReasonAttemptsSpent    = "attempts_exhausted"
	ReasonNotRetryable     = "not_retryable"
	ReasonVerification     = "verification_failed"
	ReasonReplaced         = "replaced_by_plan"
	ReasonRemoved          = "removed_from_plan"
	ReasonGoalCancelled    = "goal_cancelled"
	ReasonLeaseLost        = "lease_lost"
	ReasonTimeout          = "timeout"
	ReasonBudget           = "budget_exhausted"
	ReasonQuarantined      = "quarantined"
	ReasonDeadline         = "deadline"
	ReasonDelegation       = "delegation_failed"
	ReasonParentEnded      = "parent_ended"
)

// WorkspaceCreated starts a workspace.
type WorkspaceCreated struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

// GoalCreated starts a goal.
type GoalCreated struct {
	Workspace       string   `json:"workspace"`
	Title           string   `json:"title"`
	Description     string   `json:"description,omitempty"`
	SuccessCriteria []string `json:"success_criteria,omitempty"`
	Envelope        Envelope `json:"envelope"`
	// Labels are the goal's labels (absent: none).
	Labels Labels `json:"labels,omitempty"`
	// Priority is the priority of the goal's tasks that give none (0:
	// schemas.DefaultPriority).
	Priority int `json:"priority,omitempty"`
	// Key is the goal's key (CreateGoal.Key), if any.
	Key string `json:"key,omitempty"`
	// Ritual names the ritual version the goal was created from
	// (ritual.run), if any.
	Ritual *RitualRef `json:"ritual,omitempty"`
	// Schedule names the schedule and the slot the goal was started for,
	// if any.
	Schedule *ScheduleRef `json:"schedule,omitempty"`
	// Parent names the task whose attempt delegated the goal
	// (task.delegate), if any.
	Parent *ParentRef `json:"parent,omitempty"`
}

// ParentRef names the task whose attempt delegated a goal.
type ParentRef = schemas.ParentRef

// Delegation is a child goal a task's attempt delegated work to, as the
// task keeps it.
type Delegation = schemas.Delegation

// TaskDelegated: attempt Attempt delegated work to the child goal GoalID,
// created in the same record; the attempt is parked and the task waits on
// the goal (kind delegation).
type TaskDelegated struct {
	Key       string `json:"key"`
	GoalID    string `json:"goal_id"`
	Attempt   int    `json:"attempt"`
	OnFailure string `json:"on_failure"`
}

// TaskDelegationEnded: the child goal of the delegation Key ended, in
// State, with its plan's Tasks; what the task does next follows as its own
// event.
type TaskDelegationEnded struct {
	Key    string     `json:"key"`
	GoalID string     `json:"goal_id"`
	State  string     `json:"state"`
	Reason string     `json:"reason,omitempty"`
	Tasks  []PlanTask `json:"tasks,omitempty"`
}

// GoalShredded: the goal's data key was destroyed; its payloads, and those
// of the goals it delegated to, read as "[shredded]".
type GoalShredded struct {
	Reason string `json:"reason,omitempty"`
}

// WorkspaceConfigured: the workspace's retention was set.
type WorkspaceConfigured struct {
	RetainEnded schemas.Duration `json:"retain_ended,omitempty"`
}

// WorkspaceShredded: every data key of the workspace was destroyed.
type WorkspaceShredded struct {
	Reason string `json:"reason,omitempty"`
}

// TaskReviewRequested: the task waits for a person's review (task.review),
// without a result to judge: the goal it delegated to failed.
type TaskReviewRequested struct {
	Reason string `json:"reason"`
}

// PlanTask is one node of a committed plan.
type PlanTask = schemas.PlanTask

// PlanCommitted records a version of a goal's plan and how it relates to the
// previous one.
type PlanCommitted struct {
	Version  int        `json:"version"`
	Tasks    []PlanTask `json:"tasks"`
	Kept     []string   `json:"kept,omitempty"`     // keys whose task carries over
	Replaced []string   `json:"replaced,omitempty"` // keys whose task was cancelled and created anew
	Added    []string   `json:"added,omitempty"`
	Removed  []string   `json:"removed,omitempty"`
	// RetiredSpend is what the tasks that leave the plan (removed, and the
	// replaced ones' old tasks: they end in the same record) have spent,
	// for the goal to keep (Goal.RetiredSpend). Absent in revisions
	// recorded before it was tallied: the goal lists those tasks instead.
	RetiredSpend *Spend `json:"retired_spend,omitempty"`
}

// GoalAchieved: every task of the current plan was accepted.
type GoalAchieved struct{}

// GoalFailed: every task of the current plan ended and at least one was not accepted.
type GoalFailed struct {
	Reason string `json:"reason"`
}

// GoalBudgetExtended: an approver approved a budget approval (the goal's
// envelope says on_exhausted approval): the goal's budget is Budget from
// now on.
type GoalBudgetExtended struct {
	Budget     Budget `json:"budget"`
	ApprovalID string `json:"approval_id"`
}

// GoalLabeled: the goal's labels are Labels from now on (goal.label; none
// when absent).
type GoalLabeled struct {
	Labels Labels `json:"labels,omitempty"`
}

// GoalPrioritized: the goal's tasks that give no priority take Priority
// from now on (goal.prioritize).
type GoalPrioritized struct {
	Priority int `json:"priority"`
}

// GoalCancelled: the goal was cancelled along with its unfinished tasks.
type GoalCancelled struct {
	Reason string `json:"reason,omitempty"`
}

// TaskCreated starts a task in its first state (pending, ready or waiting).
type TaskCreated struct {
	GoalID      string     `json:"goal_id,omitempty"`
	PlanVersion int        `json:"plan_version,omitempty"`
	Spec        TaskSpec   `json:"spec"`
	DependsOn   []string   `json:"depends_on,omitempty"` // task ids
	State       string     `json:"state"`
	WaitKind    string     `json:"wait_kind,omitempty"` // when State is waiting: approval | timer
	WaitUntil   *time.Time `json:"wait_until,omitempty"`
	Labels      Labels     `json:"labels,omitempty"` // a standalone task's, from task.create
}

// TaskLabeled: the task's labels are Labels from now on (task.label; none
// when absent).
type TaskLabeled struct {
	Labels Labels `json:"labels,omitempty"`
}

// TaskReady: a work item may be dispatched.
type TaskReady struct {
	Reason string `json:"reason"`
}

// TaskWaiting parks a task durably: on an approval, a signal or a time. The
// task keeps it as its Wait.
type TaskWaiting schemas.Wait

// Wait kinds.
const (
	WaitApproval = schemas.WaitApproval
	WaitSignal   = schemas.WaitSignal
	WaitTimer    = schemas.WaitTimer
	WaitBudget   = schemas.WaitBudget
	// WaitDelegation: the task waits on the child goal it delegated to.
	WaitDelegation = schemas.WaitDelegation
)

// AttemptStarted: an executor claimed the task and holds attempt n, with
// the token whose hash is TokenHash; the event's actor is the identity that
// claimed it.
type AttemptStarted struct {
	Attempt         int        `json:"attempt"`
	Executor        string     `json:"executor"`
	ExecutorVersion string     `json:"executor_version,omitempty"`
	OperationKey    string     `json:"operation_key"`
	Deadline        *time.Time `json:"deadline,omitempty"`
	TokenHash       string     `json:"token_hash,omitempty"`
	// Handed: started in a report's commit for the reporter (the handoff).
	Handed bool `json:"handed,omitempty"`
}

// AttemptAbandoned: attempt n lost its lease or was superseded.
type AttemptAbandoned struct {
	Attempt int    `json:"attempt"`
	Reason  string `json:"reason"`
}

// CheckpointSaved: attempt n saved state for a later attempt to resume from.
type CheckpointSaved struct {
	Attempt    int             `json:"attempt"`
	Checkpoint json.RawMessage `json:"checkpoint"`
}

// AttemptSucceeded: attempt n reported a result.
type AttemptSucceeded struct {
	Attempt    int             `json:"attempt"`
	Result     json.RawMessage `json:"result,omitempty"`
	Artifacts  []ArtifactRef   `json:"artifacts,omitempty"`
	ModelSteps []ModelStep     `json:"model_steps,omitempty"`
}

// AttemptFailed: attempt n reported an error (or timed out).
type AttemptFailed struct {
	Attempt    int         `json:"attempt"`
	Error      ErrorInfo   `json:"error"`
	Retryable  bool        `json:"retryable"`
	ModelSteps []ModelStep `json:"model_steps,omitempty"`
}

// BackoffScheduled: the task will be ready again at Until.
type BackoffScheduled struct {
	Attempt int       `json:"attempt"`
	Until   time.Time `json:"until"`
}

// VerificationRecorded: a verifier's outcome for an attempt's result. The
// task keeps it among its Verifications.
type VerificationRecorded schemas.Verification

// ReviewDecided: a person decided a task in needs_review.
type ReviewDecided struct {
	Decision string `json:"decision"`
	Reason   string `json:"reason,omitempty"`
}

// ApproverRegistered: a person may decide approvals in the workspace, with a
// role and a public key, until ExpiresAt when it is set. It replaces an
// earlier registration of the name, and lifts its revocation.
type ApproverRegistered struct {
	Name      string     `json:"name"`
	Role      string     `json:"role"`
	PublicKey string     `json:"public_key"`
	KeyID     string     `json:"key_id"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// ApproverRevoked: the approver decides nothing any more; the key it had is
// named for the record.
type ApproverRevoked struct {
	Name  string `json:"name"`
	KeyID string `json:"key_id"`
}

// MemberAdded: an identity has a role in the workspace. It replaces an
// earlier member of the same name.
type MemberAdded struct {
	Name      string   `json:"name"`
	Role      Role     `json:"role"`
	PublicKey string   `json:"public_key"`
	Queues    []string `json:"queues,omitempty"`
}

// MemberRemoved: the member has no role in the workspace any more.
type MemberRemoved struct {
	Name string `json:"name"`
}

// QueueConfigured: a queue's lease and maximum deliveries.
type QueueConfigured struct {
	Queue      string `json:"queue"`
	LeaseMS    int64  `json:"lease_ms"`
	MaxDeliver int    `json:"max_deliver"`
	MaxRunning int    `json:"max_running,omitempty"` // 0: no limit
	// RateLimit items handed out a RatePeriodMS at most; 0: no limit.
	RateLimit    int   `json:"rate_limit,omitempty"`
	RatePeriodMS int64 `json:"rate_period_ms,omitempty"`
	// Order is schemas.QueueOrderPriority, or "" (fifo).
	Order string `json:"order,omitempty"`
}

// QueuePaused: the queue hands out no job until it is resumed. A queue
// without settings takes the defaults (QueueConfig.DefaultSettings).
type QueuePaused struct {
	Queue string `json:"queue"`
}

// QueueResumed: the paused queue hands out jobs again.
type QueueResumed struct {
	Queue string `json:"queue"`
}

// QueueDeleted: the queue no longer stands in the workspace; its settings
// are gone.
type QueueDeleted struct {
	Queue string `json:"queue"`
}

// ApprovalRequested parks the task on an approval (its gate, or an attempt's
// request): the attempt that asked, if any, is parked.
type ApprovalRequested struct {
	Approval
}

// ApprovalDecided: a registered approver decided an approval, signed; the
// branch it takes follows as its own event.
type ApprovalDecided struct {
	ApprovalID string `json:"approval_id"`
	schemas.SignedResponse
	// Dropped names the approvers whose sign-offs no longer counted when
	// the quorum was made (ApprovalSignedOff.Dropped).
	Dropped []string `json:"dropped,omitempty"`
}

// ApprovalSignedOff: a registered approver approved an approval that needs
// more distinct approvers (its quorum), signed; it stays pending until the
// approval that makes the quorum decides it (ApprovalDecided).
type ApprovalSignedOff struct {
	ApprovalID string `json:"approval_id"`
	schemas.SignedResponse
	// Dropped names the approvers whose earlier sign-offs no longer count:
	// revoked since, or registered again with another key. The approval's
	// SignOffs lose them; the log keeps them.
	Dropped []string `json:"dropped,omitempty"`
}

// ApprovalRefused: a decision was refused; the approval is unchanged. It is
// kept so that every attempt to decide is on record.
type ApprovalRefused struct {
	ApprovalID string `json:"approval_id"`
	Approver   string `json:"approver,omitempty"`
	Response   string `json:"response,omitempty"`
	Reason     string `json:"reason"` // one of the Refused* reasons
	Message    string `json:"message"`
}

// ApprovalExpired: nobody decided an approval in time; its expiry branch
// follows as its own event.
type ApprovalExpired struct {
	ApprovalID string `json:"approval_id"`
	Branch     string `json:"branch"`
}

// SignalReceived: a named signal reached a waiting task. The task keeps it
// as its Signal, and drops the first pending signal of that name, if any
// (the wait took it from there).
type SignalReceived schemas.Signal

// SignalBuffered: a named signal reached a task that was not waiting for
// it. The task keeps it among its PendingSignals until a wait for that name.
type SignalBuffered schemas.Signal

// TaskAccepted is terminal: the task's result is accepted.
type TaskAccepted struct {
	Attempt int `json:"attempt"`
}

// TaskRejected is terminal: verification or review rejected the result.
type TaskRejected struct {
	Reason string `json:"reason"`
}

// TaskFailed is terminal: attempts are spent, an error was not retryable, or
// a dependency did not succeed.
type TaskFailed struct {
	Reason string     `json:"reason"`
	Error  *ErrorInfo `json:"error,omitempty"`
}

// TaskCancelled is terminal.
type TaskCancelled struct {
	Reason string `json:"reason,omitempty"`
}

// TaskRetried takes a failed or rejected task out of its end: State is
// ready for the task retried (task.retry; its retry policy counts the
// attempts after this one's from then on), pending for each task that had
// failed because it did not succeed.
type TaskRetried struct {
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	// Retried is the task that task.retry named, on a dependent.
	Retried string `json:"retried,omitempty"`
}

// GoalReopened: a task of the failed goal was retried (task.retry), so the
// goal is open again.
type GoalReopened struct {
	TaskID string `json:"task_id"`
	Reason string `json:"reason,omitempty"`
}

var eventTypes = map[string]func() Event{
	"workspace.created":             func() Event { return &WorkspaceCreated{} },
	"goal.created":                  func() Event { return &GoalCreated{} },
	"goal.plan_committed":           func() Event { return &PlanCommitted{} },
	"goal.achieved":                 func() Event { return &GoalAchieved{} },
	"goal.failed":                   func() Event { return &GoalFailed{} },
	"goal.cancelled":                func() Event { return &GoalCancelled{} },
	"goal.labeled":                  func() Event { return &GoalLabeled{} },
	"goal.prioritized":              func() Event { return &GoalPrioritized{} },
	"task.labeled":                  func() Event { return &TaskLabeled{} },
	"goal.budget_extended":          func() Event { return &GoalBudgetExtended{} },
	"task.created":                  func() Event { return &TaskCreated{} },
	"task.ready":                    func() Event { return &TaskReady{} },
	"task.waiting":                  func() Event { return &TaskWaiting{} },
	"task.attempt_started":          func() Event { return &AttemptStarted{} },
	"task.attempt_abandoned":        func() Event { return &AttemptAbandoned{} },
	"task.checkpoint_saved":         func() Event { return &CheckpointSaved{} },
	"task.attempt_succeeded":        func() Event { return &AttemptSucceeded{} },
	"task.attempt_failed":           func() Event { return &AttemptFailed{} },
	"task.backoff_scheduled":        func() Event { return &BackoffScheduled{} },
	"task.verification_recorded":    func() Event { return &VerificationRecorded{} },
	"task.review_decided":           func() Event { return &ReviewDecided{} },
	"task.approval_decided":         func() Event { return &ApprovalDecided{} },
	"task.approval_requested":       func() Event { return &ApprovalRequested{} },
	"task.approval_refused":         func() Event { return &ApprovalRefused{} },
	"task.approval_signed_off":      func() Event { return &ApprovalSignedOff{} },
	"task.approval_expired":         func() Event { return &ApprovalExpired{} },
	"workspace.approver_registered": func() Event { return &ApproverRegistered{} },
	"workspace.approver_revoked":    func() Event { return &ApproverRevoked{} },
	"workspace.member_added":        func() Event { return &MemberAdded{} },
	"workspace.member_removed":      func() Event { return &MemberRemoved{} },
	"workspace.queue_configured":    func() Event { return &QueueConfigured{} },
	"workspace.queue_deleted":       func() Event { return &QueueDeleted{} },
	"workspace.queue_paused":        func() Event { return &QueuePaused{} },
	"workspace.queue_resumed":       func() Event { return &QueueResumed{} },
	"task.signal_received":          func() Event { return &SignalReceived{} },
	"task.signal_buffered":          func() Event { return &SignalBuffered{} },
	"task.delegated":                func() Event { return &TaskDelegated{} },
	"task.delegation_ended":         func() Event { return &TaskDelegationEnded{} },
	"task.review_requested":         func() Event { return &TaskReviewRequested{} },
	"goal.shredded":                 func() Event { return &GoalShredded{} },
	"workspace.shredded":            func() Event { return &WorkspaceShredded{} },
	"workspace.configured":          func() Event { return &WorkspaceConfigured{} },
	"task.accepted":                 func() Event { return &TaskAccepted{} },
	"task.rejected":                 func() Event { return &TaskRejected{} },
	"task.failed":                   func() Event { return &TaskFailed{} },
	"task.cancelled":                func() Event { return &TaskCancelled{} },
	"task.retried":                  func() Event { return &TaskRetried{} },
	"goal.reopened":                 func() Event { return &GoalReopened{} },
	"ritual.defined":                func() Event { return &RitualDefined{} },
	"schedule.created":              func() Event { return &ScheduleCreated{} },
	"schedule.paused":               func() Event { return &SchedulePaused{} },
	"schedule.resumed":              func() Event { return &ScheduleResumed{} },
	"schedule.deleted":              func() Event { return &ScheduleDeleted{} },
	"schedule.fired":                func() Event { return &ScheduleFired{} },
	"schedule.skipped":              func() Event { return &ScheduleSkipped{} },
}

// EventTypes returns every event type name, for schemas and golden tests.
func EventTypes() []string {
	return slices.Collect(maps.Keys(eventTypes))
}

// NewEvent returns a zero event of the named type.
func NewEvent(eventType string) (Event, error) {
	f, ok := eventTypes[eventType]
	if !ok {
		return nil, fmt.Errorf("domain: unknown event type %q", eventType)
	}
	return f(), nil
}

// DecodeEvent decodes an event's data by its type name. An unknown type is an
// error: a reader must stop loudly rather than skip history.
func DecodeEvent(eventType string, data []byte) (Event, error) {
	e, err := NewEvent(eventType)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, e); err != nil {
		return nil, fmt.Errorf("domain: decode %s: %w", eventType, err)
	}
	return e, nil
}
