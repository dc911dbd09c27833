package executors

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// Causes of a job's context cancellation: context.Cause(ctx) returns one of
// them (or context.Canceled when the caller of executortest.Run cancelled).
// SaveCheckpoint returns ErrCancelled or ErrLeaseLost (wrapped) when the
// service refuses a checkpoint because the attempt no longer holds the task.
var (
	// ErrCancelled: the task was cancelled, or ended (failed, rejected)
	// while the attempt ran. Whatever the job reports now is refused.
	ErrCancelled = errors.New("executors: the task was cancelled or has ended")

	// ErrLeaseLost: the attempt no longer holds the task. Its lease lapsed
	// and a redelivery of the work item superseded it, or the service ended
	// it (for example at its deadline). Whatever it reports now is refused.
	ErrLeaseLost = errors.New("executors: the attempt lost its lease; another attempt holds the task")

	// ErrTimeout: the attempt passed its deadline (the task's per-attempt
	// timeout). The service fails the attempt at the same moment.
	ErrTimeout = errors.New("executors: the attempt passed its deadline")

	// ErrStopping: the worker was stopped and its drain timeout passed
	// before the job finished. The job's work item is left unacknowledged, so
	// it is redelivered and the next attempt resumes from the last
	// checkpoint.
	ErrStopping = errors.New("executors: the worker is stopping and the drain timeout has passed")

	// ErrNoCheckpointStore is returned by SaveCheckpoint on a Job that was
	// not built by a Worker or NewJob.
	ErrNoCheckpointStore = errors.New("executors: this job has no checkpoint store (jobs come from a Worker, NewJob or executortest)")

	// ErrNoArtifactStore is returned by PutArtifact and GetArtifact on a
	// Job or Check that was not built by a Worker.
	ErrNoArtifactStore = errors.New("executors: this job reaches no artifact store (jobs and checks come from a Worker)")

	// ErrAlreadyRunning is returned by Run when it was called before.
	ErrAlreadyRunning = errors.New("executors: the worker was already run")
)

// Error codes the SDK reports on its own.
const (
	// CodePanic is the error code of a handler that panicked: the panic is
	// recovered and reported as a retryable failure.
	CodePanic = "panic"
	// CodeTimeout is the error code of a handler that returned the context's
	// error after the attempt passed its deadline.
	CodeTimeout = "timeout"
	// CodeInvalidResult is the error code reported, not retryable, when a
	// handler's Result cannot be reported: its output does not encode to
	// JSON, exceeds MaxPayloadBytes, or the service refused it as invalid.
	CodeInvalidResult = "invalid_result"
	// CodeDependencies is the code of an attempt that could not read the
	// results of its task's dependencies (retryable).
	CodeDependencies = "dependencies_unavailable"
	// CodeDelegations is the code of an attempt that could not read the
	// results of the goals its task delegated to (retryable).
	CodeDelegations = "delegations_unavailable"
)

// Failure is a handler error with full control over what is reported: the
// error code (matched by a task's retry policy non_retryable list), the
// message, and whether the task may be retried. Failure implements error;
// return it (or wrap it) from a handler.
type Failure struct {
	Code      string
	Message   string
	Retryable bool
}

// Error returns the failure's code and message.
func (f Failure) Error() string {
	switch {
	case f.Code == "":
		return f.Message
	case f.Message == "":
		return f.Code
	}
	return f.Code + ": " + f.Message
}

// Permanent marks err as not retryable: the task fails at once, whatever its
// retry policy. Permanent(nil) returns nil. The code and message of a
// Failure inside err are kept.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// IsPermanent reports whether err was marked by Permanent, or carries a
// Failure that is not retryable.
func IsPermanent(err error) bool {
	if err == nil {
		return false
	}
	return !FailureOf(err).Retryable
}

// FailureOf returns the failure a worker reports for a handler's error err:
// the Failure inside err if there is one (its message defaulting to err's
// text), otherwise a retryable failure with err's text and no code; either
// way not retryable when err was marked by Permanent. The message is made
// valid UTF-8, at most 10,000 bytes and never empty; the code at most 200
// bytes. FailureOf(nil) returns the zero Failure.
func FailureOf(err error) Failure {
	if err == nil {
		return Failure{}
	}
	f := Failure{Message: err.Error(), Retryable: true}
	var fv Failure
	var fp *Failure
	switch {
	case errors.As(err, &fv):
		f = fv
	case errors.As(err, &fp) && fp != nil:
		f = *fp
	}
	if f.Message == "" {
		f.Message = err.Error()
	}
	var pe *permanentError
	if errors.As(err, &pe) {
		f.Retryable = false
	}
	f.Code = clip(f.Code, maxLabel)
	f.Message = clip(f.Message, maxMessage)
	if strings.TrimSpace(f.Message) == "" {
		f.Message = "the handler failed without a message"
	}
	return f
}

// CommandError is a command the service refused for a reason other than
// fencing: Code is the wire error code (invalid, too_large, forbidden,
// internal...).
type CommandError struct {
	Command string
	Code    string
	Message string
}

// Error returns the command, the code and the service's message.
func (e *CommandError) Error() string {
	return "executors: " + e.Command + " refused: " + e.Code + ": " + e.Message
}

// clip returns s as valid UTF-8 cut to at most max bytes at a rune boundary.
func clip(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= max {
		return s
	}
	s = s[:max]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
