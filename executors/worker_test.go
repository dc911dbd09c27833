package executors_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

func TestPlanRunsInDependencyOrderThroughTheSDK(t *testing.T) {
	b := setup(t)
	var mu sync.Mutex
	var order []string
	b.startWorker(t, executors.Config{Queue: "chain", Concurrency: 3, Executor: "sdk-test", Version: "1.2.3"},
		func(ctx context.Context, job *executors.Job) (executors.Result, error) {
			mu.Lock()
			order = append(order, job.Key)
			mu.Unlock()
			var in struct{ N int }
			if err := job.Decode(&in); err != nil {
				return executors.Result{}, executors.Permanent(err)
			}
			return executors.Result{Output: map[string]any{"key": job.Key, "n": in.N, "op": job.OperationKey}}, nil
		})

	var goal struct{ ID string }
	require.NoError(t, json.Unmarshal(b.Command(t, "goal.create", map[string]any{"title": "chain"}), &goal))
	var plan struct {
		Tasks []struct {
			Key    string `json:"key"`
			TaskID string `json:"task_id"`
		} `json:"tasks"`
	}
	require.NoError(t, json.Unmarshal(b.Command(t, "plan.submit", map[string]any{"goal_id": goal.ID, "tasks": []map[string]any{
		{"key": "a", "queue": "chain", "input": map[string]any{"n": 1}},
		{"key": "b", "queue": "chain", "input": map[string]any{"n": 2}, "depends_on": []string{"a"}},
		{"key": "c", "queue": "chain", "input": map[string]any{"n": 3}, "depends_on": []string{"b"}},
	}}), &plan))
	require.Len(t, plan.Tasks, 3)

	for i, pt := range plan.Tasks {
		tk := b.WaitState(t, pt.TaskID, "accepted", 15*time.Second)
		require.Len(t, tk.Attempts, 1)
		require.Equal(t, "sdk-test", tk.Attempts[0].Executor)
		require.JSONEq(t, fmt.Sprintf(`{"key":%q,"n":%d,"op":"op-%s"}`, pt.Key, i+1, pt.TaskID), string(tk.Attempts[0].Result))
	}
	b.WaitGoalState(t, goal.ID, "achieved", 5*time.Second)
	mu.Lock()
	require.Equal(t, []string{"a", "b", "c"}, order, "each task ran once, after its dependency was accepted")
	mu.Unlock()
	b.waitSettled(t, "chain")
}

