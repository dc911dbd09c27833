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

	"github.com/dwr-run/dwr/executors/client"
)

// TestWorkerRunsTheCommand runs `dwr worker` end to end: the command's
// stdout is the task's result. What the command gets and how it ends are
// tested in executors/shell.
func TestWorkerRunsTheCommand(t *testing.T) {
	url := cliServer(t)
	script := filepath.Join(t.TempDir(), "echo.sh")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\nprintf '{\"input\": %s, \"attempt\": %s}\\n' \"$(cat)\" \"$DWR_ATTEMPT\"\n"), 0o700)) //nolint:gosec // a test script must be executable
	startWorker(t, url, "--queue", "echo", "--executor", "cli-echo", "--", script)

	var created map[string]any
	runJSON(t, url, &created, "task", "create", "--queue", "echo", "--input", `{"n": 7}`)
	id := created["id"].(string)
	tk := waitTaskState(t, url, id, "accepted")
	require.JSONEq(t, `{"input": {"n": 7}, "attempt": 1}`, string(tk.Attempts[0].Result))
	require.Equal(t, "cli-echo", tk.Attempts[0].Executor)
}

// cliTask is what the CLI tests read of `dwr task get --json`.
type cliTask struct {
	State    string
	Reason   string
	Attempts []struct {
		Executor string
		Result   json.RawMessage
	}
}

// waitTaskState waits until task id is in state, reading it with `dwr task
// get`, and returns it.
func waitTaskState(t *testing.T, url, id, state string) cliTask {
	t.Helper()
	var tk cliTask
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for tk.State != state { // a task just created may not be in the views yet: not found is "not yet"
		require.True(t, time.Now().Before(deadline), "task %s is %q, not %s", id, tk.State, state)
		<-tick.C
		if code, out, _ := run(t, url, "task", "get", id, "--json"); code == exitOK {
			require.NoError(t, json.Unmarshal([]byte(out), &tk), out)
		}
	}
	return tk
}

