package schemas

import (
	"encoding/json"
	"time"
)

// Command is the body of a command: CommandName is its wire name, the last
// tokens of its subject (dwr.cmd.<workspace>.<name>), and
// commands/<name>.json its schema. Every body of this file is one.
type Command interface {
	CommandName() string
}

// CreateWorkspace creates a workspace named Name.
type CreateWorkspace struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

// CreateGoal creates a goal, with the id GoalID when it is set.
type CreateGoal struct {
	GoalID          string   `json:"goal_id,omitempty"`
	Title           string   `json:"title"`
	Description     string   `json:"description,omitempty"`
	SuccessCriteria []string `json:"success_criteria,omitempty"`
	Envelope        Envelope `json:"envelope"`
	// Labels are the goal's labels: names and values that goal.list
	// selects by (Labels).
	Labels Labels `json:"labels,omitempty"`
	// Priority is the priority of the goal's tasks that give none of
	// their own (TaskSpec.Priority); 0: DefaultPriority.
	Priority int `json:"priority,omitempty"`
	// Key is the caller's own name for the goal (an order id): at most
	// one open goal of a workspace holds it. IfOpen says what a create
	// does while one does: GoalIfOpenRefuse (the default: conflict) or
	// GoalIfOpenUse (answer that goal, creating nothing).
	Key    string `json:"key,omitempty"`
	IfOpen string `json:"if_open,omitempty"`
	// Tasks, when set, are the goal's first plan, committed with the goal
	// (as a plan.submit would be, in the same record).
	Tasks []TaskSpec `json:"tasks,omitempty"`
}

// LabelGoal changes a goal's labels: it sets those of Set (a name's value
// replaced) and removes the names of Remove, in any state of the goal.
type LabelGoal struct {
	GoalID string   `json:"goal_id"`
	Set    Labels   `json:"set,omitempty"`
	Remove []string `json:"remove,omitempty"`
}

// PrioritizeGoal sets a goal's priority (CreateGoal.Priority): its tasks
// that give none of their own take their turn by it.
type PrioritizeGoal struct {
	GoalID   string `json:"goal_id"`
	Priority int    `json:"priority"`
}

// CancelGoal cancels a goal and every unfinished task of its plan.
type CancelGoal struct {
	GoalID string `json:"goal_id"`
	Reason string `json:"reason,omitempty"`
}

// SubmitPlan commits a new version of a goal's plan.
type SubmitPlan struct {
	GoalID string     `json:"goal_id"`
	Tasks  []TaskSpec `json:"tasks"`
}

// CreateTask creates a standalone task (not part of a plan), with the id
// TaskID when it is set.
type CreateTask struct {
	TaskID string   `json:"task_id,omitempty"`
	Spec   TaskSpec `json:"spec"`
	// Labels are the task's labels, which task.list selects by.
	Labels Labels `json:"labels,omitempty"`
}

// LabelTask changes a task's labels, as LabelGoal does a goal's.
type LabelTask struct {
	TaskID string   `json:"task_id"`
	Set    Labels   `json:"set,omitempty"`
	Remove []string `json:"remove,omitempty"`
}

// CancelTask cancels a task that has not ended.
type CancelTask struct {
	TaskID string `json:"task_id"`
	Reason string `json:"reason,omitempty"`
}

// RetryTask gives a failed or rejected task a new attempt, with its retry
// policy afresh: the task is ready again, the tasks that failed because it
// did not succeed wait for it again (pending), and its goal, when it had
// failed, is open again.
type RetryTask struct {
	TaskID string `json:"task_id"`
	Reason string `json:"reason,omitempty"`
}