// A task's dependencies' results flow to it: a join sees each accepted
// result by plan key, and reads the artifacts each made, — from its work item when they fit in it, read with
// task.get when they do not.
func TestAJobSeesItsDependenciesResults(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int // bytes of each leaf's result
	}{{"in the work item", 10}, {"read when too large for the item", 200 << 10}} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			queue := fmt.Sprintf("flow-%d", tc.size)
			var mu sync.Mutex
			var seen map[string]executors.Dependency
			var read map[string]string // the text of each dependency's artifact
			b.startWorker(t, executors.Config{Queue: queue, Concurrency: 3}, func(ctx context.Context, job *executors.Job) (executors.Result, error) {
				if job.Key == "join" {
					texts := map[string]string{}
					for k, d := range job.Dependencies {
						r, err := job.GetArtifact(ctx, d.Artifacts[0].SHA256)
						if err != nil {
							return executors.Result{}, err
						}
						b, err := io.ReadAll(r)
						if err != nil {
							return executors.Result{}, err
						}
						texts[k] = string(b)
					}
					mu.Lock()
					seen, read = job.Dependencies, texts
					mu.Unlock()
					return executors.Result{Output: map[string]int{"deps": len(job.Dependencies)}}, nil
				}
				if len(job.Dependencies) != 0 {
					return executors.Result{}, executors.Permanent(errors.New("a leaf has no dependencies"))
				}
				ref, err := job.PutArtifact(ctx, job.Key+".json", strings.NewReader(`"the text of `+job.Key+`"`))
				if err != nil {
					return executors.Result{}, err
				}
				return executors.Result{Output: map[string]string{"leaf": job.Key, "pad": strings.Repeat("x", tc.size)},
					Artifacts: []executors.Artifact{ref}}, nil
			})
			var goal struct{ ID string }
			require.NoError(t, json.Unmarshal(b.Command(t, "goal.create", map[string]any{"title": "join", "tasks": []map[string]any{
				{"key": "a", "queue": queue}, {"key": "b", "queue": queue}, {"key": "c", "queue": queue},
				{"key": "join", "queue": queue, "depends_on": []string{"a", "b", "c"}},
			}}), &goal))
			b.WaitGoalState(t, goal.ID, "achieved", 15*time.Second)
			mu.Lock()
			defer mu.Unlock()
			require.Len(t, seen, 3)
			for _, k := range []string{"a", "b", "c"} {
				d := seen[k]
				require.Equal(t, k, d.Key)
				require.NotEmpty(t, d.TaskID)
				var out struct{ Leaf, Pad string }
				require.NoError(t, json.Unmarshal(d.Result, &out))
				require.Equal(t, k, out.Leaf)
				require.Len(t, out.Pad, tc.size)
				text := `"the text of ` + k + `"`
				sum := sha256.Sum256([]byte(text))
				require.Equal(t, []executors.Artifact{{Name: k + ".json", SHA256: hex.EncodeToString(sum[:]), Size: int64(len(text)),
					Type: "application/json"}}, d.Artifacts)
				require.Equal(t, text, read[k], "a dependency's artifact is read back")
			}
			b.waitSettled(t, queue)
		})
	}
}

// A work item carries the task: the job is built from it, and its report
// claims the attempt (the lazy claim).
func TestAJobIsBuiltFromTheClaimedTask(t *testing.T) {
	b := setup(t)
	jobs := make(chan *executors.Job, 1)
	b.startWorker(t, executors.Config{Queue: "built"}, func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		jobs <- job
		return executors.Result{Output: "ok"}, nil
	})
	var goal schemas.CommandResult
	require.NoError(t, json.Unmarshal(b.Command(t, "goal.create", map[string]any{"title": "built"}), &goal))
	var plan schemas.CommandResult
	require.NoError(t, json.Unmarshal(b.Command(t, "plan.submit", map[string]any{"goal_id": goal.ID, "tasks": []map[string]any{
		{"key": "only", "title": "the only task", "queue": "built", "input": map[string]any{"n": 7}, "timeout": "1h"}}}), &plan))
	require.Len(t, plan.Tasks, 1)
	id := plan.Tasks[0].TaskID

	job := recv(t, jobs)
	require.Equal(t, id, job.TaskID)
	require.Equal(t, "default", job.Workspace)
	require.Equal(t, "built", job.Queue)
	require.Equal(t, goal.ID, job.GoalID)
	require.Equal(t, "only", job.Key)
	require.Equal(t, "the only task", job.Title)
	require.Equal(t, 1, job.Attempt)
	require.Equal(t, "op-"+id, job.OperationKey)
	require.JSONEq(t, `{"n":7}`, string(job.Input))
	require.Empty(t, job.PriorAttempts)
	require.Empty(t, job.Token, "the job started from its item's task, and its report claimed it")

	tk := b.WaitState(t, id, "accepted", 15*time.Second)
	require.NotNil(t, tk.Attempts[0].Deadline)
	require.False(t, job.Deadline.IsZero())
	require.False(t, job.Deadline.After(*tk.Attempts[0].Deadline),
		"the job's deadline, counted from the item's receipt, is not after its attempt's: %s, %s", job.Deadline, *tk.Attempts[0].Deadline)
	b.waitSettled(t, "built")
}

