package executors_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// joinSecrets is a job that needs its input and its dependencies' results
// opened: it returns its input's secret joined with their results.
func joinSecrets(_ context.Context, job *executors.Job) (executors.Result, error) {
	var in struct{ Secret string }
	if err := job.Decode(&in); err != nil || in.Secret == "" {
		return executors.Result{}, executors.Permanent(errors.New("the input is not opened: " + string(job.Input)))
	}
	out := in.Secret
	for _, d := range job.Dependencies {
		out += "+" + strings.Trim(string(d.Result), `"`)
	}
	return executors.Result{Output: out}, nil
}

// With encryption on, work items carry sealed payloads; jobs and verifiers
// are handed them opened all the same: the input, the dependencies'
// results, the result judged.
func TestWorkersReadSealedPayloadsOpened(t *testing.T) {
	b := bundleOf(servicetest.Start(t, "", servicetest.Options{Config: handlers.Config{WriterID: "test-writer", Encryption: true,
		MasterKey: bytes.Repeat([]byte{3}, 32)}}))
	b.startWorker(t, executors.Config{Queue: "steps", Concurrency: 2}, joinSecrets)
	b.startVerifier(t, executors.Config{Queue: "checks"}, func(ctx context.Context, c *executors.Check) (executors.Verdict, error) {
		if !strings.Contains(string(c.Result), "secret-a") || !strings.Contains(string(c.Input), "secret-b") {
			return executors.Verdict{Outcome: executors.Fail, Evidence: map[string]string{"sealed": string(c.Result)}}, nil
		}
		return executors.Verdict{Outcome: executors.Pass}, nil
	})
	var g schemas.CommandResult
	require.NoError(t, json.Unmarshal(b.Command(t, "goal.create", map[string]any{"title": "sealed", "tasks": []map[string]any{
		{"key": "a", "queue": "steps", "input": map[string]string{"secret": "secret-a"}},
		{"key": "b", "queue": "steps", "depends_on": []string{"a"}, "input": map[string]string{"secret": "secret-b"},
			"verification": map[string]any{"queue": "checks"}}}}), &g))
	done := b.WaitState(t, g.Tasks[1].TaskID, "accepted", 20*time.Second)
	require.Equal(t, `"secret-b+secret-a"`, string(done.Attempts[len(done.Attempts)-1].Result))
	require.Len(t, done.Attempts, 1, "judged PASS at once")
}

// With encryption on, a worker opens its queue's items itself, with the
// queue's key of the day: a chain of three tasks, each reading its
// dependency's sealed result, the second judged by a verifier that reads
// its input and result, runs without a single task.get, and each queue's
// key is read once. A goal with its own key (shredded alone) is not sealed with
// the queue's key: its jobs read their task with task.get, as before.
func TestWorkersOpenTheirQueuesSealedItemsThemselves(t *testing.T) {
	b := bundleOf(servicetest.Start(t, "", servicetest.Options{Config: handlers.Config{WriterID: "test-writer", Encryption: true,
		MasterKey: bytes.Repeat([]byte{3}, 32)}}))
	// The queries sent, as the server routes them (the test waits for the
	// last task of each chain with task.get: only the others count).
	queries := servicetest.WatchRequests(t, b.nc, "default")
	taskGets := func(tasks []schemas.PlanTask) int {
		return queries.Reads("task.get", tasks[0].TaskID, tasks[1].TaskID)
	}
	b.startWorker(t, executors.Config{Queue: "steps", Concurrency: 2}, joinSecrets)
	b.startVerifier(t, executors.Config{Queue: "checks"}, func(ctx context.Context, c *executors.Check) (executors.Verdict, error) {
		if string(c.Result) != `"secret-b+secret-a"` || !strings.Contains(string(c.Input), "secret-b") {
			return executors.Verdict{Outcome: executors.Fail, Evidence: map[string]string{"sealed": string(c.Result)}}, nil
		}
		return executors.Verdict{Outcome: executors.Pass}, nil
	})
	chain := func(privacy map[string]any) (string, []schemas.PlanTask) {
		var g schemas.CommandResult
		goal := map[string]any{"title": "sealed", "tasks": []map[string]any{
			{"key": "a", "queue": "steps", "input": map[string]string{"secret": "secret-a"}},
			{"key": "b", "queue": "steps", "depends_on": []string{"a"}, "input": map[string]string{"secret": "secret-b"},
				"verification": map[string]any{"queue": "checks"}},
			{"key": "c", "queue": "steps", "depends_on": []string{"b"}, "input": map[string]string{"secret": "secret-c"}}}}
		if privacy != nil {
			goal["envelope"] = map[string]any{"privacy": privacy}
		}
		require.NoError(t, json.Unmarshal(b.Command(t, "goal.create", goal), &g))
		done := b.WaitState(t, g.Tasks[2].TaskID, "accepted", 20*time.Second)
		return string(done.Attempts[len(done.Attempts)-1].Result), g.Tasks
	}
	out, tasks := chain(nil)
	require.Equal(t, `"secret-c+secret-b+secret-a"`, out)
	require.Zero(t, taskGets(tasks), "every item was opened with the queue's key")
	require.Equal(t, 2, queries.Count("queue.key"), "each queue's key of the day is read once: the workers' and the verifier's")
	judged := b.Task(t, tasks[1].TaskID) // read after the counting: the verifier's PASS, on the opened payloads
	require.Len(t, judged.Verifications, 1)
	require.Equal(t, schemas.OutcomePass, judged.Verifications[0].Outcome)

	out, tasks = chain(map[string]any{"key": "goal"})
	require.Equal(t, `"secret-c+secret-b+secret-a"`, out)
	require.GreaterOrEqual(t, taskGets(tasks), 3, "a goal's own key is not the queue's: its jobs read their tasks")
}
