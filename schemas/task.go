package schemas

import (
	"encoding/json"
	"maps"
	"slices"
	"time"
)

// Task is the state of a task with its attempts, as task.get and a claim's
// reply carry it (common.json#/$defs/Task).
type Task struct {
	ID          string `json:"id"`
	Workspace   string `json:"workspace"`
	GoalID      string `json:"goal_id,omitempty"`
	PlanVersion int    `json:"plan_version,omitempty"`
	Key         string `json:"key,omitempty"`
	// CreatedBy is the identity whose command created the task: task.create,
	// the plan that holds it (goal.plan, goal.revise, ritual.start, a
	// delegation) — or one of the service's own names (a schedule's slot).
	CreatedBy string `json:"created_by,omitempty"`
	// Labels are the task's names and values (task.create, task.label)
	// that task.list selects by.
	Labels        Labels          `json:"labels,omitempty"`
	Spec          TaskSpec        `json:"spec"`
	DependsOn     []string        `json:"depends_on,omitempty"`
	State         string          `json:"state"`
	Wait          *Wait           `json:"wait,omitempty"`
	Attempts      []Attempt       `json:"attempts,omitempty"`
	Checkpoint    json.RawMessage `json:"checkpoint,omitempty"`
	BackoffUntil  *time.Time      `json:"backoff_until,omitempty"`
	Verifications []Verification  `json:"verifications,omitempty"`
	Approved      bool            `json:"approved,omitempty"` // the gate was passed
	Approvals     []Approval      `json:"approvals,omitempty"`
	Signal        *Signal         `json:"signal,omitempty"` // the last signal received, for the attempt it resumes
	// PendingSignals are signals sent before the task waited for them,
	// oldest first: its next wait for one of their names takes the first.
	PendingSignals []Signal `json:"pending_signals,omitempty"`
	// Delegations are the child goals the task's attempts delegated work
	// to (task.delegate), oldest first.
	Delegations []Delegation `json:"delegations,omitempty"`
	// RetriedAfter is the number of attempts the task had when it was last
	// retried (task.retry): its retry policy counts only the attempts
	// after them.
	RetriedAfter int `json:"retried_after,omitempty"`
	// Earlier tallies the attempts the task no longer lists: Attempts
	// holds its last MaxListedAttempts (nil until it has had more).
	Earlier *EarlierAttempts `json:"earlier_attempts,omitempty"`
	Reason  string           `json:"reason,omitempty"`
	Error   *ErrorInfo       `json:"error,omitempty"`
	Versioned
	// Omitted names, by their JSON pointers, the parts of the task's
	// history a reply left out to stay within its bound (FitTask): the
	// events query reads them. Empty in every task kept whole.
	Omitted []string `json:"omitted,omitempty"`
}

// Delegation is a child goal an attempt of a task started (task.delegate),
// as the task keeps it: the task waits until the goal ends.
type Delegation struct {
	// Key names the delegation within its task: an attempt resumed after
	// it asks for it by this key (the SDK's Job.Delegate).
	Key       string `json:"key"`
	GoalID    string `json:"goal_id"`
	Attempt   int    `json:"attempt"`    // the attempt that delegated
	OnFailure string `json:"on_failure"` // fail | review | resume
	// State is the child goal's: open until it ends, then achieved,
	// failed or cancelled.
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"` // why the child goal failed or was cancelled
	// Tasks are the child goal's plan when it ended: the tasks whose
	// accepted results the resumed attempt is handed.
	Tasks []PlanTask `json:"tasks,omitempty"`
}