func TestAFailedAttemptIsRetriedAndSeesThePriorAttempt(t *testing.T) {
	b := setup(t)
	seen := make(chan *executors.Job, 4)
	b.startWorker(t, executors.Config{Queue: "flaky"}, func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		seen <- job
		if job.Attempt == 1 {
			return executors.Result{}, errors.New("upstream said 503")
		}
		return executors.Result{Output: "done"}, nil
	})
	id := b.CreateTask(t, map[string]any{"queue": "flaky", "retry": map[string]any{"max_attempts": 3, "initial_backoff": "100ms"}})

	tk := b.WaitState(t, id, "accepted", 15*time.Second)
	require.Len(t, tk.Attempts, 2)
	require.Equal(t, "failed", tk.Attempts[0].State)
	require.True(t, tk.Attempts[0].Retryable)
	require.Equal(t, "upstream said 503", tk.Attempts[0].Error.Message)

	first, second := recv(t, seen), recv(t, seen)
	require.Equal(t, 1, first.Attempt)
	require.Empty(t, first.PriorAttempts)
	require.Equal(t, 2, second.Attempt)
	require.Equal(t, first.OperationKey, second.OperationKey, "the operation key is stable across attempts")
	require.Len(t, second.PriorAttempts, 1)
	prior := second.PriorAttempts[0]
	require.Equal(t, 1, prior.N)
	require.Equal(t, "failed", prior.State)
	require.Equal(t, "upstream said 503", prior.Error.Message)
	require.NotNil(t, prior.EndedAt)
	b.waitSettled(t, "flaky")
}

func TestFailuresAreReportedAsTheHandlerSays(t *testing.T) {
	b := setup(t)
	cases := []struct {
		name      string
		queue     string
		err       func() error
		code      string
		retryable bool
		reason    string
	}{
		{"Permanent fails the task at once", "permanent", func() error { return executors.Permanent(errors.New("bad input")) }, "", false, "not_retryable"},
		{"a Failure sets code and retryability", "coded", func() error {
			return executors.Failure{Code: "quota", Message: "over quota", Retryable: false}
		}, "quota", false, "not_retryable"},
		{"a panic is a retryable failure", "panics", func() error { panic("handler bug") }, executors.CodePanic, true, "attempts_exhausted"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var runs atomic.Int32
			b.startWorker(t, executors.Config{Queue: tc.queue}, func(context.Context, *executors.Job) (executors.Result, error) {
				runs.Add(1)
				return executors.Result{}, tc.err()
			})
			id := b.CreateTask(t, map[string]any{"queue": tc.queue, "retry": map[string]any{"max_attempts": 1}})
			tk := b.WaitState(t, id, "failed", 15*time.Second)
			require.Len(t, tk.Attempts, 1)
			require.Equal(t, tc.code, tk.Attempts[0].Error.Code)
			require.Equal(t, tc.retryable, tk.Attempts[0].Retryable)
			require.Equal(t, tc.reason, tk.Reason)
			b.waitSettled(t, tc.queue)
			require.Equal(t, int32(1), runs.Load())
		})
	}
}

// A job that fails after calling a model reports its model steps with the
// failure: they count against the goal's budget, and goal.get shows them
// spent beside it.
func TestAFailedJobReportsItsModelSteps(t *testing.T) {
	b := setup(t)
	b.startWorker(t, executors.Config{Queue: "spendy"}, func(context.Context, *executors.Job) (executors.Result, error) {
		return executors.Result{ModelSteps: []executors.ModelStep{{Model: "m", Tokens: 70, Cost: 0.5}}}, errors.New("the model said no")
	})
	var goal struct{ ID string }
	require.NoError(t, json.Unmarshal(b.Command(t, "goal.create", map[string]any{"title": "budgeted",
		"envelope": map[string]any{"budget": map[string]any{"tokens": 100}},
		"tasks":    []map[string]any{{"key": "a", "queue": "spendy", "retry": map[string]any{"max_attempts": 5, "initial_backoff": "10ms"}}}}), &goal))
	g := b.WaitGoalState(t, goal.ID, "failed", 15*time.Second)
	// 70 tokens, then 140: the second failure leaves no budget for a third.
	require.Equal(t, 2, g.Spent.Attempts)
	require.Equal(t, int64(140), g.Spent.Tokens)
	require.InDelta(t, 1.0, g.Spent.Cost, 1e-9)
	tk := b.Task(t, g.Nodes[0].TaskID)
	require.Equal(t, "budget_exhausted", tk.Reason)
	require.Equal(t, int64(70), tk.Attempts[1].ModelSteps[0].Tokens, "the failed attempt keeps its model steps")
	b.waitSettled(t, "spendy")
}

