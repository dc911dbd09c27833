package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWorkerRunsTheCommand runs `dwr worker` end to end: the command's
// stdout is the task's result. What the command gets and how it ends are
// tested in executors/shell.
func TestWorkerRunsTheCommand(t *testing.T) {
	url := cliServer(t)
	script := filepath.Join(t.TempDir(), "echo.sh")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\nprintf '{\"input\": %s, \"attempt\": %s}\\n' \"$(cat)\" \"$DWR_ATTEMPT\"\n"), 0o700)) //nolint:gosec // a test script must be executable
	var stderr bytes.Buffer
	cmd := workerCmd(&globals{server: url, workspace: "default"})
	cmd.SetArgs([]string{"--queue", "echo", "--executor", "cli-echo", "--", script})
	cmd.SetOut(&stderr)
	cmd.SetErr(&stderr)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()

	var created map[string]any
	runJSON(t, url, &created, "task", "create", "--queue", "echo", "--input", `{"n": 7}`)
	id := created["id"].(string)
	var tk struct {
		State    string
		Attempts []struct {
			Executor string
			Result   json.RawMessage
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for tk.State != "accepted" { // a task just created may not be in the views yet: not found is "not yet"
		require.True(t, time.Now().Before(deadline), "task %s is %q, not accepted", id, tk.State)
		<-tick.C
		if code, out, _ := run(t, url, "task", "get", id, "--json"); code == exitOK {
			require.NoError(t, json.Unmarshal([]byte(out), &tk), out)
		}
	}
	require.JSONEq(t, `{"input": {"n": 7}, "attempt": 1}`, string(tk.Attempts[0].Result))
	require.Equal(t, "cli-echo", tk.Attempts[0].Executor)
}

func TestWorkerFlagsAreChecked(t *testing.T) {
	var out, errb bytes.Buffer
	code := Main([]string{"--server", "nats://127.0.0.1:1", "worker", "--", "true"}, strings.NewReader(""), &out, &errb)
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errb.String(), "--queue is required")

	errb.Reset()
	code = Main([]string{"worker", "--queue", "q"}, strings.NewReader(""), &out, &errb)
	require.Equal(t, exitInvalid, code, "a command is required")

	errb.Reset()
	code = Main([]string{"--server", "nats://127.0.0.1:1", "worker", "--queue", "Bad Queue", "--lease", "1ms", "--", "true"}, strings.NewReader(""), &out, &errb)
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errb.String(), "Queue")
	require.Contains(t, errb.String(), "Lease")
}
