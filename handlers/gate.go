package handlers

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// gate holds back the work items of the queues with a rate limit
// (QueueConfig.RateLimit) or an order by priority (QueueConfig.Order), and
// lets them out into the work stream one at a time, only while the queue's
// consumer has none left to deliver: so that items cannot pile up in the
// stream while no executor takes them and then go out at once, and so that
// the item an executor is handed is the one first in the queue's order
// when it asked — by its task's priority, then as the tasks became ready.
// A rate limit lets out at most RateLimit in any RatePeriodMS, counted from
// the moment each was stored. A queue paused keeps its last item
// undelivered, so nothing more goes out until it is resumed.
//
// What it holds is derived: the ready (or verifying) tasks of the queue
// whose items it has not let out, found again by the writer's start
// (rederive). Its count of the period is the writer's memory: a new writer
// starts it empty. An item let out and lost from the stream (the stream's
// server killed) is let out again once the queue holds nothing and the task
// still waits for that item a while later (the work audit leaves these
// queues to it).
type gate struct {
	mu     sync.Mutex
	queues map[string]*gatedQueue // by "<workspace>/<queue>"
	wake   chan struct{}
}

// gatedQueue is what the gate holds of one queue.
type gatedQueue struct {
	ws, queue string
	limit     int // 0: none (gated for its order)
	period    time.Duration
	ordered   bool                 // by priority: waiting is kept in that order
	sent      []time.Time          // when the items let out within the last period were stored, oldest first (with a limit)
	waiting   []heldTask           // the tasks whose items wait, in the order they came (ordered: by priority first)
	queued    map[string]bool      // the tasks of waiting
	released  map[string]time.Time // the items let out, by message id, and when; forgotten once settled
	lost      map[string]bool      // the items let out that were lost, to be let out again under ids of their own
	looked    time.Time            // when the items let out were last looked for
	next      time.Time            // when to look at the queue again (zero: at once)
	poked     bool                 // set by a hold while the queue is looked at: look again at once
	idle      time.Duration        // how long the queue has had an item nobody took, doubled at each look up to gateIdle
	// draining is set once the limit and the order are lifted: what
	// waits goes out at once, and the queue leaves the gate.
	draining bool
}

// heldTask is a task whose item the gate holds, and the log sequence of the
// record that left it waiting for that item: the views are read for it
// once they have applied that record.
type heldTask struct {
	id string
	// priority is the task's, or its goal's when it gives none (goal,
	// whose goal.prioritize moves it), or schemas.DefaultPriority.
	priority int
	goal     string
	seq      uint64
	// parent is the span of the command that made the task ready, when
	// it was traced: the item let out carries a span of its trace.
	parent trace.SpanContext
}

func newGate() *gate {
	return &gate{queues: map[string]*gatedQueue{}, wake: make(chan struct{}, 1)}
}

// configure applies the settings qc of queue of workspace ws (nil: none):
// a rate limit or an order by priority makes the gate hold the queue's
// items; without either, the items it holds still go out, at once, and
// new ones are not held.
func (g *gate) configure(ws, queue string, qc *domain.QueueConfig) {
	name := ws + "/" + queue
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.queues[name]
	if qc == nil || (qc.RateLimit <= 0 && qc.Order != domain.QueueOrderPriority) {
		if q != nil {
			q.draining, q.next = true, time.Time{}
			g.poke()
		}
		return
	}
	if q == nil {
		q = &gatedQueue{ws: ws, queue: queue, queued: map[string]bool{}, released: map[string]time.Time{}, lost: map[string]bool{}}
		g.queues[name] = q
	}
	q.draining = false
	q.limit, q.period = max(qc.RateLimit, 0), time.Duration(max(qc.RatePeriodMS, domain.MinRatePeriodMS))*time.Millisecond
	if q.limit == 0 {
		q.sent = nil
	}
	if ordered := qc.Order == domain.QueueOrderPriority; ordered != q.ordered {
		q.ordered = ordered
		if ordered {
			slices.SortStableFunc(q.waiting, func(a, b heldTask) int { return cmp.Compare(a.priority, b.priority) })
		}
	}
	q.next = time.Time{}
	g.poke()
}

// remove forgets queue of workspace ws (deleted).
func (g *gate) remove(ws, queue string) {
	g.mu.Lock()
	delete(g.queues, ws+"/"+queue)
	g.mu.Unlock()
}

