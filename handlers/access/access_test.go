package access_test

import (
	"time"

	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/handlers/embedded"
)

func userKey(t *testing.T) string {
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	return pub
}

// The generated configuration runs on a nats-server, with its users or
// without them (the embedded server's accounts, whose users it lets in by
// code).
func TestServerConfigRuns(t *testing.T) {
	spec := access.Spec{ServiceKeys: []string{userKey(t)}, Identities: []access.Identity{
		{Name: "admin", PublicKey: userKey(t), Grants: []access.Grant{{Workspace: access.AllWorkspaces, Role: domain.RoleAdmin}}},
		{Name: "worker", PublicKey: userKey(t), Grants: []access.Grant{{Workspace: "acme", Role: domain.RoleExecutor, Queues: []string{"q1"}}}},
	}}
	for _, open := range []bool{false, true} {
		spec.InsecureOpen = open
		for _, conf := range []string{access.ServerConfig(spec), access.AccountsConfig(spec)} {
			srv, err := embedded.Start(embedded.Config{DataDir: t.TempDir(), Accounts: conf})
			require.NoError(t, err, conf)
			// A command's reply is routed back for CommandReplyWindow; the
			// queries' (artifact.put takes minutes) for nats-server's default.
			acc, err := srv.NATS().LookupAccount(access.ServiceAccount)
			require.NoError(t, err)
			window, err := acc.ServiceExportResponseThreshold("dwr.cmd.>")
			require.NoError(t, err)
			require.Equal(t, access.CommandReplyWindow, window)
			window, err = acc.ServiceExportResponseThreshold("dwr.q.>")
			require.NoError(t, err)
			require.Equal(t, 2*time.Minute, window)
			clients, err := srv.NATS().LookupAccount(access.ClientAccount)
			require.NoError(t, err)
			require.Equal(t, access.DefaultMaxClientConnections, clients.MaxActiveConnections(), "the clients' connections are bounded")
			srv.Shutdown()
		}
		require.NotContains(t, access.AccountsConfig(spec), "nkey")
		users := spec.Users()
		require.Len(t, users, 2+map[bool]int{true: 1}[open], "the identities, and the anonymous user of an open server")
		require.Contains(t, users[spec.Identities[1].PublicKey].Publish, "dwr.cmd.acme.task.claim")
	}
}

func TestPermissionsOfExecutor(t *testing.T) {
	p := access.PermissionsOf("dwr", access.Identity{PublicKey: "UKEY", Grants: []access.Grant{
		{Workspace: "acme", Role: domain.RoleExecutor, Queues: []string{"q1"}}}})
	require.Contains(t, p.Publish, "dwr.cmd.acme.task.claim")
	require.Contains(t, p.Publish, "dwrjs.CONSUMER.MSG.NEXT.DWR_WORK.dwr-acme-q1")
	require.Contains(t, p.Publish, "$JS.ACK.DWR_WORK.dwr-acme-q1.>")
	require.NotContains(t, p.Publish, "dwr.cmd.acme.task.create")
	require.Equal(t, []string{"_INBOX.UKEY.>", "dwr.ev.acme.task.>"}, p.Subscribe)
}

// An open server lets anonymous clients in, as the admin of every
// workspace, and still keeps them off the service's subjects: no
// subscription to the command subjects, no JetStream API.
func TestInsecureOpenKeepsTheServiceSubjects(t *testing.T) {
	spec := access.Spec{ServiceKeys: []string{userKey(t)}, InsecureOpen: true}
	srv, err := embedded.Start(embedded.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Accounts: access.ServerConfig(spec)})
	require.NoError(t, err)
	defer srv.Shutdown()
	denied := make(chan error, 8)
	nc, err := nats.Connect(srv.ClientURL(), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { denied <- err }))
	require.NoError(t, err, "an anonymous client connects to an open server")
	defer nc.Close()
	_, err = nc.SubscribeSync("dwr.cmd.>")
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	requireDenied(t, denied, "subscribing to dwr.cmd.>", "even anonymous admins cannot take the service's requests")
	require.NoError(t, nc.Publish("$JS.API.STREAM.LIST", nil))
	require.NoError(t, nc.Flush())
	requireDenied(t, denied, "$JS.API", "nor reach the JetStream API")
}

// requireDenied waits for the permission violation that what causes on
// denied, a connection's asynchronous errors; why says why it must come.
func requireDenied(t *testing.T, denied <-chan error, what, why string) {
	t.Helper()
	select {
	case err := <-denied:
		require.ErrorIs(t, err, nats.ErrPermissionViolation, why)
	case <-time.After(5 * time.Second):
		t.Fatalf("%s was not refused", what)
	}
}

// A member added under the service's own key (by a hostile workspace admin
// who learnt it) is left out of the configuration, which stays valid: the
// server's users keep following additions and revocations.
func TestAMemberCannotTakeTheServiceKey(t *testing.T) {
	svc := userKey(t)
	spec := access.Spec{ServiceKeys: []string{svc}, Identities: []access.Identity{
		{Name: "admin", PublicKey: userKey(t), Grants: []access.Grant{{Workspace: access.AllWorkspaces, Role: domain.RoleAdmin}}},
		{Name: "evil@acme", PublicKey: svc, Grants: []access.Grant{{Workspace: "acme", Role: domain.RoleClient}}},
	}}
	conf := access.ServerConfig(spec)
	require.NotContains(t, conf, "evil@acme")
	require.NotContains(t, spec.Users(), svc, "nor is it let in as a member")
	srv, err := embedded.Start(embedded.Config{DataDir: t.TempDir(), Accounts: conf})
	require.NoError(t, err, conf)
	srv.Shutdown()
}
