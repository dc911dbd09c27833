package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	fastjson "github.com/go-json-experiment/json/v1"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// workItemOf returns the work item of a ready task (an attempt to run) or
// of a verifying task (a result to judge, on the verification queue). An
// execute item carries the task as it is now, without the command ids it
// remembers (they are its senders' business); msg leaves it out when the
// item would be larger than schemas.MaxItemTaskBytes.
func workItemOf(t *domain.Task, store aggregates, seq uint64) schemas.WorkItem {
	if t.State == domain.StateVerifying && t.Spec.Verification != nil {
		a := t.Current()
		return schemas.WorkItem{Kind: schemas.WorkKindVerify, TaskID: t.ID, Workspace: t.Workspace, Queue: t.Spec.Verification.Queue,
			GoalID: t.GoalID, Key: t.Key, Title: t.Spec.Title, Attempt: a.N, OperationKey: domain.OperationKey(t.ID),
			Input: t.Spec.Input, PriorAttempts: t.Attempts[:len(t.Attempts)-1], Verifications: t.Verifications,
			Result: a.Result, Artifacts: a.Artifacts, ResultDigest: domain.ResultDigest(a.Result), Seq: seq}
	}
	task := t.Clone()
	task.Commands = nil
	return schemas.WorkItem{Kind: schemas.WorkKindExecute, TaskID: t.ID, Workspace: t.Workspace, Queue: t.Spec.Queue,
		Attempt: t.AttemptCount() + 1, OperationKey: domain.OperationKey(t.ID), Task: task,
		Dependencies: dependenciesOf(t, store), Seq: seq}
}

// dependenciesOf returns the accepted outcome of each task t depends on, in
// the order of its DependsOn, or nil when it has none or one cannot be read
// as accepted (the executor then reads them with task.get).
func dependenciesOf(t *domain.Task, store aggregates) []schemas.Dependency {
	if len(t.DependsOn) == 0 {
		return nil
	}
	deps := make([]schemas.Dependency, 0, len(t.DependsOn))
	for _, id := range t.DependsOn {
		dt, err := store.Task(id)
		d, ok := schemas.DependencyOf(dt)
		if err != nil || !ok {
			return nil
		}
		deps = append(deps, d)
	}
	return deps
}

// WorkSubject returns the subject of a queue's work items.
func WorkSubject(prefix, workspace, queue string) string {
	return prefix + ".work." + workspace + "." + queue
}

// queueOf returns the workspace and queue of a queue's consumer, by its
// filter subject (WorkSubject), and false for a subject that is not one.
func queueOf(prefix, filter string) (ws, queue string, ok bool) {
	rest, ok := strings.CutPrefix(filter, prefix+".work.")
	if !ok {
		return "", "", false
	}
	ws, queue, ok = strings.Cut(rest, ".")
	return ws, queue, ok && domain.ValidName(ws) && domain.ValidName(queue)
}

// dispatcher publishes work items for ready tasks on a work-queue stream
// derived from the log: async persistence (no fsync per item), and message
// ids of task and attempt, so that publishing an item again is harmless.
type dispatcher struct {
	tracer trace.Tracer
	js     jetstream.JetStream
	stream string
	prefix string
	lists  consumerLists // queue.list's listings of the consumers (standing)
	logger *slog.Logger
	// retry holds the items whose publication failed, published again by
	// retryLoop; pending those awaiting their acknowledgement, checked by
	// retryLoop. Both hold pointers: a buffer of thousands of items by
	// value would be ~1.7 MiB of heap held from the start.
	retry   chan *schemas.WorkItem
	pending chan *pendingItem
	// reseal, with encryption on, seals an item's payloads again with its
	// queue's key (privacy.resealItem): an execute item's with its queue's,
	// a verify item's with its verification queue's; nil leaves them as
	// they are.
	reseal func(ws, queue string, b []byte) []byte
	// changed, when set, is told the name of a consumer the dispatcher
	// changed or deleted (so that its info is read again).
	changed func(consumer string)

	mu sync.Mutex
	// queues are the consumers known to stand, with the settings last
	// applied to them (zero: the defaults, or an existing consumer left as
	// it was).
	queues map[string]domain.QueueConfig

	// configuring orders the configurations of queues (configureQueue):
	// configuredAt is, per consumer, the log sequence of the configuration
	// last applied to it, so that one applied late (a reply overtaken by
	// the next commit's dispatch, a retried old command) does not undo a
	// later one.
	configuring  sync.Mutex
	configuredAt map[string]uint64
	// room counts the queues that stand, for the writer's bounds on them.
	room *queueRoom
	// gate holds the items of queues with a rate limit or an order by
	// priority back (gate.go).
	gate *gate
}