func TestACheckpointIsHandedToTheNextAttempt(t *testing.T) {
	b := setup(t)
	type progress struct{ Step int }
	resumed := make(chan json.RawMessage, 1)
	b.startWorker(t, executors.Config{Queue: "resume"}, func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		if job.Attempt == 1 {
			if job.Checkpoint != nil {
				return executors.Result{}, executors.Permanent(errors.New("attempt 1 has a checkpoint"))
			}
			for step := 1; step <= 2; step++ {
				if err := job.SaveCheckpoint(ctx, progress{Step: step}); err != nil {
					return executors.Result{}, err
				}
			}
			return executors.Result{}, errors.New("crashed after step 2")
		}
		resumed <- job.Checkpoint
		var p progress
		if err := json.Unmarshal(job.Checkpoint, &p); err != nil {
			return executors.Result{}, executors.Permanent(err)
		}
		return executors.Result{Output: map[string]int{"resumed_at": p.Step}}, nil
	})
	id := b.CreateTask(t, map[string]any{"queue": "resume", "retry": map[string]any{"initial_backoff": "100ms"}})
	tk := b.WaitState(t, id, "accepted", 15*time.Second)
	require.JSONEq(t, `{"Step":2}`, string(recv(t, resumed)))
	require.JSONEq(t, `{"resumed_at":2}`, string(tk.Attempts[1].Result))
	b.waitSettled(t, "resume")
}

func TestCancellingATaskCancelsItsRunningJob(t *testing.T) {
	b := setup(t)
	started := make(chan struct{})
	var once sync.Once
	type ended struct {
		at           time.Time
		cause, cpErr error
	}
	stopped := make(chan ended, 1)
	w := b.startWorker(t, executors.Config{Queue: "cancel"}, func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		// Its first checkpoint claims the attempt (the lazy claim).
		if err := job.SaveCheckpoint(ctx, "started"); err != nil {
			return executors.Result{}, err
		}
		once.Do(func() { close(started) })
		<-ctx.Done()
		e := ended{at: time.Now(), cause: context.Cause(ctx)}
		e.cpErr = job.SaveCheckpoint(context.Background(), "too late")
		stopped <- e
		return executors.Result{}, ctx.Err()
	})
	id := b.CreateTask(t, map[string]any{"queue": "cancel"})
	recv(t, started)
	b.Command(t, "task.cancel", map[string]any{"task_id": id, "reason": "changed my mind"})
	cancelled := time.Now()

	e := recv(t, stopped)
	require.Less(t, e.at.Sub(cancelled), time.Second, "the job's context is cancelled within a second")
	require.ErrorIs(t, e.cause, executors.ErrCancelled)
	require.ErrorIs(t, e.cpErr, executors.ErrCancelled, "a checkpoint of a cancelled attempt is refused")
	w.logs.waitLine(t, 10*time.Second, "outcome=refused")
	tk := b.Task(t, id)
	require.Equal(t, "cancelled", tk.State)
	require.Equal(t, "cancelled", tk.Attempts[0].State, "the failure report was refused: the attempt stays cancelled")
	require.Nil(t, tk.Attempts[0].Error)
	b.waitSettled(t, "cancel")
}

