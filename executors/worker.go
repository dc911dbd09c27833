package executors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/schemas"
)

// fetchWindow bounds one pull request: a fetch waits this long for work
// items (the server expires it a little earlier), with idle heartbeats that
// reveal a lost server within ten seconds.
const fetchWindow = 15 * time.Second

// fetchBytes bounds the work items one fetch brings: well under the
// server's max_pending (64 MiB by default). A worker with 64 free slots
// asked for 64 items whatever their size: items of up to 1 MiB passed it,
// and the server cut the worker's connection as a slow consumer.
const fetchBytes = 8 << 20

// The wait between attempts to reach the consumer: from retryFirst,
// doubling up to maxPause.
const (
	retryFirst = 100 * time.Millisecond
	maxPause   = 5 * time.Second
)

// Worker takes work items from one queue and runs a Handler for each, with
// at most Config.Concurrency jobs at once. Build it with NewWorker and run
// it with Run.
type Worker struct {
	cfg    Config
	h      Handler
	verify VerifyHandler // set by NewVerifier: the worker judges verify items
	c      *service
	subj   subjects
	// apis are the JetStream APIs that may serve the queue's consumer, in
	// the order tried; once one did, only it.
	apis    []jetstream.JetStream
	log     *slog.Logger
	tracer  trace.Tracer
	started atomic.Bool
	// watchers hands the events that end attempts to the running jobs.
	watchers watchers
	// lease is the queue's lease (its consumer's ack wait), in nanoseconds.
	lease atomic.Int64
	// queueKeys open the queue's sealed items (queue_keys.go).
	queueKeys queueKeys

	// pauseHeartbeats stops the renewal of leases: tests use it to make a
	// lease lapse while a job runs.
	pauseHeartbeats atomic.Bool
	// stopping is set once Run's context ends: reports ask for no handoff.
	stopping atomic.Bool
}

// NewWorker returns a worker for cfg that runs h. It returns an error naming
// every problem of cfg (Conn or Queue missing, a name that is not a valid
// subject token, a lease shorter than MinLease, ...) or when h is nil.
func NewWorker(cfg Config, h Handler) (*Worker, error) {
	cfg = cfg.withDefaults()
	err := cfg.validate()
	if h == nil {
		err = errors.Join(err, errors.New("executors: the handler is nil"))
	}
	if err != nil {
		return nil, err
	}
	prefixed, err := jetstream.NewWithAPIPrefix(cfg.Conn, schemas.JetStreamAPIPrefix)
	if err != nil {
		return nil, fmt.Errorf("executors: jetstream: %w", err)
	}
	plain, err := jetstream.New(cfg.Conn)
	if err != nil {
		return nil, fmt.Errorf("executors: jetstream: %w", err)
	}
	log := cfg.Logger.With(logQueue, cfg.Queue)
	return &Worker{cfg: cfg, h: h, apis: []jetstream.JetStream{prefixed, plain}, log: log, tracer: cfg.Tracer.Tracer(tracerName),
		c: newService(cfg, log), subj: subjectsOf(cfg)}, nil
}

// Config returns the worker's configuration with its defaults applied.
func (w *Worker) Config() Config { return w.cfg }

