package domain

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dwr-run/dwr/schemas"
)

// Command is a request to change one aggregate. CommandName is its wire name,
// the last tokens of its subject (dwr.cmd.<workspace>.<name>).
type Command = schemas.Command

// Meta is what travels with every command: its id, the workspace it
// addresses, who sent it, and the time the writer decides it at.
type Meta struct {
	CommandID     string
	Workspace     string
	Actor         string
	CorrelationID string
	Now           time.Time
	// Authenticated is true when Actor is an identity the NATS server
	// authenticated (the member whose key connected), not a name the client
	// gave. Decisions are then bound to it: an authenticated identity
	// decides an approval only as itself (approval.decide is refused,
	// reason not_approver, when the approver it names is not Actor). When
	// false (the insecure-open mode, where anyone who reaches NATS is
	// trusted) Actor is only what the client said, and nothing is bound to
	// it: the approver's signature alone decides.
	Authenticated bool
	// Executor is true when the sender is an executor member, confined to
	// Queues: its commands are refused (forbidden) for a task, or a queue,
	// not on one of them.
	Executor bool
	Queues   []string
	// Body names the command as sent: "<name>:<digest of its body>". A
	// command id sent again with another body is refused (the writer
	// compares it with the first's); empty for the service's own commands.
	Body string
}

// Key returns the command's idempotency key: CommandKey of its actor and id.
func (m Meta) Key() string { return CommandKey(m.Actor, m.CommandID) }

// CommandKey returns the idempotency key of command id sent by actor. A
// command id is unique per sender: a retry by the same identity is answered
// with the first outcome, while the same id from another identity is another
// command, which is decided on its own — an id one identity used can never
// answer for, or block, another's. A command without an actor (a request
// that carries no identity) keeps its bare id; so does an empty id (none).
// SplitCommandKey returns the actor and the id of a key CommandKey made
// (no actor for a key without one).
func SplitCommandKey(key string) (actor, id string) {
	n, rest, ok := strings.Cut(key, ":")
	size, err := strconv.Atoi(n)
	if !ok || err != nil || size <= 0 || size >= len(rest) || rest[size] != ':' {
		return "", key
	}
	return rest[:size], rest[size+1:]
}

// CommandKey returns the idempotency key of command id sent by actor.
func CommandKey(actor, id string) string {
	if actor == "" || id == "" {
		return id
	}
	return strconv.Itoa(len(actor)) + ":" + actor + ":" + id
}