func TestAnAttemptPastItsDeadlineIsCancelled(t *testing.T) {
	b := setup(t)
	causes := make(chan error, 1)
	deadlines := make(chan time.Time, 1)
	b.startWorker(t, executors.Config{Queue: "slow"}, func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		deadlines <- job.Deadline
		return untilCancelled(ctx, causes)
	})
	id := b.CreateTask(t, map[string]any{"queue": "slow", "timeout": "1s", "retry": map[string]any{"max_attempts": 1}})
	require.False(t, recv(t, deadlines).IsZero(), "the job knows its deadline")
	require.ErrorIs(t, recv(t, causes), executors.ErrTimeout)
	tk := b.WaitState(t, id, "failed", 15*time.Second)
	require.Equal(t, executors.CodeTimeout, tk.Attempts[0].Error.Code, "failed by the service's timer or the worker's report: both say timeout")
	b.waitSettled(t, "slow")
}

func TestALapsedLeaseIsSupersededAndTheStaleReportRefused(t *testing.T) {
	b := setup(t)
	const lease = executors.MinLease
	staleCause := make(chan error, 1)
	stale, id := b.staleWorker(t, "lease", lease, staleCause)

	release := make(chan struct{})
	fresh := make(chan *executors.Job, 1)
	b.startWorker(t, executors.Config{Queue: "lease", Executor: "fresh", Lease: lease},
		func(ctx context.Context, job *executors.Job) (executors.Result, error) {
			fresh <- job
			if !waitFor(ctx, release) {
				return executors.Result{}, ctx.Err()
			}
			return executors.Result{Output: "fresh"}, nil
		})

	job := recv(t, fresh) // the item was redelivered; its claim superseded attempt 1
	require.Equal(t, 2, job.Attempt)
	require.Len(t, job.PriorAttempts, 1)
	require.Equal(t, "abandoned", job.PriorAttempts[0].State)
	require.Equal(t, "lease_lost", job.PriorAttempts[0].Reason)
	require.ErrorIs(t, recv(t, staleCause), executors.ErrLeaseLost)

	// The stale report is refused, and the stale worker leaves the item to
	// the delivery that holds it now.
	stale.logs.waitLine(t, 10*time.Second, "outcome=refused", "attempt 2 holds the item")
	_, unacked := b.workState(t, "lease")
	require.Equal(t, 1, unacked, "the item is still held by the fresh delivery")

	close(release)
	tk := b.WaitState(t, id, "accepted", 10*time.Second)
	require.Equal(t, "abandoned", tk.Attempts[0].State, "attempt 1's failure report never landed")
	require.Equal(t, "succeeded", tk.Attempts[1].State)
	b.waitSettled(t, "lease")
}

func TestStoppingDrainsAndLeavesUnfinishedItemsForRedelivery(t *testing.T) {
	b := setup(t)
	const lease = executors.MinLease
	started := make(chan int, 2)
	finish := make(chan struct{})
	causes := make(chan error, 1)
	first := b.startWorker(t, executors.Config{Queue: "drain", Lease: lease, Concurrency: 2, DrainTimeout: 2 * time.Second},
		func(ctx context.Context, job *executors.Job) (executors.Result, error) {
			var in struct{ Slow bool }
			_ = job.Decode(&in)
			started <- job.Attempt
			if !in.Slow {
				if !waitFor(ctx, finish) {
					return executors.Result{}, ctx.Err()
				}
				return executors.Result{Output: "quick"}, nil
			}
			return untilCancelled(ctx, causes)
		})
	quick := b.CreateTask(t, map[string]any{"queue": "drain", "input": map[string]any{"slow": false}})
	slow := b.CreateTask(t, map[string]any{"queue": "drain", "input": map[string]any{"slow": true}})
	recv(t, started)
	recv(t, started)

	stopped := make(chan error, 1)
	go func() { stopped <- first.stop() }()
	close(finish) // the quick job finishes within the drain timeout
	require.NoError(t, recv(t, stopped))
	require.ErrorIs(t, recv(t, causes), executors.ErrStopping)
	b.WaitState(t, quick, "accepted", 5*time.Second)
	tk := b.Task(t, slow)
	require.Equal(t, "running", tk.State, "the slow job was stopped without a report")
	_, unacked := b.workState(t, "drain")
	require.Equal(t, 1, unacked, "its item is left to be redelivered")

	// Another worker gets it after the lease and supersedes attempt 1.
	b.startWorker(t, executors.Config{Queue: "drain", Lease: lease}, func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		return executors.Result{Output: job.Attempt}, nil
	})
	tk = b.WaitState(t, slow, "accepted", 15*time.Second)
	require.Equal(t, "abandoned", tk.Attempts[0].State)
	require.JSONEq(t, `2`, string(tk.Attempts[1].Result))
	b.waitSettled(t, "drain")
}

