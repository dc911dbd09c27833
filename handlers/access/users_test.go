package access_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers/access"
)

// AddUser sends the member with a fresh public key and writes the
// credential of that key; an existing file is refused before anything is
// sent, and a refused member leaves no file.
func TestAddUserWritesTheCredentialOfTheMemberItAdds(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ci.creds")
	var sent []domain.AddMember
	add := func(m domain.AddMember) error { sent = append(sent, m); return nil }
	m, about, err := access.AddUser("default", domain.AddMember{Name: "ci", Role: domain.RoleExecutor, Queues: []string{"build", "test"}}, file, false, add)
	require.NoError(t, err)
	require.Equal(t, "ci, role executor in workspace default, queues build,test", about)
	require.Len(t, sent, 1)
	require.Equal(t, m, sent[0])
	require.NotEmpty(t, m.PublicKey)
	pub, err := access.CredentialKey(file)
	require.NoError(t, err)
	require.Equal(t, m.PublicKey, pub, "the file holds the key that was added")
	st, err := os.Stat(file)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	_, _, err = access.AddUser("default", domain.AddMember{Name: "ci", Role: domain.RoleExecutor}, file, false, add)
	require.ErrorIs(t, err, fs.ErrExist)
	require.Len(t, sent, 1, "nothing sent for a file that exists")
	m2, _, err := access.AddUser("default", domain.AddMember{Name: "ci", Role: domain.RoleClient}, file, true, add)
	require.NoError(t, err)
	pub, err = access.CredentialKey(file)
	require.NoError(t, err)
	require.Equal(t, m2.PublicKey, pub, "--force replaces the file")

	refused := errors.New("refused")
	other := filepath.Join(t.TempDir(), "other.creds")
	_, _, err = access.AddUser("default", domain.AddMember{Name: "x", Role: domain.RoleViewer}, other, false,
		func(domain.AddMember) error { return refused })
	require.ErrorIs(t, err, refused)
	require.NoFileExists(t, other)
}
