package executors_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// The lazy claim (lazy_claim.go): a job starts from the task its item
// carries, and claims at its first command, at its first heartbeat moment,
// or in its report.

// commandsOf returns the names of the commands sent for task id, in order.
func commandsOf(all []sent, id string) []sent {
	var out []sent
	for _, c := range all {
		if c.TaskID == id {
			out = append(out, c)
		}
	}
	return out
}

func names(cs []sent) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func TestAShortJobSendsOneCommand(t *testing.T) {
	b := setup(t)
	commands, _ := b.watchCommands(t)
	b.startWorker(t, executors.Config{Queue: "short", Executor: "quick"}, func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		return executors.Result{Output: "done"}, nil
	})
	id := b.CreateTask(t, map[string]any{"queue": "short"})
	tk := b.WaitState(t, id, "accepted", 15*time.Second)
	b.waitSettled(t, "short")

	sentFor := commandsOf(commands(), id)
	require.Equal(t, []string{"task.succeed"}, names(sentFor), "a short job's only command is its report, which carries the claim")
	require.Empty(t, sentFor[0].Token)
	require.NotNil(t, sentFor[0].Claim)
	require.Equal(t, "quick", sentFor[0].Claim.Executor)
	require.Len(t, tk.Attempts, 1)
	require.Equal(t, "quick", tk.Attempts[0].Executor)
	require.Len(t, tk.Attempts[0].TokenHash, 64)
	require.Empty(t, b.svc.Refused())

	// A failure too.
	f := b.CreateTask(t, map[string]any{"queue": "short2", "retry": map[string]any{"max_attempts": 1}})
	b.startWorker(t, executors.Config{Queue: "short2"}, func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		return executors.Result{}, executors.Permanent(context.DeadlineExceeded)
	})
	b.WaitState(t, f, "failed", 15*time.Second)
	require.Equal(t, []string{"task.fail"}, names(commandsOf(commands(), f)))
}

func TestALongJobClaimsAtItsFirstHeartbeatMomentAndHeartbeats(t *testing.T) {
	b := setup(t)
	commands, heartbeats := b.watchCommands(t)
	b.startWorker(t, executors.Config{Queue: "long", Lease: executors.MinLease}, func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		if err := heartbeatsSeen(ctx, heartbeats, 2); err != nil {
			return executors.Result{}, err
		}
		return executors.Result{Output: "long done"}, nil
	})
	id := b.CreateTask(t, map[string]any{"queue": "long"})
	tk := b.WaitState(t, id, "accepted", 15*time.Second)
	b.waitSettled(t, "long")

	sentFor := commandsOf(commands(), id)
	got := names(sentFor)
	require.Equal(t, "task.claim", got[0], "the job claimed before anything else: %v", got)
	require.Equal(t, "task.succeed", got[len(got)-1])
	require.GreaterOrEqual(t, strings.Count(strings.Join(got, " "), "task.heartbeat"), 2)
	for _, c := range sentFor[1:] {
		require.Len(t, c.Token, 43, "%s carries the token the claim returned", c.Name)
		require.Nil(t, c.Claim, "%s of a claimed attempt carries no claim", c.Name)
		require.Equal(t, domain.TokenHash(c.Token), tk.Attempts[0].TokenHash)
	}
	require.Empty(t, b.svc.Refused())
}

// A task cancelled while its job runs unclaimed: the watch cancels the job,
// its report (which carries the claim) is refused, and no attempt is
// recorded.
func TestCancellingAnUnclaimedJobsTaskCancelsIt(t *testing.T) {
	b := setup(t)
	started := make(chan struct{}, 1)
	causes := make(chan error, 1)
	w := b.startWorker(t, executors.Config{Queue: "unclaimed"}, func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		started <- struct{}{}
		return untilCancelled(ctx, causes)
	})
	id := b.CreateTask(t, map[string]any{"queue": "unclaimed"})
	recv(t, started)
	b.Command(t, "task.cancel", map[string]any{"task_id": id})
	require.ErrorIs(t, recv(t, causes), executors.ErrCancelled)
	w.logs.waitLine(t, 10*time.Second, "outcome=refused")
	tk := b.Task(t, id)
	require.Equal(t, "cancelled", tk.State)
	require.Empty(t, tk.Attempts, "the job never started its attempt")
	b.waitSettled(t, "unclaimed")
}