// ClaimTask starts the next attempt of a ready task for an executor. When
// the work item was redelivered because attempt Supersedes lost its lease,
// that attempt is recorded as abandoned first. The reply's result carries
// the attempt's token and, unless OmitTask is set and the claim superseded
// nothing, the task as it stands after the claim.
type ClaimTask struct {
	TaskID          string `json:"task_id"`
	Executor        string `json:"executor"`
	ExecutorVersion string `json:"executor_version,omitempty"`
	Supersedes      int    `json:"supersedes,omitempty"`
	// OmitTask says that the claimer holds the task already (its work item
	// carried it: WorkItem.Task), so the reply need not carry it. A claim
	// that supersedes an attempt is answered with the task all the same:
	// the item's is stale then.
	OmitTask bool `json:"omit_task,omitempty"`
}

// SaveCheckpoint saves the current attempt's checkpoint.
type SaveCheckpoint struct {
	TaskID     string          `json:"task_id"`
	Attempt    int             `json:"attempt"`
	Token      string          `json:"token"` // the attempt's token, as its claim returned it
	Checkpoint json.RawMessage `json:"checkpoint"`
}

// ReportSuccess reports the current attempt's result. It carries either
// the attempt's Token (the attempt was claimed) or a Claim (the lazy claim:
// the job ran without claiming, and this report starts and ends attempt
// Attempt in one commit), never both.
type ReportSuccess struct {
	TaskID     string          `json:"task_id"`
	Attempt    int             `json:"attempt"`
	Token      string          `json:"token,omitempty"`
	Claim      *ReportClaim    `json:"claim,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`
	Artifacts  []ArtifactRef   `json:"artifacts,omitempty"`
	ModelSteps []ModelStep     `json:"model_steps,omitempty"`
	// Next asks for the handoff (see Handoff). NextTokenHash is the hash
	// of the token the service derives for the attempt it may hand: the
	// service sets it; it is never read from, or written to, the wire.
	Next          bool   `json:"next,omitempty"`
	NextTokenHash string `json:"-"`
}

// ReportFailure reports the current attempt's error. Like ReportSuccess,
// it carries either the attempt's Token or a Claim, never both.
type ReportFailure struct {
	TaskID    string       `json:"task_id"`
	Attempt   int          `json:"attempt"`
	Token     string       `json:"token,omitempty"`
	Claim     *ReportClaim `json:"claim,omitempty"`
	Error     ErrorInfo    `json:"error"`
	Retryable bool         `json:"retryable"`
	// ModelSteps record the model calls the failed attempt made: they
	// count against the goal's budget.
	ModelSteps []ModelStep `json:"model_steps,omitempty"`
	// Next asks for the handoff (see Handoff). NextTokenHash is the hash
	// of the token the service derives for the attempt it may hand: the
	// service sets it; it is never read from, or written to, the wire.
	Next          bool   `json:"next,omitempty"`
	NextTokenHash string `json:"-"`
}

// ReportClaim is the claim a report carries when its job ran without
// claiming first (the lazy claim of a short job): the report then starts
// attempt Attempt and ends it in one commit, as task.claim followed by the
// report would, but only when the task is still ready for exactly that
// attempt and the sender may claim it (an executor of the task's queue).
// Otherwise the report is refused (conflict on /attempt) and nothing is
// recorded. The attempt is claimed by the sender, with the operation key,
// the per-attempt deadline and a token hash as task.claim would record
// them; the token itself is never handed out, since the attempt has ended.
type ReportClaim struct {
	Executor        string `json:"executor"`
	ExecutorVersion string `json:"executor_version,omitempty"`

	// TokenHash is the hash of the token the service derives for the
	// report, as it would for a claim with the report's command id. The
	// service sets it; it is never read from, or written to, the wire.
	TokenHash string `json:"-"`
}

// Heartbeat says that the current attempt is alive. It changes nothing and
// is never recorded: the service keeps the moment in memory, so that a
// claim superseding the attempt is taken only once its lease has lapsed.
type Heartbeat struct {
	TaskID  string `json:"task_id"`
	Attempt int    `json:"attempt"`
	Token   string `json:"token"`
}

// RecordVerification records a verifier's outcome for a verifying task.
type RecordVerification struct {
	TaskID string `json:"task_id"`
	Verdict
}

