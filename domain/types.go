package domain

import (
	"cmp"
	"time"

	"github.com/dwr-run/dwr/schemas"
)

// Aggregate types, as they appear in event envelopes and subjects (wire
// values, defined in schemas).
const (
	AggWorkspace = schemas.AggWorkspace
	AggGoal      = schemas.AggGoal
	AggTask      = schemas.AggTask
	AggRitual    = schemas.AggRitual
	AggSchedule  = schemas.AggSchedule
)

// The wire data the domain decides on is defined once, in schemas (the wire
// contract's Go types); these are its names here.
type (
	// Duration is a time.Duration that travels as a Go duration string.
	Duration = schemas.Duration
	// RetryPolicy says how often and how soon a failed task is tried again
	// (RetryWithDefaults, Backoff).
	RetryPolicy = schemas.RetryPolicy
	// VerificationSpec names the verifier of a task's results.
	VerificationSpec = schemas.VerificationSpec
	// ApprovalSpec gates a task on a person's decision before its first
	// attempt.
	ApprovalSpec = schemas.ApprovalSpec
	// TaskSpec is what a plan or a client says a task is.
	TaskSpec = schemas.TaskSpec
	// Budget bounds what a goal's work may spend.
	Budget = schemas.Budget
	// Spend is what a goal's work has used (GoalSpend).
	Spend = schemas.Spend
	// Permissions say which queues a goal's tasks may use.
	Permissions = schemas.Permissions
	// Envelope is a goal's budget and permissions.
	Envelope = schemas.Envelope
	// ErrorInfo is an attempt's error as reported by its executor.
	ErrorInfo = schemas.ErrorInfo
	// ArtifactRef points at an artifact in the store by its content hash.
	ArtifactRef = schemas.ArtifactRef
	// ModelStep records one consequential model call of an attempt.
	ModelStep = schemas.ModelStep
)

// Defaults for a task that names no retry policy.
const (
	DefaultMaxAttempts    = 3
	DefaultInitialBackoff = time.Second
	DefaultMultiplier     = 2.0
	DefaultMaxBackoff     = 5 * time.Minute
)

// RetryWithDefaults returns p with every zero field set to its default.
func RetryWithDefaults(p RetryPolicy) RetryPolicy {
	p.MaxAttempts = cmp.Or(p.MaxAttempts, DefaultMaxAttempts)
	p.InitialBackoff = cmp.Or(p.InitialBackoff, Duration(DefaultInitialBackoff))
	p.Multiplier = cmp.Or(p.Multiplier, DefaultMultiplier)
	p.MaxBackoff = cmp.Or(p.MaxBackoff, Duration(DefaultMaxBackoff))
	return p
}

// Backoff returns the delay under p before the attempt after attempt n
// (n >= 1) fails: initial * multiplier^(n-1), capped at the maximum.
func Backoff(p RetryPolicy, n int) time.Duration {
	p = RetryWithDefaults(p)
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

// What a verdict leads to (VerificationSpec.OnFail, OnInconclusive).
const (
	VerdictRetry  = "retry"
	VerdictReject = "reject"
	VerdictReview = "review"
)

// onVerdict returns what outcome leads to under v: retry, reject, review, or
// "" for PASS.
func onVerdict(v *VerificationSpec, outcome string) string {
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
