package executors

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/dwr-run/dwr/schemas"
)

// The handoff (schemas.Handoff). A report asks for it unless the worker is
// configured not to (Config.NoHandoff), judges verifications, or stops.
// The service then may start, in the report's commit, the attempt of a
// task the report left ready on this queue, and hand it in the reply: its
// token and its work item, opened as a claim's task is (so a worker that
// cannot open its queue's sealed items takes it too). The worker runs it
// at once, in the slot the reported job had, as if it had claimed it — no
// work item, so nothing to acknowledge or renew: the attempt's heartbeats
// keep its lease, and the service abandons it if they stop. Its own report
// may be handed the next one, and so on down a chain.

// askNext reports whether the job's report asks for the handoff.
func (d *delivery) askNext() bool {
	return !d.w.cfg.NoHandoff && d.w.verify == nil && !d.w.stopping.Load()
}

// runHanded runs handed attempt h: the job, its heartbeats, its report. It
// returns the attempt that report was handed, if any, and the job's span,
// a child of the job whose report was handed h (parent).
func (w *Worker) runHanded(hard context.Context, h *schemas.Handoff, parent trace.SpanContext) (*schemas.Handoff, trace.SpanContext) {
	hard, span := w.tracer.Start(trace.ContextWithSpanContext(hard, parent), "dwr.job "+w.cfg.Queue, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("dwr.task_id", h.TaskID), attribute.Int("dwr.attempt", h.Attempt), attribute.Bool("dwr.handed", true)))
	defer span.End()
	d := &delivery{w: w, item: *h.Item, received: time.Now()}
	it := &d.item
	var a *schemas.Attempt
	err := checkItem(it, w.cfg.Workspace, w.cfg.Queue, schemas.WorkKindExecute)
	if err == nil && it.Task != nil && it.TaskID == h.TaskID && it.Attempt == h.Attempt && it.Task.ID == h.TaskID {
		a = it.Task.Attempt(h.Attempt)
	}
	if err != nil || a == nil || a.State != schemas.AttemptStateRunning {
		// Not for this worker to run (a service of another version?): the
		// attempt's lease lapses, and the task goes back to the queue.
		w.log.Error("executors: a handed attempt this worker cannot run; it returns to the queue when its lease lapses",
			logTask, h.TaskID, logAttempt, h.Attempt, logErr, err)
		return nil, span.SpanContext()
	}
	defer d.startHeartbeats()()
	watch := d.watch()
	defer watch.stop()
	d.claimMu.Lock()
	d.watching, d.tok = watch, h.Token
	d.claimMu.Unlock()
	d.beat.Store(&schemas.Heartbeat{TaskID: h.TaskID, Attempt: h.Attempt, Token: h.Token})
	d.run(hard, it.Task, a, watch)
	return d.next, span.SpanContext()
}
