package access_test

import (
	"testing"

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

// The generated configuration is what the embedded server runs, and a
// reload with another one is taken without a restart.
func TestServerConfigRunsAndReloads(t *testing.T) {
	spec := access.Spec{ServiceKeys: []string{userKey(t)}, Identities: []access.Identity{
		{Name: "admin", PublicKey: userKey(t), Grants: []access.Grant{{Workspace: access.AllWorkspaces, Role: domain.RoleAdmin}}},
		{Name: "worker", PublicKey: userKey(t), Grants: []access.Grant{{Workspace: "acme", Role: domain.RoleExecutor, Queues: []string{"q1"}}}},
	}}
	for _, open := range []bool{false, true} {
		spec.InsecureOpen = open
		srv, err := embedded.Start(embedded.Config{DataDir: t.TempDir(), Accounts: access.ServerConfig(spec)})
		require.NoError(t, err, access.ServerConfig(spec))
		spec.Identities = spec.Identities[:1]
		require.NoError(t, srv.Reload(access.ServerConfig(spec)))
		srv.Shutdown()
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