// The settings of a queue that no queue.configure has set: its consumer's
// ack wait (the lease) and max deliveries.
const (
	DefaultQueueLease      = domain.DefaultLeaseMS * time.Millisecond
	DefaultQueueMaxDeliver = domain.DefaultMaxDeliver
)

// ensureQueue makes the durable consumer of a queue stand, with the
// settings its workspace holds for it (queue.configure), or the defaults
// for a queue never configured (an existing consumer is then left as it
// is). Executors cannot create consumers: the service owns them. It
// remembers what it did, so that it costs nothing the next time.
func (d *dispatcher) ensureQueue(ctx context.Context, store aggregates, ws, queue string) error {
	var qc *domain.QueueConfig
	if w, err := store.Workspace(ws); err != nil {
		return err
	} else if w != nil {
		qc = w.Queue(queue)
	}
	return d.ensureQueueWith(ctx, ws, queue, qc)
}

// ensureQueueWith is ensureQueue with the queue's settings qc (nil: never
// configured): it does nothing when the consumer is known to stand with
// them — an update of a consumer writes and syncs its metadata file, which
// dispatching every work item must not pay.
func (d *dispatcher) ensureQueueWith(ctx context.Context, ws, queue string, qc *domain.QueueConfig) error {
	d.mu.Lock()
	applied, done := d.queues[access.Consumer(d.prefix, ws, queue)]
	d.mu.Unlock()
	if done && (qc == nil || applied == consumerSettings(qc)) {
		return nil
	}
	return d.ensureConsumer(ctx, ws, queue, qc)
}

// ensureConsumer makes the consumer of a queue stand with settings qc, or,
// when qc is nil, with the defaults unless it exists. With settings it
// always applies them, even when it applied them before: queue.configure
// makes a consumer deleted by hand stand again.
func (d *dispatcher) ensureConsumer(ctx context.Context, ws, queue string, qc *domain.QueueConfig) error {
	name := access.Consumer(d.prefix, ws, queue)
	d.mu.Lock()
	_, done := d.queues[name]
	d.mu.Unlock()
	if done && qc == nil {
		return nil
	}
	cfg := jetstream.ConsumerConfig{
		Durable:       name,
		Description:   "dwr workers of queue " + queue + " in workspace " + ws,
		FilterSubject: WorkSubject(d.prefix, ws, queue),
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       DefaultQueueLease,
		MaxDeliver:    DefaultQueueMaxDeliver,
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var err error
	if qc == nil {
		_, err = d.js.CreateConsumer(ctx, d.stream, cfg)
		if errors.Is(err, jetstream.ErrConsumerExists) {
			err = nil
		}
	} else {
		cfg.AckWait, cfg.MaxDeliver = time.Duration(qc.LeaseMS)*time.Millisecond, qc.MaxDeliver
		// The jobs running at once are the items delivered and not yet
		// acknowledged (0: the server's default, 1,000 per worker pull).
		cfg.MaxAckPending = qc.MaxRunning
		if qc.Paused {
			// A paused consumer delivers nothing, redeliveries included,
			// and takes acknowledgements as ever.
			until := pausedUntil
			cfg.PauseUntil = &until
		}
		var c jetstream.Consumer
		if c, err = d.js.CreateOrUpdateConsumer(ctx, d.stream, cfg); err == nil {
			err = d.pauseConsumer(ctx, c, qc.Paused)
		}
	}
	if err != nil {
		return fmt.Errorf("handlers: the consumer of queue %s in %s: %w", queue, ws, err)
	}
	var applied domain.QueueConfig
	if qc != nil {
		applied = consumerSettings(qc)
	}
	d.mu.Lock()
	d.queues[name] = applied
	d.mu.Unlock()
	if qc != nil {
		d.gate.configure(ws, queue, qc)
	}
	d.room.add(ws, queue)
	if qc != nil && d.changed != nil {
		d.changed(name)
	}
	return nil
}

// pauseConsumer pauses or resumes consumer c as paused says, unless it is
// so: the server takes the pause of a consumer that exists only through
// its pause API, not in an update of its configuration.
func (d *dispatcher) pauseConsumer(ctx context.Context, c jetstream.Consumer, paused bool) error {
	info := c.CachedInfo()
	if info.Paused == paused {
		return nil
	}
	var err error
	if paused {
		_, err = d.js.PauseConsumer(ctx, d.stream, info.Name, pausedUntil)
	} else {
		_, err = d.js.ResumeConsumer(ctx, d.stream, info.Name)
	}
	return err
}

// pausedUntil is when a paused queue's consumer would resume by itself: a
// queue stays paused until queue.resume, which clears it.
var pausedUntil = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)