// Run takes work items and runs jobs until ctx ends, then drains: it stops
// fetching, lets the running jobs finish and report for up to DrainTimeout,
// then cancels the rest (cause ErrStopping) and leaves their work items
// unacknowledged, to be redelivered. It returns nil after a drain.
//
// Run rides out a service or NATS restart: it retries creating the consumer
// and fetching, with backoff, and every command with the same command id.
// It returns an error only when the NATS connection is closed for good, and
// ErrAlreadyRunning when it was called before.
func (w *Worker) Run(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	// hard ends the jobs and their reports: DrainTimeout after ctx ends.
	hard, stopHard := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopHard(nil)
	stopAsking := context.AfterFunc(ctx, func() { w.stopping.Store(true) })
	defer stopAsking()
	if err := w.watchers.start(w.cfg.Conn, w.subj.events); err != nil {
		w.log.Warn("executors: cannot watch the tasks' events; cancellation reaches a job only through refused checkpoints and reports",
			logErr, err)
	}
	defer w.watchers.stop()
	slots := make(chan struct{}, w.cfg.Concurrency)
	var jobs sync.WaitGroup
	// The lease asked for; the queue's settings may differ, and the line
	// that says the queue is bound gives the one in force.
	w.log.Info("executors: worker started", "executor", w.cfg.Executor, "workspace", w.cfg.Workspace,
		"queue", w.cfg.Queue, "concurrency", w.cfg.Concurrency, "lease_asked", w.cfg.Lease)
	err := w.fetchLoop(ctx, hard, slots, &jobs)

	drained := make(chan struct{})
	go func() { jobs.Wait(); close(drained) }()
	t := time.NewTimer(w.cfg.DrainTimeout)
	defer t.Stop()
	select {
	case <-drained:
	case <-t.C:
		w.log.Warn("executors: drain timeout passed; cancelling the running jobs, their work items will be redelivered",
			"drain_timeout", w.cfg.DrainTimeout)
		stopHard(ErrStopping)
		<-drained
	}
	w.log.Info("executors: worker stopped")
	return err
}

// fetchLoop fetches as many work items as there are free slots and starts a
// job for each, until ctx ends or the connection is closed.
func (w *Worker) fetchLoop(ctx, hard context.Context, slots chan struct{}, jobs *sync.WaitGroup) error {
	var cons jetstream.Consumer
	wait := retryFirst
	pause := func(what string, err error) bool {
		w.log.Warn("executors: could not "+what+"; retrying", logErr, err, "in", wait)
		t := time.NewTimer(wait)
		defer t.Stop()
		wait = min(2*wait, maxPause)
		select {
		case <-t.C:
			return true
		case <-ctx.Done():
			return false
		}
	}
	// A pull request does not survive a reconnection: a fetch in flight
	// then ends at once instead of waiting out its missing heartbeats.
	status := w.cfg.Conn.StatusChanged(nats.CONNECTED, nats.CLOSED)
	defer w.cfg.Conn.RemoveStatusListener(status)
	for ctx.Err() == nil {
		if w.cfg.Conn.IsClosed() {
			return errClosed
		}
		if cons == nil {
			c, err := w.consumer(ctx)
			if err != nil {
				if ctx.Err() != nil || !pause("create the consumer "+w.subj.consumer+" on stream "+w.subj.stream, err) {
					break
				}
				continue
			}
			cons = c
		}
		n, ok := acquire(ctx, slots)
		if !ok {
			break
		}
		// A reconnection before this pull (while every slot was busy, say)
		// does not end it: the server would deliver its items into a pull
		// no longer listening, and they would come again only after their
		// lease.
		for len(status) > 0 {
			<-status
		}
		fctx, cancel := context.WithTimeout(ctx, fetchWindow)
		batch, err := cons.Fetch(n, jetstream.FetchContext(fctx), jetstream.FetchMaxBytes(fetchBytes))
		if err != nil {
			cancel()
			release(slots, n)
			if !pause("fetch work items", err) {
				break
			}
			cons = nil
			continue
		}
		got := 0
		msgs := batch.Messages()
	receive:
		for {
			select {
			case msg, ok := <-msgs:
				if !ok {
					break receive
				}
				got++
				if ctx.Err() != nil {
					// Stopping: hand it straight back for another worker.
					_ = msg.Nak()
					release(slots, 1)
					continue
				}
				jobs.Go(func() {
					defer release(slots, 1)
					w.deliver(hard, msg)
				})
			case <-status:
				cancel() // the fetch ends and msgs is closed
			}
		}
		cancel()
		release(slots, n-got)
		switch err := batch.Error(); {
		case err == nil, errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			wait = retryFirst
		case ctx.Err() == nil:
			// No heartbeat (server gone), consumer deleted, leadership
			// change: check the consumer again after a pause. pause
			// returns early when ctx ends, and the loop then stops.
			cons = nil
			pause("fetch work items", err)
		}
	}
	return nil
}

