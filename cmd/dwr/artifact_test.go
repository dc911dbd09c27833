package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/schemas"
)

// dwr artifact put stores a file and prints its digest; get writes it back
// (checked), ls lists what a task's report names, and a digest nobody
// stored is not found.
func TestCLIArtifactPutGetLs(t *testing.T) {
	url := cliServer(t)
	dir := t.TempDir()
	data := make([]byte, 3*schemas.ArtifactChunkBytes/2)
	_, err := rand.Read(data)
	require.NoError(t, err)
	src := filepath.Join(dir, "chart.svg")
	require.NoError(t, os.WriteFile(src, data, 0o600))
	sum := sha256.Sum256(data)
	sha := hex.EncodeToString(sum[:])

	var info schemas.ArtifactInfo
	runJSON(t, url, &info, "artifact", "put", src)
	require.Equal(t, sha, info.SHA256)
	require.Equal(t, "chart.svg", info.Name)
	require.Equal(t, "image/svg+xml", info.Type)
	code, out, errs := run(t, url, "artifact", "put", src)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "already stored")

	dst := filepath.Join(dir, "copy.svg")
	code, _, errs = run(t, url, "artifact", "get", sha, "-o", dst)
	require.Equal(t, 0, code, errs)
	got, err := os.ReadFile(dst)
	require.NoError(t, err)
	require.Equal(t, data, got)
	code, out, _ = run(t, url, "artifact", "get", sha)
	require.Equal(t, 0, code)
	require.Equal(t, string(data), out, "to stdout without -o")

	missing := hex.EncodeToString(make([]byte, 32))
	code, _, errs = run(t, url, "artifact", "get", missing, "-o", filepath.Join(dir, "none"))
	require.Equal(t, exitNotFound, code)
	require.Contains(t, errs, "dwr artifact put")
	require.NoFileExists(t, filepath.Join(dir, "none"))

	var task map[string]any
	runJSON(t, url, &task, "task", "create", "--queue", "q")
	id := task["id"].(string)
	token := rawCommand(t, url, "task.claim", map[string]any{"task_id": id, "executor": "e"})
	rawCommand(t, url, "task.succeed", map[string]any{"task_id": id, "attempt": 1, "token": token, "result": "done",
		"artifacts": []schemas.ArtifactRef{info.Ref()}})
	code, out, errs = run(t, url, "artifact", "ls", "--task", id)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "chart.svg")
	require.Contains(t, out, "attempt 1")
	require.Contains(t, out, sha[:16])
}