// hold takes the item that dispatchable task t waits for, which the record
// at seq left it waiting for (traced under parent, if valid), if its queue
// is gated, and reports whether it did; states has the task's goal.
func (g *gate) hold(t *domain.Task, states aggregates, seq uint64, parent trace.SpanContext) bool {
	queue, _ := awaitedItem(t)
	name := t.Workspace + "/" + queue
	g.mu.Lock()
	q := g.queues[name]
	held := q != nil && !q.draining
	queued := held && q.queued[t.ID]
	g.mu.Unlock()
	if !held || queued {
		return held
	}
	h := heldTask{id: t.ID, priority: t.Spec.Priority, seq: seq, parent: parent}
	if h.priority == 0 && t.GoalID != "" {
		h.goal = t.GoalID
		if goal, err := states.Goal(t.GoalID); err == nil && goal != nil {
			h.priority = goal.Priority
		}
	}
	h.priority = cmp.Or(h.priority, schemas.DefaultPriority)
	g.mu.Lock()
	defer g.mu.Unlock()
	if q = g.queues[name]; q == nil || q.draining {
		return false
	}
	if !q.queued[t.ID] {
		q.queued[t.ID] = true
		q.insert(h, h.priority+1) // after every task of its priority or a higher one
		q.next, q.poked = time.Time{}, true
		g.poke()
	}
	return true
}

// insert puts h in q.waiting: at the end, or, in a queue ordered by
// priority, before the first task whose priority is before or later.
func (q *gatedQueue) insert(h heldTask, before int) {
	i := len(q.waiting)
	if q.ordered {
		i, _ = slices.BinarySearchFunc(q.waiting, before, func(w heldTask, p int) int { return cmp.Compare(w.priority, p) })
	}
	q.waiting = slices.Insert(q.waiting, i, h)
}

// prioritize gives priority to the held tasks of goal that take their
// goal's (goal.prioritized), moving each to its new place.
func (g *gate) prioritize(goal string, priority int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, q := range g.queues {
		var moved []heldTask
		q.waiting = slices.DeleteFunc(q.waiting, func(h heldTask) bool {
			if h.goal != goal || h.priority == priority {
				return false
			}
			h.priority = priority
			moved = append(moved, h)
			return true
		})
		for _, h := range moved {
			q.insert(h, priority+1)
		}
	}
}

// gated reports whether queue of workspace ws is gated.
func (g *gate) gated(ws, queue string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.queues[ws+"/"+queue] != nil
}

// held returns how many items each gated queue holds, by workspace and
// queue.
func (g *gate) held() map[[2]string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[[2]string]int, len(g.queues))
	for _, q := range g.queues {
		out[[2]string{q.ws, q.queue}] = len(q.waiting)
	}
	return out
}

// poke wakes the gate's loop (g.mu held or not).
func (g *gate) poke() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// gateTick is how often the gate looks at the queues it lets items out of:
// a queue whose last item was taken is looked at again on the next tick,
// one whose item still waits for an executor after gateTick, doubling up to
// gateIdle (a pull that comes is served that late at most), one whose
// period is full when its oldest item leaves it.
const (
	gateTick = 5 * time.Millisecond
	gateIdle = 200 * time.Millisecond
)

// lostAfter is how long an item let out may be missing from its queue,
// while its task still waits for it, before it is let out again.
const lostAfter = 5 * time.Second

// gateLoop lets the gated queues' items out, as their limits allow, until
// ctx ends.
func (d *dispatcher) gateLoop(ctx context.Context, store *projections.Store) {
	t := time.NewTimer(gateIdle)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-d.gate.wake:
		}
		d.gate.mu.Lock()
		queues := make([]*gatedQueue, 0, len(d.gate.queues))
		for _, q := range d.gate.queues {
			queues = append(queues, q)
		}
		d.gate.mu.Unlock()
		now := time.Now()
		var soonest time.Time // of the next looks; zero: none (no gated queue)
		for _, q := range queues {
			d.gate.mu.Lock()
			next := q.next
			d.gate.mu.Unlock()
			if !now.Before(next) {
				var err error
				if next, err = d.letOut(ctx, store, q); err != nil && ctx.Err() == nil {
					d.logger.Warn("handlers: a held queue's items could not be let out; tried again shortly", "queue", q.queue, "workspace", q.ws, "err", err)
					next = time.Now().Add(gateIdle)
				}
				d.gate.mu.Lock()
				if q.poked {
					next = time.Time{} // a hold meanwhile: look again at once
				}
				q.next, q.poked = next, false
				d.gate.mu.Unlock()
			}
			if soonest.IsZero() || next.Before(soonest) {
				soonest = next
			}
		}
		wait := time.Hour // until a queue is gated (its configure pokes)
		if len(queues) > 0 {
			wait = max(time.Until(soonest), gateTick)
		}
		t.Reset(wait)
	}
}

