package integration

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// runChain3 creates a goal with a chain of three tasks and runs every task
// through claim and succeed, retrying unknown outcomes with the same command
// id until ctx ends. Every command must be acknowledged.
func runChain3(t *testing.T, ctx context.Context, c *client, led *ledger, label string) (goalID string, lastSeq uint64) {
	t.Helper()
	n := 0
	id := func() string { n++; return fmt.Sprintf("%s-%d", label, n) }
	must := func(r *cmdResult) *cmdResult {
		t.Helper()
		led.add(r)
		require.Equal(t, acked, r.Outcome, "%s %s: %v (last unknown cause: %s)", r.Name, r.ID, r.Err, r.LastErr)
		lastSeq = max(lastSeq, r.Seq)
		return r
	}
	g := must(c.do(ctx, "goal.create", map[string]any{"title": label}, id()))
	goalID = g.reply().ID
	g.Aggs = []aggRef{{domain.AggGoal, goalID}}
	p := must(c.do(ctx, "plan.submit", map[string]any{"goal_id": goalID, "tasks": []map[string]any{
		{"key": "a", "queue": "shell", "input": map[string]any{"n": 1}},
		{"key": "b", "queue": "shell", "depends_on": []string{"a"}},
		{"key": "c", "queue": "shell", "depends_on": []string{"b"}},
	}}, id()))
	plan := p.reply()
	require.Len(t, plan.Tasks, 3)
	for _, pt := range plan.Tasks {
		p.Aggs = append(p.Aggs, aggRef{domain.AggTask, pt.TaskID})
	}
	for i, pt := range plan.Tasks {
		cl := must(c.do(ctx, "task.claim", map[string]any{"task_id": pt.TaskID, "executor": label}, id()))
		require.Equal(t, 1, cl.reply().Attempt, "claim of task %s", pt.Key)
		done := must(c.do(ctx, "task.succeed", map[string]any{"task_id": pt.TaskID, "attempt": 1, "token": cl.reply().Token,
			"result": map[string]any{"i": i}}, id()))
		require.Equal(t, domain.StateAccepted, done.reply().State)
	}
	var gv projections.GoalView
	require.NoError(t, c.query("goal.get", schemas.Query{ID: goalID}, lastSeq, &gv))
	require.Equal(t, domain.GoalStateAchieved, gv.State)
	return goalID, lastSeq
}

// streamInfo asks for a stream's info until ctx ends or cond holds.
func streamInfo(t *testing.T, ctx context.Context, js jetstream.JetStream, name string, cond func(*jetstream.StreamInfo) bool) *jetstream.StreamInfo {
	t.Helper()
	info, err := pollStream(ctx, js, name, 2*time.Second, 100*time.Millisecond, cond)
	if err != nil {
		t.Fatalf("stream %s: condition not met before the deadline (last info %+v, err %v)", name, info, err)
	}
	return info
}

// pollStream asks for a stream's info every tick, each ask bounded by ask,
// until cond holds (it returns that info) or ctx ends (it returns the last
// info and error, with ctx's).
func pollStream(ctx context.Context, js jetstream.JetStream, name string, ask, tick time.Duration, cond func(*jetstream.StreamInfo) bool) (*jetstream.StreamInfo, error) {
	var last error
	var info *jetstream.StreamInfo
	for {
		rctx, cancel := context.WithTimeout(ctx, ask)
		st, err := js.Stream(rctx, name)
		if err == nil {
			info, err = st.Info(rctx)
		}
		cancel()
		if err == nil && cond(info) {
			return info, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return info, errors.Join(last, ctx.Err())
		case <-time.After(tick):
		}
	}
}

// r3Current reports whether a stream of three replicas has a leader and two
// followers, both current and online (and, when caughtUp, none lagging).
func r3Current(i *jetstream.StreamInfo, caughtUp bool) bool {
	if i.Cluster == nil || i.Cluster.Leader == "" || len(i.Cluster.Replicas) != 2 {
		return false
	}
	for _, r := range i.Cluster.Replicas {
		if !r.Current || r.Offline || caughtUp && r.Lag > 0 {
			return false
		}
	}
	return true
}

// clusterLoaders is how many connections send goal.create back to back
// while the log's leader is shut down.
const clusterLoaders = 4