// ReviewTask decides a task in needs_review.
type ReviewTask struct {
	TaskID   string `json:"task_id"`
	Decision string `json:"decision"`
	Reason   string `json:"reason,omitempty"`
}

// RegisterApprover registers a person who may decide approvals in the
// workspace: their name, the role that authorizes them, their Ed25519 public
// key, and optionally when the key expires. Registering a name again replaces
// its key, role and expiry (and lifts a revocation); with the same ones it
// changes nothing.
type RegisterApprover struct {
	Name      string     `json:"name"`
	Role      string     `json:"role"`
	PublicKey string     `json:"public_key"`           // standard base64 of the 32-byte key
	ExpiresAt *time.Time `json:"expires_at,omitempty"` // after it, the key decides nothing; nil: no expiry
}

// RevokeApprover revokes a registered approver: from then on, every decision
// in their name is refused (reason revoked) until the name is registered
// again. The registration stays on record, marked revoked.
type RevokeApprover struct {
	Name string `json:"name"`
}

// AddMember gives an identity a role in the workspace: a name, the role, the
// NATS user nkey it connects with and, for an executor, the queues it works.
// Adding a name again with the same role, key and queues changes nothing;
// with others it replaces the member (a key rotation, a change of role or
// queues): there is no need to remove it first.
type AddMember struct {
	Name      string   `json:"name"`
	Role      Role     `json:"role"`
	PublicKey string   `json:"public_key"`       // a NATS user nkey: "U" and 55 more base32 characters
	Queues    []string `json:"queues,omitempty"` // an executor's queues, and only an executor's
}

// RemoveMember removes a member from the workspace; its key no longer
// reaches the workspace.
type RemoveMember struct {
	Name string `json:"name"`
}

// ConfigureQueue sets a queue's lease (how long an executor holds a work
// item before it is delivered again) and how many times a work item is
// delivered before it is quarantined. With IfUnset, a queue that is already
// configured keeps its settings. The reply's result carries the settings in
// effect (CommandResult.Queue, LeaseMS, MaxDeliver).
type ConfigureQueue struct {
	Queue      string `json:"queue"`
	LeaseMS    int64  `json:"lease_ms"`
	MaxDeliver int    `json:"max_deliver"`
	// MaxRunning is how many of the queue's jobs may run at once, across
	// all its executors: N > 0 sets it, -1 removes the limit, 0 keeps the
	// queue's as it is (QueueConfig.MaxRunning).
	MaxRunning int `json:"max_running,omitempty"`
	// RateLimit is how many of the queue's work items may be handed out
	// in any RatePeriodMS milliseconds (1000 when 0): N > 0 sets it, -1
	// removes the limit, 0 keeps the queue's as it is
	// (QueueConfig.RateLimit).
	RateLimit    int   `json:"rate_limit,omitempty"`
	RatePeriodMS int64 `json:"rate_period_ms,omitempty"`
	// Order is the order the queue hands out its items in: QueueOrderFIFO
	// or QueueOrderPriority; "" keeps the queue's as it is
	// (QueueConfig.Order).
	Order   string `json:"order,omitempty"`
	IfUnset bool   `json:"if_unset,omitempty"`
}

// DeleteQueue removes a queue that no task that has not ended is given:
// its consumer and its settings, so that it no longer counts against its
// workspace's bound on queues.
type DeleteQueue struct {
	Queue string `json:"queue"`
	// ScannedAt is the log sequence up to which the service found no such
	// task in its views; a task given the queue in a later record refuses
	// the command. The service sets it; it is never read from, or written
	// to, the wire.
	ScannedAt uint64 `json:"-"`
}

// PauseQueue stops a queue's consumer handing out jobs until the queue is
// resumed; the jobs already handed out run on.
type PauseQueue struct {
	Queue string `json:"queue"`
}

