package domain

import (
	"encoding/json"
	"fmt"
	"time"
)

// Aggregate types, as they appear in event envelopes and subjects.
const (
	AggWorkspace = "workspace"
	AggGoal      = "goal"
	AggTask      = "task"
)

// Duration is a time.Duration that travels as a Go duration string ("30s",
// "1m30s"); a bare number is read as seconds.
type Duration time.Duration

// MarshalJSON encodes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON accepts a duration string or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("domain: duration %q: %w", s, err)
		}
		*d = Duration(v)
		return nil
	}
	var n float64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("domain: a duration is a string like \"30s\" or a number of seconds")
	}
	*d = Duration(time.Duration(n * float64(time.Second)))
	return nil
}

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// RetryPolicy says how often and how soon a failed task is tried again.
type RetryPolicy struct {
	MaxAttempts    int      `json:"max_attempts,omitempty"`    // attempts in all, including the first; default 3
	InitialBackoff Duration `json:"initial_backoff,omitempty"` // default 1s
	Multiplier     float64  `json:"multiplier,omitempty"`      // default 2
	MaxBackoff     Duration `json:"max_backoff,omitempty"`     // default 5m
	NonRetryable   []string `json:"non_retryable,omitempty"`   // error codes that fail the task at once
}

// Defaults for a task that names no retry policy.
const (
	DefaultMaxAttempts    = 3
	DefaultInitialBackoff = time.Second
	DefaultMultiplier     = 2.0
	DefaultMaxBackoff     = 5 * time.Minute
)

// WithDefaults returns p with every zero field set to its default.
func (p RetryPolicy) WithDefaults() RetryPolicy {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.InitialBackoff == 0 {
		p.InitialBackoff = Duration(DefaultInitialBackoff)
	}
	if p.Multiplier == 0 {
		p.Multiplier = DefaultMultiplier
	}
	if p.MaxBackoff == 0 {
		p.MaxBackoff = Duration(DefaultMaxBackoff)
	}
	return p
}

// Backoff returns the delay before the attempt after attempt n (n >= 1) fails:
// initial * multiplier^(n-1), capped at the maximum.
func (p RetryPolicy) Backoff(n int) time.Duration {
	p = p.WithDefaults()
	d := float64(p.InitialBackoff)
	for i := 1; i < n; i++ {
		d *= p.Multiplier
		if d >= float64(p.MaxBackoff) {
			return p.MaxBackoff.D()
		}
	}
	if d > float64(p.MaxBackoff) {
		return p.MaxBackoff.D()
	}
	return time.Duration(d)
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

// What a verdict leads to (VerificationSpec.OnFail, OnInconclusive).
const (
	VerdictRetry  = "retry"
	VerdictReject = "reject"
	VerdictReview = "review"
)

// onVerdict returns what outcome leads to under v: retry, reject, review, or
// "" for PASS.
func (v *VerificationSpec) onVerdict(outcome string) string {
	switch outcome {
	case OutcomeFail:
		if v.OnFail == "" {
			return VerdictRetry
		}
		return v.OnFail
	case OutcomeInconclusive:
		if v.OnInconclusive == "" {
			return VerdictReview
		}
		return v.OnInconclusive
	}
	return ""
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
}

// TaskSpec is what a plan or a client says a task is.
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
}

// Budget bounds what a goal's work may spend.
type Budget struct {
	Cost     float64    `json:"cost,omitempty"`
	Tokens   int64      `json:"tokens,omitempty"`
	Attempts int        `json:"attempts,omitempty"`
	Deadline *time.Time `json:"deadline,omitempty"`
}

// Permissions say which queues a goal's tasks may use; empty means any.
type Permissions struct {
	Queues []string `json:"queues,omitempty"`
}

// Envelope is a goal's budget and permissions.
type Envelope struct {
	Budget      Budget      `json:"budget"`
	Permissions Permissions `json:"permissions"`
}

// ErrorInfo is an attempt's error as reported by its executor.
type ErrorInfo struct {
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
}

// ArtifactRef points at an artifact in the store by its content hash.
type ArtifactRef struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size,omitempty"`
	Type   string `json:"type,omitempty"`
}

// ModelStep records one consequential model call of an attempt.
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
