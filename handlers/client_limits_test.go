package handlers_test

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// One credential cannot take the service's memory through the embedded
// NATS server, which runs in its process and keeps every client
// connection and subscription: a viewer subscribing to its own inbox
// without end (200,000 subscriptions took ~150 MB), or connecting without
// end, could. Each connection's subscriptions and the clients' connections
// are the account's limits, which the server enforces; an identity holding
// more connections than its bound, or the most subscriptions while the
// clients hold more than theirs, is benched by the boundary's guard: its
// connections closed, refused meanwhile. Others keep theirs and are served.
//
// Every identity here is of one workspace, whose own bound of connections
// (TestAWorkspaceCannotTakeEveryConnection) is off: at its default, half
// the clients', the guard benched identities filling the account's last
// connections whenever it looked before the test's last dial (CI, under
// load), and the dial past the account's bound was let in.
func TestAClientCannotExhaustTheServer(t *testing.T) {
	st := servicetest.Start(t, "", servicetest.Options{Secure: true, Listen: "127.0.0.1:0", Config: handlers.Config{WriterID: "test-writer", BenchFor: time.Minute},
		Limits: handlers.ClientLimits{MaxConnections: 40, MaxSubscriptionsPerConnection: 50, MaxConnectionsPerIdentity: 5, MaxSubscriptions: 160,
			MaxPendingPerIdentity: 1 << 20, MaxConnectionsPerWorkspace: -1}})
	type conn struct {
		nc   *nats.Conn
		errs chan error
	}
	dial := func(kp nkeys.KeyPair) (conn, error) { // over TCP, as a client in another process

		pub, _ := kp.PublicKey()
		errs := make(chan error, 16)
		nc, err := nats.Connect(st.Server.ClientURL(), nats.CustomInboxPrefix(schemas.InboxPrefix(pub)), nats.Nkey(pub, kp.Sign), nats.NoReconnect(),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				select {
				case errs <- err:
				default:
				}
			}))
		if err == nil {
			t.Cleanup(nc.Close)
		}
		return conn{nc, errs}, err
	}
	subscribe := func(c conn, pub string, from, n int) { subscribeInbox(t, c.nc, pub, from, n) }
	member := func(name string) (nkeys.KeyPair, string) {
		kp := st.MemberKey(t, "default", name, domain.RoleViewer)
		pub, _ := kp.PublicKey()
		return kp, pub
	}
	served := func(c conn) {
		t.Helper()
		var ws []schemas.Workspace
		servicetest.NewClient(c.nc, "default").Query(t, "workspace.list", schemas.Query{}, &ws)
	}

	// A connection's subscriptions past its bound are refused; the
	// connection stays, and is served.
	malloryKey, mallory := member("mallory")
	m, err := dial(malloryKey)
	require.NoError(t, err)
	served(m) // the connection's reply inbox: one subscription
	subscribe(m, mallory, 0, 49)
	select {
	case err := <-m.errs:
		t.Fatalf("below the bound: %v", err)
	default:
	}
	subscribe(m, mallory, 49, 1)
	select {
	case err := <-m.errs:
		require.ErrorIs(t, err, nats.ErrMaxSubscriptionsExceeded)
	case <-time.After(5 * time.Second):
		t.Fatal("the subscription past the connection's bound was not refused")
	}
	served(m)

	// An honest reader holds 3 connections with 20 subscriptions each.
	aliceKey, alice := member("alice")
	var honest []conn
	for i := range 3 {
		c, err := dial(aliceKey)
		require.NoError(t, err)
		subscribe(c, alice, 100*i, 20)
		honest = append(honest, c)
	}

	// Mallory's subscriptions over her connections put the clients past
	// theirs (160): she holds the most, and is benched.
	m2, err := dial(malloryKey)
	require.NoError(t, err)
	subscribe(m2, mallory, 1000, 50)
	require.Eventually(t, func() bool { return m.nc.IsClosed() && m2.nc.IsClosed() }, 10*time.Second, 10*time.Millisecond,
		"the identity holding the most subscriptions is benched")
	_, err = dial(malloryKey)
	require.ErrorIs(t, err, nats.ErrAuthorization, "a benched identity is refused meanwhile")
	for _, c := range honest {
		require.False(t, c.nc.IsClosed())
		served(c)
	}

	// More connections of one identity than its bound (5): benched.
	bobKey, _ := member("bob")
	var bobs []conn
	for range 6 {
		c, err := dial(bobKey)
		require.NoError(t, err)
		bobs = append(bobs, c)
	}
	require.Eventually(t, func() bool {
		for _, c := range bobs {
			if !c.nc.IsClosed() {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "an identity past its connections is benched")
	for _, c := range honest {
		served(c)
	}

	// An identity whose connections are subscribed to the feed and do not
	// read: the server holds what they are sent, past its bound (1 MiB)
	// at two looks in a row, and it is benched; alice, subscribed to the
	// same feed and reading, is not.
	eveKey, evePub := member("eve")
	for range 4 {
		rawNotReading(t, st, eveKey, "dwr.ev.default.>")
	}
	feed, err := honest[0].nc.SubscribeSync("dwr.ev.default.>")
	require.NoError(t, err)
	admin := servicetest.NewClient(st.Admin, "default")
	// A deadline for a loaded machine (the service's looks and the server's
	// buffers both slow down beside other work), not a measure of speed.
	servicetest.Eventually(t, 30*time.Second, func() bool {
		admin.CreateTask(t, map[string]any{"queue": "q", "title": "t", "input": map[string]any{"pad": strings.Repeat("x", 60<<10)}})
		return st.Server.Holdings(access.ClientAccount)[evePub].Connections == 0
	}, func() string { return "eve's connections are closed" })
	_, err = feed.NextMsg(5 * time.Second)
	require.NoError(t, err, "alice reads the feed")
	for _, c := range honest {
		require.False(t, c.nc.IsClosed())
	}
	require.NoError(t, feed.Unsubscribe())

	// The clients' connections in all (40): past them, the server refuses
	// one, whoever it is. Identities under their own bound fill the rest.
	open := 3 + 1 // alice's, and the test's admin connection
	for i := 0; open < 40; i++ {
		kp, _ := member(fmt.Sprintf("fill%d", i))
		for range min(5, 40-open) {
			_, err := dial(kp)
			require.NoError(t, err)
			open++
		}
	}
	kp, _ := member("late")
	_, err = dial(kp)
	require.ErrorIs(t, err, nats.ErrMaxAccountConnectionsExceeded)
	served(honest[0])
}

// rawNotReading connects to the service's NATS server as kp over TCP,
// subscribes to subject, and never reads again: what the server sends it
// stays in the server's buffers. The connection is closed at cleanup.
func rawNotReading(t *testing.T, st *servicetest.Service, kp nkeys.KeyPair, subject string) {
	t.Helper()
	pub, _ := kp.PublicKey()
	c, err := net.Dial("tcp", strings.TrimPrefix(st.Server.ClientURL(), "nats://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	line, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	var info struct {
		Nonce string `json:"nonce"`
	}
	require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "INFO ")), &info))
	sig, err := kp.Sign([]byte(info.Nonce))
	require.NoError(t, err)
	connect, err := json.Marshal(map[string]any{"nkey": pub, "sig": base64.RawURLEncoding.EncodeToString(sig), "verbose": false, "protocol": 1})
	require.NoError(t, err)
	_, err = fmt.Fprintf(c, "CONNECT %s\r\nSUB %s 1\r\nPING\r\n", connect, subject)
	require.NoError(t, err)
}

