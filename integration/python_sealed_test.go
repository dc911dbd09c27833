package integration

import (
	"bufio"
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// TestPythonWorkersOpenTheirQueuesSealedItems runs
// executors/python/tests/live_sealed.py against the service with
// encryption on: a chain of three tasks whose jobs need their inputs and
// their dependencies' results opened, the second judged by a Python
// verifier that passes it only on its opened input and result, runs with
// each queue's key (the workers' and the verifier's), read once, and no
// task.get of its first two tasks (the program waits for the last with
// task.get: it is not counted); the same chain in a goal with its own key
// runs too, its jobs and its verifier reading their tasks with task.get.
func TestPythonWorkersOpenTheirQueuesSealedItems(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the service and python3")
	}
	py := pythonSDK(t)
	s, member := pythonService(t, handlers.Config{Encryption: true, MasterKey: bytes.Repeat([]byte{5}, 32)})
	queries := servicetest.WatchRequests(t, s.Conn, "default")

	out := runPythonScript(t, py, "live_sealed.py", "DWR_SERVER="+s.URL,
		"DWR_CREDS="+member("py-caller", domain.RoleClient), "DWR_EXECUTOR_CREDS="+member("py-sealed", domain.RoleExecutor, "pys", "pysc"))
	require.Contains(t, out, "live sealed: ok")
	chains := map[string][]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 5 && f[0] == "chain" {
			chains[f[1]] = f[2:]
		}
	}
	require.Len(t, chains, 2, "%s", out)
	gets := func(ids []string) int { return queries.Reads("task.get", ids[:2]...) }
	require.Zero(t, gets(chains["queue"]), "every item was opened with the queue's key")
	require.Equal(t, 2, queries.Count("queue.key"), "each queue's key of the day is read once: the workers' and the verifier's")
	require.GreaterOrEqual(t, gets(chains["goal"]), 3, "a goal's own key is not the queue's: its jobs read their tasks")

	// The chain ran on the Python worker (its results show the jobs had
	// their payloads opened).
	k := s.Client("default")
	for _, id := range chains["queue"] {
		require.Equal(t, "py-sealed", k.Task(t, id).Attempts[0].Executor)
	}
	// Task b was judged by the Python verifier, on its opened input and
	// result (it fails the verdict otherwise), and the verdict names the
	// digest of the result as the service sealed it.
	for _, label := range []string{"queue", "goal"} {
		b := k.Task(t, chains[label][1])
		require.Len(t, b.Verifications, 1, label)
		require.Equal(t, schemas.OutcomePass, b.Verifications[0].Outcome, label)
		require.True(t, strings.HasPrefix(b.Verifications[0].ResultDigest, "sha256:"), label)
		require.Equal(t, "py-sealed", b.Verifications[0].Verifier, label)
	}
}
