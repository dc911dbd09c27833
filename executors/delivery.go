package executors

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	fastjson "github.com/go-json-experiment/json/v1"
	"go.opentelemetry.io/otel/trace"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/schemas"
)

// Job outcomes, as logged (key "outcome"), one line per delivery.
const (
	outcomeSucceeded = "succeeded"          // reported and recorded
	outcomeFailed    = "failed"             // a retryable failure, recorded
	outcomePermanent = "failed_permanently" // a failure that is not retried, recorded
	outcomeRefused   = "refused"            // the report was refused: the attempt no longer held the task
	outcomeStopped   = "stopped"            // the worker stopped first; the item will be redelivered
	outcomeUnsettled = "unsettled"          // not reported; the item will be redelivered
	outcomeSkipped   = "skipped"            // a stale or unusable item: no job ran
	outcomeWaiting   = "waiting"            // the handler parked the task: a later attempt resumes it
	outcomeVerified  = "verified"           // a verifier's verdict was recorded
)

// delivery is one work item delivered to this worker, from its receipt to
// its acknowledgement.
type delivery struct {
	w         *Worker
	msg       jetstream.Msg // nil for a handed attempt (handoff.go)
	item      schemas.WorkItem
	encrypted bool // the item carries sealed payloads (dropped: read opened)
	delivered uint64
	received  time.Time
	// beat is the heartbeat of the attempt the delivery runs, once claimed,
	// until the attempt reports.
	beat atomic.Pointer[schemas.Heartbeat]
	// beating is held while a heartbeat is sent, so that retireBeat can
	// wait for one in flight.
	beating sync.Mutex

	// The attempt's claim (lazy_claim.go), under claimMu: watching is the
	// job's watch of its task's events; tok is the attempt's token once
	// claimed; lazy is set when the job started without a claim; jobEnded
	// once the handler returned (no claim is made for its heartbeats any
	// more); sealed once its report carries the claim; lazyErr when a lazy
	// claim was refused; cancelJob cancels the job.
	claimMu   sync.Mutex
	watching  *watch
	tok       string
	lazy      bool
	jobEnded  bool
	sealed    bool
	lazyErr   error
	cancelJob context.CancelCauseFunc

	// next is the attempt the job's report was handed (handoff.go).
	next *schemas.Handoff
}

// retireBeat ends the attempt's heartbeats, once any in flight is answered:
// the attempt's report then reaches the service after its last heartbeat,
// never before it (a heartbeat handled after the attempt ended is refused
// as a stale attempt's). The item's lease is still renewed until it is
// settled.
func (d *delivery) retireBeat() {
	d.beating.Lock()
	defer d.beating.Unlock()
	d.beat.Store(nil)
}

// deliver handles one work item: claim (or not yet: lazy_claim.go), run,
// report, acknowledge — and then each attempt its report was handed, in
// turn (handoff.go). It returns once the item is settled (acknowledged,
// handed back, or left to be redelivered) and every goroutine it started
// has ended.
func (w *Worker) deliver(hard context.Context, msg jetstream.Msg) {
	next, job := w.deliverItem(hard, msg)
	for next != nil {
		next, job = w.runHanded(hard, next, job)
	}
}

// deliverItem handles one work item, and returns the attempt its report
// was handed, if any, and the job's span.
func (w *Worker) deliverItem(hard context.Context, msg jetstream.Msg) (*schemas.Handoff, trace.SpanContext) {
	hard, span := w.traceJob(hard, msg)
	defer span.End()
	d := &delivery{w: w, msg: msg, received: time.Now()}
	d.deliver(hard, msg)
	return d.next, span.SpanContext()
}

func (d *delivery) deliver(hard context.Context, msg jetstream.Msg) {
	w := d.w
	meta, err := msg.Metadata()
	if err != nil {
		w.log.Error("executors: a message without JetStream metadata on the work consumer", logErr, err)
		return
	}
	d.delivered = meta.NumDelivered
	// Sealed payloads (the service encrypts them) are opened here when
	// the queue's key seals them all (queue_keys.go); else they are read
	// opened from the service: an execute item then runs from the task as
	// task.get answers it (or, when the views do not show it ready for the
	// item's attempt yet, from its claim's), a verify item from task.get.
	data := msg.Data()
	d.encrypted = bytes.Contains(data, []byte(schemas.SealedPrefix))
	if d.encrypted {
		if plain, ok := w.openItem(hard, data); ok {
			data, d.encrypted = plain, false
		}
	}
	err = fastjson.Unmarshal(data, &d.item)
	kind := schemas.WorkKindExecute
	if w.verify != nil {
		kind = schemas.WorkKindVerify
	}
	if err == nil {
		err = checkItem(&d.item, w.cfg.Workspace, w.cfg.Queue, kind)
	}
	if err != nil {
		// An item this SDK cannot run (malformed, or of a kind it does not
		// know): hand it back for an executor that can, and past MaxDeliver
		// to the service's quarantine, which fails its task visibly.
		w.log.Error("executors: a work item this worker cannot run; handing it back", logTask, d.item.TaskID,
			logErr, err, "stream_seq", meta.Sequence.Stream, logDelivered, d.delivered)
		_ = msg.NakWithDelay(w.leaseOf())
		return
	}
	if d.encrypted {
		d.item.Task, d.item.Dependencies = nil, nil
	}
	if w.verify != nil {
		d.judge(hard, msg)
		return
	}
	if d.encrypted && d.delivered == 1 {
		it := &d.item
		// Read at least the record that dispatched the item, so that the
		// task is seen ready for it (and the job may start lazily).
		if t, err := d.getTask(hard, it.TaskID, client.MinSeq(it.Seq)); err == nil && t.State == schemas.StateReady && t.AttemptCount()+1 == it.Attempt {
			it.Task = t
		}
	}

	// The lease is renewed from receipt until the item is settled.
	defer d.startHeartbeats()()

	// The task's events are watched from before the claim, so that none
	// that ends the attempt is missed.
	watch := d.watch()
	defer watch.stop()
	lazy := d.lazyItem(meta.Timestamp)
	d.claimMu.Lock()
	d.watching, d.lazy = watch, lazy
	d.claimMu.Unlock()

	if lazy {
		// The job runs on the item's task, and claims lazily.
		d.run(hard, d.item.Task, &schemas.Attempt{N: d.item.Attempt, OperationKey: d.item.OperationKey}, watch)
		return
	}
	task, attempt, token, ok := d.claim(hard)
	if !ok {
		return
	}
	d.claimMu.Lock()
	d.tok = token
	d.claimMu.Unlock()
	d.beat.Store(&schemas.Heartbeat{TaskID: task.ID, Attempt: attempt.N, Token: token})
	d.run(hard, task, attempt, watch)
}

