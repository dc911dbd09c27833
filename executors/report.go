package executors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// Result is what a successful job returns.
type Result struct {
	// Output is the task's result, marshalled to JSON (a json.RawMessage is
	// kept as it is; nil reports no result). At most MaxPayloadBytes: store
	// anything larger as an artifact.
	Output any
	// Artifacts reference outputs stored by content hash.
	Artifacts []Artifact
	// ModelSteps record the consequential model calls the job made.
	ModelSteps []ModelStep
}

// Report is what a worker reports for a handler's return: a success with
// its encoded output, or, when Failure is set, a failure.
type Report struct {
	Output     json.RawMessage
	Artifacts  []Artifact
	ModelSteps []ModelStep
	Failure    *Failure
	Wait       *WaitError // the handler parked the task (Sleep, AwaitSignal, RequestApproval)
}

// ReportFor returns what a worker reports when a handler that ran with the
// job context ctx returned (res, err). res.ModelSteps are reported with a
// failure too: the calls were made, and count against the goal's budget. A Sleep, AwaitSignal or
// RequestApproval (a *WaitError) becomes a wait.
// Any other error becomes FailureOf(err), with
// code CodeTimeout when it has no code and the attempt's deadline had
// passed. A result whose output does not encode, or is larger than
// MaxPayloadBytes, becomes a failure with code CodeInvalidResult that is not
// retryable.
func ReportFor(ctx context.Context, res Result, err error) Report {
	if w := waitOf(err); w != nil {
		return Report{Wait: w}
	}
	if err != nil {
		f := FailureOf(err)
		if f.Code == "" && ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrTimeout) {
			f.Code = CodeTimeout
		}
		return Report{Failure: &f, ModelSteps: res.ModelSteps}
	}
	out, encErr := encodeJSON(res.Output)
	switch {
	case encErr != nil:
		return Report{Failure: &Failure{Code: CodeInvalidResult, Message: clip("the result's output does not encode to JSON: "+encErr.Error(), maxMessage)},
			ModelSteps: res.ModelSteps}
	case len(out) > MaxPayloadBytes:
		return Report{Failure: &Failure{Code: CodeInvalidResult, Message: fmt.Sprintf(
			"the result's output is %d bytes; at most %d are allowed (store large outputs as artifacts)", len(out), MaxPayloadBytes)},
			ModelSteps: res.ModelSteps}
	}
	return Report{Output: out, Artifacts: res.Artifacts, ModelSteps: res.ModelSteps}
}

// Log keys.
const (
	logTask      = "task"
	logAttempt   = "attempt"
	logOutcome   = "outcome"
	logDuration  = "duration"
	logErr       = "err"
	logQueue     = "queue"
	logSubject   = "subject"
	logCommandID = "command_id"
	logTries     = "tries"
	logDelivered = "delivered"
	logReason    = "reason"
)