// consumerSettings is what of qc its consumer follows.
func consumerSettings(qc *domain.QueueConfig) domain.QueueConfig {
	c := *qc
	c.DefaultSettings = false
	return c
}

// configureQueue makes the consumer of a queue stand with settings qc, as
// the log has them at sequence seq, unless a configuration later in the log
// was applied already.
func (d *dispatcher) configureQueue(ctx context.Context, ws string, qc domain.QueueConfig, seq uint64) error {
	name := access.Consumer(d.prefix, ws, qc.Name)
	d.configuring.Lock()
	defer d.configuring.Unlock()
	if seq < d.configuredAt[name] {
		return nil
	}
	if err := d.ensureConsumer(ctx, ws, qc.Name, &qc); err != nil {
		return err
	}
	d.configuredAt[name] = seq
	return nil
}

func newDispatcher(ctx context.Context, js jetstream.JetStream, cfg Config) (*dispatcher, error) {
	name := strings.ToUpper(cfg.Prefix) + "_WORK"
	// Work items are derived, so they need no fsync per message: a single
	// server persists them asynchronously; a replicated stream (which
	// JetStream does not allow to be async) relies on its replicas, and its
	// store syncs on flush rather than per message.
	persist := jetstream.AsyncPersistMode
	if cfg.Replicas > 1 {
		persist = jetstream.DefaultPersistMode
	}
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: name, Description: "dwr work items, derived from the log: one per ready task and attempt",
		Subjects: []string{cfg.Prefix + ".work.>"}, Storage: jetstream.FileStorage, Retention: jetstream.WorkQueuePolicy,
		Replicas: cfg.Replicas, PersistMode: persist, Duplicates: 2 * time.Minute,
		MaxMsgSize: 1 << 20, MaxConsumers: cfg.MaxQueues,
	})
	if err != nil {
		return nil, fmt.Errorf("handlers: work stream: %w", err)
	}
	return &dispatcher{js: js, stream: name, prefix: cfg.Prefix, logger: cfg.Logger, tracer: cfg.Tracer.Tracer(tracerName), retry: make(chan *schemas.WorkItem, 1024),
		pending: make(chan *pendingItem, 4096), queues: map[string]domain.QueueConfig{}, configuredAt: map[string]uint64{}, room: newQueueRoom(cfg), gate: newGate()}, nil
}