func TestConcurrencyBoundsTheJobsInFlight(t *testing.T) {
	b := setup(t)
	const n, limit = 6, 3
	var inFlight, peak atomic.Int32
	gate := make(chan struct{})
	running := make(chan struct{}, n)
	b.startWorker(t, executors.Config{Queue: "wide", Concurrency: limit}, func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		cur := inFlight.Add(1)
		for {
			p := peak.Load()
			if cur <= p || peak.CompareAndSwap(p, cur) {
				break
			}
		}
		running <- struct{}{}
		defer inFlight.Add(-1)
		select {
		case <-gate:
			return executors.Result{}, nil
		case <-ctx.Done():
			return executors.Result{}, ctx.Err()
		}
	})
	ids := make([]string, n)
	for i := range ids {
		ids[i] = b.CreateTask(t, map[string]any{"queue": "wide"})
	}
	for range limit {
		recv(t, running)
	}
	var pending uint64
	var unacked int
	servicetest.Eventually(t, 5*time.Second, func() bool { // work items are published after their commit
		pending, unacked = b.workState(t, "wide")
		return pending == n-limit
	}, func() string { return fmt.Sprintf("%d items pending", pending) })
	require.Equal(t, limit, unacked, "no more items are fetched than there are free slots")
	close(gate)
	for _, id := range ids {
		b.WaitState(t, id, "accepted", 15*time.Second)
	}
	require.Equal(t, int32(limit), peak.Load())
	b.waitSettled(t, "wide")
}

// waitFor waits until ch is closed (true) or ctx ends (false): a handler
// that blocks must still honour its context, or the worker cannot stop.
func waitFor(ctx context.Context, ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

// A reconnection while every slot is busy does not cost the next item its
// lease: the pull made once a slot frees up is not ended by the reconnection
// that came before it (the server would deliver its item into a pull no
// longer listening, and the item would come again only after its lease).
func TestAReconnectionBeforeAPullDoesNotDelayItsItem(t *testing.T) {
	b := setup(t)
	release := make(chan struct{})
	started := make(chan string, 2)
	w := b.startWorker(t, executors.Config{Queue: "reconnect", Concurrency: 1, Lease: time.Minute},
		func(ctx context.Context, job *executors.Job) (executors.Result, error) {
			started <- job.TaskID
			var in struct{ Block bool }
			if err := job.Decode(&in); err == nil && in.Block {
				<-release
			}
			return executors.Result{Output: map[string]any{"ok": true}}, nil
		})
	first := b.CreateTask(t, map[string]any{"queue": "reconnect", "input": map[string]any{"block": true}})
	select {
	case id := <-started:
		require.Equal(t, first, id)
	case <-time.After(15 * time.Second):
		t.Fatal("the first job did not start")
	}
	nc := w.w.Config().Conn
	reconnected := nc.StatusChanged(nats.CONNECTED)
	defer nc.RemoveStatusListener(reconnected)
	require.NoError(t, nc.ForceReconnect())
	select {
	case <-reconnected:
	case <-time.After(15 * time.Second):
		t.Fatal("the worker's connection did not come back")
	}
	second := b.CreateTask(t, map[string]any{"queue": "reconnect"})
	close(release)
	select {
	case id := <-started:
		require.Equal(t, second, id)
	case <-time.After(15 * time.Second):
		t.Fatal("the next item waited for its lease (a minute) to come again")
	}
}

func TestTheWorkerRecreatesItsConsumerWhenItIsDeleted(t *testing.T) {
	b := setup(t)
	b.startWorker(t, executors.Config{Queue: "phoenix"}, func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		return executors.Result{Output: job.Attempt}, nil
	})
	first := b.CreateTask(t, map[string]any{"queue": "phoenix"})
	b.WaitState(t, first, "accepted", 10*time.Second)

	js, err := jetstream.New(b.nc)
	require.NoError(t, err)
	require.NoError(t, js.DeleteConsumer(context.Background(), "DWR_WORK", "dwr-default-phoenix"))
	second := b.CreateTask(t, map[string]any{"queue": "phoenix"})
	b.WaitState(t, second, "accepted", 15*time.Second)
	b.waitSettled(t, "phoenix")
}