// consumer returns the queue's durable pull consumer, shared by every worker
// of the queue. The service owns it: the worker asks the service for the
// queue's settings (queue.configure), setting them to this worker's lease
// and max deliveries when the queue has none yet, or always with
// Config.Reconfigure; else this worker's lease is the queue's. The service
// creates or updates the consumer as the settings say, and the worker binds
// to it.
func (w *Worker) consumer(ctx context.Context) (jetstream.Consumer, error) {
	r, err := w.c.command(ctx, "queue.configure", schemas.ConfigureQueue{Queue: w.cfg.Queue,
		LeaseMS: w.cfg.Lease.Milliseconds(), MaxDeliver: w.cfg.MaxDeliver, IfUnset: !w.cfg.Reconfigure}, "")
	if err != nil {
		return nil, err
	}
	if !r.OK {
		return nil, fmt.Errorf("executors: queue.configure: %s: %s", r.Error.Code, r.Error.Message)
	}
	var got schemas.CommandResult
	if err := json.Unmarshal(r.Result, &got); err != nil {
		return nil, fmt.Errorf("executors: queue.configure: %w", err)
	}
	lease := time.Duration(got.LeaseMS) * time.Millisecond
	if lease != w.cfg.Lease || got.MaxDeliver != w.cfg.MaxDeliver {
		w.log.Warn("executors: the queue has other settings than this worker's; using the queue's (set Reconfigure, or dwr worker --reconfigure, to change them)",
			"lease", lease, "max_deliver", got.MaxDeliver, "worker_lease", w.cfg.Lease, "worker_max_deliver", w.cfg.MaxDeliver)
	}
	if got.Paused {
		w.log.Warn("executors: the queue is paused: it hands out no job until it is resumed (dwr queue resume)", "queue", w.cfg.Queue)
	}
	w.lease.Store(int64(max(lease, MinLease)))
	tctx, cancel := context.WithTimeout(ctx, client.DefaultTimeout)
	defer cancel()
	cons, err := w.bind(tctx)
	if err == nil {
		w.log.Info("executors: taking work from the queue", "queue", w.cfg.Queue, "lease", time.Duration(w.lease.Load()),
			"max_deliver", got.MaxDeliver)
	}
	return cons, err
}

// bind returns the queue's consumer through the JetStream API this
// connection reaches: the service's exports under schemas.JetStreamAPIPrefix
// on a closed deployment, else the account's own API.
func (w *Worker) bind(ctx context.Context) (jetstream.Consumer, error) {
	var errs []error
	for _, js := range w.apis {
		cons, err := js.Consumer(ctx, w.subj.stream, w.subj.consumer)
		if err == nil {
			w.apis = []jetstream.JetStream{js} // found: keep to it
			return cons, nil
		}
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, fmt.Errorf("executors: the service has not created the consumer %s yet: %w", w.subj.consumer, err)
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("executors: no JetStream API serves the consumer %s: %w", w.subj.consumer, errors.Join(errs...))
}

// leaseOf returns the lease of the queue's work items: the consumer's ack
// wait, as last read (the configured Lease before the first read).
func (w *Worker) leaseOf() time.Duration {
	if l := w.lease.Load(); l > 0 {
		return time.Duration(l)
	}
	return w.cfg.Lease
}

// acquire takes one free slot, waiting for it, then every other free one;
// it returns how many it took, or false when ctx ended first.
func acquire(ctx context.Context, slots chan struct{}) (int, bool) {
	select {
	case slots <- struct{}{}:
	case <-ctx.Done():
		return 0, false
	}
	n := 1
	for n < cap(slots) {
		select {
		case slots <- struct{}{}:
			n++
		default:
			return n, true
		}
	}
	return n, true
}

func release(slots chan struct{}, n int) {
	for range n {
		<-slots
	}
}
