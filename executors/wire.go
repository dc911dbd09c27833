package executors

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// This file mirrors, field for field, the JSON the service speaks: work
// items, command bodies and replies, the task as a claim returns it, and the
// event envelope. The SDK is written against the wire contract only (see
// doc.go), so it defines its own structs rather than importing the
// service's.

// Wire header names.
const (
	headerCommandID = "Dwr-Command-Id"
)

// Wire error codes of a refused command (README, "Replies").
const (
	codeInvalid     = "invalid"
	codeNotFound    = "not_found"
	codeConflict    = "conflict"
	codeTooLarge    = "too_large"
	codeUnavailable = "unavailable"
)

// Task and attempt states the SDK looks at.
const (
	stateRunning          = "running"
	stateCancelled        = "cancelled"
	stateFailed           = "failed"
	stateRejected         = "rejected"
	stateAccepted         = "accepted"
	attemptStateAbandoned = "abandoned"
	attemptStateRunning   = "running"
)

// Limits of the wire contract the SDK checks before it sends.
const (
	// MaxPayloadBytes bounds a result or a checkpoint: 256 KiB of JSON.
	// Store anything larger as an artifact and report its reference.
	MaxPayloadBytes = 256 << 10
	maxLabel        = 200    // executor names, versions, error codes
	maxMessage      = 10_000 // an error message, in bytes
)

// ErrorInfo is an attempt's error as its executor reported it (or as the
// runtime recorded it, for example code "timeout").
type ErrorInfo struct {
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
}

// PriorAttempt is an earlier attempt of the same task, handed to a job so it
// can reconcile with what that attempt may have done (its side effects were
// made under the same operation key).
type PriorAttempt struct {
	N               int             `json:"n"`
	State           string          `json:"state"` // succeeded | failed | abandoned | parked | cancelled | running
	Executor        string          `json:"executor"`
	ExecutorVersion string          `json:"executor_version,omitempty"`
	StartedAt       time.Time       `json:"started_at"`
	EndedAt         *time.Time      `json:"ended_at,omitempty"`
	Result          json.RawMessage `json:"result,omitempty"`
	Error           *ErrorInfo      `json:"error,omitempty"`
	Retryable       bool            `json:"retryable,omitempty"`
	Reason          string          `json:"reason,omitempty"` // why it ended, e.g. lease_lost
}

// Verification is a verifier's recorded judgement of an earlier attempt's
// result. A job is handed the FAIL verifications of its task: the evidence of
// why an earlier result was not accepted.
type Verification struct {
	VerificationID  string          `json:"verification_id,omitempty"`
	Attempt         int             `json:"attempt,omitempty"`
	Outcome         string          `json:"outcome"` // PASS | FAIL | INCONCLUSIVE
	Evidence        json.RawMessage `json:"evidence,omitempty"`
	EvidenceRefs    []Artifact      `json:"evidence_refs,omitempty"`
	Verifier        string          `json:"verifier,omitempty"`
	VerifierVersion string          `json:"verifier_version,omitempty"`
	ResultDigest    string          `json:"result_digest,omitempty"`
}