// startHeartbeats runs heartbeat until the function it returns is called,
// which waits for it to end.
func (d *delivery) startHeartbeats() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var hb sync.WaitGroup
	hb.Go(func() { d.heartbeat(ctx) })
	return func() { cancel(); hb.Wait() }
}

// heartbeat renews the work item's lease every Lease/3 until ctx ends and,
// once the attempt is claimed, tells the service the attempt is alive
// (task.heartbeat), so that no claim supersedes it within its lease.
func (d *delivery) heartbeat(ctx context.Context) {
	t := time.NewTicker(d.w.leaseOf() / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if d.w.pauseHeartbeats.Load() {
				continue
			}
			if d.msg != nil {
				if err := d.msg.InProgress(); err != nil {
					d.w.log.Debug("executors: lease renewal failed", logTask, d.item.TaskID, logErr, err)
				}
			}
			d.claimAtHeartbeat(ctx)
			d.beating.Lock()
			if b := d.beat.Load(); b != nil {
				d.w.c.heartbeat(ctx, b, d.w.leaseOf()/3)
			}
			d.beating.Unlock()
		}
	}
}

// supersedeTries bounds the claims a delivery makes to supersede an
// attempt that the service still counts as alive.
const supersedeTries = 3

// claimRequest returns the body and the command id of this delivery's
// claim of its attempt, made first or lazily: one id per delivery, so that
// a claim sent again is answered with its first outcome.
func (d *delivery) claimRequest(omitTask bool) (schemas.ClaimTask, string) {
	it := &d.item
	return schemas.ClaimTask{TaskID: it.TaskID, Executor: d.w.cfg.Executor, ExecutorVersion: d.w.cfg.Version, OmitTask: omitTask},
		fmt.Sprintf("claim.%s.%d.%d", it.TaskID, it.Attempt, d.delivered)
}