// subscribeInbox subscribes nc to n subjects of pub's inbox, numbered from
// from on, and waits until the server holds them.
func subscribeInbox(t *testing.T, nc *nats.Conn, pub string, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		_, err := nc.Subscribe(fmt.Sprintf("%s.%d", schemas.InboxPrefix(pub), i), func(*nats.Msg) {})
		require.NoError(t, err)
	}
	require.NoError(t, nc.Flush())
}

// While the clients hold more subscriptions than their bound, the guard
// benches by workspace: the largest holder of the workspace whose
// identities hold the most, as many as it takes in one look. A workspace's
// admin who made many identities, each holding fewer subscriptions than
// another workspace's honest reader, has its own identities benched; the
// honest reader keeps its connection and is served.
func TestManyIdentitiesOfOneWorkspaceCannotBenchAnothersReader(t *testing.T) {
	st := servicetest.Start(t, "", servicetest.Options{Secure: true, Listen: "127.0.0.1:0", Config: handlers.Config{BenchFor: time.Minute},
		Limits: handlers.ClientLimits{MaxSubscriptionsPerConnection: 100, MaxSubscriptions: 200, MaxPendingPerIdentity: -1}})
	servicetest.Must(t, st.Admin, "crowd", "workspace.create", map[string]any{"name": "crowd"})
	dial := func(ws, name string) (*nats.Conn, string) { // over TCP, as a client in another process
		kp := st.MemberKey(t, ws, name, domain.RoleViewer)
		pub, _ := kp.PublicKey()
		nc, err := nats.Connect(st.Server.ClientURL(), nats.CustomInboxPrefix(schemas.InboxPrefix(pub)), nats.Nkey(pub, kp.Sign), nats.NoReconnect())
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		return nc, pub
	}
	reader, pub := dial("default", "reader")
	subscribeInbox(t, reader, pub, 0, 80)
	var crowd []*nats.Conn
	for i := range 5 { // 5 × 30: the crowd's workspace holds the most, each of them less than the reader
		nc, pub := dial("crowd", fmt.Sprintf("c%d", i))
		subscribeInbox(t, nc, pub, 0, 30)
		crowd = append(crowd, nc)
	}
	require.Eventually(t, func() bool {
		closed := 0
		for _, nc := range crowd {
			if nc.IsClosed() {
				closed++
			}
		}
		return closed > 0
	}, 10*time.Second, 10*time.Millisecond, "the crowd's identities are benched")
	require.False(t, reader.IsClosed(), "the honest reader keeps its connection")
	var ws []schemas.Workspace
	servicetest.NewClient(reader, "default").Query(t, "workspace.list", schemas.Query{}, &ws)
}

