package executors_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/executors/executortest"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/embedded"
	"github.com/dwr-run/dwr/handlers/servicetest"
)

// bundle is what setup returns: the dwr service on a real embedded NATS
// server and Pebble views, and the kit's client on the service's connection
// (its commands must be accepted; its queries read its own writes).
type bundle struct {
	*servicetest.Client
	srv *embedded.Server
	nc  *nats.Conn
	svc *handlers.Service
}

// setup starts the service in-process, stopped at cleanup.
func setup(t *testing.T) *bundle {
	t.Helper()
	return bundleOf(servicetest.Start(t, "", servicetest.Options{Config: handlers.Config{WriterID: "test-writer"}}))
}

// bundleOf is the bundle of a running service.
func bundleOf(st *servicetest.Service) *bundle {
	return &bundle{Client: servicetest.NewClient(st.Conn, "default"), srv: st.Server, nc: st.Conn, svc: st.Svc}
}

// serviceLogger discards the service's logs unless DWR_TEST_LOG is set.
func serviceLogger() *slog.Logger { return servicetest.Logger() }

// workState returns the queue's consumer: items not yet delivered and
// delivered items not yet acknowledged.
func (b *bundle) workState(t *testing.T, queue string) (pending uint64, unacked int) {
	t.Helper()
	js, err := jetstream.New(b.nc)
	require.NoError(t, err)
	c, err := js.Consumer(context.Background(), "DWR_WORK", "dwr-default-"+queue)
	require.NoError(t, err)
	info, err := c.Info(context.Background())
	require.NoError(t, err)
	return info.NumPending, info.NumAckPending
}

// waitSettled waits until every item of the queue is acknowledged.
func (b *bundle) waitSettled(t *testing.T, queue string) {
	t.Helper()
	var p uint64
	var u int
	// A deadline for a failure only: under -race on a loaded 2-core
	// machine a batch of large items took over 10 s (a no-op job 3 s).
	servicetest.Eventually(t, 30*time.Second, func() bool {
		p, u = b.workState(t, queue)
		return p == 0 && u == 0
	}, func() string { return fmt.Sprintf("queue %s: %d pending, %d unacknowledged", queue, p, u) })
}

// worker is a running executors.Worker.
type worker struct {
	w    *executors.Worker
	logs *logSink
	stop func() error
}

// startWorker runs a worker with cfg (its own connection; Workspace and
// Logger filled in) until stop or cleanup.
func (b *bundle) startWorker(t *testing.T, cfg executors.Config, h executors.Handler) *worker {
	t.Helper()
	return b.run(t, cfg, func(cfg executors.Config) (*executors.Worker, error) { return executors.NewWorker(cfg, h) })
}

// startVerifier starts a verifier on cfg.Queue, stopped at cleanup.
func (b *bundle) startVerifier(t *testing.T, cfg executors.Config, v executors.VerifyHandler) *worker {
	t.Helper()
	return b.run(t, cfg, func(cfg executors.Config) (*executors.Worker, error) { return executors.NewVerifier(cfg, v) })
}

func (b *bundle) run(t *testing.T, cfg executors.Config, build func(executors.Config) (*executors.Worker, error)) *worker {
	t.Helper()
	nc, err := b.srv.Connect()
	require.NoError(t, err)
	sink := newLogSink(t)
	cfg.Conn = nc
	cfg.Logger = slog.New(sink)
	w, err := build(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close(); sink.close() }) // after the worker stops
	return &worker{w: w, logs: sink, stop: executortest.StartWorker(t, w)}
}

// untilCancelled is the end of a job that runs until it is cancelled: it
// waits for ctx to end, sends the cause on causes unless it is nil, and
// returns what the job returns then.
func untilCancelled(ctx context.Context, causes chan<- error) (executors.Result, error) {
	<-ctx.Done()
	if causes != nil {
		causes <- context.Cause(ctx)
	}
	return executors.Result{}, ctx.Err()
}

// staleWorker starts a worker (executor "stale") on queue, with lease,
// whose job saves a checkpoint — which claims its attempt (the lazy claim),
// which then holds the task — and runs until it is cancelled (the cause on
// causes unless it is nil). Its heartbeats are paused, as if its process
// hung: the attempt's lease lapses. It creates a task on queue and returns
// the worker and the task's id once the job has claimed it.
func (b *bundle) staleWorker(t *testing.T, queue string, lease time.Duration, causes chan<- error) (*worker, string) {
	t.Helper()
	claimed := make(chan struct{})
	var once sync.Once
	stale := b.startWorker(t, executors.Config{Queue: queue, Executor: "stale", Lease: lease},
		func(ctx context.Context, job *executors.Job) (executors.Result, error) {
			if err := job.SaveCheckpoint(ctx, "step 1"); err != nil {
				return executors.Result{}, err
			}
			once.Do(func() { close(claimed) })
			return untilCancelled(ctx, causes)
		})
	stale.w.PauseHeartbeats(true)
	id := b.CreateTask(t, map[string]any{"queue": queue})
	recv(t, claimed)
	return stale, id
}

// logSink is a slog.Handler that sends records to t.Log and to whoever
// waits for one.
type logSink struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
	seen  chan struct{} // closed and replaced on every record
	done  bool
	attrs []slog.Attr
	root  *logSink
}

func newLogSink(t *testing.T) *logSink {
	s := &logSink{t: t, seen: make(chan struct{})}
	s.root = s
	return s
}

func (s *logSink) Enabled(context.Context, slog.Level) bool { return true }

func (s *logSink) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
	for _, a := range s.attrs {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
	}
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	root := s.root
	root.mu.Lock()
	defer root.mu.Unlock()
	if root.done {
		return nil
	}
	root.t.Log(b.String())
	root.lines = append(root.lines, b.String())
	close(root.seen)
	root.seen = make(chan struct{})
	return nil
}

func (s *logSink) WithAttrs(as []slog.Attr) slog.Handler {
	return &logSink{root: s.root, attrs: append(append([]slog.Attr(nil), s.attrs...), as...)}
}

func (s *logSink) WithGroup(string) slog.Handler { return s }

func (s *logSink) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = true
}

// waitLine waits until a logged line contains every one of parts.
func (s *logSink) waitLine(t *testing.T, d time.Duration, parts ...string) string {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		for _, l := range s.lines {
			if containsAll(l, parts) {
				s.mu.Unlock()
				return l
			}
		}
		seen := s.seen
		s.mu.Unlock()
		select {
		case <-seen:
		case <-deadline.C:
			t.Fatalf("no log line with %q within %s", parts, d)
		}
	}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// recv returns what ch yields (or its zero value once it is closed), and
// fails the test when nothing comes within 20 s: a test waits on a signal,
// never for ever.
func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	select {
	case v := <-ch:
		return v
	case <-deadline.C:
		t.Fatal("nothing received within 20s")
		panic("unreachable")
	}
}
