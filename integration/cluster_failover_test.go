package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
)

// natsServerBuild is nats-server, the version in go.mod, built on first use.
var natsServerBuild servicetest.Binary

// natsServerBinary builds nats-server once per test run and returns its path.
func natsServerBinary(t *testing.T) string {
	t.Helper()
	return natsServerBuild.Path(t, "nats-server", "github.com/nats-io/nats-server/v2", false)
}

// procNode is one nats-server process of a cluster, with its configuration
// file (sync_interval: always, a monitoring port).
type procNode struct {
	name, url, monitor, conf string
	proc                     *serverProc
}

func startProcCluster(t *testing.T, bin string, logs *syncBuffer, accounts string) []*procNode {
	t.Helper()
	const n = 3
	routes := make([]string, n)
	for i := range routes {
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", freePort(t))
	}
	nodes := make([]*procNode, n)
	for i := range nodes {
		dir := filepath.Join(t.TempDir(), fmt.Sprintf("n%d", i+1))
		require.NoError(t, os.MkdirAll(dir, 0o750))
		port, mport := freePort(t), freePort(t)
		node := &procNode{name: fmt.Sprintf("n%d", i+1), url: fmt.Sprintf("nats://127.0.0.1:%d", port),
			monitor: fmt.Sprintf("http://127.0.0.1:%d", mport), conf: filepath.Join(dir, "nats.conf")}
		conf := fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
http: 127.0.0.1:%d
jetstream { store_dir: %q, sync_interval: always, max_file_store: 1GB, max_memory_store: 64MB }
cluster { name: dwr-procs, listen: %q, routes: [%s] }
%s
`, node.name, port, mport, dir, strings.TrimPrefix(routes[i], "nats://"), strings.Join(routes, ", "), accounts)
		require.NoError(t, os.WriteFile(node.conf, []byte(conf), 0o600))
		nodes[i] = node
	}
	for _, node := range nodes {
		node.start(t, bin, logs)
	}
	return nodes
}

func (n *procNode) start(t *testing.T, bin string, logs *syncBuffer) {
	n.proc = startServer(t, bin, logs, "nats-server "+n.name, "-c", n.conf)
}

// procReplica is one `dwr serve --nats` process, with its health listener.
type procReplica struct {
	name, data, health string
	args               []string
	proc               *serverProc
}

func (r *procReplica) start(t *testing.T, bin string, logs *syncBuffer) {
	r.proc = startServer(t, bin, logs, "dwr serve "+r.name, r.args...)
}

// state returns the replica's /readyz, or ok false when it does not answer.
func (r *procReplica) state() (h handlers.Health, ok bool) {
	c := http.Client{Timeout: 500 * time.Millisecond}
	resp, err := c.Get("http://" + r.health + "/readyz")
	if err != nil {
		return h, false
	}
	defer func() { _ = resp.Body.Close() }()
	return h, json.NewDecoder(resp.Body).Decode(&h) == nil
}

// The cluster under failure, as an operator runs it: three nats-server
// processes (sync_interval: always) and three `dwr serve --nats` processes,
// under load from clients that record every acknowledged id. Faults: kill
// -9 of the writer (several times), SIGSTOP of the writer past its lease
// then SIGCONT, kill -9 of the log stream's leader node, both at once, and
// a frozen (SIGSTOPped) node. Checked: lost 0, duplicated 0, epochs in log
// order (every record of a deposed writer before its successor's epoch
// record), no command waits out its timeout on the paused writer after the
// new writer's first acknowledgement, no replica stranded on the frozen
// node. Failover (from the writer's death to the next acknowledgement) is
// printed, p50 and p99; only a generous bound fails the test. DWR_LONG=1
// kills the writer 12 times.
func TestClusterProcessesUnderFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("three nats-server and three dwr serve processes, faults injected for about a minute")
	}
	writerKills := times(3, 12)
	bin, natsBin := dwrBinary(t), natsServerBinary(t)
	logs := logOnFailure(t, "nats-server and dwr serve output")
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(120+15*writerKills)*time.Second)
	defer cancel()
	phase := phases(t)

	acc := natsConfig(t, bin)
	nodes := startProcCluster(t, natsBin, logs, acc.accounts)
	urls, monitors := make([]string, len(nodes)), make([]string, len(nodes))
	for i, n := range nodes {
		urls[i], monitors[i] = n.url, n.monitor
	}
	natsURL := strings.Join(urls, ",")
	creds.Store(natsURL, acc.AdminCredential)
	phase("nats-server processes started")

	keyDir := t.TempDir()
	keyFile := filepath.Join(keyDir, handlers.LogKeyFile)
	_, _, err := handlers.LoadLogKey(keyFile, true)
	require.NoError(t, err)
	masterFile := filepath.Join(keyDir, handlers.MasterKeyFile) // every replica shares the master key too
	_, err = handlers.LoadOrMakeMasterKey(masterFile)
	require.NoError(t, err)
	replicas := make([]*procReplica, 3)
	for i := range replicas {
		r := &procReplica{name: fmt.Sprintf("dwr%d", i+1), data: filepath.Join(t.TempDir(), "data"),
			health: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
		r.args = append([]string{"serve", "--nats", natsURL, "--nats-monitor", strings.Join(monitors, ","), "--replicas", "3",
			"--data", r.data, "--log-key-file", keyFile, "--master-key-file", masterFile, "--health-listen", r.health, "--http", ""}, acc.serveArgs()...)
		r.start(t, bin, logs)
		replicas[i] = r
	}
	readyIn := waitReady(t, replicas[0].proc, natsURL, 60*time.Second)
	phase(fmt.Sprintf("dwr ready %s after the cluster's start", readyIn.Round(time.Millisecond)))

	// writer returns the replica holding the lease (one alone), waiting for one.
	writer := func(what string) *procReplica {
		var w *procReplica
		waitFor(t, ctx, what, func() bool {
			w = nil
			for _, r := range replicas {
				if h, ok := r.state(); ok && h.Writer {
					if w != nil {
						return false // two say so: the old one has not yet noticed
					}
					w = r
				}
			}
			return w != nil
		})
		return w
	}
	var lastStates atomic.Value // what allReady last saw, shown when the test fails
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the replicas' last health: %v", lastStates.Load())
		}
	})
	allReady := func(what string) {
		waitFor(t, ctx, what, func() bool {
			all, seen := true, ""
			for _, r := range replicas {
				if r.proc.exited() { // err is set before done is closed
					t.Fatalf("%s: dwr serve %s exited: %v", what, r.name, r.proc.err)
				}
				h, ok := r.state()
				seen += fmt.Sprintf("%s answered=%v %+v; ", r.name, ok, h)
				all = all && ok && h.Ready
			}
			lastStates.Store(seen)
			return all
		})
	}
	allReady("every replica ready")

	// Load: goal.create back to back from four connections, each command
	// retried with its id until acknowledged.
	led := &ledger{}
	const timeout = 2 * time.Second
	load := startGoalLoad(t, ctx, led, "fo", func(g int) *client {
		return dialPinging(t, natsURL, fmt.Sprintf("failover-load-%d", g), timeout)
	})
	// firstAck returns the first acknowledgement of a command sent after
	// from: a reply already on its way from a writer killed at from is not
	// one its successor gave (a slight overestimate: the loaders send their
	// next command only once their pending one is answered).
	firstAck := func(from time.Time) (time.Time, bool) {
		var first time.Time
		for _, r := range load.results(func(r *cmdResult) bool { return r.Outcome == acked && r.Sent.After(from) }) {
			if first.IsZero() || r.Answered.Before(first) {
				first = r.Answered
			}
		}
		return first, !first.IsZero()
	}
	ackedSince := func(from time.Time) int {
		return len(load.results(func(r *cmdResult) bool { return r.Outcome == acked && r.Answered.After(from) }))
	}
	waitAcks := func(what string, from time.Time, n int) time.Duration {
		var at time.Time
		waitFor(t, ctx, what, func() bool {
			var ok bool
			at, ok = firstAck(from)
			return ok && ackedSince(from) >= n
		})
		return at.Sub(from)
	}
	warm := time.Now()
	waitAcks("load acknowledged", warm, 50)

	tnc := acc.service(t, natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	js, err := jetstream.New(tnc)
	require.NoError(t, err)
	logLeader := func() *procNode {
		info := streamInfo(t, ctx, js, "DWR_LOG", func(i *jetstream.StreamInfo) bool {
			return i.Cluster != nil && i.Cluster.Leader != "" && len(i.Cluster.Replicas) == 2
		})
		i := slices.IndexFunc(nodes, func(n *procNode) bool { return n.name == info.Cluster.Leader })
		require.GreaterOrEqual(t, i, 0, "leader %q is one of our nodes", info.Cluster.Leader)
		return nodes[i]
	}
	healed := func(what string) {
		streamInfo(t, ctx, js, "DWR_LOG", func(i *jetstream.StreamInfo) bool { return r3Current(i, false) })
		allReady(what)
	}

	// 1. kill -9 of the writer, again and again.
	var failovers []time.Duration
	for k := 1; k <= writerKills; k++ {
		w := writer("a writer")
		t0 := time.Now()
		w.proc.kill9(t)
		d := waitAcks("acknowledged after the writer's kill", t0, 20)
		failovers = append(failovers, d)
		phase(fmt.Sprintf("kill %d: writer %s killed; next acknowledgement after %s", k, w.name, d.Round(time.Millisecond)))
		w.start(t, bin, logs)
		allReady("the killed replica back")
	}

	// 2. SIGSTOP of the writer past its lease, then SIGCONT.
	w := writer("a writer")
	t0 := time.Now()
	w.proc.signal(syscall.SIGSTOP)
	pausedFailover := waitAcks("acknowledged while the writer is stopped", t0, 1)
	newFirst := t0.Add(pausedFailover)
	waitAcks("load through the new writer", newFirst, 100)
	waitFor(t, ctx, "the writer stopped past three leases", func() bool { return time.Since(t0) > 3*handlers.DefaultLeaseTTL })
	cont := time.Now()
	w.proc.signal(syscall.SIGCONT)
	// Commands sent after the new writer's first ack that waited out a timeout.
	waitedOut := len(load.results(func(r *cmdResult) bool {
		return r.Sent.After(newFirst) && r.Sent.Before(cont) && r.Answered.Sub(r.Sent) >= timeout
	}))
	phase(fmt.Sprintf("writer %s stopped: next acknowledgement after %s; commands that waited out a timeout after it: %d",
		w.name, pausedFailover.Round(time.Millisecond), waitedOut))
	writer("one writer once the stopped one resumed")
	allReady("the resumed replica ready")

	// 3. kill -9 of the log stream's leader node.
	leader := logLeader()
	t0 = time.Now()
	leader.proc.kill9(t)
	leaderGap := waitAcks("acknowledged after the log leader's kill", t0, 20)
	phase(fmt.Sprintf("log leader %s killed: next acknowledgement after %s", leader.name, leaderGap.Round(time.Millisecond)))
	leader.start(t, natsBin, logs)
	healed("the cluster healed after the leader's kill")

	// 4. Both at once.
	leader, w = logLeader(), writer("a writer")
	t0 = time.Now()
	leader.proc.signal(syscall.SIGKILL)
	w.proc.signal(syscall.SIGKILL)
	bothGap := waitAcks("acknowledged after the writer's and the log leader's kill", t0, 20)
	phase(fmt.Sprintf("writer %s and log leader %s killed: next acknowledgement after %s", w.name, leader.name, bothGap.Round(time.Millisecond)))
	<-leader.proc.done
	<-w.proc.done
	leader.start(t, natsBin, logs)
	w.start(t, bin, logs)
	healed("the cluster healed after both kills")

	// 5. A frozen node: the replicas connected to it leave it for another.
	w = writer("a writer")
	h, _ := w.state()
	i := slices.IndexFunc(nodes, func(n *procNode) bool { return strings.HasSuffix(h.Server, strings.TrimPrefix(n.url, "nats://")) })
	require.GreaterOrEqual(t, i, 0, "the writer's node %q", h.Server)
	frozen := nodes[i]
	t0 = time.Now()
	frozen.proc.signal(syscall.SIGSTOP)
	waitFor(t, ctx, "every replica ready on another node while "+frozen.name+" is frozen", func() bool {
		for _, r := range replicas {
			if h, ok := r.state(); !ok || !h.Ready || strings.HasSuffix(h.Server, strings.TrimPrefix(frozen.url, "nats://")) {
				return false
			}
		}
		return true
	})
	unstranded := time.Since(t0)
	frozenGap := waitAcks("acknowledged while a node is frozen", t0, 20)
	phase(fmt.Sprintf("node %s frozen: every replica ready elsewhere after %s, next acknowledgement after %s",
		frozen.name, unstranded.Round(time.Millisecond), frozenGap.Round(time.Millisecond)))
	frozen.proc.signal(syscall.SIGCONT)
	healed("the cluster healed after the freeze")

	load.stop()

	l := settled(t, ctx, "open the log after the freeze", func() (*eventstore.JetStreamLog, error) {
		return eventstore.OpenJetStreamLog(ctx, js, eventstore.JetStreamConfig{Replicas: 3})
	})
	key, _, err := handlers.LoadLogKey(keyFile, false)
	require.NoError(t, err)
	lk, err := eventstore.NewLogKey(key)
	require.NoError(t, err)
	// The event feed lost what its stream missed while nodes were down or
	// frozen; the writer repairs it while it serves: it comes to hold
	// every event of the log, once each, in the log's order.
	feedWhole := waitFeedHoldsTheLog(t, ctx, js, l, lk)
	phase(fmt.Sprintf("the event feed holds every event of the log %s after the load stopped", feedWhole.Round(time.Millisecond)))
	for _, r := range replicas {
		require.NoError(t, r.proc.terminate(30*time.Second), "graceful stop of %s", r.name)
	}
	phase("dwr serve processes stopped")

	recs := settled(t, ctx, "read the log", func() ([]loggedRecord, error) { return readLog(ctx, l, lk) })
	a := auditLog(recs, led.all(), payloadOpener(t, ctx, js, masterFile))
	lc := led.counts()
	for _, p := range a.Problems {
		t.Log("problem: " + p)
	}
	slices.Sort(failovers)
	p50, p99 := percentile(failovers, 0.5), percentile(failovers, 0.99)
	fmt.Printf("cluster-failover: writer kills=%d failover p50=%s p99=%s max=%s; writer stopped: failover %s, commands waiting out a timeout after the new writer's first ack=%d; "+
		"log leader kill: %s; both: %s; frozen node: replicas elsewhere after %s, acks after %s; acked=%d unknown→resolved=%d lost=%d duplicates=%d epoch_errors=%d dwr ready in %s\n",
		len(failovers), p50.Round(time.Millisecond), p99.Round(time.Millisecond), slices.Max(failovers).Round(time.Millisecond),
		pausedFailover.Round(time.Millisecond), waitedOut, leaderGap.Round(time.Millisecond), bothGap.Round(time.Millisecond),
		unstranded.Round(time.Millisecond), frozenGap.Round(time.Millisecond), lc.acked, lc.resolved, a.Lost, a.Duplicates, a.EpochErrors,
		readyIn.Round(time.Millisecond))

	require.Zero(t, a.safety(), "safety counts: %s", a)
	require.Zero(t, lc.unresolved+lc.refused, "every command is acknowledged")
	require.Zero(t, waitedOut, "commands lost to the stopped writer after its successor's first acknowledgement")
	// The issue asks for p99 ≤ 3 s; the bound here is generous so that a
	// loaded machine cannot make the test flaky: the figure is printed.
	require.Less(t, p99, 10*time.Second, "failover p99")
}

// dialPinging is dial with pings every second, two unanswered and the
// connection is given up for another node: a client on a frozen node
// otherwise waits out NATS's default of two minutes before it notices.
func dialPinging(t *testing.T, url, name string, timeout time.Duration) *client {
	t.Helper()
	nc, err := nats.Connect(url, append(connectOpts(t, url), nats.Name(name), nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond), nats.Timeout(time.Second),
		nats.PingInterval(time.Second), nats.MaxPingsOutstanding(2))...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return &client{nc: nc, ws: "default", timeout: timeout, actor: "admin"}
}

// waitFeedHoldsTheLog waits until the event feed's stream holds the events
// of every record of l, each once, in the log's order, and returns how long
// that took. It fails t after a minute.
func waitFeedHoldsTheLog(t *testing.T, ctx context.Context, js jetstream.JetStream, l eventstore.Log, key *eventstore.LogKey) time.Duration {
	t.Helper()
	start := time.Now()
	var problem string
	for time.Since(start) < time.Minute {
		problem = feedProblem(ctx, t, js, l, key)
		if problem == "" {
			return time.Since(start)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the event feed: %s: %v", problem, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
	t.Fatalf("the event feed does not hold the log after a minute: %s", problem)
	return 0
}

// feedProblem says how the event feed differs from the log, or "" when it
// holds the events of every record of l, each once, in the log's order.
// It fails t if the log cannot be read for another reason than JetStream's
// being unavailable a moment (a node just resumed from a freeze: the
// stream's leader may be elected again, and JetStream answers 503).
func feedProblem(ctx context.Context, t *testing.T, js jetstream.JetStream, l eventstore.Log, key *eventstore.LogKey) string {
	t.Helper()
	recs, err := readLog(ctx, l, key)
	if jetStreamUnavailable(err) {
		return err.Error()
	}
	require.NoError(t, err)
	var want []string
	for _, r := range recs {
		for _, e := range r.C.Events {
			want = append(want, e.ID)
		}
	}
	got, err := feedEventIDs(ctx, js)
	switch {
	case err != nil:
		return err.Error()
	case !slices.Equal(got, want):
		return fmt.Sprintf("the feed holds %d events, the log %d", len(got), len(want))
	}
	return ""
}

// settled returns what f returns once JetStream answers it, trying again
// while it answers that it is unavailable for now (503: a stream's leader
// is being elected after a node was killed or frozen); any other error
// fails t, as does ctx's end.
func settled[T any](t *testing.T, ctx context.Context, what string, f func() (T, error)) T {
	t.Helper()
	var v T
	waitFor(t, ctx, what, func() bool {
		var err error
		v, err = f()
		if !jetStreamUnavailable(err) {
			require.NoError(t, err, what)
		}
		return err == nil
	})
	return v
}

// jetStreamUnavailable reports whether err is JetStream's answer that it
// is unavailable for now (503), which a reader meets while a stream's
// leader is elected.
func jetStreamUnavailable(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.Code == http.StatusServiceUnavailable
}

// feedEventIDs returns the ids of the events the feed's stream holds, in its
// order.
func feedEventIDs(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	st, err := js.Stream(ctx, "DWR_EVENTS")
	if err != nil {
		return nil, err
	}
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	var ids []string
	for {
		batch, err := c.FetchNoWait(1000)
		if err != nil {
			return nil, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			var e struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(m.Data(), &e); err != nil {
				return nil, err
			}
			ids = append(ids, e.ID)
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
		if n == 0 {
			return ids, nil
		}
	}
}
