package embedded

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dwr-run/dwr/handlers/servicetest/ports"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testLogger returns a logger writing to t.Log until the test's cleanups
// run, so that a late line from a stopping server cannot fail the test.
// Register it before starting servers: cleanups run last-in first-out.
func testLogger(t *testing.T) *slog.Logger {
	t.Helper()
	w := &testWriter{t: t}
	t.Cleanup(w.close)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct {
	mu     sync.Mutex
	t      *testing.T
	closed bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.t.Log(string(p))
	}
	return len(p), nil
}

func (w *testWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
}

// setup starts a server on cfg (DataDir and Logger filled in when empty)
// and connects a client in-process; both are stopped at cleanup.
func setup(t *testing.T, cfg Config) (*Server, *nats.Conn) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	s, err := Start(cfg)
	require.NoError(t, err)
	t.Cleanup(s.Shutdown)
	nc, err := s.Connect()
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return s, nc
}

// freePort returns a loopback TCP port to listen on (ports.Free).
func freePort(t *testing.T) int { return ports.Free(t) }

func testContext(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// publishN creates stream name on subject and publishes n messages, each
// acknowledged by JetStream.
func publishN(ctx context.Context, t *testing.T, js jetstream.JetStream, name, subject string, replicas, n int) {
	t.Helper()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{subject}, Storage: jetstream.FileStorage, Replicas: replicas,
	})
	require.NoError(t, err)
	for i := range n {
		ack, err := js.Publish(ctx, subject, []byte("msg-"+strconv.Itoa(i+1)))
		require.NoError(t, err)
		require.Equal(t, name, ack.Stream)
		require.Equal(t, uint64(i+1), ack.Sequence)
	}
}

func TestStartInProcessJetStream(t *testing.T) {
	s, nc := setup(t, Config{})

	require.Empty(t, s.ClientURL(), "no TCP listener without Listen")
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	publishN(testContext(t, 10*time.Second), t, js, "T", "t.>", 1, 3)
}

func TestStartAssertsSyncAlways(t *testing.T) {
	s, _ := setup(t, Config{})

	jsc := s.NATS().JetStreamConfig()
	require.NotNil(t, jsc)
	require.True(t, jsc.SyncAlways)
	require.Equal(t, DefaultMaxMemory, jsc.MaxMemory)
	require.Positive(t, jsc.MaxStore)
}

// The default store limit is what the store holds plus half the disk's
// free space: a store that grew larger than the space left is still under
// its limit when it starts again (a limit of three quarters of the free
// space alone refused every write from then on), and nothing caps it at a
// fixed size (it was 10 GiB).
func TestTheStoreLimitCountsWhatTheStoreHolds(t *testing.T) {
	require.Equal(t, int64(12<<30), storeLimit(10<<30, 4<<30), "10 GiB held, 4 free")
	require.Equal(t, int64(math.MaxInt64), storeLimit(math.MaxInt64-1, 4<<30))

	dir := t.TempDir()
	s, nc := setup(t, Config{DataDir: dir})
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := testContext(t, 10*time.Second)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "HELD", Subjects: []string{"held"}})
	require.NoError(t, err)
	for range 64 {
		_, err := js.Publish(ctx, "held", make([]byte, 32<<10))
		require.NoError(t, err)
	}
	nc.Close()
	s.Shutdown()

	held := stored(filepath.Join(dir, storeSubdir))
	require.Greater(t, held, int64(2<<20), "what the stream holds is counted")
	avail, _, ok := DiskSpace(dir)
	if !ok {
		t.Skip("free space is not measured here")
	}
	o, err := buildOptions(Config{DataDir: dir})
	require.NoError(t, err)
	require.InDelta(t, storeLimit(held, avail), o.nats.JetStreamMaxStore, 64<<20, "held plus half the free space (give or take what others wrote meanwhile)")
}

func TestCheckDurabilityRejectsIntervalSync(t *testing.T) {
	o, err := buildOptions(Config{DataDir: t.TempDir(), MaxStore: 1 << 30})
	require.NoError(t, err)
	good := &server.JetStreamConfig{
		MaxMemory: o.nats.JetStreamMaxMemory, MaxStore: o.nats.JetStreamMaxStore,
		StoreDir: o.storeDir + "/" + server.JetStreamStoreDir, SyncAlways: true,
	}
	require.NoError(t, checkDurability(good, o))

	bad := *good
	bad.SyncAlways, bad.SyncInterval = false, 2*time.Minute
	require.ErrorIs(t, checkDurability(&bad, o), ErrNotSyncAlways)

	require.Error(t, checkDurability(nil, o), "JetStream not running")
}

func TestStartListensOnFreePort(t *testing.T) {
	s, _ := setup(t, Config{Listen: "127.0.0.1:0"})

	url := s.ClientURL()
	require.NotEmpty(t, url)
	require.NotContains(t, url, ":0", "the chosen port is reported")
	publishOverTCP(t, url, "TCP")
}