// The commands' bodies are wire data, defined once in schemas; ClaimTask
// adds what only the service sets.
type (
	// CreateWorkspace creates a workspace named Name.
	CreateWorkspace = schemas.CreateWorkspace
	// CreateGoal creates a goal with the id the edge assigned.
	CreateGoal = schemas.CreateGoal
	// CancelGoal cancels a goal and every unfinished task of its plan.
	CancelGoal = schemas.CancelGoal
	// LabelGoal sets and removes a goal's labels.
	LabelGoal = schemas.LabelGoal
	// PrioritizeGoal sets a goal's priority.
	PrioritizeGoal = schemas.PrioritizeGoal
	// LabelTask sets and removes a task's labels.
	LabelTask = schemas.LabelTask
	// Labels are a goal's names and values.
	Labels = schemas.Labels
	// SubmitPlan commits a new version of a goal's plan.
	SubmitPlan = schemas.SubmitPlan
	// CreateTask creates a standalone task (not part of a plan).
	CreateTask = schemas.CreateTask
	// CancelTask cancels a task that has not ended.
	CancelTask = schemas.CancelTask
	// RetryTask gives a failed or rejected task a new attempt.
	RetryTask = schemas.RetryTask
	// SaveCheckpoint saves the current attempt's checkpoint.
	SaveCheckpoint = schemas.SaveCheckpoint
	// ReportSuccess reports the current attempt's result.
	ReportSuccess = schemas.ReportSuccess
	// ReportFailure reports the current attempt's error.
	ReportFailure = schemas.ReportFailure
	// ReportClaim is the claim a report carries when its job ran without
	// claiming first: the report starts and ends the attempt in one commit.
	ReportClaim = schemas.ReportClaim
	// Heartbeat says that the current attempt is alive; it is never
	// recorded.
	Heartbeat = schemas.Heartbeat
	// RecordVerification records a verifier's outcome for a verifying task.
	RecordVerification = schemas.RecordVerification
	// Verdict is what a verifier says of an attempt's result.
	Verdict = schemas.Verdict
	// ReviewTask decides a task in needs_review.
	ReviewTask = schemas.ReviewTask
	// RegisterApprover registers a person who may decide approvals in the
	// workspace.
	RegisterApprover = schemas.RegisterApprover
	// RevokeApprover revokes a registered approver.
	RevokeApprover = schemas.RevokeApprover
	// AddMember gives an identity a role in the workspace.
	AddMember = schemas.AddMember
	// RemoveMember removes a member from the workspace.
	RemoveMember = schemas.RemoveMember
	// ConfigureQueue sets a queue's lease and maximum deliveries.
	ConfigureQueue = schemas.ConfigureQueue
	// DeleteQueue removes a queue no open task is given.
	DeleteQueue = schemas.DeleteQueue
	// PauseQueue stops a queue handing out jobs until it is resumed.
	PauseQueue = schemas.PauseQueue
	// ResumeQueue lets a paused queue hand out jobs again.
	ResumeQueue = schemas.ResumeQueue
	// RequestApproval parks the current attempt's task on a person's
	// decision about a concrete action.
	RequestApproval = schemas.RequestApproval
	// DecideApproval decides an approval, signed by a registered approver
	// over DecisionMessage.
	DecideApproval = schemas.DecideApproval
	// WaitTask parks the current attempt's task on a signal or until a time.
	WaitTask = schemas.WaitTask
	// SendSignal delivers a named signal to a task waiting on it.
	SendSignal = schemas.SendSignal
	// DelegateTask hands work of the running attempt on to a child goal
	// linked to its task.
	DelegateTask = schemas.DelegateTask
	// ShredGoal records that a goal's data key was destroyed.
	ShredGoal = schemas.ShredGoal
	// ShredWorkspace records that a workspace's data keys were destroyed.
	ShredWorkspace = schemas.ShredWorkspace
	// ConfigureWorkspace sets a workspace's retention.
	ConfigureWorkspace = schemas.ConfigureWorkspace
	// QuarantineTask fails a task whose work item could not be processed.
	QuarantineTask = schemas.QuarantineTask
	// DefineRitual stores the next version of a ritual.
	DefineRitual = schemas.DefineRitual
	// RunRitual creates a goal and its first plan from a ritual's version.
	RunRitual = schemas.RunRitual
	// CreateSchedule creates a schedule that starts a goal at each slot.
	CreateSchedule = schemas.CreateSchedule
	// PauseSchedule stops a schedule's firing until it is resumed.
	PauseSchedule = schemas.PauseSchedule
	// ResumeSchedule lets a paused schedule fire again from its next slot.
	ResumeSchedule = schemas.ResumeSchedule
	// DeleteSchedule ends a schedule.
	DeleteSchedule = schemas.DeleteSchedule
	// FireTimer is sent by the writer's timers when a moment it waits for
	// has come: a backoff ended, an attempt's deadline passed, or a wait's
	// time came.
	FireTimer = schemas.FireTimer
)

// ClaimBody is the body of task.claim, as it travels.
type ClaimBody = schemas.ClaimTask

// ClaimTask starts the next attempt of a ready task for an executor, held
// by the identity that sends it (Meta.Actor) and by the token whose hash is
// TokenHash. When the work item was redelivered because attempt Supersedes
// lost its lease, that attempt is recorded as abandoned first — but only
// from SupersedeAfter on, the moment its lease lapsed.
type ClaimTask struct {
	ClaimBody

	// TokenHash is TokenHash of the token the service hands the claimer.
	// The service sets it; it is never read from the wire.
	TokenHash string `json:"-"`
	// SupersedeAfter is when attempt Supersedes counts as lapsed: its last
	// sign of life (its claim, a checkpoint, a heartbeat) plus its queue's
	// lease. The service sets it, since only it knows both; a claim that
	// supersedes without it is refused.
	SupersedeAfter time.Time `json:"-"`
}