// A lazy claim the service refuses (another claimed the task meanwhile)
// cancels the job as a lost attempt, and its report is never sent.
func TestARefusedLazyClaimCancelsTheJob(t *testing.T) {
	b := setup(t)
	commands, _ := b.watchCommands(t)
	started := make(chan struct{}, 1)
	causes := make(chan error, 1)
	w := b.startWorker(t, executors.Config{Queue: "taken", Executor: "lazy", Lease: executors.MinLease},
		func(ctx context.Context, job *executors.Job) (executors.Result, error) {
			started <- struct{}{}
			return untilCancelled(ctx, causes)
		})
	id := b.CreateTask(t, map[string]any{"queue": "taken"})
	recv(t, started)
	// Someone else claims the ready task while the job runs unclaimed; the
	// job's claim at its first heartbeat moment is refused.
	b.Command(t, "task.claim", map[string]any{"task_id": id, "executor": "other"})
	require.ErrorIs(t, recv(t, causes), executors.ErrLeaseLost)
	w.logs.waitLine(t, 10*time.Second, "outcome=refused")
	for _, c := range commandsOf(commands(), id) {
		require.NotEqual(t, "task.fail", c.Name, "a job whose claim was refused reports nothing")
	}
	tk := b.Task(t, id)
	require.Len(t, tk.Attempts, 1)
	require.Equal(t, "other", tk.Attempts[0].Executor, "the other claim's attempt stands")
	require.Equal(t, "running", tk.Attempts[0].State)
}

// A report whose claim finds the goal's budget spent fails the task
// instead, as a claim would: nothing of the report is recorded, and the
// worker says so.
func TestAReportsClaimKeepsTheGoalsBudget(t *testing.T) {
	b := setup(t)
	var goal struct{ ID string }
	require.NoError(t, json.Unmarshal(b.Command(t, "goal.create", map[string]any{"title": "one attempt", "envelope": map[string]any{
		"budget": map[string]any{"attempts": 1}}}), &goal))
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	w := b.startWorker(t, executors.Config{Queue: "budget", Concurrency: 2}, func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		started <- struct{}{}
		if !waitFor(ctx, release) {
			return executors.Result{}, ctx.Err()
		}
		return executors.Result{Output: "done"}, nil
	})
	b.Command(t, "plan.submit", map[string]any{"goal_id": goal.ID, "tasks": []map[string]any{
		{"key": "a", "queue": "budget"}, {"key": "b", "queue": "budget"}}})
	recv(t, started)
	recv(t, started)
	close(release)
	w.logs.waitLine(t, 10*time.Second, "outcome=refused", "the report's claim started no attempt")
	// The reports are answered before the views apply their record: wait
	// until both tasks have ended there.
	var tasks []struct {
		State    string
		Attempts []json.RawMessage
	}
	servicetest.Eventually(t, 10*time.Second, func() bool {
		tasks = nil
		b.Query(t, "task.list", schemas.Query{GoalID: goal.ID}, &tasks)
		ended := 0
		for _, tk := range tasks {
			if tk.State == "accepted" || tk.State == "failed" {
				ended++
			}
		}
		return ended == 2
	}, func() string { return fmt.Sprintf("tasks: %+v", tasks) })
	attempts := 0
	for _, tk := range tasks {
		attempts += len(tk.Attempts)
	}
	require.Equal(t, 1, attempts, "the goal's budget allowed one attempt")
}

// A job that never claimed, whose item was redelivered (its holder hung
// past the lease): the new delivery claims first and runs the attempt; the
// hung job's report, which carries its claim, is refused, and nothing of it
// is recorded.
func TestAnUnclaimedJobsRedeliveredItemIsClaimedFirst(t *testing.T) {
	b := setup(t)
	commands, _ := b.watchCommands(t)
	const lease = executors.MinLease
	staleStarted := make(chan struct{}, 1)
	release := make(chan struct{})
	stale := b.startWorker(t, executors.Config{Queue: "hung", Executor: "stale", Lease: lease},
		func(ctx context.Context, job *executors.Job) (executors.Result, error) {
			staleStarted <- struct{}{}
			if !waitFor(ctx, release) {
				return executors.Result{}, ctx.Err()
			}
			return executors.Result{Output: "stale"}, nil
		})
	stale.w.PauseHeartbeats(true) // as if its process hung: no renewal, no claim
	id := b.CreateTask(t, map[string]any{"queue": "hung"})
	recv(t, staleStarted)
	b.startWorker(t, executors.Config{Queue: "hung", Executor: "fresh", Lease: lease},
		func(context.Context, *executors.Job) (executors.Result, error) {
			return executors.Result{Output: "fresh"}, nil
		})
	tk := b.WaitState(t, id, "accepted", 20*time.Second)
	require.Len(t, tk.Attempts, 1)
	require.Equal(t, "fresh", tk.Attempts[0].Executor)
	var fresh []string
	for _, c := range commandsOf(commands(), id) {
		if c.Name == "task.claim" || (c.Name == "task.succeed" && c.Token != "") {
			fresh = append(fresh, c.Name)
		}
	}
	require.Equal(t, []string{"task.claim", "task.succeed"}, fresh, "the redelivered item was claimed first")

	close(release)
	stale.logs.waitLine(t, 10*time.Second, "outcome=refused")
	after := b.Task(t, id)
	require.Equal(t, tk.Version, after.Version, "the stale report recorded nothing")
	b.waitSettled(t, "hung")
}