// goalLoad is steady load on a cluster: clusterLoaders connections send
// goal.create back to back, each command retried with its id until it is
// answered or ctx ends, until stopped. Every result goes to the ledger, and
// is kept.
type goalLoad struct {
	mu      sync.Mutex
	all     []*cmdResult
	stopped atomic.Bool
	wg      sync.WaitGroup
}

// startGoalLoad starts the load, one loader on each connection dial makes,
// with command ids that begin with label. It is stopped when the test ends.
func startGoalLoad(t *testing.T, ctx context.Context, led *ledger, label string, dial func(loader int) *client) *goalLoad {
	l := &goalLoad{}
	for g := range clusterLoaders {
		c := dial(g)
		l.wg.Go(func() {
			for n := 1; !l.stopped.Load(); n++ {
				r := c.do(ctx, "goal.create", map[string]any{"title": label}, fmt.Sprintf("%s-%d-%d", label, g, n))
				led.add(r)
				if r.Outcome == acked {
					r.Aggs = []aggRef{{domain.AggGoal, r.reply().ID}}
				}
				l.mu.Lock()
				l.all = append(l.all, r)
				l.mu.Unlock()
			}
		})
	}
	t.Cleanup(l.stop)
	return l
}

// stop stops the load and waits for the loaders' last commands.
func (l *goalLoad) stop() {
	l.stopped.Store(true)
	l.wg.Wait()
}

// results returns the results so far that keep selects, in the order they
// came.
func (l *goalLoad) results(keep func(*cmdResult) bool) []*cmdResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*cmdResult
	for _, r := range l.all {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out
}

// maxUnavailable bounds the unavailability window after a graceful shutdown
// of the log's leader, beyond the time NATS took to give the log and the
// writer's lease a leader again. NATS itself elects a new stream leader in
// about 0.3 s (NATS-NOTES) when the node that shuts down hands its
// leadership over; when that hand-over does not take (no follower was
// current at that moment, as under steady writes), the followers wait out
// their Raft election timeout, 4–9 s in nats-server, and no client of the
// stream can do better. The writer's part: an append in flight when the
// leader went waits out its attempt (1 s), and a step-down adds a 1 s pause.
const maxUnavailable = 5 * time.Second

// leadersBack returns how long after t0 every one of streams answered with
// a leader other than node from, polling until ctx ends (then it returns
// the time until then).
func leadersBack(ctx context.Context, js jetstream.JetStream, t0 time.Time, from string, streams ...string) time.Duration {
	for _, name := range streams {
		_, _ = pollStream(ctx, js, name, 200*time.Millisecond, 20*time.Millisecond, func(i *jetstream.StreamInfo) bool {
			return i.Cluster != nil && i.Cluster.Leader != "" && i.Cluster.Leader != from
		})
	}
	return time.Since(t0)
}

// handover is one round of TestClusterR3: the log's leader shut down.
type handover struct {
	from, to, writerConn string
	window               time.Duration // longest time without an acknowledgement
	elected              time.Duration // from the shutdown to the log and the lease both led elsewhere
	firstAck             time.Duration // from the shutdown to the first acknowledgement
	heal                 time.Duration // from the restart of the node to all replicas current
}

