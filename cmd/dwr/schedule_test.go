package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

const reportYAML = `goal:
  title: Daily report
  success_criteria: ["the report is mailed"]
tasks:
  - key: collect
    queue: shell
  - key: mail
    queue: shell
    depends_on: [collect]
`

func TestCLIScheduleCreateListGetPauseResumeDelete(t *testing.T) {
	url := cliServer(t)
	file := filepath.Join(t.TempDir(), "report.yaml")
	require.NoError(t, os.WriteFile(file, []byte(reportYAML), 0o600))

	code, out, errs := run(t, url, "schedule", "create", "daily", "--cron", "0 9 * * *", "--tz", "Europe/Paris", "-f", file)
	require.Equal(t, 0, code, errs)
	require.Equal(t, "schedule daily created\n", out)
	code, out, _ = run(t, url, "schedule", "create", "daily", "--cron", "0 9 * * *", "--tz", "Europe/Paris", "-f", file)
	require.Equal(t, 0, code)
	require.Equal(t, "schedule daily is unchanged: it has this spec\n", out)
	code, _, errs = run(t, url, "schedule", "create", "daily", "--every", "1h", "-f", file)
	require.Equal(t, exitConflict, code, errs)

	code, out, _ = run(t, url, "schedule", "list")
	require.Equal(t, 0, code)
	require.Contains(t, out, "cron 0 9 * * *")
	require.Contains(t, out, "Europe/Paris")
	var s map[string]any
	runJSON(t, url, &s, "schedule", "get", "daily")
	require.Equal(t, "one", s["catch_up"])
	require.Equal(t, "skip", s["overlap"])
	require.NotEmpty(t, s["next_slot"])

	code, out, _ = run(t, url, "schedule", "pause", "daily")
	require.Equal(t, 0, code)
	require.Equal(t, "schedule daily paused\n", out)
	code, out, _ = run(t, url, "schedule", "get", "daily")
	require.Equal(t, 0, code)
	require.Contains(t, out, "next slot: paused")
	code, out, _ = run(t, url, "schedule", "resume", "daily")
	require.Equal(t, 0, code)
	require.Equal(t, "schedule daily resumed\n", out)
	code, _, _ = run(t, url, "schedule", "delete", "daily")
	require.Equal(t, 0, code)
	code, _, errs = run(t, url, "schedule", "get", "daily")
	require.Equal(t, exitNotFound, code, errs)

	// Refusals: the service's names the field; the CLI's, the flag.
	code, _, errs = run(t, url, "schedule", "create", "bad", "--cron", "*/5 * * *", "-f", file)
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, "/cron")
	code, _, errs = run(t, url, "schedule", "create", "bad", "--cron", "@daily", "--tz", "Mars/Base", "-f", file)
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, "/time_zone")
	code, _, errs = run(t, url, "schedule", "create", "bad", "--cron", "@daily", "--every", "1h", "-f", file)
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, "--cron SPEC or --every D")
	require.NoError(t, os.WriteFile(file, []byte("goal: {title: T}\ntasks: [{key: a, queue: q, start_after: 1h}]\n"), 0o600))
	code, _, errs = run(t, url, "schedule", "create", "bad", "--every", "1h", "-f", file)
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, "/tasks/0/start_after")
}
