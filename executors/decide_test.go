package executors_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/schemas"
)

// CreateKey registers a fresh key and writes its private half where
// ReadSigningKey reads it; Decide signs a gated task's approval with it, and
// the task resumes on the branch the service recorded.
func TestCreateKeyThenDecide(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	c := client.New(b.nc, client.Workspace("default"))
	file := filepath.Join(t.TempDir(), "ada.pem")

	key, reg, err := executors.CreateKey(ctx, c, "ada", "ops", file, false)
	require.NoError(t, err)
	require.Equal(t, executors.KeyID(key.Public()), reg.KeyID)
	require.Equal(t, "default", reg.Workspace)
	read, err := executors.ReadSigningKey(file)
	require.NoError(t, err)
	require.Equal(t, key.Private, read.Private)
	require.Equal(t, "ada", read.Approver)
	st, err := os.Stat(file)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	// An existing file is not replaced without force, and nothing is registered.
	_, _, err = executors.CreateKey(ctx, c, "ada", "ops", file, false)
	var kf *executors.KeyFileError
	require.ErrorAs(t, err, &kf)
	require.ErrorIs(t, err, fs.ErrExist)
	require.False(t, kf.Registered)

	// A refused registration writes no file.
	bad := filepath.Join(t.TempDir(), "bad.pem")
	_, _, err = executors.CreateKey(ctx, c, "Not A Name", "ops", bad, false)
	var se *schemas.Error
	require.ErrorAs(t, err, &se)
	require.NoFileExists(t, bad)
	entries, err := os.ReadDir(filepath.Dir(bad))
	require.NoError(t, err)
	require.Empty(t, entries, "no temporary file is left behind")

	// Created through c, so that c's reads see the task and its gate.
	tk, err := c.CreateTask(ctx, schemas.TaskSpec{Queue: "deploys", Input: json.RawMessage(`{"deploy":"v2"}`),
		Approval: &schemas.ApprovalSpec{Role: "ops"}})
	require.NoError(t, err)
	id := tk.ID
	d, err := executors.Decide(ctx, c, id+"-1", executors.ResponseApprove, "checked", key, "ada")
	require.NoError(t, err)
	require.Equal(t, id+"-1", d.Approval.ID)
	require.Equal(t, d.Approval.ActionDigest, d.ActionDigest)
	require.Equal(t, reg.KeyID, d.KeyID)
	require.Equal(t, id, d.Result.ID)
	require.Equal(t, executors.BranchResume, d.Branch)
	got, err := c.Approval(ctx, id+"-1")
	require.NoError(t, err)
	require.Equal(t, schemas.ApprovalStateDecided, got.State)
	require.Equal(t, "checked", got.Decision.Comment)

	// Deciding again is refused, with what was signed.
	d, err = executors.Decide(ctx, c, id+"-1", executors.ResponseReject, "", key, "ada")
	require.ErrorAs(t, err, &se)
	require.NotNil(t, d)
	require.Nil(t, d.Result)
	require.Equal(t, got.ActionDigest, d.ActionDigest)

	_, err = executors.Decide(ctx, c, "nope-1", executors.ResponseApprove, "", key, "ada")
	require.ErrorIs(t, err, client.ErrNotFound)
}