// letOut lets out the items of q that its limit allows now, if its consumer
// has none left to deliver: as many as executors wait for (one when none
// does). A queue whose limit was lifted lets out all it holds and leaves
// the gate. About once a second it looks for the items it let out that
// were lost (lostItems). It returns when to look at q again.
func (d *dispatcher) letOut(ctx context.Context, store *projections.Store, q *gatedQueue) (time.Time, error) {
	g := d.gate
	g.mu.Lock()
	now := time.Now()
	for len(q.sent) > 0 && now.Sub(q.sent[0]) >= q.period {
		q.sent = q.sent[1:]
	}
	room, waiting, draining := q.limit-len(q.sent), len(q.waiting), q.draining
	if q.limit == 0 {
		room = waiting // no limit: the order alone
	}
	look := len(q.released) > 0 && now.Sub(q.looked) >= time.Second
	if look {
		q.looked = now
	}
	// When nothing is to be done before: the oldest item leaving a full
	// period, the next look for lost items.
	later := now.Add(time.Second)
	if out := q.sent; room <= 0 && len(out) > 0 && out[0].Add(q.period).Before(later) {
		later = out[0].Add(q.period)
	}
	g.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if draining {
		for _, h := range d.take(q, waiting, store.Checkpoint()) {
			if err := d.release(cctx, store, q, h); err != nil {
				g.holdAgain(q, h)
				return now, err
			}
		}
		g.mu.Lock()
		if q.draining && len(q.waiting) == 0 && g.queues[q.ws+"/"+q.queue] == q {
			delete(g.queues, q.ws+"/"+q.queue)
		}
		g.mu.Unlock()
		return now, nil
	}
	if (room <= 0 || waiting == 0) && !look {
		return later, nil
	}
	info, err := d.js.Consumer(cctx, d.stream, access.Consumer(d.prefix, q.ws, q.queue))
	if err != nil {
		return now, err
	}
	ci := info.CachedInfo()
	if look {
		d.lostItems(store, q, ci, now)
	}
	switch {
	case room <= 0 || waiting == 0:
		return later, nil
	case ci.NumPending > 0:
		// An item still waits for an executor: look again later, the
		// longer the longer nobody takes it.
		g.mu.Lock()
		q.idle = min(max(2*q.idle, gateTick), gateIdle)
		idle := q.idle
		g.mu.Unlock()
		return now.Add(idle), nil
	}
	g.mu.Lock()
	q.idle = 0
	g.mu.Unlock()
	for _, h := range d.take(q, min(room, max(ci.NumWaiting, 1)), store.Checkpoint()) {
		if err := d.release(cctx, store, q, h); err != nil {
			g.holdAgain(q, h) // tried again
			return now, err
		}
	}
	return now, nil
}

// take takes up to n of the tasks waiting in q, the first first, as far as
// the views have applied the records that left them waiting (applied, the
// views' checkpoint).
func (d *dispatcher) take(q *gatedQueue, n int, applied uint64) []heldTask {
	d.gate.mu.Lock()
	defer d.gate.mu.Unlock()
	n = min(n, len(q.waiting))
	for i, h := range q.waiting[:n] {
		if h.seq > applied {
			n = i
			break
		}
	}
	taken := q.waiting[:n:n]
	q.waiting = q.waiting[n:]
	for _, h := range taken {
		delete(q.queued, h.id)
	}
	return taken
}

