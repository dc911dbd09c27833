package executors_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/embedded"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// bundle is what setup returns: the dwr service on a real embedded NATS
// server and Pebble views, and a client connection.
type bundle struct {
	srv     *embedded.Server
	nc      *nats.Conn
	svc     *handlers.Service
	lastSeq atomic.Uint64 // the log sequence of the last command: queries wait for it
}

// setup starts the service in-process, stopped at cleanup.
func setup(t *testing.T) *bundle {
	t.Helper()
	st := servicetest.Start(t, "", servicetest.Options{Config: handlers.Config{WriterID: "test-writer"}})
	return &bundle{srv: st.Server, nc: st.Conn, svc: st.Svc}
}

// serviceLogger discards the service's logs unless DWR_TEST_LOG is set.
func serviceLogger() *slog.Logger { return servicetest.Logger() }

// command sends a command and requires that it is accepted.
func (b *bundle) command(t *testing.T, name string, body any) json.RawMessage {
	t.Helper()
	r := b.request(t, "dwr.cmd.default."+name, body)
	require.True(t, r.OK, "%s: %+v", name, r.Error)
	for seq := b.lastSeq.Load(); r.Seq > seq && !b.lastSeq.CompareAndSwap(seq, r.Seq); seq = b.lastSeq.Load() {
	}
	return r.Result
}

func (b *bundle) request(t *testing.T, subject string, body any) schemas.Reply {
	t.Helper()
	data, err := json.Marshal(body)
	require.NoError(t, err)
	m := nats.NewMsg(subject)
	m.Data = data
	if strings.HasPrefix(subject, "dwr.q.") {
		m.Header.Set(schemas.HeaderMinSeq, fmt.Sprint(b.lastSeq.Load())) // read our own writes
	}
	resp, err := b.nc.RequestMsg(m, 10*time.Second)
	require.NoError(t, err)
	var r schemas.Reply
	require.NoError(t, json.Unmarshal(resp.Data, &r), string(resp.Data))
	return r
}

// task returns the task as the task.get query does.
func (b *bundle) task(t *testing.T, id string) schemas.Task {
	t.Helper()
	r := b.request(t, "dwr.q.default.task.get", schemas.Query{ID: id})
	require.True(t, r.OK, "task.get: %+v", r.Error)
	var tk schemas.Task
	require.NoError(t, json.Unmarshal(r.Result, &tk))
	return tk
}

// createTask creates a standalone task from spec and returns its id.
func (b *bundle) createTask(t *testing.T, spec map[string]any) string {
	t.Helper()
	var rep struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal(b.command(t, "task.create", map[string]any{"spec": spec}), &rep))
	return rep.ID
}

// waitState waits until the task is in state, and returns it.
func (b *bundle) waitState(t *testing.T, id, state string, d time.Duration) schemas.Task {
	t.Helper()
	var tk schemas.Task
	eventually(t, d, func() bool {
		tk = b.task(t, id)
		return tk.State == state
	}, func() string { return fmt.Sprintf("task %s is %s, not %s: %+v", id, tk.State, state, tk) })
	return tk
}

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
	eventually(t, 10*time.Second, func() bool {
		p, u = b.workState(t, queue)
		return p == 0 && u == 0
	}, func() string { return fmt.Sprintf("queue %s: %d pending, %d unacknowledged", queue, p, u) })
}

// eventually polls f every 20ms until it holds, failing after d with
// what's message.
func eventually(t *testing.T, d time.Duration, f func() bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what())
		}
		<-tick.C
	}
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			runErr = <-done
			nc.Close()
			sink.close()
		})
		return runErr
	}
	t.Cleanup(func() { require.NoError(t, stop()) })
	return &worker{w: w, logs: sink, stop: stop}
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
