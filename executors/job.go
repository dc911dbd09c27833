package executors

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"path"
	"runtime/debug"
	"time"

	"github.com/dwr-run/dwr/executors/client"
)

// Handler does the work of one job (one attempt of a task) and returns its
// result, or an error: a retryable failure by default, Permanent(err) for
// one that must not be retried, a Failure for full control.
//
// ctx is cancelled when the attempt must stop: context.Cause(ctx) is
// ErrCancelled (the task was cancelled or ended), ErrLeaseLost (another
// attempt holds the task), ErrTimeout (the attempt's deadline passed) or
// ErrStopping (the worker stopped and its drain timeout passed). A handler
// must return promptly once ctx is done: whatever it reports then is
// refused, and Run waits for it.
//
// A handler may run again for the same task (a retry, or after a crash):
// make side effects idempotent under job.OperationKey, and reconcile with
// job.PriorAttempts and job.Checkpoint before repeating work.
type Handler func(ctx context.Context, job *Job) (Result, error)

// Job is one attempt of a task, as a handler receives it.
type Job struct {
	TaskID    string
	Workspace string
	Queue     string
	GoalID    string // empty for a standalone task
	Key       string // the task's key in its goal's plan
	Title     string

	// Attempt is this attempt's number, 1 for the first.
	Attempt int

	// Token is the attempt's token, as its claim returned it, when the
	// worker claimed before the job started (a redelivered item, or one
	// that did not carry its task); it is empty for a job that claims
	// lazily (its first command of the attempt, its first heartbeat moment
	// or its report claims). Every command of a claimed attempt
	// (checkpoints, the report, waits, approval requests, heartbeats)
	// carries the token, and the worker sends them for the job. It is a
	// secret: do not log it or hand it to anything that does not report for
	// this attempt.
	Token string

	// OperationKey is stable across every attempt of the task: use it as
	// the idempotency key of the side effects the job makes.
	OperationKey string

	// Input is the task's input as JSON (nil when it has none); Decode
	// unmarshals it.
	Input json.RawMessage

	// Checkpoint is the last checkpoint an earlier attempt (or this one
	// before it was superseded) saved, nil when none: resume from it.
	Checkpoint json.RawMessage

	// PriorAttempts are the task's earlier attempts, oldest first. In a
	// long history the oldest results may be left out (see Omitted).
	PriorAttempts []PriorAttempt

	// Omitted names, by JSON pointers into the task, the parts of its
	// history left out to keep it within the wire's bound (the oldest
	// results first: "/attempts/0/result"); empty for a task sent whole.
	// The client's History (the events query) reads them.
	Omitted []string

	// Verifications are the FAIL verifications of earlier results: the
	// evidence of why they were not accepted.
	Verifications []Verification

	// Signal is the last signal the task received — the one that resumed it
	// after AwaitSignal — or nil.
	Signal *Signal

	// Dependencies are the accepted outcomes of the tasks this one depends
	// on, by their key in the goal's plan (by task id for a standalone
	// task's): the result and artifacts each was accepted with. Empty when
	// the task depends on none.
	Dependencies map[string]Dependency

	// Decisions are the decisions taken on the task's approvals, in the
	// order the approvals were requested: RequestApproval looks here for a
	// decision on its action, and Approval returns the latest.
	Decisions []Decision

	// Delegations are the outcomes of the task's delegations whose child
	// goals ended (Delegate), oldest first, each with the accepted results
	// of the child goal's tasks.
	Delegations []Delegated

	// Deadline is when the attempt times out; zero when it has no timeout.
	// The handler's context carries the same deadline.
	Deadline time.Time

	save CheckpointFunc
	ask  approvalFunc // nil for a job from NewJob: RequestApproval sends nothing
	// delegate is nil for a job from NewJob: Delegate sends nothing.
	delegate delegateFunc
	// artifacts is the worker's client: nil for a job from NewJob.
	artifacts *client.Client
	// approvalRole is the role of the task's approval settings, which the
	// service gives a request that names none ("" when it has none).
	approvalRole string
}

// CheckpointFunc stores a checkpoint durably for a job; it returns nil once
// it is stored. NewJob takes one.
type CheckpointFunc func(ctx context.Context, checkpoint json.RawMessage) error

// NewJob returns a copy of j whose SaveCheckpoint calls save. It is for
// running a handler outside a worker, as executortest does; a worker builds
// its jobs itself. Its RequestApproval sends no request: it returns the
// *WaitError a worker would report, or the decision j.Decisions holds; its
// Delegate likewise sends nothing.
func NewJob(j Job, save CheckpointFunc) *Job {
	j.save, j.ask, j.delegate = save, nil, nil
	return &j
}

