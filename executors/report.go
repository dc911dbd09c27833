package executors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/dwr-run/dwr/schemas"
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
// job context ctx returned (res, err). A Sleep, AwaitSignal or
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
		return Report{Failure: &f}
	}
	out, encErr := encodeJSON(res.Output)
	switch {
	case encErr != nil:
		return Report{Failure: &Failure{Code: CodeInvalidResult, Message: clip("the result's output does not encode to JSON: "+encErr.Error(), maxMessage)}}
	case len(out) > MaxPayloadBytes:
		return Report{Failure: &Failure{Code: CodeInvalidResult, Message: fmt.Sprintf(
			"the result's output is %d bytes; at most %d are allowed (store large outputs as artifacts)", len(out), MaxPayloadBytes)}}
	}
	return Report{Output: out, Artifacts: res.Artifacts, ModelSteps: res.ModelSteps}
}

// Request pacing.
const (
	requestTimeout = 5 * time.Second // one try of a command or query
	retryFirst     = 100 * time.Millisecond
	retryMax       = 2 * time.Second
)

// client sends commands and queries to the service.
type client struct {
	nc       *nats.Conn
	subj     subjects
	executor string
	log      *slog.Logger
}

// errClosed is returned when the NATS connection is closed for good.
var errClosed = errors.New("executors: the NATS connection is closed")

// command sends the named command with a deterministic id and returns its
// reply, asking again with the same id on timeouts, missing responders and
// "unavailable" replies until the service answers or ctx ends (then ctx's
// cause is returned).
func (c *client) command(ctx context.Context, name string, body any, id string) (*schemas.Reply, error) {
	return c.request(ctx, c.subj.cmd+name, body, id)
}

// heartbeat tells the service that an attempt is alive (task.heartbeat):
// one try, bounded by timeout. A heartbeat that is lost or refused changes
// nothing the worker does — the next one follows — so it is only logged.
func (c *client) heartbeat(ctx context.Context, b *schemas.Heartbeat, timeout time.Duration) {
	data, err := json.Marshal(b)
	if err != nil {
		return
	}
	m := nats.NewMsg(c.subj.cmd + "task.heartbeat")
	m.Data = data
	tctx, cancel := context.WithTimeout(ctx, min(timeout, requestTimeout))
	defer cancel()
	resp, err := c.nc.RequestMsgWithContext(tctx, m)
	if err != nil {
		c.log.Debug("executors: heartbeat not answered", logTask, b.TaskID, logAttempt, b.Attempt, logErr, err)
		return
	}
	var r schemas.Reply
	if err := json.Unmarshal(resp.Data, &r); err == nil && !r.OK && r.Error != nil {
		c.log.Debug("executors: heartbeat refused", logTask, b.TaskID, logAttempt, b.Attempt, "code", r.Error.Code, logErr, r.Error.Message)
	}
}

// query sends the named query, with the same retries as command.
func (c *client) query(ctx context.Context, name string, body any) (*schemas.Reply, error) {
	return c.request(ctx, c.subj.query+name, body, "")
}

func (c *client) request(ctx context.Context, subject string, body any, id string) (*schemas.Reply, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("executors: encode %s: %w", subject, err)
	}
	wait := retryFirst
	for try := 1; ; try++ {
		m := nats.NewMsg(subject)
		m.Data = data
		if id != "" {
			m.Header.Set(schemas.HeaderCommandID, id)
		}
		tctx, cancel := context.WithTimeout(ctx, requestTimeout)
		resp, err := c.nc.RequestMsgWithContext(tctx, m)
		cancel()
		var why string
		switch {
		case ctx.Err() != nil:
			return nil, context.Cause(ctx)
		case errors.Is(err, nats.ErrConnectionClosed):
			return nil, errClosed
		case errors.Is(err, nats.ErrMaxPayload), errors.Is(err, nats.ErrBadSubject):
			return nil, fmt.Errorf("executors: %s: %w", subject, err)
		case err != nil:
			why = err.Error() // a timeout, no responders, a reconnect in progress
		default:
			var r schemas.Reply
			if err := json.Unmarshal(resp.Data, &r); err != nil {
				return nil, fmt.Errorf("executors: %s: the answer is not a dwr reply: %w", subject, err)
			}
			if !r.OK && r.Error == nil {
				r.Error = &schemas.Error{Code: schemas.CodeInternal, Message: "refused without an error"}
			}
			if r.OK || r.Error.Code != schemas.CodeUnavailable {
				return &r, nil
			}
			why = r.Error.Message
		}
		if try == 3 || try%20 == 0 {
			c.log.Warn("executors: the service did not answer; retrying with the same command id",
				logSubject, subject, logCommandID, id, logTries, try, logErr, why)
		}
		t := time.NewTimer(wait + rand.N(wait/2+1)) //nolint:gosec // G404: jitter, not a secret
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, context.Cause(ctx)
		}
		wait = min(2*wait, retryMax)
	}
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