// Artifact references an output stored by its content hash (in the object
// store dwr-artifacts), reported with a result.
type Artifact struct {
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

// workItem is the body of a message on <prefix>.work.<workspace>.<queue>.
type workItem struct {
	Kind          string          `json:"kind"`
	TaskID        string          `json:"task_id"`
	Workspace     string          `json:"workspace"`
	Queue         string          `json:"queue"`
	GoalID        string          `json:"goal_id,omitempty"`
	Key           string          `json:"key,omitempty"`
	Title         string          `json:"title,omitempty"`
	Attempt       int             `json:"attempt"`
	OperationKey  string          `json:"operation_key"`
	Input         json.RawMessage `json:"input,omitempty"`
	Checkpoint    json.RawMessage `json:"checkpoint,omitempty"`
	PriorAttempts []PriorAttempt  `json:"prior_attempts,omitempty"`
	Verifications []Verification  `json:"verifications,omitempty"`
	Signal        *Signal         `json:"signal,omitempty"`
	Timeout       duration        `json:"timeout,omitempty"`
	Result        json.RawMessage `json:"result,omitempty"`
	Artifacts     []Artifact      `json:"artifacts,omitempty"`
	ResultDigest  string          `json:"result_digest,omitempty"`
}

// Signal is a named signal a task received, with its payload.
type Signal struct {
	Name    string          `json:"name"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// The work item kinds: a Worker runs execute items, a verifier (NewVerifier)
// judges verify items.
const (
	kindExecute = "execute"
	kindVerify  = "verify"
)

func (it *workItem) check(workspace, queue, kind string) error {
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

// duration is a Go duration string on the wire ("30s"); a bare number is
// read as seconds, as the service does.
type duration time.Duration

func (d *duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		if s == "" {
			*d = 0
			return nil
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("executors: duration %q: %w", s, err)
		}
		*d = duration(v)
		return nil
	}
	var n float64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("executors: a duration is a string such as \"30s\" or a number of seconds")
	}
	*d = duration(time.Duration(n * float64(time.Second)))
	return nil
}

func (d duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// Command bodies.

type claimBody struct {
	TaskID          string `json:"task_id"`
	Executor        string `json:"executor"`
	ExecutorVersion string `json:"executor_version,omitempty"`
	Supersedes      int    `json:"supersedes,omitempty"`
}

type checkpointBody struct {
	TaskID     string          `json:"task_id"`
	Attempt    int             `json:"attempt"`
	Token      string          `json:"token"`
	Checkpoint json.RawMessage `json:"checkpoint"`
}

type succeedBody struct {
	TaskID     string          `json:"task_id"`
	Attempt    int             `json:"attempt"`
	Token      string          `json:"token"`
	Result     json.RawMessage `json:"result,omitempty"`
	Artifacts  []Artifact      `json:"artifacts,omitempty"`
	ModelSteps []ModelStep     `json:"model_steps,omitempty"`
}

type failBody struct {
	TaskID    string    `json:"task_id"`
	Attempt   int       `json:"attempt"`
	Token     string    `json:"token"`
	Error     ErrorInfo `json:"error"`
	Retryable bool      `json:"retryable"`
}

// heartbeatBody is the task.heartbeat command: the attempt is alive.
type heartbeatBody struct {
	TaskID  string `json:"task_id"`
	Attempt int    `json:"attempt"`
	Token   string `json:"token"`
}

type queryBody struct {
	ID string `json:"id"`
}

// reply is every answer of a command or query endpoint.
type reply struct {
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result,omitempty"`
	Seq    uint64          `json:"seq,omitempty"`
	Error  *wireError      `json:"error,omitempty"`
}

type wireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Fields  []struct {
		Pointer string `json:"pointer"`
		Message string `json:"message"`
	} `json:"fields,omitempty"`
	// RetryAfter is when the same request may be taken, for a request
	// refused only for being early.
	RetryAfter *time.Time `json:"retry_after,omitempty"`
}

// commandReply is the result of a task command.
type commandReply struct {
	ID      string     `json:"id"`
	State   string     `json:"state,omitempty"`
	Version uint64     `json:"version"`
	Attempt int        `json:"attempt,omitempty"`
	Task    *taskState `json:"task,omitempty"` // task.claim only
	// ApprovalID is the approval a task.request_approval recorded.
	ApprovalID string `json:"approval_id,omitempty"`
	Duplicate  bool   `json:"duplicate,omitempty"`
	// Token is, for task.claim, the attempt's token: its later commands
	// carry it.
	Token string `json:"token,omitempty"`
}

// taskState is a task as a claim or the task.get query returns it; only the
// fields the SDK reads.
type taskState struct {
	ID            string          `json:"id"`
	Workspace     string          `json:"workspace"`
	GoalID        string          `json:"goal_id,omitempty"`
	Key           string          `json:"key,omitempty"`
	Spec          taskSpec        `json:"spec"`
	State         string          `json:"state"`
	Attempts      []attemptState  `json:"attempts,omitempty"`
	Checkpoint    json.RawMessage `json:"checkpoint,omitempty"`
	Verifications []Verification  `json:"verifications,omitempty"`
	Signal        *Signal         `json:"signal,omitempty"`
	Wait          *taskWait       `json:"wait,omitempty"`
	Approvals     []approvalState `json:"approvals,omitempty"`
}

// taskWait is what a waiting task waits on.
type taskWait struct {
	Kind       string     `json:"kind"` // approval | signal | timer
	Signal     string     `json:"signal,omitempty"`
	Until      *time.Time `json:"until,omitempty"`
	ApprovalID string     `json:"approval_id,omitempty"`
}