// Decode unmarshals the job's input into v. A job without input leaves v
// unchanged and returns nil; malformed input returns the json error.
func (j *Job) Decode(v any) error {
	if len(j.Input) == 0 {
		return nil
	}
	if err := json.Unmarshal(j.Input, v); err != nil {
		return fmt.Errorf("executors: decode the input of task %s: %w", j.TaskID, err)
	}
	return nil
}

// SaveCheckpoint stores data (marshalled to JSON; a json.RawMessage is kept
// as it is) as the task's checkpoint, durably, before it returns nil. A later
// attempt receives it as Job.Checkpoint.
//
// It returns an error wrapping ErrCancelled or ErrLeaseLost when the service
// refuses it because this attempt no longer holds the task; the job's
// context is then cancelled with that cause. It returns a *CommandError for
// another refusal (too large, invalid), an error when data does not encode
// or exceeds MaxPayloadBytes, and ctx's error when ctx ends first (the
// service keeps being asked, with the same command id, until it answers or
// ctx ends).
func (j *Job) SaveCheckpoint(ctx context.Context, data any) error {
	raw, err := encodeJSON(data)
	if err != nil {
		return fmt.Errorf("executors: checkpoint of task %s: %w", j.TaskID, err)
	}
	if raw == nil {
		raw = json.RawMessage("null")
	}
	if len(raw) > MaxPayloadBytes {
		return fmt.Errorf("executors: checkpoint of task %s is %d bytes; at most %d are allowed (store large state as an artifact)", j.TaskID, len(raw), MaxPayloadBytes)
	}
	if j.save == nil {
		return ErrNoCheckpointStore
	}
	return j.save(ctx, raw)
}

// PutArtifact stores the bytes r yields as an artifact of the task's
// workspace — a file too large for the result, a model's raw response —
// and returns its reference: put it in Result.Artifacts, or make it a
// ModelStep's InputRef or ResponseRef as "sha256:" and its digest. The bytes
// stream in chunks: memory stays flat whatever the size. The media type is
// guessed from name's extension.
func (j *Job) PutArtifact(ctx context.Context, name string, r io.Reader) (Artifact, error) {
	return putArtifact(ctx, j.artifacts, name, j.TaskID, r)
}

// GetArtifact opens an artifact of the task's workspace by its digest: a
// dependency's (Job.Dependencies), an earlier attempt's. The reader checks
// the bytes against the digest; its last Read returns
// client.ErrArtifactCorrupt when they differ, so read to the end before
// trusting them. Close it when done.
func (j *Job) GetArtifact(ctx context.Context, sha256 string) (*client.ArtifactReader, error) {
	return getArtifact(ctx, j.artifacts, sha256)
}

func putArtifact(ctx context.Context, c *client.Client, name, taskID string, r io.Reader) (Artifact, error) {
	if c == nil {
		return Artifact{}, ErrNoArtifactStore
	}
	info, err := c.PutArtifact(ctx, r, client.ArtifactMeta{Name: name, TaskID: taskID, Type: MediaType(name)})
	if err != nil {
		return Artifact{}, fmt.Errorf("executors: put artifact %q: %w", name, err)
	}
	return info.Ref(), nil
}

// MediaType returns the media type a file name's extension says, without
// parameters ("text/plain", not "text/plain; charset=utf-8"), or "".
func MediaType(name string) string {
	typ, _, err := mime.ParseMediaType(mime.TypeByExtension(path.Ext(name)))
	if err != nil {
		return ""
	}
	return typ
}

func getArtifact(ctx context.Context, c *client.Client, sha256 string) (*client.ArtifactReader, error) {
	if c == nil {
		return nil, ErrNoArtifactStore
	}
	r, err := c.GetArtifact(ctx, sha256)
	if err != nil {
		return nil, fmt.Errorf("executors: get artifact %s: %w", sha256, err)
	}
	return r, nil
}

// Call runs h on job as a worker does: a panic in h is recovered and
// returned as a retryable Failure with code CodePanic whose message holds
// the panic value and the stack.
func Call(ctx context.Context, h Handler, job *Job) (res Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			res = Result{}
			err = Failure{Code: CodePanic, Message: fmt.Sprintf("%v\n%s", p, debug.Stack()), Retryable: true}
		}
	}()
	return h(ctx, job)
}

// encodeJSON returns v as JSON: nil for nil, a json.RawMessage as it is
// (after checking that it is valid JSON).
func encodeJSON(v any) (json.RawMessage, error) {
	switch r := v.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		if r == nil {
			return nil, nil
		}
		if !json.Valid(r) {
			return nil, fmt.Errorf("json.RawMessage is not valid JSON")
		}
		return r, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return b, nil
}
