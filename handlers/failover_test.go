package handlers_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// load sends goal.create commands from a few clients, each with its own
// command ids, retrying each (with the same id) until it is acknowledged,
// and records every acknowledged id with its log sequence.
type load struct {
	mu    sync.Mutex
	acked map[string]uint64
	sent  atomic.Int64
	stop  context.CancelFunc
	wg    sync.WaitGroup
}

func startLoad(t *testing.T, connect func() (*nats.Conn, error), clients int) *load {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{acked: map[string]uint64{}, stop: cancel}
	for i := range clients {
		nc, err := connect()
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		c := client.New(nc, client.Timeout(2*time.Second))
		l.wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				id := fmt.Sprintf("c%d-%d", i, n)
				l.sent.Add(1)
				// Once sent, a command is retried until it is acknowledged,
				// even after the load stops: its outcome must be known.
				rctx, rcancel := context.WithTimeout(context.Background(), 60*time.Second)
				r, err := c.CreateGoal(rctx, schemas.CreateGoal{Title: id}, client.CommandID(id))
				rcancel()
				if err != nil {
					t.Errorf("command %s: %v", id, err)
					return
				}
				l.mu.Lock()
				l.acked[id] = r.Seq
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

// end stops the load and returns what was acknowledged.
func (l *load) end() map[string]uint64 {
	l.stop()
	l.wg.Wait()
	return l.acked
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
	var last uint64
	for _, seq := range acked {
		last = max(last, seq)
	}
	require.NoError(t, waitFor(b.store, last))
	goals, err := b.store.ListGoals("default", "", 0)
	require.NoError(t, err)
	seen := map[string]int{}
	for _, g := range goals {
		seen[g.Title]++
	}
	for id := range acked {
		require.Equal(t, 1, seen[id], "acknowledged command %s is in the log %d times", id, seen[id])
	}
	t.Logf("acknowledged %d commands (%d sent), decided by the old writer %d, by the new %d; lost 0, duplicated 0",
		len(acked), ld.sent.Load(), decidedByA, b.svc.Decided())

	// Resumed, the old writer stays a standby: the lease is the new writer's.
	a.svc.PauseLease(false)
	require.True(t, b.svc.HoldsLease())
}