// publish sends a work item without waiting for its acknowledgement; a
// failure is handed to retryLoop.
func (d *dispatcher) publish(it schemas.WorkItem, traced context.Context) {
	m, err := d.msg(it)
	if err != nil {
		d.logger.Error("handlers: work item not encodable", "task", it.TaskID, "err", err)
		return
	}
	if traced != nil {
		traceContext.Inject(traced, schemas.TraceCarrier(m.Header))
	}
	// What waits for an acknowledgement (thousands of items) keeps no
	// task: an item published again goes without it, and its executor
	// claims first.
	it.Task, it.Dependencies = nil, nil
	f, err := d.js.PublishMsgAsync(m)
	if err != nil {
		d.failed(it, err)
		return
	}
	d.pending <- &pendingItem{it, f}
}

// pendingItem is a work item published and not yet acknowledged.
type pendingItem struct {
	it schemas.WorkItem
	f  jetstream.PubAckFuture
}

// msg returns the message of work item it. An execute item goes without
// its dependencies' results when, with them, it would be larger than
// schemas.MaxItemTaskBytes (the executor then reads them with task.get),
// then with its task's oldest history left out (schemas.FitTask) when it
// still would be, and without its task when even that is too large (the
// executor then claims first, and its claim's reply carries the task).
func (d *dispatcher) msg(it schemas.WorkItem) (*nats.Msg, error) {
	encode := func() ([]byte, error) {
		b, err := fastjson.Marshal(it)
		if err == nil && d.reseal != nil {
			b = d.reseal(it.Workspace, it.Queue, b)
		}
		return b, err
	}
	b, err := encode()
	if err != nil {
		return nil, err
	}
	// What goes, in this order, while the item would be too large. An
	// execute item: its dependencies' results, then its task. A verify
	// item's context (each attempt and verdict is bounded, their sum is
	// not): the earlier attempts, then the verdicts; what is judged — the
	// input and the result, each bounded — stays, so the item fits the work
	// stream's messages.
	drops := []func() bool{
		func() bool { had := it.Dependencies != nil; it.Dependencies = nil; return had },
		func() bool {
			if it.Task == nil || it.Task.Omitted != nil {
				return false
			}
			// Its history's payloads, oldest first, by what the item
			// is over.
			f := schemas.TrimTask(it.Task, len(b)-schemas.MaxItemTaskBytes)
			had := f != it.Task
			it.Task = f
			return had
		},
		func() bool { had := it.Task != nil; it.Task = nil; return had },
	}
	if it.Kind == schemas.WorkKindVerify {
		drops = []func() bool{
			func() bool { had := it.PriorAttempts != nil; it.PriorAttempts = nil; return had },
			func() bool { had := it.Verifications != nil; it.Verifications = nil; return had },
		}
	}
	for _, drop := range drops {
		if len(b) <= schemas.MaxItemTaskBytes {
			break
		}
		if drop() {
			if b, err = encode(); err != nil {
				return nil, err
			}
		}
	}
	m := nats.NewMsg(WorkSubject(d.prefix, it.Workspace, it.Queue))
	m.Header.Set(jetstream.MsgIDHeader, itemID(it.TaskID, it.Attempt, it.Kind == schemas.WorkKindVerify))
	m.Data = b
	return m, nil
}

// itemID is the message id of the work item of a task's attempt: to run it,
// or, with verify, to judge its result. An item published again within the
// work stream's duplicates window is not stored again.
func itemID(task string, attempt int, verify bool) string {
	id := task + "." + strconv.Itoa(attempt)
	if verify {
		id += ".verify"
	}
	return id
}

func (d *dispatcher) failed(it schemas.WorkItem, err error) {
	d.logger.Warn("handlers: work item not published; retrying", "task", it.TaskID, "attempt", it.Attempt, "err", err)
	select {
	case d.retry <- &it:
	default:
		d.logger.Error("handlers: work item retry queue full; the item is published again once its queue is idle (audit)", "task", it.TaskID)
	}
}