// claim starts the attempt and returns it with its token. On a redelivered
// item whose task is still running an attempt started from this item (its
// holder lost the lease), it claims again superseding that attempt — once
// the service counts its lease as lapsed. It settles the item itself and
// returns false when no job is to run.
func (d *delivery) claim(ctx context.Context) (*schemas.Task, *schemas.Attempt, string, bool) {
	it := &d.item
	// The reply carries the task when the item did not, or when the claim
	// supersedes an attempt (the item's task is stale then).
	body, id := d.claimRequest(it.Task != nil)
	r, err := d.w.c.command(ctx, "task.claim", body, id)
	if err != nil {
		d.done(outcomeStopped, 0, logErr, err)
		return nil, nil, "", false
	}
	if !r.OK && r.Error.Code == schemas.CodeConflict && d.delivered > 1 {
		// The service found the task not ready: a view still showing it
		// ready is behind.
		t, err := d.taskAfter(ctx, func(t *schemas.Task) bool { return t.State != schemas.StateReady })
		if err != nil {
			d.done(outcomeUnsettled, 0, logErr, err) // redelivered after the lease
			return nil, nil, "", false
		}
		if a, ok := runningFromItem(t, it.Attempt); ok {
			body.Supersedes = a.N
			for try := 1; ; try++ {
				r, err = d.w.c.command(ctx, "task.claim", body, id+".s"+strconv.Itoa(a.N))
				if err != nil {
					d.done(outcomeStopped, 0, logErr, err)
					return nil, nil, "", false
				}
				if r.OK || r.Error.Code != schemas.CodeConflict {
					break
				}
				// The service still counts the attempt alive within its
				// lease (its last heartbeat reached the service a moment
				// after the item's last renewal reached JetStream): the
				// item stays ours while we wait for the moment it names.
				if wait, ok := d.supersedeWait(r.Error); ok && try < supersedeTries {
					select {
					case <-time.After(wait):
						continue
					case <-ctx.Done():
						d.done(outcomeStopped, 0, logErr, context.Cause(ctx))
						return nil, nil, "", false
					}
				}
				// The task moved on since it was read (the views of a
				// replica may lag), or its attempt is alive: look again at
				// the next delivery rather than drop an item that may
				// still be this task's only one.
				_ = d.msg.NakWithDelay(d.w.leaseOf())
				d.done(outcomeSkipped, 0, logReason, "supersede refused: "+r.Error.Message)
				return nil, nil, "", false
			}
		}
	}
	if !r.OK {
		switch r.Error.Code {
		case schemas.CodeConflict, schemas.CodeNotFound:
			// The task is no longer ready: the item is stale.
			d.ack()
			d.done(outcomeSkipped, 0, logReason, r.Error.Message)
		default:
			// Refused for another reason (forbidden, invalid, internal):
			// hand it back; past MaxDeliver the service quarantines it.
			d.w.log.Error("executors: claim refused", logTask, it.TaskID, "code", r.Error.Code, logErr, r.Error.Message)
			_ = d.msg.NakWithDelay(d.w.leaseOf())
			d.done(outcomeSkipped, 0, logReason, "claim refused: "+r.Error.Code)
		}
		return nil, nil, "", false
	}
	var cr schemas.CommandResult
	if err := fastjson.Unmarshal(r.Result, &cr); err != nil {
		d.w.log.Error("executors: a claim reply that does not decode", logTask, it.TaskID, logErr, err)
		_ = d.msg.NakWithDelay(d.w.leaseOf())
		return nil, nil, "", false
	}
	t := cr.Task
	var a *schemas.Attempt
	switch {
	case t != nil:
		a = t.Attempt(cr.Attempt)
	case it.Task != nil && cr.TokenHash != "" && cr.Attempt == it.Task.AttemptCount()+1:
		// The claim started the item's attempt on the task the item
		// carries: the job runs on it (the attempt's deadline is counted
		// from the item's receipt, a moment before the claim's own).
		t = it.Task
		a = &schemas.Attempt{N: cr.Attempt, Executor: d.w.cfg.Executor, ExecutorVersion: d.w.cfg.Version,
			OperationKey: it.OperationKey, State: schemas.AttemptStateRunning, TokenHash: cr.TokenHash}
	default:
		if t, err = d.getTask(ctx, d.item.TaskID); err != nil {
			d.done(outcomeStopped, 0, logErr, err)
			return nil, nil, "", false
		}
		a = t.Attempt(cr.Attempt)
	}
	if cr.State != schemas.StateRunning || a == nil || a.State != schemas.AttemptStateRunning || a.Executor != d.w.cfg.Executor {
		// The claim ended the task (attempts or budget spent) or answered
		// for another attempt: nothing to run.
		d.ack()
		d.done(outcomeSkipped, cr.Attempt, logReason, "the claim started no attempt; task is "+cr.State)
		return nil, nil, "", false
	}
	if cr.Token == "" {
		// Our attempt runs, but without its token none of its commands
		// would be taken (the service's token key changed since the claim
		// was first answered): leave the item to be redelivered after the
		// lease, when a claim supersedes the attempt.
		d.w.log.Error("executors: the claim's reply carries no token", logTask, it.TaskID, logAttempt, cr.Attempt)
		d.done(outcomeUnsettled, cr.Attempt, logReason, "the claim returned no token")
		return nil, nil, "", false
	}
	return t, a, cr.Token, true
}

// supersedeWait returns how long to wait before claiming again a task whose
// attempt the service still counts alive, as its refusal says: at most a
// lease and a few seconds, else false.
func (d *delivery) supersedeWait(e *schemas.Error) (time.Duration, bool) {
	if e.RetryAfter == nil {
		return 0, false
	}
	wait := time.Until(*e.RetryAfter) + 10*time.Millisecond
	if wait > d.w.leaseOf()+5*time.Second {
		return 0, false
	}
	return max(wait, 0), true
}

// job builds the handler's Job from the task it runs on — the item's (a
// job that claims lazily, or whose claim's reply omitted it), the claim's
// reply's, or the views' — and its attempt, with the attempt's token when
// it was claimed first.
func (d *delivery) job(t *schemas.Task, a *schemas.Attempt) *Job {
	j := &Job{TaskID: t.ID, Workspace: t.Workspace, Queue: t.Spec.Queue, GoalID: t.GoalID, Key: t.Key,
		Title: t.Spec.Title, Attempt: a.N, Token: d.tok, OperationKey: a.OperationKey, Input: t.Spec.Input,
		Checkpoint: t.Checkpoint, Signal: t.Signal, Decisions: decisionsOf(t), Omitted: t.Omitted, artifacts: d.w.c.c}
	if t.Spec.Approval != nil {
		j.approvalRole = t.Spec.Approval.Role
	}
	for _, p := range t.Attempts {
		if p.N < a.N {
			j.PriorAttempts = append(j.PriorAttempts, p)
		}
	}
	for _, v := range t.Verifications {
		if v.Outcome == schemas.OutcomeFail {
			j.Verifications = append(j.Verifications, v)
		}
	}
	switch timeout := t.Spec.Timeout.D(); {
	case a.Deadline != nil:
		j.Deadline = *a.Deadline
	case timeout > 0 && a.StartedAt.IsZero():
		j.Deadline = d.received.Add(timeout)
	case timeout > 0:
		j.Deadline = a.StartedAt.Add(timeout)
	}
	return j
}

