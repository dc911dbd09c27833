package logtest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// StartServer starts an embedded single-node NATS server with JetStream for
// the duration of the test: an ephemeral port, a temporary store directory,
// fsync on every write (SyncAlways), explicit memory and store limits, no
// signal handlers and no logging. It is shut down, and waited for, at
// cleanup. It fails the test if the server does not start.
func StartServer(tb testing.TB) *server.Server { return StartServerWithStore(tb, 1<<30) }

// StartServerWithStore is StartServer with a JetStream store limit of
// maxStore bytes.
func StartServerWithStore(tb testing.TB, maxStore int64) *server.Server {
	tb.Helper()
	ns, err := server.NewServer(&server.Options{
		ServerName:         "dwr-test",
		Host:               "127.0.0.1",
		Port:               -1,
		JetStream:          true,
		StoreDir:           tb.TempDir(),
		SyncAlways:         true,
		JetStreamMaxMemory: 64 << 20,
		JetStreamMaxStore:  maxStore,
		NoSigs:             true,
		NoLog:              true,
	})
	require.NoError(tb, err)
	ns.Start()
	tb.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	require.True(tb, ns.ReadyForConnections(10*time.Second), "nats server not ready")
	return ns
}

// Connect opens an in-process client connection to ns and a JetStream
// context on it, both closed at cleanup (before the server shuts down, when
// ns came from StartServer in the same test). It fails the test if the
// connection fails.
func Connect(tb testing.TB, ns *server.Server) (*nats.Conn, jetstream.JetStream) {
	tb.Helper()
	nc, err := nats.Connect("", nats.InProcessServer(ns), nats.Name(tb.Name()))
	require.NoError(tb, err)
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(tb, err)
	return nc, js
}