// A queue's lease and max deliveries belong to its one consumer, shared by
// every worker of the queue: a second worker with other settings uses the
// queue's (and says so) instead of changing them under the first, unless it
// reconfigures the queue.
func TestWorkersOfAQueueShareItsLease(t *testing.T) {
	b := setup(t)
	ok := func(context.Context, *executors.Job) (executors.Result, error) { return executors.Result{}, nil }
	ackWait := func() (time.Duration, int) {
		js, err := jetstream.New(b.nc)
		require.NoError(t, err)
		cons, err := js.Consumer(context.Background(), "DWR_WORK", "dwr-default-shared")
		if err != nil {
			return 0, 0 // not created yet
		}
		c := cons.CachedInfo().Config
		return c.AckWait, c.MaxDeliver
	}
	first := b.startWorker(t, executors.Config{Queue: "shared", Lease: 20 * time.Second, MaxDeliver: 4}, ok)
	first.logs.waitLine(t, 10*time.Second, "worker started")
	servicetest.Eventually(t, 10*time.Second, func() bool { l, _ := ackWait(); return l == 20*time.Second },
		func() string { return "the first worker did not create the queue's consumer" })

	second := b.startWorker(t, executors.Config{Queue: "shared", Lease: 2 * time.Second, MaxDeliver: 9}, ok)
	second.logs.waitLine(t, 10*time.Second, "using the queue's")
	// Its log says which lease is in force: the queue's, not the one it asked for.
	second.logs.waitLine(t, 10*time.Second, "worker started", "lease_asked=2s")
	second.logs.waitLine(t, 10*time.Second, "taking work from the queue", "lease=20s", "max_deliver=4")
	lease, maxDeliver := ackWait()
	require.Equal(t, 20*time.Second, lease, "a second worker does not shorten the lease the first renews at its own pace")
	require.Equal(t, 4, maxDeliver)

	third := b.startWorker(t, executors.Config{Queue: "shared", Lease: 12 * time.Second, MaxDeliver: 6, Reconfigure: true}, ok)
	third.logs.waitLine(t, 10*time.Second, "worker started")
	servicetest.Eventually(t, 10*time.Second, func() bool { l, m := ackWait(); return l == 12*time.Second && m == 6 },
		func() string { return "Reconfigure did not update the queue's consumer" })
}

// A worker that starts before the service sends its first command again
// with the same id, and warns at the third try that the service does not
// answer.
func TestAWorkerWarnsWhileTheServiceDoesNotAnswer(t *testing.T) {
	srv, _ := servicetest.StartNATS(t) // stopped after the worker
	w := (&bundle{srv: srv}).startWorker(t, executors.Config{Queue: "early"}, func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		return executors.Result{Output: "ran"}, nil
	})
	line := w.logs.waitLine(t, 10*time.Second, "WARN executors: the service did not answer; retrying with the same command id",
		"subject=dwr.cmd.default.queue.configure", "tries=3", "no responders")
	require.NotContains(t, line, "command_id= ", "the retried command has an id")
}