// TestClusterR3 runs `dwr serve --replicas 3` against a three-node NATS
// cluster under steady load, gracefully shuts down the node that leads the
// log stream (then restarts it, and again, for a few rounds: the stall it
// looks for depends on an append being in flight at that moment), and checks
// that commands keep being acknowledged and that every acknowledged command
// is in the log.
func TestClusterR3(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-node JetStream cluster takes seconds to form")
	}
	rounds := times(4, 12)
	bin := dwrBinary(t)
	logs := logOnFailure(t, "cluster and dwr serve output")
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(60+30*rounds)*time.Second)
	defer cancel()
	phase := phases(t)

	acc := natsConfig(t, bin)
	nodes := startCluster(t, 3, logs, acc.accounts)
	natsURL := clusterURL(nodes)
	creds.Store(natsURL, acc.AdminCredential)
	waitFor(t, ctx, "JetStream meta leader elected", func() bool { return jetStreamReady(nodes) })
	phase("JetStream cluster ready")
	data := filepath.Join(t.TempDir(), "data")
	srv := startServer(t, bin, logs, "dwr serve on the cluster", append([]string{"serve", "--nats", natsURL, "--nats-monitor", monitorURLs(nodes), "--replicas", "3", "--data", data, "--http", ""}, acc.serveArgs()...)...)
	readyIn := waitReady(t, srv, natsURL, 60*time.Second)
	phase("dwr ready")

	led := &ledger{}
	c := dial(t, natsURL, "cluster-client", 5*time.Second)
	runChain3(t, ctx, c, led, "r3-before")

	tnc := acc.service(t, natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	js, err := jetstream.New(tnc)
	require.NoError(t, err)
	healthy := func(i *jetstream.StreamInfo) bool { return r3Current(i, true) }
	info := streamInfo(t, ctx, js, "DWR_LOG", healthy)
	require.Equal(t, 3, info.Config.Replicas)
	require.Len(t, info.Cluster.Replicas, 2, "the log has two followers")
	phase("chain run; log stream is R3: " + replicasString(info))

	// Steady load: goal.create back to back from a few connections, so that
	// an append is in flight when the leader goes.
	// A reply in flight when the writer's node goes down is lost: the reply
	// subject of a request that crossed accounts is mapped on the
	// requester's side of the import, and a reply published after the
	// writer reconnected elsewhere finds no mapping. Clients retry with the
	// same command id after their timeout; keep it short.
	load := startGoalLoad(t, ctx, led, "r3-load", func(g int) *client {
		return dial(t, natsURL, fmt.Sprintf("cluster-load-%d", g), 2*time.Second)
	})
	// acks returns the acknowledgement times after from, in order.
	acks := func(from time.Time) []time.Time {
		var out []time.Time
		for _, r := range load.results(func(r *cmdResult) bool { return r.Outcome == acked && r.Answered.After(from) }) {
			out = append(out, r.Answered)
		}
		slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
		return out
	}

	var handovers []handover
	for round := 1; round <= rounds; round++ {
		info := streamInfo(t, ctx, js, "DWR_LOG", healthy)
		var h handover
		h.from = info.Cluster.Leader
		i := slices.IndexFunc(nodes, func(n *natsNode) bool { return n.name == h.from })
		require.GreaterOrEqual(t, i, 0, "leader %q is one of our nodes", h.from)
		leader := nodes[i]
		h.writerConn = nodeOfClient(nodes, "dwr-serve")
		warm := time.Now()
		waitFor(t, ctx, "load acknowledged before the shutdown", func() bool { return len(acks(warm)) >= 100 })

		t0 := time.Now()
		elected := make(chan time.Duration, 1)
		go func() { elected <- leadersBack(ctx, js, t0, h.from, "DWR_LOG", "KV_dwr-writer") }()
		leader.shutdown()
		phase(fmt.Sprintf("round %d: leader %s shut down (dwr serve connected to %s)", round, h.from, h.writerConn))

		// Commands keep being acknowledged: a whole chain, and the load.
		afterCtx, afterCancel := context.WithTimeout(ctx, 45*time.Second)
		runChain3(t, afterCtx, c, led, fmt.Sprintf("r3-round%d", round))
		waitFor(t, afterCtx, "load acknowledged after the shutdown", func() bool { return len(acks(t0)) >= 100 })
		afterCancel()
		around := acks(t0.Add(-time.Second))
		h.firstAck = around[slices.IndexFunc(around, func(a time.Time) bool { return a.After(t0) })].Sub(t0)
		for k := 1; k < len(around); k++ {
			h.window = max(h.window, around[k].Sub(around[k-1]))
		}
		info = streamInfo(t, ctx, js, "DWR_LOG", func(i *jetstream.StreamInfo) bool {
			return i.Cluster != nil && i.Cluster.Leader != "" && i.Cluster.Leader != h.from
		})
		h.to = info.Cluster.Leader
		h.elected = <-elected

		// Heal: restart the node and wait until every replica is current.
		healStart := time.Now()
		require.NoError(t, leader.start())
		streamInfo(t, ctx, js, "DWR_LOG", healthy)
		h.heal = time.Since(healStart)
		handovers = append(handovers, h)
		phase(fmt.Sprintf("round %d: leader %s→%s, window %s, log and lease led elsewhere after %s, first ack after %s, healed in %s", round, h.from, h.to,
			h.window.Round(time.Millisecond), h.elected.Round(time.Millisecond), h.firstAck.Round(time.Millisecond), h.heal.Round(time.Millisecond)))
		if h.window >= h.elected+maxUnavailable {
			break // the stall showed: no need for more rounds
		}
	}
	load.stop()
	if srv.exited() { // err is set before done is closed
		t.Fatalf("dwr serve died: %v", srv.err)
	}
	require.NoError(t, srv.terminate(30*time.Second), "graceful stop of dwr serve")
	phase("dwr serve stopped")

	l := settled(t, ctx, "open the log", func() (*eventstore.JetStreamLog, error) {
		return eventstore.OpenJetStreamLog(ctx, js, eventstore.JetStreamConfig{Replicas: 3})
	})
	recs := settled(t, ctx, "read the log", func() ([]loggedRecord, error) { return readLog(ctx, l, logKeyOf(t, data)) })
	phase("log read")
	a := auditLog(recs, led.all(), payloadOpener(t, ctx, js, filepath.Join(data, handlers.MasterKeyFile)))
	views := compareViews(t, ctx, filepath.Join(data, "views"), l, logKeyOf(t, data))
	lc := led.counts()
	phase("views rebuilt and compared")

	// Maintenance on the cluster never lowers the log's durability: it opens
	// the stream read-only (it used to update it to R1).
	for _, args := range [][]string{{"admin", "verify"}, {"admin", "rebuild"}} {
		out, err := exec.Command(bin, append(args, "--nats", natsURL, "--nats-creds", acc.ServiceSeed, "--data", data)...).CombinedOutput()
		require.NoError(t, err, "dwr %s --nats: %s", strings.Join(args, " "), out)
	}
	info = streamInfo(t, ctx, js, "DWR_LOG", func(*jetstream.StreamInfo) bool { return true })
	require.Equal(t, 3, info.Config.Replicas, "dwr admin left the log stream with three replicas")
	phase("dwr admin verify and rebuild on the cluster")

	t.Logf("cluster log: %s", a)
	t.Logf("cluster views: live checkpoint %d, rebuilt %d, equal=%v %s", views.LiveCheckpoint, views.RebuiltCheckpoint, views.Equal, views.FirstDiff)
	for _, line := range logs.lines(30, "level=ERROR", "level=WARN", "panic", "DATA RACE") {
		if strings.Contains(line, "node=") {
			continue // the NATS servers' own warnings, expected around a shutdown
		}
		t.Log("dwr serve: " + line)
	}
	for _, p := range a.Problems {
		t.Log("problem: " + p)
	}
	var windows []time.Duration
	var leaders []string
	for _, h := range handovers {
		windows = append(windows, h.window.Round(time.Millisecond))
		leaders = append(leaders, h.from+"→"+h.to)
	}
	fmt.Printf("cluster-r3: replicas=%d handovers=%d (%s) acked=%d unknown→resolved=%d lost=%d duplicates=%d dwr ready in %s unavailability windows=%v max=%s\n",
		info.Config.Replicas, len(handovers), strings.Join(leaders, " "), lc.acked, lc.resolved, a.Lost, a.Duplicates,
		readyIn.Round(time.Millisecond), windows, slices.Max(windows))

	require.Zero(t, a.safety(), "safety counts: %s", a)
	require.Zero(t, lc.unresolved+lc.refused, "every command of the cluster test is acknowledged")
	require.Equal(t, views.RebuiltCheckpoint, views.LiveCheckpoint)
	require.True(t, views.Equal, "rebuilt views equal the live ones: %s", views.FirstDiff)
	for k, h := range handovers {
		require.Less(t, h.window, h.elected+maxUnavailable, "round %d: no command was acknowledged for %s after leader %s shut down gracefully "+
			"(dwr serve connected to %s), though the log and the lease were led elsewhere %s after the shutdown", k+1, h.window, h.from, h.writerConn, h.elected)
	}
}

