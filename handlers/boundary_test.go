package handlers_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
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

// A change of members is in force without judging the connections that
// stand again: one still in its handshake — connected, its CONNECT not yet
// sent — is let in as it would be at any other time. (A reload of the
// server's users cut such a connection: "Authorization Violation" for a
// worker that started while an admin added another.)
func TestAMemberChangeDoesNotCutAConnectionInItsHandshake(t *testing.T) {
	st := servicetest.Start(t, "", servicetest.Options{Secure: true, Listen: "127.0.0.1:0"})
	member := func(name string) (nkeys.KeyPair, string) {
		kp, err := nkeys.CreateUser()
		require.NoError(t, err)
		pub, _ := kp.PublicKey()
		servicetest.Must(t, st.Admin, "default", "member.add", domain.AddMember{Name: name, Role: domain.RoleExecutor,
			PublicKey: pub, Queues: []string{"q"}})
		return kp, pub
	}
	kp, pub := member("first")

	u, err := url.Parse(st.URL)
	require.NoError(t, err)
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	var info struct {
		Nonce string `json:"nonce"`
	}
	require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(strings.TrimSpace(line), "INFO ")), &info))
	require.NotEmpty(t, info.Nonce, "the server asks every client to sign its nonce")

	member("second") // while the first one's connection is in its handshake

	sig, err := kp.Sign([]byte(info.Nonce))
	require.NoError(t, err)
	connect, err := json.Marshal(map[string]any{"nkey": pub, "sig": base64.RawURLEncoding.EncodeToString(sig),
		"verbose": false, "pedantic": false, "protocol": 1, "lang": "test", "version": "0"})
	require.NoError(t, err)
	_, err = conn.Write([]byte("CONNECT " + string(connect) + "\r\nPING\r\n"))
	require.NoError(t, err)
	line, err = r.ReadString('\n')
	require.NoError(t, err, "the connection was cut")
	require.Equal(t, "PONG", strings.TrimSpace(line))
}