// ResumeQueue lets a paused queue's consumer hand out jobs again.
type ResumeQueue struct {
	Queue string `json:"queue"`
}

// RequestApproval parks the current attempt's task on a person's decision
// about a concrete action. The task resumes (as a new attempt, handed the
// decision) or ends, as the request's branches say.
type RequestApproval struct {
	TaskID  string `json:"task_id"`
	Attempt int    `json:"attempt"`
	Token   string `json:"token"`
	ApprovalRequest
}

// DecideApproval decides an approval: signed by a registered approver over
// the approval id, the response and the action digest.
type DecideApproval struct {
	ApprovalID   string `json:"approval_id"`
	Approver     string `json:"approver"`
	Response     string `json:"response"`
	ActionDigest string `json:"action_digest"`
	Comment      string `json:"comment,omitempty"`
	Signature    string `json:"signature"` // standard base64 of the Ed25519 signature of the decision message
}

// WaitTask parks the current attempt's task on a signal (Kind WaitSignal)
// or until a time (Kind WaitTimer).
type WaitTask struct {
	TaskID  string     `json:"task_id"`
	Attempt int        `json:"attempt"`
	Token   string     `json:"token"`
	Kind    string     `json:"kind"`
	Signal  string     `json:"signal,omitempty"`
	Until   *time.Time `json:"until,omitempty"`
}

// DelegateTask hands work of the running attempt on to a child goal,
// linked to its task: a goal with its plan (Goal, whose Tasks are
// required) or the goal a ritual renders (Ritual), one of the two. The
// child goal is created and the attempt parked in one commit; the task
// waits until the child goal ends. Achieved, the task is ready again and
// its next attempt is handed the children's accepted results; failed or
// cancelled, the task does what OnFailure says. Ending the task (a cancel,
// its deadline) cancels the child goal, and so down the tree.
type DelegateTask struct {
	TaskID  string `json:"task_id"`
	Attempt int    `json:"attempt"`
	Token   string `json:"token"`
	// Key names the delegation within its task: an attempt asks for its
	// outcome by it. A task delegates under a key once.
	Key    string      `json:"key"`
	Goal   *CreateGoal `json:"goal,omitempty"`
	Ritual *RunRitual  `json:"ritual,omitempty"`
	// OnFailure is what the task does when the child goal fails or is
	// cancelled: DelegationFail (the default), DelegationReview or
	// DelegationResume.
	OnFailure string `json:"on_failure,omitempty"`
}

// ShredGoal destroys the data key of a goal whose envelope says privacy
// key goal: its payloads, and those of the goals it delegated to, can never
// be read again (everywhere, the log included); an open goal is cancelled.
type ShredGoal struct {
	GoalID string `json:"goal_id"`
	Reason string `json:"reason,omitempty"`
}

// ConfigureWorkspace sets a workspace's retention: how long the payloads of
// an ended goal are kept (RetainEnded; 0: for ever) before the service
// shreds them.
type ConfigureWorkspace struct {
	RetainEnded Duration `json:"retain_ended"`
}

// ShredWorkspace destroys every data key of the workspace: the payloads of
// all its work can never be read again, and it takes no new ones.
type ShredWorkspace struct {
	Reason string `json:"reason,omitempty"`
}

