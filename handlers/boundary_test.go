package handlers_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// After a crash the views may lack the log's last records, and with them a
// member added there: the embedded server starts with the members the views
// hold. Its client port stays closed until the service is ready and the
// members are the log's, so such a member finds the port closed (which its
// client retries) instead of being refused as unknown (which nats.go gives up
// on after two tries) — and a member removed there is not let in meanwhile.
func TestTheClientPortOpensOnceTheViewsHoldTheLogsMembers(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())

	st := servicetest.Start(t, dir, servicetest.Options{Secure: true, Listen: addr})
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, _ := kp.PublicKey()
	servicetest.Must(t, st.Admin, "default", "member.add", domain.AddMember{Name: "late", Role: domain.RoleExecutor,
		PublicKey: pub, Queues: []string{"q"}})
	st.Stop()
	// The views lose every record; the log keeps them, the member's too.
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "views")))

	store, err := projections.Open(filepath.Join(dir, "views"), projections.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	bnd, err := handlers.StartEmbedded(handlers.EmbeddedConfig{DataDir: dir, Listen: addr, Logger: servicetest.Logger()}, store)
	require.NoError(t, err)
	t.Cleanup(bnd.Server().Shutdown)
	asMember := func() (*nats.Conn, error) {
		return nats.Connect(bnd.Server().ClientURL(), nats.Timeout(time.Second), nats.CustomInboxPrefix(schemas.InboxPrefix(pub)),
			nats.Nkey(pub, func(nonce []byte) ([]byte, error) { return kp.Sign(nonce) }))
	}
	_, err = asMember()
	require.ErrorIs(t, err, nats.ErrNoServers, "until the views caught up the port is closed: the member is not judged by them")

	nc, err := bnd.Connect("dwr-serve")
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	key, _, err := handlers.LoadLogKey(filepath.Join(dir, handlers.LogKeyFile), false)
	require.NoError(t, err)
	svc, err := handlers.New(nc, store, handlers.Config{LogKey: key, Auth: bnd.Auth(), Logger: servicetest.Logger()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	select {
	case <-svc.Ready():
	case err := <-done:
		t.Fatalf("the service stopped before it was ready: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the service was not ready within 30s")
	}
	require.NoError(t, bnd.Open())
	member, err := asMember()
	require.NoError(t, err, "once open, a member only the log held connects")
	member.Close()
}