// run runs the handler for the attempt (claimed, or to be claimed lazily)
// and reports what it returned.
func (d *delivery) run(hard context.Context, t *schemas.Task, a *schemas.Attempt, watch *watch) {
	d.claimMu.Lock()
	job := d.job(t, a) // reads the token, when the attempt was claimed first
	d.claimMu.Unlock()
	deps, err := d.dependencies(hard, t)
	if err != nil {
		d.report(hard, job, Report{Failure: &Failure{Code: CodeDependencies, Retryable: true,
			Message: clip("the results of the task's dependencies could not be read: "+err.Error(), maxMessage)}}, watch)
		return
	}
	job.Dependencies = deps
	if job.Delegations, err = delegationsOf(hard, t, d.endedTask); err != nil {
		d.report(hard, job, Report{Failure: &Failure{Code: CodeDelegations, Retryable: true,
			Message: clip("the results of the task's delegations could not be read: "+err.Error(), maxMessage)}}, watch)
		return
	}
	jctx, cancel := context.WithCancelCause(hard)
	defer cancel(nil)
	d.claimMu.Lock()
	d.cancelJob = cancel
	d.claimMu.Unlock()
	if !job.Deadline.IsZero() {
		var stop context.CancelFunc
		jctx, stop = context.WithDeadlineCause(jctx, job.Deadline, ErrTimeout)
		defer stop()
	}
	watch.bind(job.Attempt, cancel)
	job.save = d.checkpointer(hard, job, cancel, watch)
	job.ask = d.approvals(hard, job, cancel, watch)
	job.delegate = d.delegations(hard, job, cancel, watch)

	res, err := Call(jctx, d.w.h, job)
	rep := ReportFor(jctx, res, err)
	d.claimMu.Lock()
	d.jobEnded = true // its heartbeats claim no more
	d.claimMu.Unlock()
	d.retireBeat()
	if hard.Err() != nil {
		d.done(outcomeStopped, job.Attempt, logReason, "the drain timeout passed; the item will be redelivered")
		return
	}
	d.report(hard, job, rep, watch)
}

// report sends the attempt's success or failure, then settles the item.
func (d *delivery) report(ctx context.Context, job *Job, rep Report, watch *watch) {
	var r *schemas.Reply
	var err error
	switch {
	case rep.Wait != nil && (rep.Wait.ApprovalID != "" || rep.Wait.GoalID != ""):
		// RequestApproval recorded the request, or Delegate the
		// delegation, which parked the attempt: there is nothing more to
		// report.
		d.ack()
		d.done(outcomeWaiting, job.Attempt, logReason, rep.Wait.Error())
		return
	}
	// A wait needs the attempt claimed; a success or failure of a job that
	// is not carries the claim instead.
	token, claim, err := d.reportAuth(ctx, rep.Wait != nil)
	if err != nil {
		if d.refusedLazily() {
			watch.end(ErrLeaseLost)
			d.settleFenced(ctx, job, watch, err.Error(), true)
			return
		}
		d.done(outcomeUnsettled, job.Attempt, logErr, err)
		return
	}
	switch {
	case rep.Wait != nil && rep.Wait.Approval != nil:
		// A request the handler made up itself: send it now.
		body, digest, berr := approvalBodyOf(job, *rep.Wait.Approval)
		if berr != nil {
			rep.Wait, rep.Failure = nil, &Failure{Code: CodeInvalidResult, Message: clip("the approval request cannot be sent: "+berr.Error(), maxMessage)}
			break
		}
		wait := *rep.Wait
		wait.ActionDigest = digest
		rep.Wait = &wait
		body.Token = token
		r, err = d.w.c.command(ctx, "task.request_approval", body, approvalCommandID(job.TaskID, job.Attempt, wait.ActionDigest))
		switch {
		case err != nil:
		case r.OK:
			var cr schemas.CommandResult
			if json.Unmarshal(r.Result, &cr) == nil {
				wait.ApprovalID = cr.ApprovalID
			}
		case r.Error.Code == schemas.CodeInvalid || r.Error.Code == schemas.CodeTooLarge:
			rep.Wait, rep.Failure = nil, &Failure{Code: CodeInvalidResult, Message: clip("the service refused the approval request: "+r.Error.Message, maxMessage)}
		}
	case rep.Wait != nil && rep.Wait.Delegation != nil:
		// A delegation not sent yet: send it now.
		body, berr := delegateBodyOf(job, *rep.Wait.Delegation)
		if berr != nil {
			rep.Wait, rep.Failure = nil, &Failure{Code: CodeInvalidResult, Message: clip("the delegation cannot be sent: "+berr.Error(), maxMessage)}
			break
		}
		body.Token = token
		r, err = d.w.c.command(ctx, "task.delegate", body, delegateCommandID(job.TaskID, job.Attempt, body.Key))
		if err == nil && !r.OK && !fencedRefusal(r.Error) {
			rep.Wait, rep.Failure = nil, &Failure{Code: CodeInvalidResult, Message: clip("the service refused the delegation: "+r.Error.Message, maxMessage)}
		}
	case rep.Wait != nil:
		body := waitBodyOf(job, rep.Wait)
		body.Token = token
		r, err = d.w.c.command(ctx, "task.wait", body, fmt.Sprintf("wait.%s.%d", job.TaskID, job.Attempt))
		if err == nil && !r.OK && r.Error.Code == schemas.CodeInvalid {
			rep.Wait, rep.Failure = nil, &Failure{Code: CodeInvalidResult, Message: clip("the service refused the wait: "+r.Error.Message, maxMessage)}
		}
	case rep.Failure == nil:
		r, err = d.w.c.command(ctx, "task.succeed", schemas.ReportSuccess{TaskID: job.TaskID, Attempt: job.Attempt, Token: token, Claim: claim,
			Result: rep.Output, Artifacts: rep.Artifacts, ModelSteps: rep.ModelSteps, Next: d.askNext()},
			d.reportID("succeed", job, claim))
		if err == nil && !r.OK && (r.Error.Code == schemas.CodeInvalid || r.Error.Code == schemas.CodeTooLarge) {
			rep.Failure = &Failure{Code: CodeInvalidResult, Message: clip("the service refused the result: "+r.Error.Message, maxMessage)}
		}
	}
	if rep.Failure != nil {
		r, err = d.w.c.command(ctx, "task.fail", schemas.ReportFailure{TaskID: job.TaskID, Attempt: job.Attempt, Token: token, Claim: claim,
			Error: ErrorInfo{Code: rep.Failure.Code, Message: rep.Failure.Message}, Retryable: rep.Failure.Retryable,
			ModelSteps: rep.ModelSteps, Next: d.askNext()},
			d.reportID("fail", job, claim))
	}
	switch {
	case err != nil:
		d.done(outcomeUnsettled, job.Attempt, logErr, err)
	case r.OK:
		d.ack()
		var cr schemas.CommandResult
		decoded := rep.Wait == nil && fastjson.Unmarshal(r.Result, &cr) == nil
		if decoded && cr.Next != nil && cr.Next.Token != "" && cr.Next.Item != nil {
			d.next = cr.Next
		}
		switch {
		case claim != nil && decoded && cr.Attempt != job.Attempt:
			// The report's claim failed the task instead of starting the
			// attempt (its goal's budget or its attempts were spent), as a
			// claim would have: the report was not recorded.
			d.done(outcomeRefused, job.Attempt, logReason, "the report's claim started no attempt; task is "+cr.State)
		case rep.Wait != nil:
			d.done(outcomeWaiting, job.Attempt, logReason, rep.Wait.Error())
		case rep.Failure == nil:
			d.done(outcomeSucceeded, job.Attempt)
		case rep.Failure.Retryable:
			d.done(outcomeFailed, job.Attempt, logErr, rep.Failure.Error())
		default:
			d.done(outcomePermanent, job.Attempt, logErr, rep.Failure.Error())
		}
	case r.Error.Code == schemas.CodeConflict || r.Error.Code == schemas.CodeNotFound:
		watch.end(ErrLeaseLost)
		d.settleFenced(ctx, job, watch, r.Error.Message, claim != nil)
	default:
		// Refused for another reason: leave the item to be redelivered,
		// so that a later attempt supersedes this one.
		d.w.log.Error("executors: report refused", logTask, job.TaskID, logAttempt, job.Attempt,
			"code", r.Error.Code, logErr, r.Error.Message)
		d.done(outcomeUnsettled, job.Attempt, logReason, "report refused: "+r.Error.Code)
	}
}