// retryLoop checks the acknowledgements of published items and publishes
// failed ones again, waiting for each acknowledgement, until ctx ends.
func (d *dispatcher) retryLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-d.pending:
			select {
			case <-p.f.Ok():
			case err := <-p.f.Err():
				d.failed(p.it, err)
			case <-ctx.Done():
				return
			}
		case item := <-d.retry:
			it := *item
			for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
				m, err := d.msg(it)
				if err == nil {
					pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					_, err = d.js.PublishMsg(pctx, m)
					cancel()
				}
				if err == nil || ctx.Err() != nil {
					break
				}
				if errors.Is(err, nats.ErrMaxPayload) {
					// Trying again cannot help, and would hold every other
					// item's retry.
					d.logger.Error("handlers: work item larger than the server's max_payload; not published", "task", it.TaskID, "attempt", it.Attempt, "bytes", len(m.Data), "err", err)
					break
				}
				if !sleepCtx(ctx, wait) {
					return
				}
			}
		}
	}
}

// dispatchCommit publishes the work items of the tasks that a committed
// record left ready, as states has them.
func (d *dispatcher) dispatchCommit(c *eventstore.Commit, seq uint64, store aggregates, traces commandTraces) {
	seen := map[string]bool{}
	for i := range c.Events {
		e := &c.Events[i]
		if e.Type == "workspace.queue_deleted" {
			var qd domain.QueueDeleted
			if err := json.Unmarshal(e.Data, &qd); err == nil {
				d.deleteQueue(e.Workspace, qd.Queue)
			}
			continue
		}
		if e.Type == "workspace.queue_configured" || e.Type == "workspace.queue_paused" || e.Type == "workspace.queue_resumed" {
			// The settings as the record left them (a pause outlasts new
			// settings; new settings outlast a pause).
			var qe struct {
				Queue string `json:"queue"`
			}
			if err := json.Unmarshal(e.Data, &qe); err != nil {
				continue
			}
			w, err := store.Workspace(e.Workspace)
			if err != nil || w == nil || w.Queue(qe.Queue) == nil {
				continue // deleted later in the record, or unreadable: set at the next start
			}
			if err := d.configureQueue(context.Background(), e.Workspace, *w.Queue(qe.Queue), seq); err != nil {
				d.logger.Warn("handlers: a queue's consumer could not be configured; it is at the next start", "err", err)
			}
			continue
		}
		if e.Type == "goal.prioritized" {
			var gp domain.GoalPrioritized
			if err := json.Unmarshal(e.Data, &gp); err == nil {
				d.gate.prioritize(e.AggregateID, gp.Priority)
			}
			continue
		}
		if e.AggregateType != domain.AggTask || seen[e.AggregateID] {
			continue
		}
		seen[e.AggregateID] = true
		t, err := store.Task(e.AggregateID)
		if err != nil || t == nil {
			d.logger.Error("handlers: cannot read a committed task to dispatch it", "task", e.AggregateID, "err", err)
			continue
		}
		if domain.Terminal(t.State) {
			continue
		}
		d.openQueues(t, store, seq) // a dispatchable task's too
		if dispatchable(t) {
			if d.gate.hold(t, store, seq, traces.of(e)) {
				continue // let out at its queue's rate, or in its order
			}
			d.publishTraced(workItemOf(t, store, seq), traces.of(e))
		}
	}
}

// openQueues makes the consumers of the queues of task t, which has not
// ended, as the record at seq left it — from its creation on, before it is
// ready, so that the queues its record opened (domain.QueueUse) stand at
// once — and counts them, with seq as their last use (queue.delete).
func (d *dispatcher) openQueues(t *domain.Task, store aggregates, seq uint64) {
	queues := []string{t.Spec.Queue}
	if v := t.Spec.Verification; v != nil {
		queues = append(queues, v.Queue)
	}
	for _, q := range queues {
		d.room.given(t.Workspace, q, seq)
		if err := d.ensureQueue(context.Background(), store, t.Workspace, q); err != nil {
			d.logger.Warn("handlers: a queue's consumer could not be created; its items wait in the stream", "err", err)
		}
	}
}