// Timer kinds.
const (
	TimerBackoff = "backoff"
	TimerAttempt = "attempt_timeout"
	TimerWait    = "wait"
	TimerGoal    = "goal_deadline"
	TimerTask    = "task_deadline"
	// TimerApproval is an approval's expiry; FireTimer.Attempt holds the
	// approval's number within its task.
	TimerApproval = "approval_expiry"
	// TimerLease is the lease of a handed attempt (schemas.Handoff),
	// which no work item redelivers: FireTimer.Attempt is the attempt,
	// Due its last sign of life plus its queue's lease.
	TimerLease = "attempt_lease"
)

var commandTypes = map[string]func() Command{
	"workspace.create":      func() Command { return &CreateWorkspace{} },
	"goal.create":           func() Command { return &CreateGoal{} },
	"goal.cancel":           func() Command { return &CancelGoal{} },
	"goal.label":            func() Command { return &LabelGoal{} },
	"goal.prioritize":       func() Command { return &PrioritizeGoal{} },
	"task.label":            func() Command { return &LabelTask{} },
	"plan.submit":           func() Command { return &SubmitPlan{} },
	"task.create":           func() Command { return &CreateTask{} },
	"task.cancel":           func() Command { return &CancelTask{} },
	"task.retry":            func() Command { return &RetryTask{} },
	"task.claim":            func() Command { return &ClaimTask{} },
	"task.checkpoint":       func() Command { return &SaveCheckpoint{} },
	"task.succeed":          func() Command { return &ReportSuccess{} },
	"task.fail":             func() Command { return &ReportFailure{} },
	"task.heartbeat":        func() Command { return &Heartbeat{} },
	"task.verify":           func() Command { return &RecordVerification{} },
	"task.review":           func() Command { return &ReviewTask{} },
	"approval.decide":       func() Command { return &DecideApproval{} },
	"approver.register":     func() Command { return &RegisterApprover{} },
	"approver.revoke":       func() Command { return &RevokeApprover{} },
	"member.add":            func() Command { return &AddMember{} },
	"member.remove":         func() Command { return &RemoveMember{} },
	"queue.configure":       func() Command { return &ConfigureQueue{} },
	"queue.delete":          func() Command { return &DeleteQueue{} },
	"queue.pause":           func() Command { return &PauseQueue{} },
	"queue.resume":          func() Command { return &ResumeQueue{} },
	"task.request_approval": func() Command { return &RequestApproval{} },
	"task.wait":             func() Command { return &WaitTask{} },
	"task.signal":           func() Command { return &SendSignal{} },
	"task.delegate":         func() Command { return &DelegateTask{} },
	"goal.shred":            func() Command { return &ShredGoal{} },
	"workspace.shred":       func() Command { return &ShredWorkspace{} },
	"workspace.configure":   func() Command { return &ConfigureWorkspace{} },
	"timer.fire":            func() Command { return &FireTimer{} },
	"task.quarantine":       func() Command { return &QuarantineTask{} },
	"ritual.define":         func() Command { return &DefineRitual{} },
	"ritual.run":            func() Command { return &RunRitual{} },
	"schedule.create":       func() Command { return &CreateSchedule{} },
	"schedule.pause":        func() Command { return &PauseSchedule{} },
	"schedule.resume":       func() Command { return &ResumeSchedule{} },
	"schedule.delete":       func() Command { return &DeleteSchedule{} },
}

// CommandNames returns every command's wire name.
func CommandNames() []string {
	return slices.Collect(maps.Keys(commandTypes))
}

// NewCommand returns a pointer to a zero command of the named type, ready to
// decode into, or false when the name is unknown.
func NewCommand(name string) (Command, bool) {
	f, ok := commandTypes[name]
	if !ok {
		return nil, false
	}
	return f(), true
}
