package access_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/handlers/access"
)

// A credential file is made once, private, and read back as the identity it
// holds.
func TestEnsureCredentialMakesOneAndKeepsIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), access.AdminCredsFile)
	pub, created, err := access.EnsureCredential(path, "admin of every workspace")
	require.NoError(t, err)
	require.True(t, created)
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(b), "# dwr credential: admin of every workspace\n# identity "+pub)

	again, created, err := access.EnsureCredential(path, "another")
	require.NoError(t, err)
	require.False(t, created, "an existing credential is kept")
	require.Equal(t, pub, again)

	c, err := access.NewCredential()
	require.NoError(t, err)
	require.ErrorIs(t, c.Write(path, "x", false), fs.ErrExist, "no replacing without force")
	require.NoError(t, c.Write(path, "x", true))
	got, err := access.CredentialKey(path)
	require.NoError(t, err)
	require.Equal(t, c.PublicKey, got)
}

// A cluster's configuration keeps its credentials from one run to the next
// and lists the service, the admin and the members.
func TestClusterConfigKeepsItsCredentials(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nats")
	c, err := access.OpenClusterConfig(dir)
	require.NoError(t, err)
	again, err := access.OpenClusterConfig(dir)
	require.NoError(t, err)
	require.Equal(t, c, again)
	path, n, err := c.Write(nil, false)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the admin")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(b), c.ServiceKey)
	require.Contains(t, string(b), c.AdminKey)
}

// A NATS credentials file is a JWT credential or an nkey seed, such as the
// service's that ClusterConfig writes; anything else is refused by name.
func TestNATSCredentialsTakesAJWTOrASeed(t *testing.T) {
	c, err := access.OpenClusterConfig(filepath.Join(t.TempDir(), "nats"))
	require.NoError(t, err)
	opt, err := access.NATSCredentials(c.ServiceSeed())
	require.NoError(t, err)
	require.NotNil(t, opt)

	jwt := filepath.Join(t.TempDir(), "user.creds")
	require.NoError(t, os.WriteFile(jwt, []byte("-----BEGIN NATS USER JWT-----\neyJ0...\n------END NATS USER JWT------\n"), 0o600))
	opt, err = access.NATSCredentials(jwt)
	require.NoError(t, err)
	require.NotNil(t, opt)

	junk := filepath.Join(t.TempDir(), "junk")
	require.NoError(t, os.WriteFile(junk, []byte("hello"), 0o600))
	_, err = access.NATSCredentials(junk)
	require.ErrorContains(t, err, junk+": neither a JWT credential nor an nkey seed")
	_, err = access.NATSCredentials(filepath.Join(t.TempDir(), "missing"))
	require.ErrorIs(t, err, fs.ErrNotExist)
}