// What the server holds for the clients' connections in all is bounded as
// well as each identity's: many identities of one workspace, each under its
// own bound, subscribed to their feed and not reading, are benched by
// workspace once the clients pass the bound at two looks in a row; another
// workspace's reader, reading, keeps its connection and is served.
func TestManyIdentitiesThatDoNotReadAreBenchedTogether(t *testing.T) {
	st := servicetest.Start(t, "", servicetest.Options{Secure: true, Listen: "127.0.0.1:0", Config: handlers.Config{BenchFor: time.Minute},
		Limits: handlers.ClientLimits{MaxPendingPerIdentity: 64 << 20, MaxPending: 2 << 20}})
	servicetest.Must(t, st.Admin, "crowd", "workspace.create", map[string]any{"name": "crowd"})
	var crowd []string
	var keys []nkeys.KeyPair
	for i := range 4 {
		kp := st.MemberKey(t, "crowd", fmt.Sprintf("c%d", i), domain.RoleViewer)
		rawNotReading(t, st, kp, "dwr.ev.crowd.>")
		pub, _ := kp.PublicKey()
		crowd, keys = append(crowd, pub), append(keys, kp)
	}
	reader := st.Member(t, "default", "reader", domain.RoleViewer)
	feed, err := reader.SubscribeSync("dwr.ev.default.>")
	require.NoError(t, err)
	admin := servicetest.NewClient(st.Admin, "crowd")
	servicetest.Eventually(t, 20*time.Second, func() bool {
		admin.CreateTask(t, map[string]any{"queue": "q", "title": "t", "input": map[string]any{"pad": strings.Repeat("x", 60<<10)}})
		held := st.Server.Holdings(access.ClientAccount)
		for _, pub := range crowd {
			if held[pub].Connections > 0 {
				return false
			}
		}
		return true
	}, func() string { return "the crowd's connections are closed" })
	for i, kp := range keys {
		_, err := nats.Connect(st.Server.ClientURL(), nats.Nkey(crowd[i], kp.Sign), nats.NoReconnect())
		require.ErrorIs(t, err, nats.ErrAuthorization, "benched, not cut as a slow consumer: refused meanwhile")
	}
	servicetest.NewClient(st.Admin, "default").CreateTask(t, map[string]any{"queue": "q"})
	_, err = feed.NextMsg(5 * time.Second)
	require.NoError(t, err, "the reader reads its feed")
	require.False(t, reader.IsClosed())
}

// The clients' connections are shared by every workspace: one workspace's
// identities, each under its own bound, holding more than
// MaxConnectionsPerWorkspace together have the largest holders benched
// until it holds no more, and another workspace's client can connect.
// (Four identities of ten connections took all forty, and it could not.)
func TestAWorkspaceCannotTakeEveryConnection(t *testing.T) {
	const perIdentity, identities = 10, 4
	st := servicetest.Start(t, "", servicetest.Options{Secure: true, Listen: "127.0.0.1:0", Config: handlers.Config{BenchFor: time.Minute},
		Limits: handlers.ClientLimits{MaxConnections: perIdentity * identities, MaxConnectionsPerIdentity: perIdentity}})
	servicetest.Must(t, st.Admin, "crowd", "workspace.create", map[string]any{"name": "crowd"})
	var crowd []string
	for i := range identities {
		kp := st.MemberKey(t, "crowd", fmt.Sprintf("c%d", i), domain.RoleViewer)
		pub, _ := kp.PublicKey()
		crowd = append(crowd, pub)
		for range perIdentity {
			nc, err := nats.Connect(st.Server.ClientURL(), nats.Nkey(pub, kp.Sign), nats.NoReconnect())
			if err != nil {
				continue // the server's bound, or benched meanwhile
			}
			t.Cleanup(nc.Close)
		}
	}
	kp := st.MemberKey(t, "default", "other", domain.RoleViewer)
	pub, _ := kp.PublicKey()
	var other *nats.Conn
	servicetest.Eventually(t, 20*time.Second, func() bool {
		nc, err := nats.Connect(st.Server.ClientURL(), nats.Nkey(pub, kp.Sign), nats.NoReconnect(), nats.CustomInboxPrefix(schemas.InboxPrefix(pub)))
		other = nc
		return err == nil
	}, func() string { return "another workspace's client connects" })
	t.Cleanup(other.Close)
	servicetest.Eventually(t, 10*time.Second, func() bool {
		held, open := st.Server.Holdings(access.ClientAccount), 0
		for _, pub := range crowd {
			open += held[pub].Connections
		}
		return open <= perIdentity*identities/2
	}, func() string { return "the crowd holds no more than its workspace's bound" })
	var ws []schemas.Workspace
	servicetest.NewClient(other, "default").Query(t, "workspace.list", schemas.Query{}, &ws)
}