// publishOverTCP connects to url as a client in another process would and
// publishes to a stream of its own, named stream.
func publishOverTCP(t *testing.T, url, stream string) {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	publishN(testContext(t, 10*time.Second), t, js, stream, strings.ToLower(stream)+".>", 1, 2)
}

func TestStartFailsWhenPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })

	_, err = Start(Config{DataDir: t.TempDir(), Listen: l.Addr().String(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.ErrorContains(t, err, "embedded: server failed to start")
}

func TestListenLaterOpensTheClientPortOnListen(t *testing.T) {
	s, _ := setup(t, Config{Listen: "127.0.0.1:0", ListenLater: true})

	url := s.ClientURL()
	require.NotEmpty(t, url, "the port is picked at start")
	require.NotContains(t, url, ":0", "the chosen port is reported")
	_, err := nats.Connect(url, nats.Timeout(time.Second))
	require.ErrorIs(t, err, nats.ErrNoServers, "before Listen clients in other processes find the port closed")
	nc, err := s.Connect()
	require.NoError(t, err, "in-process connections work at once")
	nc.Close()

	require.NoError(t, s.Listen())
	require.NoError(t, s.Listen(), "a second Listen does nothing")
	require.Equal(t, url, s.ClientURL(), "it listens where it said it would")
	publishOverTCP(t, url, "LATER")
}

func TestListenLaterFailsAtStartWhenPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })

	_, err = Start(Config{DataDir: t.TempDir(), Listen: l.Addr().String(), ListenLater: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.ErrorContains(t, err, "embedded: cannot listen for clients", "a port in use is found at start, not at Listen")
}

func TestRestartKeepsMessages(t *testing.T) {
	dir := t.TempDir()
	logger := testLogger(t)
	ctx := testContext(t, 20*time.Second)

	s, err := Start(Config{DataDir: dir, Logger: logger})
	require.NoError(t, err)
	nc, err := s.Connect()
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	publishN(ctx, t, js, "KEEP", "keep.>", 1, 5)
	require.NoError(t, nc.Drain())
	s.Shutdown()
	s.Shutdown() // idempotent

	_, nc = setup(t, Config{DataDir: dir, Logger: logger})
	js, err = jetstream.New(nc)
	require.NoError(t, err)
	st, err := js.Stream(ctx, "KEEP")
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(5), info.State.Msgs)
	msg, err := st.GetMsg(ctx, 5)
	require.NoError(t, err)
	require.Equal(t, "msg-5", string(msg.Data))
}

// With an at-rest key, no byte of the server's files holds what was
// stored; restarted with the key, it reads back.
func TestAtRestKeyEncryptsTheFiles(t *testing.T) {
	dir := t.TempDir()
	logger := testLogger(t)
	ctx := testContext(t, 20*time.Second)
	cfg := Config{DataDir: dir, Logger: logger, AtRestKey: "s3cr3t-at-rest-key-0123456789"}
	s, err := Start(cfg)
	require.NoError(t, err)
	nc, err := s.Connect()
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "SECRET", Subjects: []string{"secret.>"}})
	require.NoError(t, err)
	_, err = js.Publish(ctx, "secret.a", []byte("MARKER-AT-REST-PAYLOAD"))
	require.NoError(t, err)
	require.NoError(t, nc.Drain())
	s.Shutdown()

	hits := 0
	require.NoError(t, filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		b, err := os.ReadFile(p) //nolint:gosec // the test's own directory
		if err == nil && bytes.Contains(b, []byte("MARKER-AT-REST-PAYLOAD")) {
			hits++
		}
		return err
	}))
	require.Zero(t, hits, "the marker is in no file")

	_, nc = setup(t, cfg)
	js, err = jetstream.New(nc)
	require.NoError(t, err)
	st, err := js.Stream(ctx, "SECRET")
	require.NoError(t, err)
	msg, err := st.GetMsg(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, "MARKER-AT-REST-PAYLOAD", string(msg.Data))
}

func TestStartRejectsInvalidConfig(t *testing.T) {
	_, err := Start(Config{
		MaxStore:    -1,
		MaxMemory:   -1,
		Cluster:     &ClusterConfig{Routes: []string{"nats-route://"}},
		ListenLater: true,
		Users:       func(string) (User, bool) { return User{}, false },
	})
	require.Error(t, err)
	for _, want := range []string{
		"DataDir is required", "MaxMemory", "MaxStore", "ServerName is required", "Users needs Accounts",
		"Cluster.Name is required", "Listen is required with Cluster", "Cluster.Listen is required",
		"Cluster.Routes[0]", "ListenLater needs Listen", "ListenLater cannot be used with Cluster",
	} {
		require.ErrorContains(t, err, want)
	}

	_, err = Start(Config{DataDir: t.TempDir(), Listen: "127.0.0.1:http-ish"})
	require.ErrorContains(t, err, "Listen")
}