// deleteQueue removes queue of workspace ws (queue.delete): its consumer,
// and what its subject still holds of the work stream — items of attempts
// that ended, since no task that has not ended is given the queue.
func (d *dispatcher) deleteQueue(ws, queue string) {
	name := access.Consumer(d.prefix, ws, queue)
	d.mu.Lock()
	delete(d.queues, name)
	d.mu.Unlock()
	d.gate.remove(ws, queue)
	d.room.remove(ws, queue)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.js.DeleteConsumer(ctx, d.stream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		d.logger.Warn("handlers: a deleted queue's consumer could not be removed", "queue", queue, "workspace", ws, "err", err)
	}
	if d.changed != nil {
		d.changed(name)
	}
	if s, err := d.js.Stream(ctx, d.stream); err == nil {
		err = s.Purge(ctx, jetstream.WithPurgeSubject(WorkSubject(d.prefix, ws, queue)))
		if err != nil {
			d.logger.Warn("handlers: a deleted queue's items could not be purged", "queue", queue, "workspace", ws, "err", err)
		}
	}
}

// publishTraced publishes work item it; when the command that made it
// ready was traced (parent), within a span "dwr.dispatch" of that trace,
// whose context the item carries to its executor.
func (d *dispatcher) publishTraced(it schemas.WorkItem, parent trace.SpanContext) {
	if !parent.IsValid() || d.tracer == nil {
		d.publish(it, nil)
		return
	}
	ctx, span := d.tracer.Start(trace.ContextWithRemoteSpanContext(context.Background(), parent), "dwr.dispatch "+it.Queue,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("dwr.task_id", it.TaskID), attribute.Int("dwr.attempt", it.Attempt)))
	defer span.End()
	d.publish(it, ctx)
}

// dispatchable reports whether a task in its state has a work item: ready
// (an attempt to run) or verifying (a result to judge).
func dispatchable(t *domain.Task) bool {
	return t.State == domain.StateReady || (t.State == domain.StateVerifying && t.Spec.Verification != nil)
}

// rederive publishes the work item of every ready or verifying task, waiting for each
// acknowledgement: after a crash, any item that may be missing is there
// again (an item still present is deduplicated by its message id, or, past
// the duplicates window, refused at claim as stale).
func (d *dispatcher) rederive(ctx context.Context, store *projections.Store) (int, error) {
	wss, err := store.ListWorkspaces()
	if err != nil {
		return 0, err
	}
	n := 0
	// A queue whose consumer cannot be made does not keep the others'
	// items back: the first such error is returned once all are published.
	var queueErr error
	for _, ws := range wss {
		for _, q := range ws.Queues {
			// The settings as the log holds them now, at the views'
			// checkpoint: the stored reply of an older queue.configure sent
			// again does not set them back (a pause among them).
			if err := d.configureQueue(ctx, ws.Name, q, store.Checkpoint()); err != nil && queueErr == nil {
				queueErr = err
			}
		}
		ready, err := store.ListTasks(ws.Name, projections.TaskFilter{State: domain.StateReady})
		if err != nil {
			return n, err
		}
		verifying, err := store.ListTasks(ws.Name, projections.TaskFilter{State: domain.StateVerifying})
		if err != nil {
			return n, err
		}
		tasks := append(ready, verifying...)
		for _, t := range tasks {
			it := workItemOf(t, store, store.Checkpoint())
			if err := d.ensureQueue(ctx, store, ws.Name, it.Queue); err != nil && queueErr == nil {
				queueErr = err
			}
			if d.gate.hold(t, store, store.Checkpoint(), trace.SpanContext{}) {
				continue // let out at its queue's rate or in its order, not published here
			}
			m, err := d.msg(it)
			if err != nil {
				return n, err
			}
			if _, err := d.js.PublishMsg(ctx, m); err != nil {
				return n, fmt.Errorf("handlers: re-derive the work item of task %s: %w", t.ID, err)
			}
			n++
		}
	}
	return n, queueErr
}

// workAuditEvery is how often the writer looks for dispatchable tasks that
// their queue has lost the item of.
const workAuditEvery = 2 * time.Second

