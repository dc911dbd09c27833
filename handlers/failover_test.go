package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// load sends goal.create commands from a few clients, each with its own
// command ids, retrying each (with the same id) until it is acknowledged,
// and records every acknowledged id with its log sequence.
type load struct {
	mu    sync.Mutex
	acked map[string]uint64
	// sentAt, answered: when each acknowledged command was first sent, and
	// answered.
	sentAt, answered map[string]time.Time
	sent             atomic.Int64
	stop             context.CancelFunc
	wg               sync.WaitGroup
}

func startLoad(t *testing.T, connect func() (*nats.Conn, error), clients int) *load {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{acked: map[string]uint64{}, sentAt: map[string]time.Time{}, answered: map[string]time.Time{}, stop: cancel}
	for i := range clients {
		nc, err := connect()
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		c := servicetest.NewLoadClient(nc, 2*time.Second)
		l.wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				id := fmt.Sprintf("c%d-%d", i, n)
				l.sent.Add(1)
				// Once sent, a command is retried until it is acknowledged,
				// even after the load stops: its outcome must be known.
				rctx, rcancel := context.WithTimeout(context.Background(), 60*time.Second)
				sent := time.Now()
				seq, err := c.CreateGoal(rctx, id, id)
				rcancel()
				if err != nil {
					t.Errorf("command %s: %v", id, err)
					return
				}
				l.mu.Lock()
				l.acked[id], l.sentAt[id], l.answered[id] = seq, sent, time.Now()
				l.mu.Unlock()
			}
		})
	}
	return l
}

func (l *load) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// firstAckSentAfter returns when the first command sent after from was
// acknowledged: a reply already on its way from a writer that died at from
// is not one its successor gave.
func (l *load) firstAckSentAfter(from time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for id, s := range l.sentAt {
		if a := l.answered[id]; s.After(from) && (first.IsZero() || a.Before(first)) {
			first = a
		}
	}
	return first, !first.IsZero()
}

// end stops the load and returns what was acknowledged.
func (l *load) end() map[string]uint64 {
	l.stop()
	l.wg.Wait()
	return l.acked
}

// notOnceInLog waits until store has applied the last of the acknowledged
// commands (id → sequence) and returns those it holds no goal of (lost) and
// those it holds several of (duplicated): a goal's title is its command id.
func notOnceInLog(t *testing.T, acked map[string]uint64, store *projections.Store) (lost, duplicated []string) {
	t.Helper()
	var last uint64
	for _, seq := range acked {
		last = max(last, seq)
	}
	require.NoError(t, waitFor(store, last))
	goals, err := store.ListGoals("default", "", 0)
	require.NoError(t, err)
	seen := map[string]int{}
	for _, g := range goals {
		seen[g.Title]++
	}
	for id := range acked {
		switch n := seen[id]; {
		case n == 0:
			lost = append(lost, id)
		case n > 1:
			duplicated = append(duplicated, id)
		}
	}
	return lost, duplicated
}

