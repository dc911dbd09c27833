// Package executortest runs an executors.Handler without a server, so that
// an executor's author can test it like any function: hand it a job (input,
// attempt number, last checkpoint, earlier attempts), and look at what a
// worker would report — the result or the failure and whether it is
// retryable — and at every checkpoint it saved. The job's context can be
// cancelled mid-run, as a task cancellation or a lost lease would.
// StartWorker runs a Worker for a test against a running service, stopped
// at the test's end.
//
// It may import the standard library and executors only.
package executortest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/dwr-run/dwr/executors"
)

// Defaults of Job, applied to its zero fields.
const (
	DefaultTaskID    = "01J00000000000000000000000"
	DefaultWorkspace = "default"
	DefaultQueue     = "test"
)

// Job is the attempt to hand the handler, and how to disturb it.
type Job struct {
	TaskID    string // default DefaultTaskID
	Workspace string // default DefaultWorkspace
	Queue     string // default DefaultQueue
	GoalID    string
	Key       string
	Title     string

	// Attempt is the attempt's number; default 1.
	Attempt int
	// OperationKey defaults to "op-" + TaskID, as the service makes it.
	OperationKey string

	// Input is the task's input: marshalled to JSON (a json.RawMessage is
	// kept as it is); nil for none.
	Input any
	// Checkpoint is the last checkpoint saved by an earlier attempt,
	// marshalled like Input; nil for none.
	Checkpoint any
	// PriorAttempts are the earlier attempts the job is told about.
	PriorAttempts []executors.PriorAttempt
	// Verifications are FAIL verifications of earlier results.
	Verifications []executors.Verification
	// Decisions are the decisions taken on the task's approvals, oldest
	// first: Job.RequestApproval returns the latest one on its action,
	// asked of its role. A decision without AskedRole is taken as asked of
	// its approver's Role (what a request that was not escalated records).
	// Without one it asks nothing of a server: the Outcome's Report.Wait
	// then holds the request (Approval, ActionDigest), as a worker would
	// record it.
	Decisions []executors.Decision

	// Timeout, when positive, gives the job a deadline that far from the
	// start; passing it cancels the job's context with cause
	// executors.ErrTimeout.
	Timeout time.Duration

	// Cancel, when it is closed, cancels the job's context with cause
	// CancelCause, as a task cancellation does.
	Cancel <-chan struct{}
	// CancelAfterCheckpoints, when positive, cancels the job's context with
	// cause CancelCause as soon as that many checkpoints were saved.
	CancelAfterCheckpoints int
	// CancelCause is the cause of a cancellation through Cancel or
	// CancelAfterCheckpoints: executors.ErrCancelled (the default) or
	// executors.ErrLeaseLost. After it, SaveCheckpoint is refused with it,
	// as the service refuses the checkpoints of an attempt that no longer
	// holds its task.
	CancelCause error
}

// Outcome is what happened when the handler ran.
type Outcome struct {
	// Result is what the handler returned (zero after an error).
	Result executors.Result
	// Err is the error the handler returned (a panic becomes a Failure
	// with code executors.CodePanic).
	Err error
	// Report is what a worker would report: the encoded output, or the
	// failure with its code, message and retryability.
	Report executors.Report
	// Checkpoints are the checkpoints saved, in order, as JSON.
	Checkpoints []json.RawMessage
	// Cancelled reports whether the job's context was cancelled before the
	// handler returned; Cause is its cause (executors.ErrCancelled,
	// executors.ErrLeaseLost, executors.ErrTimeout, or the cause of Run's
	// ctx).
	Cancelled bool
	Cause     error
	// Duration is how long the handler ran.
	Duration time.Duration
}

// Succeeded reports whether a worker would report a success.
func (o *Outcome) Succeeded() bool { return o.Report.Failure == nil }

// Retryable reports whether a worker would report a failure that may be
// retried; false after a success.
func (o *Outcome) Retryable() bool { return o.Report.Failure != nil && o.Report.Failure.Retryable }