func TestClusterOfThreeCreatesR3Stream(t *testing.T) {
	if testing.Short() {
		t.Skip("a JetStream cluster takes seconds to elect its leader")
	}
	logger := testLogger(t)
	ports := []int{freePort(t), freePort(t), freePort(t)}
	routes := make([]string, len(ports))
	for i, p := range ports {
		routes[i] = fmt.Sprintf("127.0.0.1:%d", p)
	}

	// Start the servers concurrently: each waits for its route listener only.
	servers := make([]*Server, len(ports))
	errs := make([]error, len(ports))
	var wg sync.WaitGroup
	for i := range ports {
		wg.Go(func() {
			servers[i], errs[i] = Start(Config{
				DataDir:    t.TempDir(),
				Listen:     "127.0.0.1:0",
				ServerName: fmt.Sprintf("n%d", i+1),
				Logger:     logger,
				Cluster:    &ClusterConfig{Name: "dwr-test", Listen: routes[i], Routes: routes},
			})
		})
	}
	wg.Wait()
	for i := range servers {
		require.NoError(t, errs[i])
		t.Cleanup(servers[i].Shutdown)
	}

	nc, err := servers[0].Connect()
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)

	// Until the meta leader is elected stream creation fails; poll.
	ctx := testContext(t, 60*time.Second)
	cfg := jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3.>"}, Storage: jetstream.FileStorage, Replicas: 3}
	var lastErr error
	for {
		reqCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, lastErr = js.CreateStream(reqCtx, cfg)
		cancel()
		if lastErr == nil {
			break
		}
		select {
		case <-ctx.Done():
			require.NoError(t, lastErr, "R3 stream not created before the deadline")
		case <-time.After(100 * time.Millisecond):
		}
	}

	ack, err := js.Publish(ctx, "r3.a", []byte("x"))
	require.NoError(t, err)
	require.Equal(t, uint64(1), ack.Sequence)
	st, err := js.Stream(ctx, "R3")
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.NotNil(t, info.Cluster)
	require.Len(t, info.Cluster.Replicas, 2)
}

// recordHandler keeps the level and message of every record it is given.
type recordHandler struct {
	mu      sync.Mutex
	level   slog.Level
	records []string
}

func (h *recordHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *recordHandler) WithGroup(string) slog.Handler                { return h }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Level.String()+" "+r.Message)
	return nil
}

func TestLoggerLevelsAndFatal(t *testing.T) {
	h := &recordHandler{level: slog.LevelInfo}
	a := newSlogAdapter(slog.New(h), "n1")

	a.Noticef("banner %d", 1)
	a.Debugf("debug")
	a.Tracef("trace")
	a.Warnf("careful %s", "now")
	a.Errorf("broken")
	require.NoError(t, a.fatalErr())
	a.Fatalf("cannot listen on %d", 4222)
	a.Fatalf("second")

	require.Equal(t, []string{"WARN careful now", "ERROR broken", "ERROR cannot listen on 4222", "ERROR second"}, h.records)
	require.EqualError(t, a.fatalErr(), "cannot listen on 4222", "the first fatal error is kept")
	require.False(t, a.enabled(levelDebug), "server debug stays off under an Info handler")

	h.level = levelTrace
	a.Noticef("banner")
	a.Tracef("trace")
	require.Equal(t, []string{"DEBUG banner", "DEBUG-8 trace"}, h.records[4:])
}

// A connection the server cuts — as it cuts a slow consumer — tries again
// after 10 ms, not nats.go's default 2 s, and is back at its first try:
// in-process, the server is right there.
func TestAnInProcessConnectionCutIsBackAtItsFirstTry(t *testing.T) {
	var waits []time.Duration
	for n := 1; n <= 10; n++ {
		waits = append(waits, InProcessReconnectDelay(n))
	}
	ms := time.Millisecond
	require.Equal(t, []time.Duration{10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 640 * ms, 1280 * ms, 2000 * ms, 2000 * ms}, waits)

	s, nc := setup(t, Config{})
	back := make(chan struct{}, 1)
	nc.SetReconnectHandler(func(*nats.Conn) { back <- struct{}{} })
	sub, err := nc.Subscribe("echo", func(m *nats.Msg) { _ = m.Respond(m.Data) })
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	cid, err := nc.GetClientID()
	require.NoError(t, err)
	require.NoError(t, s.NATS().DisconnectClientByID(cid))
	select {
	case <-back:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection did not come back")
	}
	require.Equal(t, uint64(1), nc.Stats().Reconnects, "back at the first try")
	m, err := nc.Request("echo", []byte("hi"), 5*time.Second)
	require.NoError(t, err, "its subscriptions are back")
	require.Equal(t, "hi", string(m.Data))
}
