package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/schemas"
)

// killLoad is the client side of the kill -9 test: goroutines that create
// goals with small plans and work their tasks, each on its own connection,
// recording every command in the ledger.
type killLoad struct {
	ledger  *ledger
	stop    atomic.Bool     // no new work once set
	resolve context.Context // bounds the retries of unknown outcomes
	seed    uint64

	queries, queryErrs atomic.Int64
}

func (w *killLoad) run(i int, c *client) {
	rng := rand.New(rand.NewPCG(w.seed, uint64(i)))
	var n int
	newID := func() string { n++; return fmt.Sprintf("k9-c%d-%06d", i, n) }
	var minSeq uint64
	record := func(r *cmdResult) *cmdResult {
		w.ledger.add(r)
		if r.Outcome == acked {
			minSeq = max(minSeq, r.Seq)
		}
		return r
	}
	for !w.stop.Load() {
		var ready []struct {
			ID string `json:"id"`
		}
		w.queries.Add(1)
		if err := c.query("task.list", schemas.Query{State: domain.StateReady, Limit: 32}, minSeq, &ready); err != nil {
			w.queryErrs.Add(1)
			t := time.NewTimer(50 * time.Millisecond) // pacing while the service is down
			<-t.C
			continue
		}
		if len(ready) < 6 || rng.IntN(5) == 0 {
			// A goal with a chain of 1-3 tasks.
			g := record(c.do(w.resolve, "goal.create", map[string]any{"title": fmt.Sprintf("kill-9 client %d", i)}, newID()))
			if g.Outcome != acked {
				continue
			}
			goalID := g.reply().ID
			g.Aggs = []aggRef{{domain.AggGoal, goalID}}
			tasks := make([]map[string]any, 1+rng.IntN(3))
			for k := range tasks {
				tasks[k] = map[string]any{"key": fmt.Sprintf("s%d", k), "queue": "work", "input": map[string]any{"k": k}}
				if k > 0 {
					tasks[k]["depends_on"] = []string{fmt.Sprintf("s%d", k-1)}
				}
			}
			p := record(c.do(w.resolve, "plan.submit", map[string]any{"goal_id": goalID, "tasks": tasks}, newID()))
			if p.Outcome == acked {
				p.Aggs = []aggRef{{domain.AggGoal, goalID}}
				for _, pt := range p.reply().Tasks {
					p.Aggs = append(p.Aggs, aggRef{domain.AggTask, pt.TaskID})
				}
			}
			continue
		}
		// Claim a ready task (other clients race for the same ones) and report.
		taskID := ready[rng.IntN(len(ready))].ID
		cl := record(c.do(w.resolve, "task.claim", map[string]any{"task_id": taskID, "executor": fmt.Sprintf("kill9-c%d", i)}, newID()))
		if cl.Outcome != acked {
			continue
		}
		cl.Aggs = []aggRef{{domain.AggTask, taskID}}
		rep := cl.reply()
		if rep.State != domain.StateRunning || rep.Attempt == 0 {
			continue
		}
		var r *cmdResult
		if rng.IntN(8) == 0 {
			r = c.do(w.resolve, "task.fail", map[string]any{"task_id": taskID, "attempt": rep.Attempt, "token": rep.Token,
				"error": map[string]any{"message": "injected failure"}, "retryable": false}, newID())
		} else {
			r = c.do(w.resolve, "task.succeed", map[string]any{"task_id": taskID, "attempt": rep.Attempt, "token": rep.Token,
				"result": map[string]any{"by": i}}, newID())
		}
		record(r)
		if r.Outcome == acked {
			r.Aggs = []aggRef{{domain.AggTask, taskID}}
		}
	}
}

