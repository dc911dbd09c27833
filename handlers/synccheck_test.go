package handlers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/handlers"
)

// monitoredServer starts a real nats-server with JetStream and its HTTP
// monitoring port, fsyncing every write or not, and returns its monitoring
// URL.
func monitoredServer(t *testing.T, name string, syncAlways bool) string {
	t.Helper()
	ns, err := server.NewServer(&server.Options{ServerName: name, DontListen: true, HTTPHost: "127.0.0.1", HTTPPort: -1,
		JetStream: true, StoreDir: t.TempDir(), SyncAlways: syncAlways, NoSigs: true,
		JetStreamMaxMemory: 64 << 20, JetStreamMaxStore: 64 << 20})
	require.NoError(t, err)
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	require.True(t, ns.ReadyForConnections(10*time.Second))
	return fmt.Sprintf("http://%s", ns.MonitorAddr())
}

// dwr serve --nats starts only on nodes shown to fsync before they
// acknowledge: the check reads each node's /varz.
func TestCheckClusterSync(t *testing.T) {
	ctx := context.Background()
	synced := monitoredServer(t, "synced", true)
	unsynced := monitoredServer(t, "unsynced", false)

	require.NoError(t, handlers.CheckClusterSync(ctx, []string{synced}))

	err := handlers.CheckClusterSync(ctx, []string{synced, unsynced})
	require.ErrorIs(t, err, handlers.ErrUnsyncedCluster)
	require.ErrorContains(t, err, "unsynced")
	require.ErrorContains(t, err, "sync_interval is 2m0s, not always")

	err = handlers.CheckClusterSync(ctx, nil)
	require.ErrorIs(t, err, handlers.ErrUnsyncedCluster)

	err = handlers.CheckClusterSync(ctx, []string{"http://127.0.0.1:1"})
	require.ErrorIs(t, err, handlers.ErrUnsyncedCluster, "a node that cannot be read is not shown to fsync")
}

// A node asked while its JetStream is still starting (its monitoring port
// answers first) is refused then, and passes once JetStream runs: the
// check does not go by /varz, whose JetStream section a nats-server fills
// on the first request only.
func TestCheckClusterSyncNodeStartingJetStream(t *testing.T) {
	ctx := context.Background()
	ns, err := server.NewServer(&server.Options{ServerName: "starting", DontListen: true, HTTPHost: "127.0.0.1", HTTPPort: -1, NoSigs: true})
	require.NoError(t, err)
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	require.True(t, ns.ReadyForConnections(10*time.Second))
	url := fmt.Sprintf("http://%s", ns.MonitorAddr())

	err = handlers.CheckClusterSync(ctx, []string{url})
	require.ErrorIs(t, err, handlers.ErrUnsyncedCluster)
	require.ErrorContains(t, err, "starting (http://127.0.0.1:")
	require.ErrorContains(t, err, "JetStream is not enabled")

	require.NoError(t, ns.EnableJetStream(&server.JetStreamConfig{StoreDir: t.TempDir(), SyncAlways: true,
		MaxMemory: 64 << 20, MaxStore: 64 << 20}))
	require.NoError(t, handlers.CheckClusterSync(ctx, []string{url}), "the node fsyncs now that its JetStream runs")
}
