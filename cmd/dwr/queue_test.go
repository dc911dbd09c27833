package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/schemas"
)

// `dwr queue set` keeps what it is not given, and limits or frees the jobs
// running at once; `dwr queue list` shows the settings; `dwr queue delete`
// removes a queue.
func TestCLIQueueSet(t *testing.T) {
	url := cliServer(t)
	code, out, errs := run(t, url, "queue", "set", "llm", "--max-running", "2")
	require.Zero(t, code, errs)
	require.Equal(t, "queue llm: lease 30s, max deliver 5, max running: 2\n", out)
	code, out, errs = run(t, url, "queue", "set", "llm", "--lease", "1m")
	require.Zero(t, code, errs)
	require.Equal(t, "queue llm: lease 1m0s, max deliver 5, max running: 2\n", out, "what is not given stays")
	var qs []schemas.QueueConfig
	runJSON(t, url, &qs, "queue", "list")
	require.Equal(t, []schemas.QueueConfig{{Name: "llm", LeaseMS: 60_000, MaxDeliver: 5, MaxRunning: 2}}, qs)
	code, out, errs = run(t, url, "queue", "set", "llm", "--no-limit")
	require.Zero(t, code, errs)
	require.Contains(t, out, "max running: no limit")

	code, _, errs = run(t, url, "queue", "set", "llm", "--max-running", "3", "--no-limit")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, "give one")
	code, _, errs = run(t, url, "queue", "set", "llm", "--max-running", "200000")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, "/max_running")
	qs = nil
	runJSON(t, url, &qs, "queue", "list")
	require.Zero(t, qs[0].MaxRunning, "a refused setting changes nothing")

	// A rate limit: N jobs handed out in any period.
	code, out, errs = run(t, url, "queue", "set", "llm", "--rate", "60/1m")
	require.Zero(t, code, errs)
	require.Equal(t, "queue llm: lease 1m0s, max deliver 5, max running: no limit, rate: 60/1m\n", out)
	code, out, errs = run(t, url, "queue", "list")
	require.Zero(t, code, errs)
	require.Regexp(t, `(?m)^llm\s+0\s+0\s+0\s+no\s+1m0s\s+5\s+no limit\s+60/1m\s+fifo$`, out)
	for _, bad := range [][]string{{"--rate", "60"}, {"--rate", "x/1m"}, {"--rate", "5/soon"}, {"--rate", "5/1s", "--no-rate-limit"}} {
		code, _, errs = run(t, url, append([]string{"queue", "set", "llm"}, bad...)...)
		require.Equal(t, exitInvalid, code, bad)
		require.NotEmpty(t, errs)
	}
	code, _, errs = run(t, url, "queue", "set", "llm", "--rate", "5/100ms")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, "/rate_period_ms", "the service's bound, named")
	code, out, errs = run(t, url, "queue", "set", "llm", "--no-rate-limit")
	require.Zero(t, code, errs)
	require.NotContains(t, out, "rate")

	// An order by priority: a task's --priority sets its turn.
	code, out, errs = run(t, url, "queue", "set", "llm", "--order", "priority")
	require.Zero(t, code, errs)
	require.Equal(t, "queue llm: lease 1m0s, max deliver 5, max running: no limit, order: by priority\n", out)
	code, out, errs = run(t, url, "queue", "list")
	require.Zero(t, code, errs)
	require.Regexp(t, `(?m)^llm\s.*\s-\s+priority$`, out)
	code, _, errs = run(t, url, "queue", "set", "llm", "--order", "lifo")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, "want fifo")
	code, out, errs = run(t, url, "queue", "set", "llm", "--lease", "2m")
	require.Zero(t, code, errs)
	require.Contains(t, out, "order: by priority", "what is not given stays")
	var tk map[string]any
	runJSON(t, url, &tk, "task", "create", "--queue", "llm", "--priority", "1")
	code, out, errs = run(t, url, "task", "get", tk["id"].(string))
	require.Zero(t, code, errs)
	require.Contains(t, out, "\npriority: 1\n")
	code, _, errs = run(t, url, "task", "create", "--queue", "llm", "--priority", "9")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, "/spec/priority")
	runJSON(t, url, &tk, "task", "cancel", tk["id"].(string))
	code, out, errs = run(t, url, "queue", "set", "llm", "--order", "fifo")
	require.Zero(t, code, errs)
	require.NotContains(t, out, "order")

	// A queue no unfinished task is given is deleted; one that does not
	// stand is not found.
	code, out, errs = run(t, url, "queue", "delete", "llm")
	require.Zero(t, code, errs)
	require.Equal(t, "queue llm deleted from workspace default\n", out)
	qs = nil
	runJSON(t, url, &qs, "queue", "list")
	require.Empty(t, qs)
	code, _, errs = run(t, url, "queue", "delete", "llm")
	require.Equal(t, exitNotFound, code)
	require.Contains(t, errs, "does not stand")
}

// `dwr queue pause` stops a queue handing out jobs, and says how to undo
// it; `dwr queue list` shows it; `dwr queue resume` lets the jobs out.
func TestCLIQueuePauseAndResume(t *testing.T) {
	url := cliServer(t)
	code, out, errs := run(t, url, "queue", "pause", "llm")
	require.Zero(t, code, errs)
	require.Equal(t, "queue llm paused: lease 30s, max deliver 5, max running: no limit, paused: no job goes out until dwr queue resume llm\n", out)
	code, out, errs = run(t, url, "queue", "set", "llm", "--lease", "1m")
	require.Zero(t, code, errs)
	require.Contains(t, out, "lease 1m0s", "new settings")
	require.Contains(t, out, "paused", "keep the pause")
	code, _, errs = run(t, url, "task", "create", "--queue", "llm")
	require.Zero(t, code, errs)
	code, out, errs = run(t, url, "queue", "list")
	require.Zero(t, code, errs)
	require.Regexp(t, `(?m)^QUEUE\s+PENDING\s+IN FLIGHT\s+POLLING\s+PAUSED\s+LEASE\s+MAX DELIVER\s+MAX RUNNING\s+RATE\s+ORDER$`, out)
	require.Regexp(t, `(?m)^llm\s+1\s+0\s+0\s+yes\s+1m0s\s+5\s+no limit\s+-\s+fifo$`, out, "the task waits in the paused queue")
	var qs []schemas.QueueConfig
	runJSON(t, url, &qs, "queue", "list")
	require.True(t, qs[0].Paused)

	code, out, errs = run(t, url, "queue", "resume", "llm")
	require.Zero(t, code, errs)
	require.Equal(t, "queue llm resumed: lease 1m0s, max deliver 5, max running: no limit\n", out)
	code, out, errs = run(t, url, "queue", "resume", "llm")
	require.Zero(t, code, errs)
	require.Equal(t, "queue llm, nothing changed: lease 1m0s, max deliver 5, max running: no limit\n", out)
	code, _, errs = run(t, url, "queue", "resume", "nowhere")
	require.Equal(t, exitNotFound, code)
	require.Contains(t, errs, "does not stand")
}