// Run ends with an error once its connection is closed for good.
func TestRunEndsWhenTheConnectionIsClosed(t *testing.T) {
	b := setup(t)
	nc, err := b.srv.Connect()
	require.NoError(t, err)
	w, err := executors.NewWorker(executors.Config{Conn: nc, Queue: "closing", Logger: serviceLogger()},
		func(context.Context, *executors.Job) (executors.Result, error) { return executors.Result{}, nil })
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	nc.Close()
	require.ErrorIs(t, recv(t, done), executors.ErrClosed, "Run ended once its connection closed")
}

// A queue's limit of jobs running at once holds across all its workers:
// two workers of four slots each run two jobs of a queue limited to two,
// the rest waiting in the stream, and every job runs in the end.
func TestAQueuesLimitHoldsAcrossItsWorkers(t *testing.T) {
	b := setup(t)
	b.Command(t, "queue.configure", map[string]any{"queue": "llm", "lease_ms": 30_000, "max_deliver": 5, "max_running": 2})
	var running, most atomic.Int32
	gate := make(chan struct{})
	h := func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		select {
		case <-gate:
		case <-ctx.Done():
			return executors.Result{}, ctx.Err()
		}
		return executors.Result{Output: job.TaskID}, nil
	}
	b.startWorker(t, executors.Config{Queue: "llm", Concurrency: 4}, h)
	b.startWorker(t, executors.Config{Queue: "llm", Concurrency: 4}, h)
	var ids []string
	for range 6 {
		ids = append(ids, b.CreateTask(t, map[string]any{"queue": "llm"}))
	}
	js, err := jetstream.New(b.nc)
	require.NoError(t, err)
	cons, err := js.Consumer(t.Context(), "DWR_WORK", "dwr-default-llm")
	require.NoError(t, err)
	servicetest.Eventually(t, 10*time.Second, func() bool {
		info, err := cons.Info(t.Context())
		return err == nil && running.Load() == 2 && info.NumAckPending == 2 && info.NumPending == 4
	}, func() string { return fmt.Sprintf("%d jobs running", running.Load()) })
	close(gate)
	for _, id := range ids {
		b.WaitState(t, id, "accepted", 15*time.Second)
	}
	require.EqualValues(t, 2, most.Load(), "never more than the queue's limit at once, with eight slots free")
	b.waitSettled(t, "llm")
}

// A worker with many free slots fetches large work items a few MiB at a
// time: the server does not cut its connection as a slow consumer, and
// every job runs. (It asked for as many items as it had slots, whatever
// their size, and 64 items of 250 KiB passed the server's max_pending.)
func TestAWorkerFetchesLargeItemsAFewAtATime(t *testing.T) {
	st := servicetest.Start(t, "", servicetest.Options{Config: handlers.Config{WriterID: "test-writer"}, MaxPending: 12 << 20})
	b := bundleOf(st)
	input := map[string]any{"blob": strings.Repeat("x", 250<<10)}
	const tasks = 80
	for range tasks {
		b.Command(t, "task.create", map[string]any{"spec": map[string]any{"queue": "large", "input": input}})
	}
	var done atomic.Int64
	b.startWorker(t, executors.Config{Queue: "large", Concurrency: 64}, func(context.Context, *executors.Job) (executors.Result, error) {
		done.Add(1)
		return executors.Result{}, nil
	})
	b.waitSettled(t, "large")
	require.Equal(t, int64(tasks), done.Load())
	require.Zero(t, st.Server.NATS().NumSlowConsumers(), "a connection was cut as a slow consumer")
}