// SendSignal delivers a named signal to a task waiting on it.
type SendSignal struct {
	TaskID  string          `json:"task_id"`
	Name    string          `json:"name"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// QuarantineTask fails a task whose work item could not be processed: it was
// delivered the most times allowed without an executor finishing it. Only
// the service's writer sends it.
type QuarantineTask struct {
	TaskID string `json:"task_id"`
	Reason string `json:"reason,omitempty"`
}

// FireTimer is sent by the service's timers when a moment it waits for has
// come: a backoff ended, an attempt's deadline passed, or a wait's time came.
// Only the service's writer sends it.
type FireTimer struct {
	TaskID string `json:"task_id,omitempty"`
	GoalID string `json:"goal_id,omitempty"` // for kind goal_deadline
	// Schedule is, for kind schedule, the schedule's name.
	Schedule string    `json:"schedule,omitempty"`
	Kind     string    `json:"kind"`
	Attempt  int       `json:"attempt,omitempty"`
	Due      time.Time `json:"due"`
}

// CommandName returns the command's wire name.
func (CreateWorkspace) CommandName() string { return "workspace.create" }

// CommandName returns the command's wire name.
func (CreateGoal) CommandName() string { return "goal.create" }

// CommandName returns the command's wire name.
func (CancelGoal) CommandName() string { return "goal.cancel" }

// CommandName returns the command's wire name.
func (LabelGoal) CommandName() string { return "goal.label" }

// CommandName returns the command's wire name.
func (PrioritizeGoal) CommandName() string { return "goal.prioritize" }

// CommandName returns the command's wire name.
func (LabelTask) CommandName() string { return "task.label" }

// CommandName returns the command's wire name.
func (SubmitPlan) CommandName() string { return "plan.submit" }

// CommandName returns the command's wire name.
func (CreateTask) CommandName() string { return "task.create" }

// CommandName returns the command's wire name.
func (CancelTask) CommandName() string { return "task.cancel" }

// CommandName returns the command's wire name.
func (RetryTask) CommandName() string { return "task.retry" }

// CommandName returns the command's wire name.
func (ClaimTask) CommandName() string { return "task.claim" }

// CommandName returns the command's wire name.
func (SaveCheckpoint) CommandName() string { return "task.checkpoint" }

// CommandName returns the command's wire name.
func (ReportSuccess) CommandName() string { return "task.succeed" }

// CommandName returns the command's wire name.
func (ReportFailure) CommandName() string { return "task.fail" }

// CommandName returns the command's wire name.
func (Heartbeat) CommandName() string { return "task.heartbeat" }

// CommandName returns the command's wire name.
func (RecordVerification) CommandName() string { return "task.verify" }

// CommandName returns the command's wire name.
func (ReviewTask) CommandName() string { return "task.review" }

// CommandName returns the command's wire name.
func (DecideApproval) CommandName() string { return "approval.decide" }

// CommandName returns the command's wire name.
func (RegisterApprover) CommandName() string { return "approver.register" }

// CommandName returns the command's wire name.
func (RevokeApprover) CommandName() string { return "approver.revoke" }

// CommandName returns the command's wire name.
func (AddMember) CommandName() string { return "member.add" }

// CommandName returns the command's wire name.
func (RemoveMember) CommandName() string { return "member.remove" }

// CommandName returns the command's wire name.
func (ConfigureQueue) CommandName() string { return "queue.configure" }

// CommandName returns the command's wire name.
func (DeleteQueue) CommandName() string { return "queue.delete" }

// CommandName returns the command's wire name.
func (PauseQueue) CommandName() string { return "queue.pause" }

// CommandName returns the command's wire name.
func (ResumeQueue) CommandName() string { return "queue.resume" }

// CommandName returns the command's wire name.
func (RequestApproval) CommandName() string { return "task.request_approval" }

// CommandName returns the command's wire name.
func (WaitTask) CommandName() string { return "task.wait" }

// CommandName returns the command's wire name.
func (DelegateTask) CommandName() string { return "task.delegate" }

// CommandName returns the command's wire name.
func (ShredGoal) CommandName() string { return "goal.shred" }

// CommandName returns the command's wire name.
func (ConfigureWorkspace) CommandName() string { return "workspace.configure" }

// CommandName returns the command's wire name.
func (ShredWorkspace) CommandName() string { return "workspace.shred" }

// CommandName returns the command's wire name.
func (SendSignal) CommandName() string { return "task.signal" }

// CommandName returns the command's wire name.
func (FireTimer) CommandName() string { return "timer.fire" }

// CommandName returns the command's wire name.
func (QuarantineTask) CommandName() string { return "task.quarantine" }