// lostItems finds the items of q let out that are settled or lost: one
// whose task no longer waits for it is forgotten; when the consumer holds
// none at all (ci), one let out more than lostAfter ago whose task still
// waits for it was lost, and its task waits again to be let out.
func (d *dispatcher) lostItems(store *projections.Store, q *gatedQueue, ci *jetstream.ConsumerInfo, now time.Time) {
	g := d.gate
	g.mu.Lock()
	released := maps.Clone(q.released)
	g.mu.Unlock()
	for id, at := range released {
		task, _, _ := strings.Cut(id, ".")
		t, err := store.Task(task)
		if err != nil {
			continue
		}
		awaited := ""
		if t != nil && dispatchable(t) {
			_, awaited = awaitedItem(t)
		}
		lost := awaited == id && ci.NumPending == 0 && ci.NumAckPending == 0 && now.Sub(at) > lostAfter
		if awaited == id && !lost {
			continue
		}
		g.mu.Lock()
		delete(q.released, id)
		if lost {
			q.lost[id] = true
		}
		g.mu.Unlock()
		if lost {
			g.hold(t, store, store.Checkpoint(), trace.SpanContext{})
		}
	}
}

// release publishes the item of held task h of gated queue q, if the task
// still waits for it, and counts it against the limit when it is stored.
func (d *dispatcher) release(ctx context.Context, store *projections.Store, q *gatedQueue, h heldTask) error {
	id := h.id
	t, err := store.Task(id)
	if err != nil {
		return err
	}
	if t == nil || !dispatchable(t) {
		return nil // moved on since it came
	}
	queue, itemID := awaitedItem(t)
	if queue != q.queue || t.Workspace != q.ws {
		return nil
	}
	d.gate.mu.Lock()
	_, out := q.released[itemID]
	_, again := q.lost[itemID]
	delete(q.lost, itemID)
	d.gate.mu.Unlock()
	if out {
		return nil // let out already: a later record of the task came through the gate again
	}
	it := workItemOf(t, store, store.Checkpoint())
	m, err := d.msg(it)
	if err != nil {
		d.logger.Error("handlers: work item not encodable", "task", id, "err", err)
		return nil
	}
	if h.parent.IsValid() && d.tracer != nil {
		traced, span := d.tracer.Start(trace.ContextWithRemoteSpanContext(ctx, h.parent), "dwr.dispatch "+queue,
			trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(attribute.String("dwr.task_id", id), attribute.Int("dwr.attempt", it.Attempt)))
		defer span.End()
		traceContext.Inject(traced, schemas.TraceCarrier(m.Header))
	}
	if again {
		// Past the duplicates window that may still hold the lost one.
		m.Header.Set(jetstream.MsgIDHeader, itemID+".again."+strconv.FormatInt(time.Now().UnixNano(), 36))
	}
	if _, err := d.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("handlers: let out the work item of task %s: %w", id, err)
	}
	stored := time.Now() // at or after the stream's own time for it
	d.gate.mu.Lock()
	if q.limit > 0 {
		q.sent = append(q.sent, stored)
	}
	q.released[itemID] = stored
	d.gate.mu.Unlock()
	return nil
}

// holdAgain puts h, taken from q and not let out, back first among the
// tasks of its priority.
func (g *gate) holdAgain(q *gatedQueue, h heldTask) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if q.queued[h.id] {
		return
	}
	q.queued[h.id] = true
	if !q.ordered {
		q.waiting = slices.Insert(q.waiting, 0, h)
		return
	}
	q.insert(h, h.priority) // before the others of its priority
}

// waits reports why the gate holds the item of task, not let out yet: its
// queue's rate limit, or its turn in the queue's order; "" when it does
// not.
func (g *gate) waits(task string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, q := range g.queues {
		switch {
		case !q.queued[task]:
		case q.limit > 0:
			return "its queue's rate limit"
		default:
			return "its turn in its queue's order by priority"
		}
	}
	return ""
}

// heldByGate refuses a claim — a task.claim, or a report that carries one
// (the lazy claim) — of a task whose item its queue still holds (a rate
// limit, an order by priority): no executor was handed it, and an attempt
// started by its id alone would pass the limit, or tasks before it.
func (s *Service) heldByGate(cmd domain.Command) *schemas.Error {
	var id string
	switch c := cmd.(type) {
	case *domain.ClaimTask:
		id = c.TaskID
	case *domain.ReportSuccess:
		if c.Claim != nil {
			id = c.TaskID
		}
	case *domain.ReportFailure:
		if c.Claim != nil {
			id = c.TaskID
		}
	}
	if id == "" || s.dispatch == nil {
		return nil
	}
	why := s.dispatch.gate.waits(id)
	if why == "" {
		return nil
	}
	return &schemas.Error{Code: schemas.CodeConflict, Message: fmt.Sprintf(
		"task %s waits for %s: it is handed out as a work item, to be claimed then", id, why)}
}