// Output returns the reported output, decoded into v.
func (o *Outcome) Output(v any) error {
	if o.Report.Failure != nil {
		return fmt.Errorf("executortest: the job failed: %w", o.Report.Failure)
	}
	if len(o.Report.Output) == 0 {
		return fmt.Errorf("executortest: the job reported no output")
	}
	return json.Unmarshal(o.Report.Output, v)
}

// Run runs h on job, as a worker would, and returns what happened. The job's
// context ends with ctx, with the job's Timeout, or through Cancel and
// CancelAfterCheckpoints. Run returns an error only when job cannot be set
// up (its Input or Checkpoint does not encode); a handler's failure is in
// the Outcome.
func Run(ctx context.Context, h executors.Handler, job Job) (*Outcome, error) {
	spec, err := job.spec()
	if err != nil {
		return nil, err
	}
	jctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if job.Timeout > 0 {
		var stop context.CancelFunc
		jctx, stop = context.WithDeadlineCause(jctx, time.Now().Add(job.Timeout), executors.ErrTimeout)
		defer stop()
		spec.Deadline, _ = jctx.Deadline()
	}
	cause := job.CancelCause
	if cause == nil {
		cause = executors.ErrCancelled
	}
	out := &Outcome{}
	var mu sync.Mutex
	cancelled := false
	save := func(sctx context.Context, cp json.RawMessage) error {
		mu.Lock()
		defer mu.Unlock()
		if cancelled {
			return fmt.Errorf("%w: checkpoint refused: the attempt no longer holds the task", cause)
		}
		if err := sctx.Err(); err != nil {
			return err
		}
		out.Checkpoints = append(out.Checkpoints, append(json.RawMessage(nil), cp...))
		if job.CancelAfterCheckpoints > 0 && len(out.Checkpoints) >= job.CancelAfterCheckpoints {
			cancelled = true
			cancel(cause)
		}
		return nil
	}
	if job.Cancel != nil {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		defer func() { close(stop); wg.Wait() }()
		wg.Go(func() {
			select {
			case <-job.Cancel:
				mu.Lock()
				cancelled = true
				mu.Unlock()
				cancel(cause)
			case <-stop:
			}
		})
	}
	j := executors.NewJob(spec, save)
	start := time.Now()
	res, herr := executors.Call(jctx, h, j)
	out.Duration = time.Since(start)
	out.Result, out.Err = res, herr
	out.Report = executors.ReportFor(jctx, res, herr)
	if jctx.Err() != nil {
		out.Cancelled, out.Cause = true, context.Cause(jctx)
	}
	return out, nil
}

// spec returns the executors.Job the handler receives.
func (job Job) spec() (executors.Job, error) {
	s := executors.Job{TaskID: job.TaskID, Workspace: job.Workspace, Queue: job.Queue, GoalID: job.GoalID,
		Key: job.Key, Title: job.Title, Attempt: job.Attempt, OperationKey: job.OperationKey,
		PriorAttempts: job.PriorAttempts, Verifications: job.Verifications}
	for _, d := range job.Decisions {
		d.AskedRole = cmp.Or(d.AskedRole, d.Role)
		s.Decisions = append(s.Decisions, d)
	}
	if s.TaskID == "" {
		s.TaskID = DefaultTaskID
	}
	if s.Workspace == "" {
		s.Workspace = DefaultWorkspace
	}
	if s.Queue == "" {
		s.Queue = DefaultQueue
	}
	s.Attempt = cmp.Or(s.Attempt, 1)
	if s.OperationKey == "" {
		s.OperationKey = "op-" + s.TaskID
	}
	var err error
	if s.Input, err = encode(job.Input); err != nil {
		return s, fmt.Errorf("executortest: Input: %w", err)
	}
	if s.Checkpoint, err = encode(job.Checkpoint); err != nil {
		return s, fmt.Errorf("executortest: Checkpoint: %w", err)
	}
	return s, nil
}

func encode(v any) (json.RawMessage, error) {
	switch r := v.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		if !json.Valid(r) {
			return nil, fmt.Errorf("not valid JSON")
		}
		return r, nil
	}
	return json.Marshal(v)
}