func replicasString(info *jetstream.StreamInfo) string {
	var b strings.Builder
	fmt.Fprintf(&b, "leader %s", info.Cluster.Leader)
	for _, r := range info.Cluster.Replicas {
		fmt.Fprintf(&b, ", %s current=%v offline=%v lag=%d", r.Name, r.Current, r.Offline, r.Lag)
	}
	return b.String()
}

// jetStreamReady reports whether the cluster has a JetStream meta leader
// that every node is current with.
func jetStreamReady(nodes []*natsNode) bool {
	leader := false
	for _, n := range nodes {
		ns := n.server().NATS()
		if !ns.JetStreamIsCurrent() {
			return false
		}
		leader = leader || ns.JetStreamIsLeader()
	}
	return leader
}

// TestServeStartsWithTheCluster starts `dwr serve --nats` together with the
// three NATS servers it uses, as a supervisor would after a full restart:
// the service must wait for JetStream to elect its meta leader (well under a
// second here; NATS-NOTES saw 5 s) and become ready, not exit. A JetStream
// API request sent before the election gets no answer and times out.
func TestServeStartsWithTheCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-node JetStream cluster takes seconds to form")
	}
	bin := dwrBinary(t)
	logs := logOnFailure(t, "cluster and dwr serve output")
	acc := natsConfig(t, bin)
	nodes := startCluster(t, 3, logs, acc.accounts)
	natsURL := clusterURL(nodes)
	creds.Store(natsURL, acc.AdminCredential)
	data := filepath.Join(t.TempDir(), "data")
	srv := startServer(t, bin, logs, "dwr serve started with the cluster", append([]string{"serve", "--nats", natsURL, "--nats-monitor", monitorURLs(nodes), "--replicas", "3",
		"--data", data, "--http", ""}, acc.serveArgs()...)...)
	readyIn := waitReady(t, srv, natsURL, 60*time.Second)
	t.Logf("dwr serve ready %s after it started with the cluster", readyIn.Round(time.Millisecond))
	// The sync check sees the whole JetStream cluster: a node left out of
	// --nats-monitor is named.
	err := handlers.CheckClusterSync(context.Background(), []string{nodes[0].monitor, nodes[1].monitor})
	require.ErrorIs(t, err, handlers.ErrUnsyncedCluster)
	require.ErrorContains(t, err, "n3")
	require.NoError(t, handlers.CheckClusterSync(context.Background(), []string{nodes[0].monitor, nodes[1].monitor, nodes[2].monitor}))
	tnc := acc.service(t, natsURL)
	js, err := jetstream.New(tnc)
	require.NoError(t, err)
	before := streamReplicas(t, js)
	require.Equal(t, 3, before["DWR_LOG"], "streams: %v", before)
	require.NoError(t, srv.terminate(30*time.Second))

	// A restart without --replicas keeps what the cluster's streams have:
	// the log remembers its replicas, and the derived streams and buckets
	// follow it.
	srv = startServer(t, bin, logs, "dwr serve restarted without --replicas", append([]string{"serve", "--nats", natsURL, "--nats-monitor", monitorURLs(nodes),
		"--data", data, "--http", ""}, acc.serveArgs()...)...)
	waitReady(t, srv, natsURL, 60*time.Second)
	require.Equal(t, before, streamReplicas(t, js), "every stream keeps its replicas after a restart without --replicas")
	require.NoError(t, srv.terminate(30*time.Second))
}

