package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/handlers"
)

// TestLogKeyRotation rotates the log key of a stopped dwr serve with `dwr
// admin rotate-log-key`: the next start writes under the new key, the whole
// log verifies with the new key and the retired one, and not without the
// retired one.
func TestLogKeyRotation(t *testing.T) {
	if testing.Short() {
		t.Skip("starts dwr serve")
	}
	bin := dwrBinary(t)
	logs := logOnFailure(t, "dwr serve output")
	args, data, url := localServe(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	createGoal := func(title string) {
		t.Helper()
		p := startServer(t, bin, logs, "dwr serve", args...)
		waitReady(t, p, url, 30*time.Second)
		c := dial(t, url, "rotation", 10*time.Second)
		r := c.do(ctx, "goal.create", map[string]any{"title": title}, "")
		require.Equal(t, acked, r.Outcome, "%+v", r)
		c.nc.Close()
		require.NoError(t, p.terminate(30*time.Second))
	}
	verify := func() (map[string]any, error) {
		out, err := exec.Command(bin, "admin", "verify", "--data", data, "--json").Output()
		var r map[string]any
		require.NoError(t, json.Unmarshal(out, &r), "%s", out)
		return r, err
	}
	createGoal("before")
	out, err := exec.Command(bin, "admin", "rotate-log-key", "--data", data, "--json").Output()
	require.NoError(t, err, "%s", out)
	var rot struct {
		Old string `json:"old_key_id"`
		New string `json:"new_key_id"`
	}
	require.NoError(t, json.Unmarshal(out, &rot), "%s", out)
	require.NotEqual(t, rot.Old, rot.New)
	info, err := os.Stat(filepath.Join(data, handlers.LogKeyFile+handlers.RetiredLogKeysSuffix))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm())

	createGoal("after")
	r, err := verify()
	require.NoError(t, err, "the log verifies with the new key and the retired one: %v", r)
	require.Equal(t, rot.New, r["key_id"])
	require.Equal(t, []any{rot.Old}, r["retired_key_ids"])
	require.Equal(t, rot.New, r["verified"].(map[string]any)["kid"], "the log's last record is under the new key")

	// Without the retired key, the records before the rotation are foreign.
	retired := filepath.Join(data, handlers.LogKeyFile+handlers.RetiredLogKeysSuffix)
	require.NoError(t, os.Rename(retired, retired+".away"))
	r, err = verify()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "verify fails without the retired key: %v", r)
	require.Equal(t, exitDamagedCode, ee.ExitCode())
	require.Contains(t, fmt.Sprint(r["problems"]), "written under another log key")
}