// reportID returns the command id of the job's report: "<kind>.<task>.<attempt>"
// — and ".<delivery>" after it when the report carries its claim. Two
// deliveries of one item may both report attempt n without a claim between
// them (a holder that hung before claiming, and the redelivery that claimed
// n), and under one identity (a credential shared by several workers) the
// same id would answer the hung one's report with the other's outcome.
func (d *delivery) reportID(kind string, job *Job, claim *schemas.ReportClaim) string {
	if claim != nil {
		return fmt.Sprintf("%s.%s.%d.%d", kind, job.TaskID, job.Attempt, d.delivered)
	}
	return fmt.Sprintf("%s.%s.%d", kind, job.TaskID, job.Attempt)
}

// settleFenced settles the item of an attempt whose report was refused
// because it no longer holds the task — or, when unclaimed, of a job that
// never started its attempt and found the task no longer ready for it. The
// item is acknowledged unless a redelivery of it now runs an attempt of its
// own: JetStream acknowledges by stream sequence, so acknowledging here
// would remove the item from under that delivery's holder.
func (d *delivery) settleFenced(ctx context.Context, job *Job, watch *watch, why string, unclaimed bool) {
	if !watch.terminal() {
		// The service found this attempt not running (or the task not
		// ready for it): a view that still shows it so is behind.
		t, err := d.taskAfter(ctx, func(t *schemas.Task) bool {
			if unclaimed {
				return t.State != schemas.StateReady || t.AttemptCount()+1 != job.Attempt
			}
			r := running(t)
			return r == nil || r.N != job.Attempt
		})
		if err != nil {
			d.done(outcomeUnsettled, job.Attempt, logErr, err)
			return
		}
		if a, ok := runningFromItem(t, d.item.Attempt); ok && (a.N > job.Attempt || unclaimed) {
			d.done(outcomeRefused, job.Attempt, logReason, why+" (attempt "+strconv.Itoa(a.N)+" holds the item)")
			return
		}
	}
	d.ack()
	d.done(outcomeRefused, job.Attempt, logReason, why)
}