// startWorker runs `dwr worker` with args until the test ends.
func startWorker(t *testing.T, url string, args ...string) {
	t.Helper()
	var stderr bytes.Buffer
	cmd := workerCmd(&globals{server: url, workspace: "default"})
	cmd.SetArgs(args)
	cmd.SetOut(&stderr)
	cmd.SetErr(&stderr)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// TestTaskRetryRunsAFailedTaskAgain: a command fails for good (exit 100);
// once what it needed is there, `dwr task retry` gives it a new attempt.
func TestTaskRetryRunsAFailedTaskAgain(t *testing.T) {
	url := cliServer(t)
	dir := t.TempDir()
	flag := filepath.Join(dir, "fixed")
	script := filepath.Join(dir, "needs-fix.sh")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\n[ -f "+flag+" ] || { echo 'not fixed yet' >&2; exit 100; }\necho '\"done\"'\n"), 0o700)) //nolint:gosec // a test script must be executable
	startWorker(t, url, "--queue", "fix", "--", script)

	var created map[string]any
	runJSON(t, url, &created, "task", "create", "--queue", "fix")
	id := created["id"].(string)
	waitTaskState(t, url, id, "failed")
	code, out, _ := run(t, url, "task", "get", id)
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "dwr task retry "+id, "a failed task says how to retry it")

	require.NoError(t, os.WriteFile(flag, nil, 0o600))
	var retried map[string]any
	runJSON(t, url, &retried, "task", "retry", id, "--reason", "fixed")
	require.Contains(t, []any{"ready", "running", "accepted"}, retried["state"])
	tk := waitTaskState(t, url, id, "accepted")
	require.Len(t, tk.Attempts, 2, "the retry is a new attempt; the failed one stays in the record")

	code, _, errs := run(t, url, "task", "retry", id)
	require.Equal(t, exitConflict, code)
	require.Contains(t, errs, "only a failed or rejected task can be retried")
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

// `dwr worker` takes the handoff: the second task of a chain is handed to
// it in the reply to the first's report; with --no-handoff it comes from
// the queue.
func TestWorkerTakesTheHandoffUnlessTold(t *testing.T) {
	url := cliServer(t)
	script := filepath.Join(t.TempDir(), "ok.sh")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\necho '\"ok\"'\n"), 0o700)) //nolint:gosec // a test script must be executable
	for _, c := range []struct {
		queue  string
		args   []string
		handed bool
	}{{"handed", nil, true}, {"fetched", []string{"--no-handoff"}, false}} {
		startWorker(t, url, append(append([]string{"--queue", c.queue}, c.args...), "--", script)...)
		var goal map[string]any
		runJSON(t, url, &goal, "goal", "create", "--title", c.queue)
		plan := filepath.Join(t.TempDir(), "plan.yaml")
		require.NoError(t, os.WriteFile(plan, []byte("tasks:\n  - key: a\n    queue: "+c.queue+"\n  - key: b\n    queue: "+c.queue+"\n    depends_on: [a]\n"), 0o600))
		code, _, errs := run(t, url, "plan", "submit", "--goal", goal["id"].(string), "-f", plan)
		require.Equal(t, exitOK, code, errs)
		var tasks []struct {
			ID  string
			Key string
		}
		runJSON(t, url, &tasks, "task", "list", "--goal", goal["id"].(string))
		require.Len(t, tasks, 2)
		for _, tk := range tasks {
			waitTaskState(t, url, tk.ID, "accepted")
			_, out, _ := run(t, url, "task", "get", tk.ID, "--json")
			var got struct{ Attempts []struct{ Handed bool } }
			require.NoError(t, json.Unmarshal([]byte(out), &got))
			require.Equal(t, c.handed && tk.Key == "b", got.Attempts[0].Handed, "queue %s, task %s", c.queue, tk.Key)
		}
	}
}

// dwr task retry and dwr task cancel with filters act on every task they
// select, each by a command of its own; without --yes they only say what
// they would do; with an id they act on that task alone, as before.
func TestTaskRetryAndCancelEveryTaskAFilterSelects(t *testing.T) {
	url := cliServer(t)
	failed := func(queue string) string {
		var created map[string]any
		runJSON(t, url, &created, "task", "create", "--queue", queue)
		id := created["id"].(string)
		token := rawCommand(t, url, "task.claim", map[string]any{"task_id": id, "executor": "e"})
		rawCommand(t, url, "task.fail", map[string]any{"task_id": id, "attempt": 1, "token": token,
			"error": map[string]any{"message": "the vendor was down"}, "retryable": false})
		return id
	}
	mail := []string{failed("mail"), failed("mail"), failed("mail")}
	other := failed("deploys")
	for _, id := range append([]string{other}, mail...) {
		waitTaskState(t, url, id, "failed")
	}

	code, out, errs := run(t, url, "task", "retry", "--queue", "mail")
	require.Equal(t, exitOK, code, errs)
	require.Equal(t, 3, strings.Count(out, "would retry task"), out)
	require.Contains(t, errs, "3 tasks would be retried: add --yes to retry them")
	require.Equal(t, "failed", waitTaskState(t, url, mail[0], "failed").State, "nothing was sent")

	var outcomes []bulkOutcome
	runJSON(t, url, &outcomes, "task", "retry", "--queue", "mail", "--state", "failed", "--yes", "--reason", "the vendor is back",
		"--command-id", "after-outage")
	require.Len(t, outcomes, 3)
	for _, o := range outcomes {
		require.Contains(t, mail, o.TaskID)
		require.Equal(t, [2]string{"done", "ready"}, [2]string{o.Outcome, o.State})
	}
	waitTaskState(t, url, other, "failed") // another queue's task is left
	code, out, errs = run(t, url, "task", "retry", "--queue", "mail", "--yes")
	require.Equal(t, exitOK, code, errs)
	require.Empty(t, out, "the retried tasks are no longer failed")
	require.Contains(t, errs, "retried 0 tasks")

	code, out, errs = run(t, url, "task", "cancel", "--queue", "mail", "--state", "ready", "--yes", "--reason", "not needed")
	require.Equal(t, exitOK, code, errs)
	require.Equal(t, 3, strings.Count(out, "cancelled task"), out)
	require.Contains(t, errs, "cancelled 3 tasks")
	for _, id := range mail {
		require.Equal(t, "cancelled", waitTaskState(t, url, id, "cancelled").State)
	}

	refusals(t, url, map[string][]string{
		"give a task's ID, or filters": {"task", "retry"},
		"not both":                     {"task", "retry", other, "--queue", "mail"},
		"--state ready: retry takes tasks in failed, rejected":    {"task", "retry", "--state", "ready"},
		"--state cancelled: cancel takes tasks in pending, ready": {"task", "cancel", "--state", "cancelled"},
	})
	var one map[string]any
	runJSON(t, url, &one, "task", "retry", other)
	require.Equal(t, "ready", one["state"], "with an id: that task alone")

	// A task another operator retried between the listing and its command
	// is skipped, the service's conflict said, and the walk goes on; a
	// refusal of another kind stops it, saying how far it got.
	again := []string{failed("mail"), failed("mail")}
	for _, id := range again {
		waitTaskState(t, url, id, "failed")
	}
	var printed, errb bytes.Buffer
	g := &globals{server: url, workspace: "default", timeout: "10s", out: &printed, errOut: &errb}
	cl, err := g.connect()
	require.NoError(t, err)
	defer cl.Close()
	b := &bulk{verb: "retry", done: "retried", noun: "task", states: []string{"failed"}, queue: "mail", yes: true}
	err = b.run(context.Background(), g, cl, "", func(ctx context.Context, cl *client.Client, id string, opt client.CallOption) (*client.Result, error) {
		if id == again[0] {
			_, err := cl.RetryTask(ctx, id, "another operator")
			require.NoError(t, err)
		}
		return cl.RetryTask(ctx, id, "", opt)
	})
	require.NoError(t, err)
	require.Contains(t, printed.String(), "skipped task "+again[0]+": ")
	require.Contains(t, printed.String(), "only a failed or rejected task can be retried")
	require.Contains(t, printed.String(), "retried task "+again[1])
	require.Contains(t, errb.String(), "retried 1 tasks, skipped 1 that had changed meanwhile")

	printed.Reset()
	third := failed("mail")
	waitTaskState(t, url, third, "failed")
	err = b.run(context.Background(), g, cl, "", func(ctx context.Context, cl *client.Client, id string, opt client.CallOption) (*client.Result, error) {
		return cl.RetryTask(ctx, id, strings.Repeat("why ", 600), opt) // past the 2,000 characters a reason may have
	})
	var ce *cliError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, exitInvalid, ce.code)
	require.Contains(t, ce.msg, "/reason")
	require.Contains(t, ce.msg, "stopped after 0 tasks (retried 0 tasks); the same command again goes on from there")
	require.Equal(t, "failed", waitTaskState(t, url, third, "failed").State)
}
