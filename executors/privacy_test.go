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

// With encryption on, work items carry sealed payloads; jobs and verifiers
// are handed them opened all the same: the input, the dependencies'
// results, the result judged.
func TestWorkersReadSealedPayloadsOpened(t *testing.T) {
	b := bundleOf(servicetest.Start(t, "", servicetest.Options{Config: handlers.Config{WriterID: "test-writer", Encryption: true,
		MasterKey: bytes.Repeat([]byte{3}, 32)}}))
	b.startWorker(t, executors.Config{Queue: "steps", Concurrency: 2}, func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		var in struct{ Secret string }
		if err := job.Decode(&in); err != nil || in.Secret == "" {
			return executors.Result{}, executors.Permanent(errors.New("the input is not opened: " + string(job.Input)))
		}
		out := in.Secret
		for _, d := range job.Dependencies {
			out += "+" + strings.Trim(string(d.Result), `"`)
		}
		return executors.Result{Output: out}, nil
	})
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