// approvalState is one of a task's approvals (a gate, attempt 0, or an
// attempt's request), as the task carries it; only the fields the SDK reads.
type approvalState struct {
	ID           string            `json:"id"` // <task id>-<n>
	Attempt      int               `json:"attempt,omitempty"`
	Action       json.RawMessage   `json:"action"`
	ActionDigest string            `json:"action_digest"`
	Summary      string            `json:"summary,omitempty"`
	Role         string            `json:"role,omitempty"`
	State        string            `json:"state"` // pending | decided | expired | withdrawn
	ExpiresAt    *time.Time        `json:"expires_at,omitempty"`
	Decision     *approvalDecision `json:"decision,omitempty"`
}

// approvalDecision is the decision taken on an approval.
type approvalDecision struct {
	Response  string    `json:"response"`
	Branch    string    `json:"branch"`
	Approver  string    `json:"approver"`
	Role      string    `json:"role,omitempty"`
	KeyID     string    `json:"key_id"`
	Comment   string    `json:"comment,omitempty"`
	Signature string    `json:"signature"`
	DecidedAt time.Time `json:"decided_at"`
}

// decisions returns the decisions taken on the task's approvals, and their
// expiries (ResponseExpired), in the order the approvals were requested.
func (t *taskState) decisions() []Decision {
	var ds []Decision
	for _, a := range t.Approvals {
		switch d := a.Decision; {
		case d != nil:
			ds = append(ds, Decision{ApprovalID: a.ID, ActionDigest: a.ActionDigest, Action: a.Action,
				Response: d.Response, Comment: d.Comment, Approver: d.Approver, Role: d.Role, DecidedAt: d.DecidedAt})
		case a.State == "expired" && a.ExpiresAt != nil:
			ds = append(ds, Decision{ApprovalID: a.ID, ActionDigest: a.ActionDigest, Action: a.Action,
				Response: ResponseExpired, DecidedAt: *a.ExpiresAt})
		}
	}
	return ds
}

type taskSpec struct {
	Title   string          `json:"title,omitempty"`
	Queue   string          `json:"queue"`
	Input   json.RawMessage `json:"input,omitempty"`
	Timeout duration        `json:"timeout,omitempty"`
}

type attemptState struct {
	PriorAttempt
	OperationKey string     `json:"operation_key"`
	Deadline     *time.Time `json:"deadline,omitempty"`
}

// running returns the attempt that holds the task now, or nil.
func (t *taskState) running() *attemptState {
	if t.State != stateRunning || len(t.Attempts) == 0 {
		return nil
	}
	a := &t.Attempts[len(t.Attempts)-1]
	if a.State != attemptStateRunning {
		return nil
	}
	return a
}

// attempt returns attempt n, or nil.
func (t *taskState) attempt(n int) *attemptState {
	for i := range t.Attempts {
		if t.Attempts[i].N == n {
			return &t.Attempts[i]
		}
	}
	return nil
}

// runningFromItem returns the running attempt when it was started from the
// work item whose first claim starts attempt itemAttempt: by its first
// delivery, or by a redelivery that superseded the attempt of an earlier
// delivery whose lease lapsed (every attempt from itemAttempt up to the
// running one was abandoned). An attempt that followed a failure came from
// another work item, and is not this item's to supersede.
func (t *taskState) runningFromItem(itemAttempt int) (*attemptState, bool) {
	r := t.running()
	if r == nil || r.N < itemAttempt {
		return nil, false
	}
	for _, a := range t.Attempts {
		if a.N >= itemAttempt && a.N < r.N && a.State != attemptStateAbandoned {
			return nil, false
		}
	}
	return r, true
}

// terminal reports whether the task has ended.
func (t *taskState) terminal() bool {
	switch t.State {
	case stateAccepted, stateRejected, stateFailed, stateCancelled:
		return true
	}
	return false
}

// envelope is an event as the feed publishes it; only what the SDK reads.
type envelope struct {
	Type string `json:"type"`
	Data struct {
		Attempt int `json:"attempt"`
	} `json:"data"`
}

// queueSettings is the body and the reply of queue.configure.
type queueSettings struct {
	Queue      string `json:"queue"`
	LeaseMS    int64  `json:"lease_ms"`
	MaxDeliver int    `json:"max_deliver"`
	IfUnset    bool   `json:"if_unset,omitempty"`
}
