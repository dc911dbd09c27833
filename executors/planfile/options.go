package planfile

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/dwr-run/dwr/schemas"
)

// Options describe one task as plain values, the way a command line gives
// them (`dwr task create`): Spec holds what needs no resolving (queue,
// title, dependencies, and the approval's role, responses, expiry branch
// and escalation), and the other fields are text and numbers that Spec
// resolves into the wire's spec.
type Options struct {
	Spec schemas.TaskSpec
	// Input is the task's input as JSON text ("" for none).
	Input string
	// MaxAttempts bounds the attempts (0: the service's default).
	MaxAttempts int
	// Timeout is the per-attempt timeout, a duration such as 5m.
	Timeout string
	// VerifyQueue is the verifier's queue; VerifyOnFail and
	// VerifyOnInconclusive what its verdicts do.
	VerifyQueue, VerifyOnFail, VerifyOnInconclusive string
	// StartAt (RFC 3339) or StartAfter (a duration from now): when the task
	// becomes ready.
	StartAt, StartAfter string
	// Deadline (RFC 3339) or DeadlineAfter (a positive duration from now):
	// when the task fails if it has not ended.
	Deadline, DeadlineAfter string
	// Approval gates the task on a person's approval before its first
	// attempt, as does any approval setting.
	Approval bool
	// ApprovalExpiresIn is how long the approval request stands, a
	// positive duration.
	ApprovalExpiresIn string
}

// The options an OptionError names.
const (
	OptInput                = "input"
	OptTimeout              = "timeout"
	OptVerifyQueue          = "verification.queue"
	OptVerifyOnFail         = "verification.on_fail"
	OptVerifyOnInconclusive = "verification.on_inconclusive"
	OptStartAt              = "start_at"
	OptStartAfter           = "start_after"
	OptDeadline             = "deadline"
	OptDeadlineAfter        = "deadline_after"
	OptApprovalExpiresIn    = "approval.expires_in"
)

// OptionError is an Options value that cannot be used. It names the
// options concerned (Opt constants) so that a caller can say it in its own
// words: Message(name) writes each as name calls it (a flag, a form's
// field); Error writes them as they are.
type OptionError struct {
	Options []string
	format  string // {0}, {1}... stand for Options, named
	args    []any
}

func optionError(opts []string, format string, args ...any) *OptionError {
	return &OptionError{Options: opts, format: format, args: args}
}

// Message returns the error with each option written as name writes it.
func (e *OptionError) Message(name func(option string) string) string {
	pairs := make([]string, 0, 2*len(e.Options))
	for i, o := range e.Options {
		pairs = append(pairs, fmt.Sprintf("{%d}", i), strings.ReplaceAll(name(o), "%", "%%"))
	}
	return fmt.Sprintf(strings.NewReplacer(pairs...).Replace(e.format), e.args...)
}

// Error returns the error with the options as they are named here.
func (e *OptionError) Error() string {
	return "planfile: " + e.Message(func(o string) string { return o })
}

// TaskSpec returns the spec o describes, relative times counted from now,
// or an *OptionError naming what cannot be used.
func (o Options) TaskSpec(now time.Time) (schemas.TaskSpec, error) {
	spec := o.Spec
	if o.Input != "" {
		if !json.Valid([]byte(o.Input)) {
			return spec, optionError([]string{OptInput}, "{0} is not valid JSON")
		}
		spec.Input = json.RawMessage(o.Input)
	}
	if o.MaxAttempts > 0 {
		spec.Retry = &schemas.RetryPolicy{MaxAttempts: o.MaxAttempts}
	}
	if o.Timeout != "" {
		d, err := time.ParseDuration(o.Timeout)
		if err != nil {
			return spec, optionError([]string{OptTimeout}, "{0} %q: %v", o.Timeout, err)
		}
		spec.Timeout = schemas.Duration(d)
	}
	switch {
	case o.VerifyQueue != "":
		spec.Verification = &schemas.VerificationSpec{Queue: o.VerifyQueue, OnFail: o.VerifyOnFail, OnInconclusive: o.VerifyOnInconclusive}
	case o.VerifyOnFail != "" || o.VerifyOnInconclusive != "":
		return spec, optionError([]string{OptVerifyOnFail, OptVerifyOnInconclusive, OptVerifyQueue}, "{0} and {1} need {2}")
	}
	var err error
	if spec.StartAt, err = moment(OptStartAt, o.StartAt, OptStartAfter, o.StartAfter, math.MinInt64, now); err != nil {
		return spec, err
	}
	if spec.Deadline, err = moment(OptDeadline, o.Deadline, OptDeadlineAfter, o.DeadlineAfter, 1, now); err != nil {
		return spec, err
	}
	var approval schemas.ApprovalSpec // o.Spec's, copied: o stays as it is
	if spec.Approval != nil {
		approval = *spec.Approval
	}
	if o.ApprovalExpiresIn != "" {
		d, err := time.ParseDuration(o.ApprovalExpiresIn)
		if err != nil || d <= 0 {
			return spec, optionError([]string{OptApprovalExpiresIn}, "{0} %q is not a positive duration such as 1h", o.ApprovalExpiresIn)
		}
		approval.ExpiresIn = schemas.Duration(d)
	}
	spec.Approval = nil
	if o.Approval || approval.Role != "" || approval.ExpiresIn != 0 || len(approval.Responses) > 0 ||
		approval.OnExpiry != "" || approval.EscalateTo != "" || approval.Quorum != 0 || approval.ExcludeRequester {
		spec.Approval = &approval
	}
	return spec, nil
}

// moment resolves the pair of options that name one moment: at (RFC 3339),
// or after, a duration counted from now, at least minAfter. It returns nil
// when neither is given.
func moment(atOpt, at, afterOpt, after string, minAfter time.Duration, now time.Time) (*time.Time, error) {
	opts := []string{atOpt, afterOpt}
	switch {
	case at != "" && after != "":
		return nil, optionError(opts, "give {0} or {1}, not both")
	case after != "":
		d, err := time.ParseDuration(after)
		if err != nil || d < minAfter {
			kind := "a duration"
			if minAfter > 0 {
				kind = "a positive duration"
			}
			return nil, optionError(opts, "{1} %q is not %s such as 30m or 48h", after, kind)
		}
		t := now.Add(d).UTC()
		return &t, nil
	case at != "":
		t, err := time.Parse(time.RFC3339, at)
		if err != nil {
			return nil, optionError(opts, "{0} %q is not an RFC 3339 time (2026-01-02T15:04:05Z): %v", at, err)
		}
		return &t, nil
	}
	return nil, nil
}
