package executors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/dwr-run/dwr/schemas"
)

// The lazy claim. An execute item carries its task (WorkItem.Task), so a
// short job need not claim before it runs: the worker starts the job at
// once, holding the item by in-progress acks as ever (the work consumer's
// ack wait is the lease), and claims at the first of
//
//   - the job's first command of the attempt (SaveCheckpoint, a wait,
//     RequestApproval): they carry the attempt's token;
//   - the moment its first heartbeat is due (Lease/3): from there on a long
//     job holds a claimed attempt and heartbeats, exactly as a job that
//     claimed first;
//   - its end: then the report itself carries the claim (task.succeed or
//     task.fail with schemas.ReportClaim), and the service starts and ends
//     the attempt in one commit.
//
// A claim or merged report the service refuses because the task is no
// longer ready for the attempt (cancelled, or claimed through a redelivery
// of the item) ends the job as a lost attempt. A redelivered item, one
// without its task, or one that waited in the stream longer than
// lazyMaxAge is claimed first, as before: the job then runs on the task the
// claim's reply (or the item) carries — one source of truth per job.

// lazyMaxAge bounds how long an item may have waited in the stream for its
// job to start unclaimed. An event that ends the task before the job's
// watch begins (a cancellation) is not seen by the watch: the claim (or
// the merged report) is refused then, but the job would have run. Claiming
// first an item that waited longer keeps that window short. The stream's
// timestamp is the NATS server's clock; a skew between it and this
// process's clock shifts the window by as much.
const lazyMaxAge = time.Second

// lazyItem reports whether the delivery may run its job before claiming:
// its first delivery of an item that carries its task, ready for exactly
// the item's attempt, fresh from the stream.
func (d *delivery) lazyItem(published time.Time) bool {
	it := &d.item
	t := it.Task
	return t != nil && d.delivered == 1 && t.ID == it.TaskID && t.Workspace == it.Workspace &&
		t.Spec.Queue == it.Queue && t.State == schemas.StateReady && t.AttemptCount()+1 == it.Attempt &&
		time.Since(published) < lazyMaxAge
}

// errSealed: the report carries the claim, and no other claim is made.
var errSealed = errors.New("executors: the attempt is claimed by its report")

// token returns the attempt's token, claiming the attempt first when the
// job started without a claim. It returns the error of a claim the service
// refused (the job is then cancelled as a lost attempt), or ctx's cause or
// a transport error when the claim was not answered (the next need claims
// again, with the same command id).
func (d *delivery) token(ctx context.Context) (string, error) {
	d.claimMu.Lock()
	defer d.claimMu.Unlock()
	switch {
	case d.tok != "":
		return d.tok, nil
	case d.lazyErr != nil:
		return "", d.lazyErr
	case d.sealed:
		return "", errSealed
	}
	return d.claimLazily(ctx)
}

// claimAtHeartbeat claims an unclaimed job's attempt when its first
// heartbeat is due, so that a long job holds its attempt (and heartbeats)
// as a job that claimed first does.
//
// It never holds up the heartbeat loop, whose in-progress acks keep the
// item: when a claim is in flight already (the job's first command claims)
// it does nothing, and its own claim is bounded by a heartbeat interval (a
// claim not answered by then is sent again at the next one, with the same
// command id).
func (d *delivery) claimAtHeartbeat(ctx context.Context) {
	if !d.claimMu.TryLock() {
		return
	}
	defer d.claimMu.Unlock()
	if !d.lazy || d.jobEnded || d.tok != "" || d.lazyErr != nil || d.sealed {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, d.w.leaseOf()/3)
	defer cancel()
	if _, err := d.claimLazily(ctx); err != nil && d.lazyErr == nil {
		d.w.log.Debug("executors: lazy claim not answered; claiming again at the next heartbeat", logTask, d.item.TaskID, logErr, err)
	}
}

// reportClaim returns what the job's report carries: the attempt's token
// when it was claimed, or else the claim itself (and no claim is made from
// then on). It returns the error of a lazy claim that was refused.
func (d *delivery) reportClaim() (string, *schemas.ReportClaim, error) {
	d.claimMu.Lock()
	defer d.claimMu.Unlock()
	switch {
	case d.tok != "":
		return d.tok, nil, nil
	case d.lazyErr != nil:
		return "", nil, d.lazyErr
	}
	d.sealed = true
	return "", &schemas.ReportClaim{Executor: d.w.cfg.Executor, ExecutorVersion: d.w.cfg.Version}, nil
}

// reportAuth returns what a report of the job carries: the attempt's token
// (claiming it first when needToken: a wait is a command of a running
// attempt), or, for a success or failure of a job that did not claim, the
// claim.
func (d *delivery) reportAuth(ctx context.Context, needToken bool) (string, *schemas.ReportClaim, error) {
	if needToken {
		tok, err := d.token(ctx)
		return tok, nil, err
	}
	return d.reportClaim()
}

// refusedLazily reports whether the job's lazy claim was refused.
func (d *delivery) refusedLazily() bool {
	d.claimMu.Lock()
	defer d.claimMu.Unlock()
	return d.lazyErr != nil
}

// claimLazily claims the attempt of a job that started without a claim
// (claimMu held). The item carried the task, so the reply need not.
func (d *delivery) claimLazily(ctx context.Context) (string, error) {
	it := &d.item
	body, id := d.claimRequest(true)
	r, err := d.w.c.command(ctx, "task.claim", body, id)
	if err != nil {
		return "", err
	}
	if !r.OK {
		cause := ErrLeaseLost
		if r.Error.Code == schemas.CodeConflict || r.Error.Code == schemas.CodeNotFound {
			cause = d.endedCause(ctx)
		}
		return "", d.refuseLazily(cause, "the lazy claim was refused ("+r.Error.Code+"): "+r.Error.Message)
	}
	var cr schemas.CommandResult
	if err := json.Unmarshal(r.Result, &cr); err != nil {
		return "", fmt.Errorf("executors: a claim reply that does not decode: %w", err)
	}
	if cr.State != schemas.StateRunning || cr.Attempt != it.Attempt || cr.Token == "" {
		// The claim ended the task (attempts or budget spent), or
		// answered for another attempt: this job's attempt never runs.
		cause := ErrLeaseLost
		if schemas.Terminal(cr.State) {
			cause = ErrCancelled
		}
		return "", d.refuseLazily(cause, fmt.Sprintf("the lazy claim started no attempt %d; task is %s", it.Attempt, cr.State))
	}
	d.tok = cr.Token
	if !d.jobEnded { // an ended job's heartbeats are retired
		d.beat.Store(&schemas.Heartbeat{TaskID: it.TaskID, Attempt: it.Attempt, Token: cr.Token})
	}
	return cr.Token, nil
}

// refuseLazily records that the job's attempt cannot be claimed and
// cancels the job with cause (claimMu held).
func (d *delivery) refuseLazily(cause error, why string) error {
	d.lazyErr = fmt.Errorf("%w: %s", cause, why)
	if d.cancelJob != nil {
		d.cancelJob(cause)
	}
	return d.lazyErr
}

// endedCause returns why an unclaimed job's attempt was refused:
// ErrCancelled when the task has ended, ErrLeaseLost otherwise (another
// delivery of the item claimed it).
func (d *delivery) endedCause(ctx context.Context) error {
	if d.watching != nil && d.watching.terminal() {
		return ErrCancelled
	}
	if t, err := d.getTask(ctx, d.item.TaskID); err == nil && schemas.Terminal(t.State) {
		return ErrCancelled
	}
	return ErrLeaseLost
}
