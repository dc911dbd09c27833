package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/projections"
)

// BenchmarkWriterChain3 measures the writer's commit path alone — deciding,
// encoding, appending to a memory log and applying to real Pebble views —
// for chains of three sequential tasks (goal, plan, and claim and report of
// each task: 8 commands), 32 chains at a time, as `dwr bench chain3` drives
// it but without NATS, executors or fsyncs. One op is one chain.
func BenchmarkWriterChain3(b *testing.B) {
	store, err := projections.Open(filepath.Join(b.TempDir(), "views"), projections.Options{})
	require.NoError(b, err)
	defer store.Close()
	key, err := eventstore.NewLogKey(bytes.Repeat([]byte{7}, eventstore.LogKeySize))
	require.NoError(b, err)
	log := eventstore.NewMemoryLog()
	w := &writer{store: store, clock: time.Now, logger: slog.New(slog.DiscardHandler), broken: make(chan struct{})}
	c := eventstore.NewCommitter[*request](log, w, eventstore.GroupConfig{LogKey: key})
	require.NoError(b, c.Start(b.Context()))
	_, err = store.CatchUp(b.Context(), log, key)
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-ran; err != nil {
			b.Log(err)
		}
	}()

	n := 0
	run := func(cmds ...domain.Command) []domain.Reply {
		reqs := make([]*request, len(cmds))
		for i, cmd := range cmds {
			n++
			reqs[i] = &request{cmd: cmd, meta: domain.Meta{Workspace: "w", CommandID: fmt.Sprint("c", n), Actor: "bench", Authenticated: true},
				done: make(chan outcome, 1)}
			require.NoError(b, c.Submit(ctx, reqs[i]))
		}
		replies := make([]domain.Reply, len(cmds))
		for i, r := range reqs {
			o := <-r.done
			require.NoError(b, o.Err)
			require.NoError(b, json.Unmarshal(o.Reply, &replies[i]))
		}
		return replies
	}
	run(&domain.CreateWorkspace{Name: "w"})
	const parallel = 32
	input := json.RawMessage(`{"prompt": "write the next paragraph", "n": 3}`)
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += parallel {
		var goals, plans []domain.Command
		for range parallel {
			id := domain.DeriveID(time.Now(), fmt.Sprint("goal", n, len(goals)))
			goals = append(goals, &domain.CreateGoal{GoalID: id, Title: "chain"})
			plans = append(plans, &domain.SubmitPlan{GoalID: id, Tasks: []domain.TaskSpec{{Key: "a", Queue: "q", Input: input},
				{Key: "b", Queue: "q", Input: input, DependsOn: []string{"a"}}, {Key: "c", Queue: "q", Input: input, DependsOn: []string{"b"}}}})
		}
		run(goals...)
		replies := run(plans...)
		for step := range 3 {
			var claims, reports []domain.Command
			for _, r := range replies {
				task := r.Tasks[step].TaskID
				claims = append(claims, &domain.ClaimTask{ClaimBody: domain.ClaimBody{TaskID: task, Executor: "x"}, TokenHash: domain.TokenHash("t" + task)})
				reports = append(reports, &domain.ReportSuccess{TaskID: task, Attempt: 1, Token: "t" + task, Result: json.RawMessage(`{"text": "done"}`)})
			}
			run(claims...)
			run(reports...)
		}
	}
	b.StopTimer()
	select {
	case <-w.broken:
		b.Fatal("the views could not apply a committed record")
	default:
	}
}
