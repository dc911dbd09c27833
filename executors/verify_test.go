package executors_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/executors"
)

// A verifier judges each result: FAIL hands its evidence to a new attempt,
// PASS accepts the task.
func TestAVerifierFailsThenPassesAResult(t *testing.T) {
	b := setup(t)
	b.startWorker(t, executors.Config{Queue: "drafts"}, func(_ context.Context, job *executors.Job) (executors.Result, error) {
		if len(job.Verifications) == 0 {
			return executors.Result{Output: map[string]string{"text": "draft without a title"}}, nil
		}
		var ev struct{ Missing string }
		if err := json.Unmarshal(job.Verifications[0].Evidence, &ev); err != nil {
			return executors.Result{}, executors.Permanent(err)
		}
		if refs := job.Verifications[0].EvidenceRefs; len(refs) != 1 || refs[0].Name != "diff.txt" {
			return executors.Result{}, executors.Permanent(fmt.Errorf("the evidence's references are %+v", refs))
		}
		return executors.Result{Output: map[string]string{"text": "draft", "added": ev.Missing}}, nil
	})
	b.startVerifier(t, executors.Config{Queue: "checks", Executor: "title-check", Version: "1.0"},
		func(ctx context.Context, c *executors.Check) (executors.Verdict, error) {
			var r map[string]string
			if err := json.Unmarshal(c.Result, &r); err != nil {
				return executors.Verdict{}, err
			}
			if r["added"] == "" {
				diff, err := c.PutArtifact(ctx, "diff.txt", strings.NewReader("+ title"))
				if err != nil {
					return executors.Verdict{}, err
				}
				return executors.Verdict{Outcome: executors.Fail, Evidence: map[string]string{"missing": "title"},
					EvidenceRefs: []executors.Artifact{diff}}, nil
			}
			return executors.Verdict{Outcome: executors.Pass, Evidence: map[string]string{"checked": "title"}}, nil
		})
	id := b.CreateTask(t, map[string]any{"queue": "drafts", "verification": map[string]any{"queue": "checks"}})
	done := b.WaitState(t, id, "accepted", 15*time.Second)
	require.Len(t, done.Attempts, 2)
	require.JSONEq(t, `{"text":"draft","added":"title"}`, string(done.Attempts[1].Result))
	b.waitSettled(t, "drafts")
	b.waitSettled(t, "checks")
}

// INCONCLUSIVE puts the task in needs_review for a person.
func TestAnInconclusiveVerdictAwaitsReview(t *testing.T) {
	b := setup(t)
	b.startWorker(t, executors.Config{Queue: "drafts"}, func(context.Context, *executors.Job) (executors.Result, error) {
		return executors.Result{Output: "maybe"}, nil
	})
	b.startVerifier(t, executors.Config{Queue: "checks"}, func(context.Context, *executors.Check) (executors.Verdict, error) {
		return executors.Verdict{Outcome: executors.Inconclusive, Evidence: "cannot tell"}, nil
	})
	id := b.CreateTask(t, map[string]any{"queue": "drafts", "verification": map[string]any{"queue": "checks"}})
	b.WaitState(t, id, "needs_review", 15*time.Second)
	b.Command(t, "task.review", map[string]any{"task_id": id, "decision": "accept", "reason": "read it"})
	b.WaitState(t, id, "accepted", 5*time.Second)
}

// A task whose history outgrows the wire still reaches its job: the oldest
// results are left out of it, and the job's Omitted names them.
func TestALongHistoryReachesTheJobFitted(t *testing.T) {
	b := setup(t)
	jobs := make(chan *executors.Job, 8)
	b.startWorker(t, executors.Config{Queue: "drafts"}, func(_ context.Context, job *executors.Job) (executors.Result, error) {
		jobs <- job
		return executors.Result{Output: strings.Repeat(fmt.Sprint(job.Attempt), 240<<10)}, nil
	})
	b.startVerifier(t, executors.Config{Queue: "checks"}, func(_ context.Context, c *executors.Check) (executors.Verdict, error) {
		if c.Attempt < 4 {
			return executors.Verdict{Outcome: executors.Fail, Evidence: map[string]int{"attempt": c.Attempt}}, nil
		}
		return executors.Verdict{Outcome: executors.Pass}, nil
	})
	id := b.CreateTask(t, map[string]any{"queue": "drafts", "retry": map[string]any{"max_attempts": 5},
		"verification": map[string]any{"queue": "checks", "on_fail": "retry"}})
	b.WaitState(t, id, "accepted", 30*time.Second)
	var last *executors.Job
	for range 4 {
		last = recv(t, jobs)
	}
	require.Equal(t, 4, last.Attempt)
	require.Len(t, last.PriorAttempts, 3, "every earlier attempt reaches the job")
	require.Contains(t, last.Omitted, "/attempts/0/result")
	require.Nil(t, last.PriorAttempts[0].Result, "the oldest result is left out")
	require.JSONEq(t, strconv.Quote(strings.Repeat("3", 240<<10)), string(last.PriorAttempts[2].Result), "the latest stays")
	require.JSONEq(t, `{"attempt":3}`, string(last.Verifications[len(last.Verifications)-1].Evidence))
	b.waitSettled(t, "drafts")
	b.waitSettled(t, "checks")
}