// Attempt is one execution of a task (a WorkExecution).
type Attempt struct {
	N               int             `json:"n"`
	Executor        string          `json:"executor"`
	ExecutorVersion string          `json:"executor_version,omitempty"`
	OperationKey    string          `json:"operation_key"`
	State           string          `json:"state"` // running | succeeded | failed | abandoned | parked | cancelled
	StartedAt       time.Time       `json:"started_at"`
	EndedAt         *time.Time      `json:"ended_at,omitempty"`
	Deadline        *time.Time      `json:"deadline,omitempty"`
	Result          json.RawMessage `json:"result,omitempty"`
	Artifacts       []ArtifactRef   `json:"artifacts,omitempty"`
	ModelSteps      []ModelStep     `json:"model_steps,omitempty"`
	Error           *ErrorInfo      `json:"error,omitempty"`
	Retryable       bool            `json:"retryable,omitempty"`
	Reason          string          `json:"reason,omitempty"` // why it ended, e.g. lease_lost
	// TokenHash is the hex SHA-256 of the attempt's token: the token itself
	// is never kept. Empty for an attempt claimed before attempts had
	// tokens, which no command can then come from.
	TokenHash string `json:"token_hash,omitempty"`
	// ClaimedBy is the identity that claimed the attempt (the claim's
	// actor): the only one its later commands may come from.
	ClaimedBy string `json:"claimed_by,omitempty"`
	// Handed says that the service started the attempt for its claimer in
	// the reply to a report (the handoff): no work item was published for
	// it, so the service itself abandons it when its lease lapses.
	Handed bool `json:"handed,omitempty"`
}

// Wait is what a waiting task waits on (common.json#/$defs/TaskWaiting).
type Wait struct {
	Kind   string     `json:"kind"` // approval | signal | timer
	Signal string     `json:"signal,omitempty"`
	Until  *time.Time `json:"until,omitempty"`
	// ApprovalID is the approval waited on; it is set by task.approval_requested.
	ApprovalID string `json:"approval_id,omitempty"`
	// GoalID is, for kind delegation, the child goal waited on; it is set
	// by task.delegated.
	GoalID string `json:"goal_id,omitempty"`
}

// Verification is a verifier's recorded outcome for an attempt's result,
// under its replay-safe identity (common.json#/$defs/VerificationRecorded).
type Verification struct {
	VerificationID string `json:"verification_id"`
	Verdict
}

// Verdict is a verifier's judgement of an attempt's result: what a
// task.verify command says (RecordVerification) and its Verification keeps.
type Verdict struct {
	Attempt         int             `json:"attempt"`
	Outcome         string          `json:"outcome"` // PASS | FAIL | INCONCLUSIVE
	Evidence        json.RawMessage `json:"evidence,omitempty"`
	EvidenceRefs    []ArtifactRef   `json:"evidence_refs,omitempty"` // bulky evidence, by content hash
	Verifier        string          `json:"verifier"`
	VerifierVersion string          `json:"verifier_version,omitempty"`
	ResultDigest    string          `json:"result_digest"`
}

// Signal is a named signal a task received, with its payload.
type Signal struct {
	Name    string          `json:"name"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// ErrorInfo is an attempt's error as its executor reported it (or as the
// runtime recorded it, for example code "timeout").
type ErrorInfo struct {
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
}

// ArtifactRef points at an artifact in the store (the object store
// dwr-artifacts) by its content hash.
type ArtifactRef struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size,omitempty"`
	Type   string `json:"type,omitempty"` // media type, e.g. "application/json"
}

// ModelStep records one consequential model call of an attempt; its tokens
// and cost are charged to the goal's budget.
type ModelStep struct {
	InputRef          string          `json:"input_ref,omitempty"`
	PromptVersion     string          `json:"prompt_version,omitempty"`
	ToolSchemaVersion string          `json:"tool_schema_version,omitempty"`
	Model             string          `json:"model"`
	ResponseRef       string          `json:"response_ref,omitempty"`
	Parsed            json.RawMessage `json:"parsed,omitempty"`
	Validation        string          `json:"validation,omitempty"`
	Tokens            int64           `json:"tokens,omitempty"`
	Cost              float64         `json:"cost,omitempty"`
}

// MaxListedAttempts is how many attempts a task lists: its latest. A task
// that waits again and again — each time it resumes is a new attempt: a
// job polling with sleeps, an agent awaiting message after message — would
// otherwise grow without end, and every event would rewrite all of it. The
// ones before are tallied in Earlier, for the retry policy and the goal's
// spend; the events query still reads each.
const MaxListedAttempts = 100