// checkpointer returns the job's checkpoint store: task.checkpoint commands
// with an id per save, serialised, retried until answered.
func (d *delivery) checkpointer(hard context.Context, job *Job, cancel context.CancelCauseFunc, watch *watch) CheckpointFunc {
	var mu sync.Mutex
	seq := 0
	return func(ctx context.Context, raw json.RawMessage) error {
		mu.Lock()
		defer mu.Unlock()
		seq++
		id := fmt.Sprintf("checkpoint.%s.%d.%d", job.TaskID, job.Attempt, seq)
		rctx, stop := mergeCancel(ctx, hard)
		defer stop()
		token, err := d.token(rctx)
		if err != nil {
			return fmt.Errorf("executors: checkpoint of task %s not saved: %w", job.TaskID, err)
		}
		r, err := d.w.c.command(rctx, "task.checkpoint", schemas.SaveCheckpoint{TaskID: job.TaskID, Attempt: job.Attempt, Token: token, Checkpoint: raw}, id)
		switch {
		case err != nil:
			return fmt.Errorf("executors: checkpoint of task %s not saved: %w", job.TaskID, err)
		case r.OK:
			return nil
		case r.Error.Code == schemas.CodeConflict || r.Error.Code == schemas.CodeNotFound:
			cause := d.fencedCause(rctx, job, watch)
			cancel(cause)
			return fmt.Errorf("%w: checkpoint refused: %s", cause, r.Error.Message)
		}
		return &CommandError{Command: "task.checkpoint", Code: r.Error.Code, Message: r.Error.Message}
	}
}

// fencedCause returns why the service refused a command of the job's
// attempt as not holding the task: ErrCancelled when the task has ended,
// ErrLeaseLost otherwise.
func (d *delivery) fencedCause(ctx context.Context, job *Job, watch *watch) error {
	if watch.terminal() {
		return ErrCancelled
	}
	if t, err := d.taskAfter(ctx, func(t *schemas.Task) bool {
		r := running(t)
		return r == nil || r.N != job.Attempt
	}); err == nil && schemas.Terminal(t.State) {
		return ErrCancelled
	}
	return ErrLeaseLost
}

// approvals returns the job's approval requester: task.request_approval
// commands, with an id per attempt and action, retried until answered.
func (d *delivery) approvals(hard context.Context, job *Job, cancel context.CancelCauseFunc, watch *watch) approvalFunc {
	return func(ctx context.Context, body schemas.RequestApproval, digest string) (string, error) {
		rctx, stop := mergeCancel(ctx, hard)
		defer stop()
		r, err := d.attemptCommand(rctx, job, "approval request", "task.request_approval", approvalCommandID(job.TaskID, job.Attempt, digest),
			func(token string) any { body.Token = token; return body })
		switch {
		case err != nil:
			return "", err
		case r.OK:
			var cr schemas.CommandResult
			if err := json.Unmarshal(r.Result, &cr); err == nil && cr.ApprovalID != "" {
				return cr.ApprovalID, nil
			}
			// Recorded, but the reply (a duplicate's) does not name the
			// approval: the task does.
			var found string
			_, err := d.taskAfter(rctx, func(t *schemas.Task) bool {
				for i := len(t.Approvals) - 1; i >= 0 && found == ""; i-- {
					if a := t.Approvals[i]; a.Attempt == job.Attempt && a.ActionDigest == digest {
						found = a.ID
					}
				}
				return found != ""
			})
			if err != nil {
				// The task waits all the same; the worker sends the request
				// again (a duplicate) when the handler returns.
				d.w.log.Warn("executors: cannot tell which approval a request recorded", logTask, job.TaskID, logErr, err)
			}
			return found, nil
		case r.Error.Code == schemas.CodeConflict || r.Error.Code == schemas.CodeNotFound:
			cause := d.fencedCause(rctx, job, watch)
			cancel(cause)
			return "", fmt.Errorf("%w: approval request refused: %s", cause, r.Error.Message)
		case r.Error.Code == schemas.CodeInvalid || r.Error.Code == schemas.CodeTooLarge:
			return "", Permanent(&CommandError{Command: "task.request_approval", Code: r.Error.Code, Message: r.Error.Message})
		}
		return "", &CommandError{Command: "task.request_approval", Code: r.Error.Code, Message: r.Error.Message}
	}
}

// mergeCancel returns a context that ends with ctx or with also.
func mergeCancel(ctx, also context.Context) (context.Context, func()) {
	m, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(also, func() { cancel(context.Cause(also)) })
	return m, func() { stop(); cancel(nil) }
}

// viewLag bounds how long taskAfter waits for the views to catch up with a
// refusal the writer decided.
const viewLag = 5 * time.Second

// taskAfter reads the task from the views once they reflect what a refusal
// said (current reports whether a read does): the views follow the writer's
// commits by a moment, and a replica's by more.
func (d *delivery) taskAfter(ctx context.Context, current func(*schemas.Task) bool) (*schemas.Task, error) {
	t, err := d.readTask(ctx, d.item.TaskID, current)
	if errors.Is(err, errViewLag) {
		return nil, fmt.Errorf("executors: the views still show task %s as %s, which the service refused", d.item.TaskID, t.State)
	}
	return t, err
}

// errViewLag is readTask's error when the views did not show the task as
// wanted within viewLag.
var errViewLag = errors.New("executors: the views did not catch up")

// readTask reads task id from the views until ok holds for it, for up to
// viewLag; past it, it returns the last read with errViewLag.
func (d *delivery) readTask(ctx context.Context, id string, ok func(*schemas.Task) bool) (*schemas.Task, error) {
	deadline := time.Now().Add(viewLag)
	for {
		t, err := d.getTask(ctx, id)
		if err != nil || ok(t) {
			return t, err
		}
		if time.Now().After(deadline) {
			return t, errViewLag
		}
		tick := time.NewTimer(50 * time.Millisecond)
		select {
		case <-tick.C:
		case <-ctx.Done():
			tick.Stop()
			return nil, context.Cause(ctx)
		}
	}
}

