package schemas

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a time.Duration that travels as a Go duration string ("30s",
// "1m30s"); a bare number is read as seconds.
type Duration time.Duration

// MarshalJSON encodes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON accepts a duration string or a number of seconds; it
// returns an error for anything else.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("schemas: duration %q: %w", s, err)
		}
		*d = Duration(v)
		return nil
	}
	var n float64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("schemas: a duration is a string like \"30s\" or a number of seconds")
	}
	*d = Duration(time.Duration(n * float64(time.Second)))
	return nil
}

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// TaskSpec is what a plan or a client says a task is
// (common.json#/$defs/TaskSpec).
type TaskSpec struct {
	Key          string            `json:"key,omitempty"`
	Title        string            `json:"title,omitempty"`
	Queue        string            `json:"queue"`
	Input        json.RawMessage   `json:"input,omitempty"`
	DependsOn    []string          `json:"depends_on,omitempty"` // keys within a plan; task ids for a standalone task
	Retry        *RetryPolicy      `json:"retry,omitempty"`
	Timeout      Duration          `json:"timeout,omitempty"` // per attempt; 0 = none
	Verification *VerificationSpec `json:"verification,omitempty"`
	Approval     *ApprovalSpec     `json:"approval,omitempty"`
	StartAt      *time.Time        `json:"start_at,omitempty"`
	Deadline     *time.Time        `json:"deadline,omitempty"` // the task fails (reason deadline) if it has not ended by then
	// Priority orders the task's work items in a queue whose order is
	// priority (QueueConfig.Order): 1 first to 5 last; 0 (not given) is 3.
	Priority int `json:"priority,omitempty"`
}

// RetryPolicy says how often and how soon a failed task is tried again; a
// zero field takes the service's default.
type RetryPolicy struct {
	MaxAttempts    int      `json:"max_attempts,omitempty"`    // attempts in all, including the first; default 3
	InitialBackoff Duration `json:"initial_backoff,omitempty"` // default 1s
	Multiplier     float64  `json:"multiplier,omitempty"`      // default 2
	MaxBackoff     Duration `json:"max_backoff,omitempty"`     // default 5m
	NonRetryable   []string `json:"non_retryable,omitempty"`   // error codes that fail the task at once
}

// VerificationSpec names the verifier that decides whether a successful
// attempt is accepted, and what a FAIL and an INCONCLUSIVE verdict do.
type VerificationSpec struct {
	Queue string `json:"queue"`
	// OnFail: retry (the default: a new attempt, handed the evidence; the
	// task is rejected when its attempts are spent), reject, or review.
	OnFail string `json:"on_fail,omitempty"`
	// OnInconclusive: review (the default: needs_review, for a person),
	// retry, or reject.
	OnInconclusive string `json:"on_inconclusive,omitempty"`
}

// ApprovalSpec gates a task on a person's decision before its first attempt;
// the proposed action is the task's input. Its settings are also the
// defaults of the approvals the task's attempts request.
type ApprovalSpec struct {
	Role       string            `json:"role,omitempty"` // who may decide; "" = any registered approver
	ExpiresIn  Duration          `json:"expires_in,omitempty"`
	Responses  []string          `json:"responses,omitempty"` // default approve, reject
	Branches   map[string]string `json:"branches,omitempty"`  // response -> resume | reject | fail | escalate
	OnExpiry   string            `json:"on_expiry,omitempty"` // default fail
	EscalateTo string            `json:"escalate_to,omitempty"`
	Basis      json.RawMessage   `json:"basis,omitempty"`
	// Quorum is how many distinct approvers must approve (1 when 0, at
	// most MaxQuorum): four eyes within one role. Any other response
	// decides at once.
	Quorum int `json:"quorum,omitempty"`
	// ExcludeRequester keeps the identity that created the task from
	// approving it (separation of duties): its approval is refused
	// (self_approval), so it counts neither as the decision nor toward the
	// quorum. It may still reject, revise or escalate.
	ExcludeRequester bool `json:"exclude_requester,omitempty"`
	// ActionDigest is set by the service when it seals the task's input
	// (the gate's action): the digest of the input as sent, which the
	// gate's approvers sign. It is ignored for an input that is not sealed,
	// whose digest is computed.
	ActionDigest string `json:"action_digest,omitempty"`
}
