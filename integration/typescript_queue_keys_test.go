package integration

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/schemas"
)

// TestTypeScriptWorkersOpenTheirQueuesSealedItemsThemselves: with
// encryption on, the TypeScript SDK's worker reads its queue's key of the
// day once and opens each item in memory: a chain of three runs without a
// task.get of its first two tasks (their own, or as the next one's
// dependency), each job claiming lazily as an unsealed item's does. Its
// second task is judged by a TypeScript verifier, which opens its verify
// item with its verification queue's key too (it fails the verdict unless
// it sees the opened input and result). A goal with its own key is not
// sealed with the queue's: its jobs and its verifier read their tasks, as
// before.
func TestTypeScriptWorkersOpenTheirQueuesSealedItemsThemselves(t *testing.T) {
	e := newTSLazyEnvWith(t, handlers.Config{Encryption: true, MasterKey: bytes.Repeat([]byte{3}, 32)})
	e.worker("steps", "ts-sealed", 30*time.Second)
	e.worker("checks", "ts-checks", 30*time.Second, "LAZY_VERIFY=1")
	// The queries the workers sent: the test reads only the last task of
	// each chain (WaitState), so the first two count.
	queries := func(name, id string) int {
		n := 0
		for _, r := range e.sent() {
			if r.Query && r.Name == name && (id == "" || r.ID == id) {
				n++
			}
		}
		return n
	}
	chain := func(privacy map[string]any) []schemas.PlanTask {
		step := func(secret string) map[string]any { return map[string]any{"scenario": "join", "secret": secret} }
		goal := map[string]any{"title": "sealed", "tasks": []map[string]any{
			{"key": "a", "queue": "steps", "input": step("secret-a")},
			{"key": "b", "queue": "steps", "depends_on": []string{"a"}, "input": step("secret-b"),
				"verification": map[string]any{"queue": "checks"}},
			{"key": "c", "queue": "steps", "depends_on": []string{"b"}, "input": step("secret-c")}}}
		if privacy != nil {
			goal["envelope"] = map[string]any{"privacy": privacy}
		}
		var g schemas.CommandResult
		require.NoError(t, json.Unmarshal(e.k.Command(t, "goal.create", goal), &g))
		done := e.k.WaitState(t, g.Tasks[2].TaskID, "accepted", 20*time.Second)
		require.JSONEq(t, `"secret-c+secret-b+secret-a"`, string(done.Attempts[len(done.Attempts)-1].Result))
		return g.Tasks
	}
	// judged checks that task b was judged PASS by the verifier, on its
	// opened input and result, naming the digest of the result as the
	// service sealed it (read after the task.get are counted: this is one).
	judged := func(tasks []schemas.PlanTask) {
		b := e.k.Task(t, tasks[1].TaskID)
		require.Len(t, b.Verifications, 1)
		require.Equal(t, schemas.OutcomePass, b.Verifications[0].Outcome)
		require.Equal(t, "ts-checks", b.Verifications[0].Verifier)
		require.True(t, strings.HasPrefix(b.Verifications[0].ResultDigest, "sha256:"))
	}

	tasks := chain(nil)
	require.Zero(t, queries("task.get", tasks[0].TaskID)+queries("task.get", tasks[1].TaskID),
		"every item was opened with the queue's key")
	require.Equal(t, 2, queries("queue.key", ""), "each queue's key of the day is read once: the workers' and the verifier's")
	judged(tasks)
	for i, pt := range tasks {
		e.jobLine(pt.TaskID, "succeeded")
		var cmds []tsSent
		for _, r := range e.sentFor(pt.TaskID) {
			if !r.Query && r.Name != "task.verify" { // the job's, not the verifier's
				cmds = append(cmds, r)
			}
		}
		require.Equal(t, []string{"task.succeed"}, tsCommandNames(cmds))
		if i == 1 {
			// b was handed in the reply to a's report (the handoff),
			// started in that commit and opened by the service: its
			// report carries the handed attempt's token.
			require.Nil(t, cmds[0].Claim)
			require.NotEmpty(t, cmds[0].Token)
			require.True(t, e.k.Task(t, pt.TaskID).Attempts[0].Handed)
			continue
		}
		require.NotNil(t, cmds[0].Claim, "an opened item runs as an unsealed one: its report carries the claim")
	}

	tasks = chain(map[string]any{"key": "goal"})
	require.GreaterOrEqual(t, queries("task.get", tasks[0].TaskID)+queries("task.get", tasks[1].TaskID), 3,
		"a goal's own key is not the queue's: its jobs read their tasks")
	require.Equal(t, 2, queries("queue.key", ""), "the keys read before are kept")
	judged(tasks)
}