// streamReplicas returns the replicas of every stream of the service's
// account, by name.
func streamReplicas(t *testing.T, js jetstream.JetStream) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A listing of every stream's info can leave one out on a cluster
	// ("Did not receive all stream info results"): each is asked for.
	// A stream just created can be listed by the meta leader before the
	// node asked has its assignment ("stream not found"): the listing is
	// taken again until every stream it names is found.
	for {
		out, missing := map[string]int{}, ""
		names := js.StreamNames(ctx)
		for name := range names.Name() {
			s, err := js.Stream(ctx, name)
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				missing = name
				continue
			}
			require.NoError(t, err)
			out[name] = s.CachedInfo().Config.Replicas
		}
		require.NoError(t, names.Err())
		if missing == "" {
			return out
		}
		select {
		case <-ctx.Done():
			t.Fatalf("stream %s is listed but not found", missing)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// nodeOfClient returns the name of the node a client connection named name
// is connected to, or "".
func nodeOfClient(nodes []*natsNode, name string) string {
	for _, n := range nodes {
		cz, err := n.server().NATS().Connz(&server.ConnzOptions{})
		if err != nil {
			continue
		}
		for _, c := range cz.Conns {
			if c.Name == name {
				return n.name
			}
		}
	}
	return ""
}

// waitFor polls cond until it holds or ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not before the deadline", what)
		case <-tick.C:
		}
	}
}