// MaxTaskApprovals and MaxTaskApprovalBytes bound the approvals a task
// keeps — each with its action and basis, and every decision — since each
// event of the task rewrites all of them: a task asks at most
// MaxTaskApprovals (its gate, escalations and budget extensions included),
// whose actions and bases take at most MaxTaskApprovalBytes together.
// Work that asks approval after approval belongs in a task per request.
const (
	MaxTaskApprovals     = 100
	MaxTaskApprovalBytes = 8 << 20
)

// MaxTaskEvidenceBytes bounds the evidence a task's verifications keep
// inline, together (one verdict per attempt, up to 1,000 attempts, each up
// to 256 KiB, would otherwise make a task of 256 MiB): bulky evidence is
// stored as artifacts and named in evidence_refs.
const MaxTaskEvidenceBytes = 8 << 20

// EarlierAttempts tallies a task's attempts that it no longer lists.
type EarlierAttempts struct {
	// Count is how many: attempts 1 to Count are not listed.
	Count int `json:"count"`
	// Spent is how many of them used up the retry budget (failed,
	// abandoned, or succeeded and failed verification) since the task was
	// last retried.
	Spent  int     `json:"spent,omitempty"`
	Tokens int64   `json:"tokens,omitempty"`  // their model steps' tokens
	Cost   float64 `json:"cost,omitempty"`    // their model steps' cost
	WallMS int64   `json:"wall_ms,omitempty"` // the time they ran, in milliseconds
}

// AttemptCount returns how many attempts the task has had: the number of
// its latest, listed or not.
func (t *Task) AttemptCount() int {
	n := len(t.Attempts)
	if t.Earlier != nil {
		n += t.Earlier.Count
	}
	return n
}

// Current returns the latest attempt, or nil before the first.
func (t *Task) Current() *Attempt {
	if len(t.Attempts) == 0 {
		return nil
	}
	return &t.Attempts[len(t.Attempts)-1]
}

// Running returns the attempt that holds the task now, or nil.
func (t *Task) Running() *Attempt {
	if a := t.Current(); a != nil && a.State == AttemptStateRunning {
		return a
	}
	return nil
}

// Attempt returns attempt n of the task, or nil.
func (t *Task) Attempt(n int) *Attempt {
	return find(t.Attempts, func(a *Attempt) bool { return a.N == n })
}

// Approval returns the task's approval with id, or nil.
func (t *Task) Approval(id string) *Approval {
	return find(t.Approvals, func(a *Approval) bool { return a.ID == id })
}

// PendingApproval returns the approval the task waits on, or nil.
func (t *Task) PendingApproval() *Approval {
	if t.State != StateWaiting || t.Wait == nil || t.Wait.Kind != WaitApproval {
		return nil
	}
	return t.Approval(t.Wait.ApprovalID)
}

// Delegation returns the task's delegation named key, or nil.
func (t *Task) Delegation(key string) *Delegation {
	return find(t.Delegations, func(d *Delegation) bool { return d.Key == key })
}

// LastDecision returns the task's latest decided approval, or nil: what a
// resumed attempt is handed.
func (t *Task) LastDecision() *Approval {
	for i := len(t.Approvals) - 1; i >= 0; i-- {
		if t.Approvals[i].Decision != nil {
			return &t.Approvals[i]
		}
	}
	return nil
}

// Clone returns a deep copy of t.
func (t *Task) Clone() *Task {
	c := *t
	c.DependsOn = slices.Clone(t.DependsOn)
	c.Labels = maps.Clone(t.Labels)
	c.Attempts = slices.Clone(t.Attempts)
	c.Earlier = cloneValue(t.Earlier)
	c.Verifications = slices.Clone(t.Verifications)
	c.Approvals = cloneEach(t.Approvals, func(a *Approval) {
		a.Refusals = slices.Clone(a.Refusals)
		a.Decision = cloneValue(a.Decision)
	})
	c.Commands = slices.Clone(t.Commands)
	c.Wait = cloneValue(t.Wait)
	c.Signal = cloneValue(t.Signal)
	c.PendingSignals = slices.Clone(t.PendingSignals)
	c.Delegations = cloneEach(t.Delegations, func(d *Delegation) { d.Tasks = slices.Clone(d.Tasks) })
	return &c
}