// TestKillNineLosesNothing SIGKILLs `dwr serve` under load again and again,
// restarting it on the same data, then reads the whole log: every
// acknowledged command is there once, histories are contiguous and chained,
// and the views rebuilt from the log equal the live ones.
func TestKillNineLosesNothing(t *testing.T) {
	kills, clients := times(3, 20), 8
	bin := dwrBinary(t)
	logs := logOnFailure(t, "dwr serve output")
	args, data, url := localServe(t)

	srv := startServer(t, bin, logs, "start 0", args...)
	cold := waitReady(t, srv, url, 60*time.Second)

	resolve, cancel := context.WithCancel(context.Background())
	defer cancel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("workload seed %d", seed)
	load := &killLoad{ledger: &ledger{}, resolve: resolve, seed: seed}
	var wg sync.WaitGroup
	for i := range clients {
		c := dial(t, url, fmt.Sprintf("kill9-client-%d", i), 2*time.Second)
		wg.Go(func() { load.run(i, c) })
	}

	rng := rand.New(rand.NewPCG(seed, 99))
	var readyIn []time.Duration
	for k := 1; k <= kills; k++ {
		// Load shaping: let the clients run for a random 1.5-3 s, then crash.
		pause := time.NewTimer(1500*time.Millisecond + time.Duration(rng.Int64N(int64(1500*time.Millisecond))))
		<-pause.C
		srv.kill9(t)
		srv = startServer(t, bin, logs, fmt.Sprintf("restart %d after SIGKILL", k), args...)
		readyIn = append(readyIn, waitReady(t, srv, url, 60*time.Second))
	}
	// Load shaping: a last stretch of load on the final server.
	pause := time.NewTimer(time.Second)
	<-pause.C
	load.stop.Store(true)

	// The clients finish their current command; unknown outcomes get a
	// bounded time to resolve against the running server.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	resolveDeadline := time.NewTimer(45 * time.Second)
	select {
	case <-done:
		resolveDeadline.Stop()
	case <-resolveDeadline.C:
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("clients still busy 10s after their retries were cancelled")
		}
	}
	if srv.exited() { // err is set before exited reports true: read it only then
		t.Fatalf("dwr serve died under load: %v", srv.err)
	}

	// Every acknowledged command sent again with its id answers with its
	// first outcome (and appends nothing: the audit counts duplicates).
	cmds := load.ledger.all()
	var replays, replayMismatches int
	rc := dial(t, url, "kill9-replay", 5*time.Second)
	for _, k := range rng.Perm(len(cmds)) {
		if r := cmds[k]; r.Outcome == acked && (r.Unknowns > 0 || replays < 200) {
			replays++
			if msg := rc.replay(r); msg != "" {
				replayMismatches++
				t.Log(msg)
			}
		}
	}

	// Stop gracefully, then read what is on disk.
	require.NoError(t, srv.terminate(30*time.Second), "graceful stop of dwr serve")
	ctx, stopCtx := context.WithTimeout(context.Background(), 60*time.Second)
	defer stopCtx()
	l, opened := openLog(t, ctx, data, logs)
	recs, err := readLog(ctx, l, logKeyOf(t, data))
	require.NoError(t, err, "read the whole log")
	last, err := l.LastSeq(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, recs)
	require.Equal(t, last, recs[len(recs)-1].Seq, "Read reached the log's last sequence")

	a := auditLog(recs, cmds, opened)
	views := compareViews(t, ctx, filepath.Join(data, "views"), l, logKeyOf(t, data))
	lc := load.ledger.counts()

	t.Logf("kill-9 load: %d commands, %d conflicts, %d other refusals, %d internal-error replies, %d bad replies, "+
		"%d queries (%d failed); %d acked commands replayed, %d answered otherwise", len(cmds), lc.conflicts,
		lc.refused-lc.conflicts, lc.internal, lc.badReplies, load.queries.Load(), load.queryErrs.Load(), replays, replayMismatches)
	t.Logf("kill-9 log: %s", a)
	t.Logf("kill-9 views: %s", views)
	t.Logf("kill-9: cold start ready in %s; restarts ready in %v", cold.Round(time.Millisecond), readyIn)
	for _, line := range logs.lines(30, "level=ERROR", "level=WARN", "panic", "DATA RACE") {
		t.Log("dwr serve: " + line)
	}
	fmt.Printf("kill-9: acked=%d refused=%d unknown→resolved=%d lost=%d duplicates=%d restarts=%d ready p50=%s p99=%s\n",
		lc.acked, lc.refused, lc.resolved, a.Lost, a.Duplicates, len(readyIn),
		percentile(readyIn, 0.50).Round(time.Millisecond), percentile(readyIn, 0.99).Round(time.Millisecond))

	for _, p := range a.Problems {
		t.Log("problem: " + p)
	}
	require.Zero(t, a.safety(), "safety counts: %s", a)
	require.Zero(t, replayMismatches, "a retry of an acknowledged command id must return its first outcome")
	require.Zero(t, lc.unresolved, "commands whose outcome never became known (a hang)")
	require.Zero(t, lc.badReplies, "replies that are not dwr responses")
	require.Zero(t, lc.invalid, "the workload's commands are valid; an invalid refusal is a wire bug")
	require.Positive(t, lc.acked)
	views.requireRebuiltEqual(t, a.LastSeq)
}