// audit publishes again, every workAuditEvery until ctx ends, the work item
// of each ready or verifying task that its queue has lost, and calls
// restored with how many it published. The work stream is derived and not
// fsynced: a single server killed can lose its last items, and then gives
// their sequence numbers to the next ones, so that an executor still
// holding an item from before acknowledges the one that took its number —
// a task is left ready with no item, and nothing else would publish it
// before the next writer's start. A task has lost its item when it is found
// dispatchable, for the same attempt, in two rounds in a row while its
// queue holds no item of it — none to deliver and none delivered
// unacknowledged, by its consumer's counts when it holds none, else by the
// ids of the items it holds (read when they are fewer than its dispatchable
// tasks in two rounds in a row, and at most maxAuditReads): an item
// published in between would show in one of the rounds. Such a task's item
// goes out under a message id of its own, past the duplicates window that
// still holds the lost one's; should the item not have been lost after
// all, the second one is refused at its claim as stale.
//
// A round that takes long (many queues, many ready tasks) spaces the next
// ones out: the audit takes at most a twentieth of the writer's time.
func (d *dispatcher) audit(ctx context.Context, store *projections.Store, restored func(int)) {
	t := time.NewTimer(workAuditEvery)
	defer t.Stop()
	var suspects map[string]bool
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		began := time.Now()
		var n int
		var err error
		suspects, n, err = d.auditRound(ctx, store, suspects)
		t.Reset(max(workAuditEvery, 20*time.Since(began)))
		if n > 0 {
			d.logger.Warn("handlers: work items missing from their queues published again", "tasks", n)
			restored(n)
		}
		if err != nil && ctx.Err() == nil {
			d.logger.Warn("handlers: work item audit failed; tried again shortly", "err", err)
		}
	}
}

// auditRound is a round of audit: it publishes the items of the
// dispatchable tasks among suspects (the previous round's) still found
// without one, and returns this round's suspects and how many it published.
func (d *dispatcher) auditRound(ctx context.Context, store *projections.Store, suspects map[string]bool) (map[string]bool, int, error) {
	st, err := d.js.Stream(ctx, d.stream)
	if err != nil {
		return nil, 0, err
	}
	queues, err := d.queueStates(ctx, st)
	if err != nil || len(queues) == 0 {
		return nil, 0, err
	}
	for ws, qs := range queues {
		for _, state := range []string{domain.StateReady, domain.StateVerifying} {
			err := store.EachTask(ws, projections.TaskFilter{State: state}, func(t *domain.Task) bool {
				if !dispatchable(t) {
					return true
				}
				queue, id := awaitedItem(t)
				if d.gate.gated(ws, queue) {
					return true // the gate's to let out, and to find lost
				}
				if q := qs[queue]; q != nil {
					q.tasks = append(q.tasks, t.ID)
					q.ids = append(q.ids, id)
				}
				return true
			})
			if err != nil {
				return nil, 0, err
			}
		}
	}
	found := map[string]bool{}
	var lost, lostIDs []string // the tasks, read again to be published, and their items' ids
	for ws, qs := range queues {
		for queue, q := range qs {
			// Fewer tasks than items held: none can be missing its item
			// (an item of an attempt since ended counts too, which can only
			// hide a loss until it is settled).
			if uint64(len(q.tasks)) <= q.held {
				continue
			}
			var present map[string]bool
			if q.held > 0 {
				// Its items are read only when it held fewer than its
				// tasks in the round before too: a queue under load often
				// shows a task before its item.
				key := "queue " + ws + "/" + queue
				if found[key] = true; !suspects[key] {
					continue
				}
				if present, err = heldItems(ctx, st, WorkSubject(d.prefix, ws, queue), q.ackFloor, q.held); err != nil {
					return found, 0, err
				}
				if present == nil {
					continue // too many to read: audited when fewer
				}
			}
			for i, t := range q.tasks {
				switch id := q.ids[i]; {
				case present[id]:
				case suspects[id]:
					lost, lostIDs = append(lost, t), append(lostIDs, id)
				default:
					found[id] = true
				}
			}
		}
	}
	// One that cannot be published (the server's max_payload, say) does
	// not hold back the others; it is found again in two rounds.
	n, failed := 0, 0
	var first error
	for i, id := range lost {
		t, err := store.Task(id)
		if err != nil || t == nil || !dispatchable(t) {
			continue // moved on since, or read on the next round
		}
		if _, id := awaitedItem(t); id != lostIDs[i] {
			continue // another attempt since
		}
		it := workItemOf(t, store, store.Checkpoint())
		m, err := d.msg(it)
		if err == nil {
			m.Header.Set(jetstream.MsgIDHeader, m.Header.Get(jetstream.MsgIDHeader)+".again."+strconv.FormatInt(time.Now().UnixNano(), 36))
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err = d.js.PublishMsg(pctx, m)
			cancel()
		}
		if err != nil {
			if failed++; first == nil {
				first = fmt.Errorf("handlers: publish the work item of task %s again: %w", t.ID, err)
			}
			continue
		}
		n++
	}
	if failed > 0 {
		return found, n, fmt.Errorf("%d work items not published again; the first: %w", failed, first)
	}
	return found, n, nil
}

