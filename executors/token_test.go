package executors_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/executors"
)

// sent is an attempt's command as the service received it.
type sent struct {
	Name    string
	TaskID  string `json:"task_id"`
	Attempt int    `json:"attempt"`
	Token   string `json:"token"`
	Claim   *struct {
		Executor string `json:"executor"`
	} `json:"claim"`
}

// watchCommands collects the commands sent on the workspace's command
// subjects (a plain subscription gets a copy of every request).
func (b *bundle) watchCommands(t *testing.T) (get func() []sent, heartbeats <-chan sent) {
	t.Helper()
	var mu sync.Mutex
	var all []sent
	hb := make(chan sent, 64)
	sub, err := b.nc.Subscribe("dwr.cmd.default.>", func(m *nats.Msg) {
		var s sent
		if json.Unmarshal(m.Data, &s) != nil {
			return
		}
		s.Name = strings.TrimPrefix(m.Subject, "dwr.cmd.default.")
		mu.Lock()
		all = append(all, s)
		mu.Unlock()
		if s.Name == "task.heartbeat" {
			select {
			case hb <- s:
			default:
			}
		}
	})
	require.NoError(t, err)
	require.NoError(t, b.nc.Flush())
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return func() []sent {
		mu.Lock()
		defer mu.Unlock()
		return append([]sent(nil), all...)
	}, hb
}

// heartbeatsSeen waits, in a job, until n heartbeats (of any job) reached
// the service; it returns ctx's error when the job is cancelled first.
func heartbeatsSeen(ctx context.Context, heartbeats <-chan sent, n int) error {
	for range n {
		select {
		case <-heartbeats:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func TestAJobsCommandsCarryItsTokenAndItsHeartbeatsReachTheService(t *testing.T) {
	b := setup(t)
	commands, heartbeats := b.watchCommands(t)
	jobs := make(chan *executors.Job, 1)
	b.startWorker(t, executors.Config{Queue: "tokens", Lease: executors.MinLease},
		func(ctx context.Context, job *executors.Job) (executors.Result, error) {
			jobs <- job
			if err := job.SaveCheckpoint(ctx, map[string]int{"step": 1}); err != nil {
				return executors.Result{}, err
			}
			// Run past two heartbeats (every Lease/3) before reporting.
			if err := heartbeatsSeen(ctx, heartbeats, 2); err != nil {
				return executors.Result{}, err
			}
			return executors.Result{Output: "done"}, nil
		})
	id := b.CreateTask(t, map[string]any{"queue": "tokens"})
	job := recv(t, jobs)
	require.Empty(t, job.Token, "the job started before its claim (its item carried the task): the worker holds the token")
	tk := b.WaitState(t, id, "accepted", 15*time.Second)
	require.Equal(t, "done", strings.Trim(string(tk.Attempts[0].Result), `"`))

	kinds := map[string]int{}
	token := ""
	for _, c := range commands() {
		if c.TaskID != id {
			continue
		}
		kinds[c.Name]++
		if c.Name == "task.claim" {
			require.Equal(t, 1, kinds["task.claim"]+kinds["task.checkpoint"]+kinds["task.heartbeat"], "the job claims at its first checkpoint")
			continue
		}
		require.Equal(t, 1, c.Attempt, c.Name)
		require.Len(t, c.Token, 43, "%s carries the attempt's token", c.Name)
		if token == "" {
			token = c.Token
		}
		require.Equal(t, token, c.Token, "%s carries the attempt's token", c.Name)
	}
	require.Equal(t, domain.TokenHash(token), tk.Attempts[0].TokenHash, "the token is the one the claim recorded")
	require.Equal(t, 1, kinds["task.claim"])
	require.Equal(t, 1, kinds["task.checkpoint"])
	require.Equal(t, 1, kinds["task.succeed"])
	require.GreaterOrEqual(t, kinds["task.heartbeat"], 2)
	require.Empty(t, b.svc.Refused(), "the service refused none of the worker's commands")
}

func TestARedeliveredItemWaitsForTheLeaseToLapseThenSupersedes(t *testing.T) {
	// The stale worker's attempt was last heard from at its claim, a moment
	// after the item's delivery: its redelivery comes a lease after the
	// delivery, before the service counts the lease lapsed. The fresh
	// worker waits for the moment the refusal names (holding the item)
	// instead of handing the item back for another lease.
	b := setup(t)
	const lease = executors.MinLease
	_, id := b.staleWorker(t, "lapse", lease, nil)
	fresh := b.startWorker(t, executors.Config{Queue: "lapse", Executor: "fresh", Lease: lease},
		func(context.Context, *executors.Job) (executors.Result, error) {
			return executors.Result{Output: "fresh"}, nil
		})
	tk := b.WaitState(t, id, "accepted", 20*time.Second)
	require.Len(t, tk.Attempts, 2)
	require.Equal(t, "abandoned", tk.Attempts[0].State)
	require.Positive(t, b.svc.Refused()[domain.RefusedLeaseHeld], "the first supersede came before the lease lapsed")
	fresh.logs.mu.Lock()
	defer fresh.logs.mu.Unlock()
	for _, l := range fresh.logs.lines {
		require.NotContains(t, l, "supersede refused", "the fresh worker handed the item back instead of waiting")
	}
}
