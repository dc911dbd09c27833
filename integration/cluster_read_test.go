package integration

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/eventstore"
)

// TestReadWhileAReplicaCatchesUp reads a replicated log again and again
// while one of its replicas, restarted after missing many records, catches
// up. A read's consumer may be placed on that replica, whose copy ends
// early; every read must still give every record the leader had when it
// began (a read that ended early made `dwr serve` report its log damaged and
// exit, in TestClusterR3).
func TestReadWhileAReplicaCatchesUp(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-node JetStream cluster takes seconds to form")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	logs := logOnFailure(t, "cluster output")
	acc := natsConfig(t, dwrBinary(t))
	nodes := startCluster(t, 3, logs, acc.accounts)
	waitFor(t, ctx, "JetStream meta leader elected", func() bool { return jetStreamReady(nodes) })
	js, err := jetstream.New(acc.service(t, clusterURL(nodes), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond)))
	require.NoError(t, err)
	// Until every node is known online, an R3 stream finds no peers.
	var l *eventstore.JetStreamLog
	var lastErr error
	defer func() {
		if l == nil && lastErr != nil {
			t.Logf("the last try to create the R3 log stream: %v", lastErr) // it once took over two minutes in CI
		}
	}()
	waitFor(t, ctx, "the R3 log stream created", func() bool {
		// Each try has its own timeout, as the service's own do: a request
		// to a meta leader that went away is never answered, and under the
		// test's deadline one try waited it out whole (CI, twice).
		tctx, tcancel := context.WithTimeout(ctx, 5*time.Second)
		defer tcancel()
		l, lastErr = eventstore.NewJetStreamLog(tctx, js, eventstore.JetStreamConfig{Replicas: 3})
		return lastErr == nil
	})
	rec := bytes.Repeat([]byte("r"), 8<<10)
	seq, err := l.Append(ctx, rec, 0)
	require.NoError(t, err)
	info := streamInfo(t, ctx, js, "DWR_LOG", func(i *jetstream.StreamInfo) bool { return r3Current(i, true) })

	// A follower misses most of the log.
	follower := nodes[slices.IndexFunc(nodes, func(n *natsNode) bool { return n.name == info.Cluster.Replicas[0].Name })]
	follower.shutdown()
	const missed = 2000
	for range missed {
		seq, err = l.Append(ctx, rec, seq)
		require.NoError(t, err)
	}
	require.NoError(t, follower.start())

	// Read while it catches up, and a few times after.
	reads, after := 0, 0
	for after < 5 {
		caughtUp := false
		sctx, scancel := context.WithTimeout(ctx, 2*time.Second) // one ask, bounded: see the create above
		if st, err := js.Stream(sctx, "DWR_LOG"); err == nil {
			caughtUp = r3Current(st.CachedInfo(), true)
		}
		scancel()
		n, lastRead := 0, uint64(0)
		err := l.Read(ctx, 1, func(s uint64, _ []byte) error {
			n, lastRead = n+1, s
			return nil
		})
		require.NoError(t, err)
		reads++
		require.Equal(t, missed+1, n, "read %d gave %d records, up to seq %d (the log has %d, up to seq %d)", reads, n, lastRead, missed+1, seq)
		// One record by its sequence: whichever replica answers a direct
		// get, a record it does not hold yet is asked of the leader.
		got, err := l.Record(ctx, seq)
		require.NoError(t, err, "the last record, while a replica catches up")
		require.Equal(t, rec, got)
		if caughtUp {
			after++
		}
	}
	t.Logf("%d reads, each of %d records, while a replica caught up and after", reads, missed+1)
}
