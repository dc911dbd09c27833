package handlers_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/handlers"
)

// Rotations keep the retired keys beside the key, the most recent first,
// each once; a line that is not a key is refused, naming the file and line.
func TestRotateLogKey(t *testing.T) {
	dir := t.TempDir()
	first, _, err := handlers.LoadLogKey(filepath.Join(dir, handlers.LogKeyFile), true)
	require.NoError(t, err)
	id := func(b []byte) string {
		k, err := eventstore.NewLogKey(b)
		require.NoError(t, err)
		return k.ID()
	}
	old1, new1, err := handlers.RotateLogKey("", dir)
	require.NoError(t, err)
	require.Equal(t, id(first), old1)
	old2, new2, err := handlers.RotateLogKey("", dir)
	require.NoError(t, err)
	require.Equal(t, new1, old2)
	current, err := handlers.OpenLogKey("", dir, false, nil)
	require.NoError(t, err)
	require.Equal(t, new2, id(current))
	retired, err := handlers.OpenRetiredLogKeys("", dir)
	require.NoError(t, err)
	require.Len(t, retired, 2)
	require.Equal(t, []string{new1, old1}, []string{id(retired[0]), id(retired[1])}, "the most recent first")

	// A rotation cut short after the retired keys were written: the key in
	// force is listed there already, and again once.
	path := filepath.Join(dir, handlers.LogKeyFile)
	require.NoError(t, handlers.ReplaceKeyFile(path, retired[0]))
	_, _, err = handlers.RotateLogKey("", dir)
	require.NoError(t, err)
	again, err := handlers.OpenRetiredLogKeys("", dir)
	require.NoError(t, err)
	require.Len(t, again, 2)

	require.NoError(t, os.WriteFile(path+handlers.RetiredLogKeysSuffix, []byte("# a comment\n\nnot-base64!\n"), 0o600))
	_, err = handlers.OpenRetiredLogKeys("", dir)
	require.ErrorContains(t, err, handlers.LogKeyFile+handlers.RetiredLogKeysSuffix+" line 3")
}