// A writer that can no longer renew its lease (cut off from the lease's
// bucket, or stopped past it) stops deciding commands by its own clock and
// drops its command endpoints; a standby takes the lease over after the
// TTL and serves: the old writer decides nothing after the new writer's
// first acknowledgement, and every acknowledged command is in the log once.
func TestADeposedWriterServesNothingOnceReplaced(t *testing.T) {
	srv, _ := servicetest.StartNATS(t)
	ncA, err := srv.Connect()
	require.NoError(t, err)
	t.Cleanup(ncA.Close)
	ncB, err := srv.Connect()
	require.NoError(t, err)
	t.Cleanup(ncB.Close)

	a := startReplicaWith(t, ncA, handlers.Config{WriterID: "writer-a"})
	servicetest.Eventually(t, 10*time.Second, a.svc.HoldsLease)
	b := startReplicaWith(t, ncB, handlers.Config{WriterID: "writer-b"})
	ld := startLoad(t, func() (*nats.Conn, error) { return srv.Connect() }, 4)
	servicetest.Eventually(t, 10*time.Second, func() bool { return ld.count() >= 50 })

	a.svc.PauseLease(true)
	servicetest.Eventually(t, 10*time.Second, b.svc.HoldsLease)
	require.False(t, a.svc.HoldsLease(), "two replicas hold the lease")
	// The new writer's first acknowledgement.
	before := ld.count()
	servicetest.Eventually(t, 10*time.Second, func() bool { return b.svc.Decided() > 0 && ld.count() > before })
	decidedByA := a.svc.Decided()
	servicetest.Eventually(t, 20*time.Second, func() bool { return ld.count() >= before+200 })
	acked := ld.end()
	require.Equal(t, decidedByA, a.svc.Decided(), "the deposed writer decided commands after its successor's first acknowledgement")

	// Every acknowledged command is in the log once, at the sequence it
	// was acknowledged with.
	lost, dup := notOnceInLog(t, acked, b.store)
	require.Empty(t, lost, "acknowledged commands not in the log")
	require.Empty(t, dup, "acknowledged commands in the log more than once")
	t.Logf("acknowledged %d commands (%d sent), decided by the old writer %d, by the new %d; lost 0, duplicated 0",
		len(acked), ld.sent.Load(), decidedByA, b.svc.Decided())

	// Resumed, the old writer stays a standby: the lease is the new writer's.
	a.svc.PauseLease(false)
	require.True(t, b.svc.HoldsLease())
}

// kill ends a replica as a crash would, as far as the others can tell: its
// connection closes first (its subscriptions go, its lease is not
// released), then it stops.
func (r *replica) kill(nc *nats.Conn) {
	nc.Close()
	r.cancel()
	if err := <-r.done; err != nil {
		_ = err // how a killed replica's Run ends does not matter
	}
	r.cancel = nil
	_ = r.store.Close()
}

// The writer dies again and again under load, with the default lease: a
// standby takes over and the clients, retrying with the same ids, are
// acknowledged again. The failover — from the writer's death to the next
// acknowledgement — is printed (p50, p99); only a generous bound fails the
// test, so that a loaded machine cannot make it flaky. Nothing
// acknowledged is lost or duplicated.
func TestFailoverWhenTheWriterDies(t *testing.T) {
	if testing.Short() {
		t.Skip("kills the writer several times")
	}
	srv, _ := servicetest.StartNATS(t)
	type member struct {
		r  *replica
		nc *nats.Conn
	}
	start := func(id string) *member {
		nc, err := srv.Connect()
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		return &member{r: startReplicaWith(t, nc, handlers.Config{WriterID: id, LeaseTTL: handlers.DefaultLeaseTTL}), nc: nc}
	}
	members := []*member{start("r0")}
	servicetest.Eventually(t, 10*time.Second, members[0].r.svc.HoldsLease)
	members = append(members, start("r1"), start("r2"))
	ld := startLoad(t, func() (*nats.Conn, error) { return srv.Connect() }, 4)
	servicetest.Eventually(t, 10*time.Second, func() bool { return ld.count() >= 20 })

	const kills = 5
	var failovers []time.Duration
	for k := range kills {
		var w int
		servicetest.Eventually(t, 20*time.Second, func() bool {
			for i, m := range members {
				if m.r.svc.HoldsLease() {
					w = i
					return true
				}
			}
			return false
		})
		before := ld.count()
		died := time.Now()
		members[w].r.kill(members[w].nc)
		var first time.Time
		servicetest.Eventually(t, 30*time.Second, func() bool {
			var ok bool
			first, ok = ld.firstAckSentAfter(died)
			return ok
		})
		failovers = append(failovers, first.Sub(died))
		members[w] = start(fmt.Sprintf("r%d", 3+k)) // a new replica, from an empty data directory
		servicetest.Eventually(t, 20*time.Second, func() bool { return ld.count() >= before+20 })
	}
	acked := ld.end()

	var check *replica
	for _, m := range members {
		if m.r.svc.HoldsLease() {
			check = m.r
		}
	}
	require.NotNil(t, check)
	lost, dup := notOnceInLog(t, acked, check.store)
	slices.Sort(failovers)
	p50, p99 := failovers[len(failovers)/2], failovers[len(failovers)-1]
	t.Logf("failover over %d kills of the writer (lease %s): p50 %s, p99 %s (max); acknowledged %d, lost %d, duplicated %d",
		kills, handlers.DefaultLeaseTTL, p50.Round(time.Millisecond), p99.Round(time.Millisecond), len(acked), len(lost), len(dup))
	require.Empty(t, lost, "acknowledged commands not in the log")
	require.Empty(t, dup, "acknowledged commands in the log more than once")
	require.Less(t, p99, 10*time.Second, "failover p99")
}