// awaitedItem returns the queue and the message id of the work item a
// dispatchable task t waits for, as workItemOf makes it.
func awaitedItem(t *domain.Task) (queue, id string) {
	if t.State == domain.StateVerifying {
		return t.Spec.Verification.Queue, itemID(t.ID, t.Current().N, true)
	}
	return t.Spec.Queue, itemID(t.ID, t.AttemptCount()+1, false)
}

// auditedQueue is what a round of audit knows of a queue: from its
// consumer, the items it holds — to deliver, or delivered and not
// acknowledged — and its acknowledgement floor; from the views, its
// dispatchable tasks and their items' ids.
type auditedQueue struct {
	held     uint64
	ackFloor uint64
	tasks    []string // ids (a large backlog is not held in memory whole)
	ids      []string // their items'
}

// queueStates returns, by workspace and queue, the consumers of the work
// stream st's queues.
func (d *dispatcher) queueStates(ctx context.Context, st jetstream.Stream) (map[string]map[string]*auditedQueue, error) {
	queues := map[string]map[string]*auditedQueue{}
	infos := st.ListConsumers(ctx)
	for ci := range infos.Info() {
		ws, queue, ok := strings.Cut(strings.TrimPrefix(ci.Config.FilterSubject, d.prefix+".work."), ".")
		if !ok || WorkSubject(d.prefix, ws, queue) != ci.Config.FilterSubject {
			continue // not a queue's consumer
		}
		if queues[ws] == nil {
			queues[ws] = map[string]*auditedQueue{}
		}
		queues[ws][queue] = &auditedQueue{held: ci.NumPending + uint64(max(ci.NumAckPending, 0)), ackFloor: ci.AckFloor.Stream} //nolint:gosec // not negative
	}
	return queues, infos.Err()
}

// maxAuditReads bounds the items a round of audit reads of one queue.
const maxAuditReads = 4096

// heldItems returns the ids of the items of subject the work stream st
// holds past the consumer's acknowledgement floor (held of them, by its
// count), or nil when they are more than maxAuditReads. Below the floor
// every item is settled: one found there (an acknowledgement a crash
// undid) is not delivered again.
func heldItems(ctx context.Context, st jetstream.Stream, subject string, floor, held uint64) (map[string]bool, error) {
	if held > maxAuditReads {
		return nil, nil
	}
	ids := make(map[string]bool, held)
	for seq, reads := floor+1, 0; reads < maxAuditReads; reads++ {
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if isNotFound(err) {
			break
		}
		if err != nil {
			return nil, err
		}
		id, _, _ := strings.Cut(m.Header.Get(jetstream.MsgIDHeader), ".again.")
		ids[id] = true
		seq = m.Sequence + 1
	}
	return ids, nil
}