// endedTask reads task id from the views once they show it ended.
func (d *delivery) endedTask(ctx context.Context, id string) (*schemas.Task, error) {
	t, err := d.readTask(ctx, id, func(t *schemas.Task) bool { return schemas.Terminal(t.State) })
	if errors.Is(err, errViewLag) {
		return nil, fmt.Errorf("executors: task %s is %s, not ended", id, t.State)
	}
	return t, err
}

// delegations returns the delegateFunc of job: it records a delegation of
// the attempt (claiming it first when it was not) and returns the child
// goal's id.
func (d *delivery) delegations(hard context.Context, job *Job, cancel context.CancelCauseFunc, watch *watch) delegateFunc {
	return func(ctx context.Context, body schemas.DelegateTask) (string, error) {
		rctx, stop := mergeCancel(ctx, hard)
		defer stop()
		r, err := d.attemptCommand(rctx, job, "delegation", "task.delegate", delegateCommandID(job.TaskID, job.Attempt, body.Key),
			func(token string) any { body.Token = token; return body })
		switch {
		case err != nil:
			return "", err
		case r.OK:
			return delegatedResult(r.Result), nil
		case fencedRefusal(r.Error):
			cause := d.fencedCause(rctx, job, watch)
			cancel(cause)
			return "", fmt.Errorf("%w: delegation refused: %s", cause, r.Error.Message)
		case r.Error.Code == schemas.CodeUnavailable || r.Error.Code == schemas.CodeInternal:
			return "", &CommandError{Command: "task.delegate", Code: r.Error.Code, Message: r.Error.Message}
		}
		return "", Permanent(&CommandError{Command: "task.delegate", Code: r.Error.Code, Message: r.Error.Message})
	}
}

// attemptCommand sends command name (what, for its errors) of job's
// attempt under command id id, claiming the attempt first when it was not:
// withToken returns the body with the attempt's token.
func (d *delivery) attemptCommand(ctx context.Context, job *Job, what, name, id string, withToken func(token string) any) (*schemas.Reply, error) {
	token, err := d.token(ctx)
	if err == nil {
		var r *schemas.Reply
		if r, err = d.w.c.command(ctx, name, withToken(token), id); err == nil {
			return r, nil
		}
	}
	return nil, fmt.Errorf("executors: %s of task %s not recorded: %w", what, job.TaskID, err)
}

// fencedRefusal reports whether e refuses a command because its attempt no
// longer holds the task: not the running attempt, the task gone, or a
// token that is not the attempt's.
func fencedRefusal(e *schemas.Error) bool {
	for _, f := range e.Fields {
		switch {
		case f.Pointer == "/attempt" && e.Code == schemas.CodeConflict,
			f.Pointer == "/task_id" && e.Code == schemas.CodeNotFound,
			f.Pointer == "/token":
			return true
		}
	}
	return false
}

// getTask reads task id from the views.
func (d *delivery) getTask(ctx context.Context, id string, opts ...client.CallOption) (*schemas.Task, error) {
	r, err := d.w.c.query(ctx, "task.get", schemas.Query{ID: id}, opts...)
	if err != nil {
		return nil, err
	}
	if !r.OK {
		return nil, &CommandError{Command: "task.get", Code: r.Error.Code, Message: r.Error.Message}
	}
	var t schemas.Task
	if err := json.Unmarshal(r.Result, &t); err != nil {
		return nil, fmt.Errorf("executors: task.get: %w", err)
	}
	return &t, nil
}

func (d *delivery) ack() {
	if d.msg == nil {
		return // a handed attempt has no item
	}
	if err := d.msg.Ack(); err != nil {
		// Redelivered later, found stale, acknowledged then.
		d.w.log.Warn("executors: ack failed", logTask, d.item.TaskID, logErr, err)
	}
}

// done logs the delivery's one line.
func (d *delivery) done(outcome string, attempt int, kv ...any) {
	args := append([]any{logTask, d.item.TaskID, logAttempt, attempt, logOutcome, outcome,
		logDuration, time.Since(d.received).Round(time.Millisecond), logDelivered, d.delivered}, kv...)
	level := d.w.log.Info
	if outcome == outcomeUnsettled || outcome == outcomeStopped {
		level = d.w.log.Warn
	}
	level("executors: job", args...)
}

// watch follows the task's events while its item is held, and cancels the
// job when one ends its attempt: the task cancelled, failed or rejected, or
// the attempt abandoned (superseded) or failed by the service (deadline).
type watch struct {
	taskID string
	w      *watchers

	mu      sync.Mutex
	attempt int                     // 0 until bound
	cancel  context.CancelCauseFunc // nil until bound
	ended   error                   // the task has ended: ErrCancelled
	lost    map[int]error           // attempts ended by the service
}

// endingEvents are the task events that end a job's attempt.
var endingEvents = []string{"cancelled", "failed", "rejected", "attempt_abandoned", "attempt_failed"}

// watchers routes the events that end attempts to the jobs watching their
// tasks. A worker subscribes once per event name (dwr.ev.<ws>.task.*.<name>),
// not once per job: a subscription per job costs the server a change of its
// subject index for every job, and events of tasks that succeed — nearly all
// of them — are never sent to the worker at all.
type watchers struct {
	mu     sync.Mutex
	byTask map[string]map[*watch]struct{}
	subs   []*nats.Subscription
}