// /readyz says whether a replica serves: ready while it is connected, not
// ready (503, with the reason) once it has no NATS connection.
func TestReadyzSaysWhenAReplicaCannotReachNATS(t *testing.T) {
	srv, _ := servicetest.StartNATS(t)
	nc, err := srv.Connect()
	require.NoError(t, err)
	r := startReplicaWith(t, nc, handlers.Config{WriterID: "alone"})
	servicetest.Eventually(t, 10*time.Second, r.svc.HoldsLease)
	ts := httptest.NewServer(r.svc.HealthHandler())
	t.Cleanup(ts.Close)
	get := func() (int, handlers.Health) {
		resp, err := http.Get(ts.URL + "/readyz")
		require.NoError(t, err)
		defer func() { _ = resp.Body.Close() }()
		var h handlers.Health
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&h))
		return resp.StatusCode, h
	}
	code, h := get()
	require.Equal(t, http.StatusOK, code, "%+v", h)
	require.True(t, h.Ready && h.Writer, "%+v", h)

	r.kill(nc)
	code, h = get()
	require.Equal(t, http.StatusServiceUnavailable, code, "%+v", h)
	require.False(t, h.Ready)
	require.Contains(t, h.Reason, "NATS")
}

// Once the writer dies, a standby answers commands "unavailable" (retry
// with the same id) at once, where clients would otherwise find no
// responders until the lease shows the writer gone: here the lease is 30 s,
// so the lease alone would leave them without an answer for 15 s.
func TestStandbysAnswerUnavailableAsSoonAsTheWriterDies(t *testing.T) {
	srv, _ := servicetest.StartNATS(t)
	connect := func() *nats.Conn {
		nc, err := srv.Connect()
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		return nc
	}
	const ttl = 30 * time.Second
	ncA := connect()
	a := startReplicaWith(t, ncA, handlers.Config{WriterID: "writer-a", LeaseTTL: ttl})
	servicetest.Eventually(t, 10*time.Second, a.svc.HoldsLease)
	startReplicaWith(t, connect(), handlers.Config{WriterID: "standby-b", LeaseTTL: ttl})

	c := connect()
	send := func() (code string, err error) {
		m := nats.NewMsg("dwr.cmd.default.goal.create")
		m.Header.Set(schemas.HeaderCommandID, "the-same-id")
		m.Data = []byte(`{"title":"after the writer"}`)
		r, err := c.RequestMsg(m, 2*time.Second)
		if err != nil {
			return "", err
		}
		var rep schemas.Reply
		require.NoError(t, json.Unmarshal(r.Data, &rep))
		if rep.OK {
			return "ok", nil
		}
		return rep.Error.Code, nil
	}
	code, err := send()
	require.NoError(t, err)
	require.Equal(t, "ok", code, "the writer answers while it lives")

	died := time.Now()
	a.kill(ncA)
	var last error
	servicetest.Eventually(t, 5*time.Second, func() bool {
		code, last = send()
		return last == nil && code == string(schemas.CodeUnavailable)
	})
	require.Less(t, time.Since(died), ttl/2, "answered before the lease showed the writer gone")
	t.Logf("a standby answered %q %s after the writer's death (lease %s)", code, time.Since(died).Round(time.Millisecond), ttl)
}