// start subscribes to the ending events of the workspace's tasks.
func (ws *watchers) start(nc *nats.Conn, prefix string) error {
	ws.mu.Lock()
	ws.byTask = map[string]map[*watch]struct{}{}
	ws.mu.Unlock()
	for _, name := range endingEvents {
		sub, err := nc.Subscribe(prefix+"*."+name, func(m *nats.Msg) { ws.route(m, prefix, name) })
		if err != nil {
			ws.stop()
			return err
		}
		ws.subs = append(ws.subs, sub)
	}
	return nc.Flush() // the subscriptions are in place before the first job starts
}

func (ws *watchers) stop() {
	for _, sub := range ws.subs {
		_ = sub.Unsubscribe()
	}
	ws.subs = nil
}

// route hands an ending event to the watches of its task.
func (ws *watchers) route(m *nats.Msg, prefix, name string) {
	taskID := strings.TrimSuffix(strings.TrimPrefix(m.Subject, prefix), "."+name)
	ws.mu.Lock()
	var targets []*watch
	for wt := range ws.byTask[taskID] {
		targets = append(targets, wt)
	}
	ws.mu.Unlock()
	if len(targets) == 0 {
		return
	}
	switch name {
	case "cancelled", "failed", "rejected":
		for _, wt := range targets {
			wt.end(ErrCancelled)
		}
	case "attempt_abandoned", "attempt_failed":
		var e struct { // the event's envelope (envelope.json): only the attempt it names
			Data struct {
				Attempt int `json:"attempt"`
			} `json:"data"`
		}
		if err := json.Unmarshal(m.Data, &e); err != nil || e.Data.Attempt == 0 {
			return
		}
		cause := ErrLeaseLost
		if name == "attempt_failed" {
			cause = ErrTimeout // the service fails a running attempt only at its deadline
		}
		for _, wt := range targets {
			wt.endAttempt(e.Data.Attempt, cause)
		}
	}
}

func (d *delivery) watch() *watch {
	ws := &d.w.watchers
	wt := &watch{taskID: d.item.TaskID, w: ws, lost: map[int]error{}}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.byTask == nil {
		d.w.log.Warn("executors: the task's events are not watched; cancellation reaches the job only through refused checkpoints",
			logTask, d.item.TaskID)
		return wt
	}
	set := ws.byTask[wt.taskID]
	if set == nil {
		set = map[*watch]struct{}{}
		ws.byTask[wt.taskID] = set
	}
	set[wt] = struct{}{}
	return wt
}

// bind names the attempt the job runs and the cancellation of its context,
// applying whatever was seen before.
func (wt *watch) bind(attempt int, cancel context.CancelCauseFunc) {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	wt.attempt, wt.cancel = attempt, cancel
	if wt.ended != nil {
		cancel(wt.ended)
	} else if c := wt.lost[attempt]; c != nil {
		cancel(c)
	}
}

// end records that the task ended (or that the attempt was fenced) and
// cancels the job.
func (wt *watch) end(cause error) {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	if cause == ErrCancelled && wt.ended == nil {
		wt.ended = cause
	}
	if wt.cancel != nil {
		wt.cancel(cause)
	}
}

func (wt *watch) endAttempt(n int, cause error) {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	if wt.lost[n] == nil {
		wt.lost[n] = cause
	}
	if wt.cancel != nil && wt.attempt == n {
		wt.cancel(cause)
	}
}

// terminal reports whether a terminal event of the task was seen.
func (wt *watch) terminal() bool {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	return wt.ended != nil
}

func (wt *watch) stop() {
	wt.w.mu.Lock()
	defer wt.w.mu.Unlock()
	if set := wt.w.byTask[wt.taskID]; set != nil {
		delete(set, wt)
		if len(set) == 0 {
			delete(wt.w.byTask, wt.taskID)
		}
	}
}

// dependencies returns the accepted outcomes of the tasks t depends on, by
// plan key (by task id for a standalone task's): from the work item when it
// carried them with t, else read with task.get, waiting up to viewLag for
// the views to show each accepted.
func (d *delivery) dependencies(ctx context.Context, t *schemas.Task) (map[string]Dependency, error) {
	if len(t.DependsOn) == 0 {
		return nil, nil
	}
	list := d.item.Dependencies
	if d.item.Task != t || len(list) != len(t.DependsOn) {
		list = make([]Dependency, 0, len(t.DependsOn))
		for _, id := range t.DependsOn {
			dep, err := d.dependency(ctx, id)
			if err != nil {
				return nil, err
			}
			list = append(list, dep)
		}
	}
	out := make(map[string]Dependency, len(list))
	for _, dep := range list {
		k := dep.Key
		if k == "" {
			k = dep.TaskID
		}
		out[k] = dep
	}
	return out, nil
}

// dependency reads task id's accepted outcome with task.get.
func (d *delivery) dependency(ctx context.Context, id string) (Dependency, error) {
	t, err := d.readTask(ctx, id, func(t *schemas.Task) bool { return t.State == schemas.StateAccepted })
	if errors.Is(err, errViewLag) {
		return Dependency{}, fmt.Errorf("executors: dependency %s is %s, not accepted", id, t.State)
	}
	if err != nil {
		return Dependency{}, err
	}
	dep, _ := schemas.DependencyOf(t)
	return dep, nil
}
