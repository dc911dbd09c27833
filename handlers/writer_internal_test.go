package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// gatedWriter is the writer with a gate: a batch that opens with the gate
// request waits in Decide until the test releases it, so that the requests
// the test submits meanwhile are decided together as the next batch.
type gatedWriter struct {
	*writer
	gate    *request
	entered chan struct{} // closed once the gate's batch is being decided
	release chan struct{}
}

func (g *gatedWriter) Decide(items []*request) ([]eventstore.Event, []eventstore.CommandResult, []error) {
	if items[0] == g.gate {
		select {
		case <-g.entered:
		default:
			close(g.entered)
		}
		<-g.release
	}
	return g.writer.Decide(items)
}

// writerBench runs a writer's committer on a memory log into real Pebble
// views, one batch at a time.
type writerBench struct {
	t     *testing.T
	w     *gatedWriter
	c     *eventstore.Committer[*request]
	log   *eventstore.MemoryLog
	key   *eventstore.LogKey
	store *projections.Store
	now   time.Time
	ran   chan error
}

func setupWriter(t *testing.T) *writerBench {
	store, err := projections.Open(filepath.Join(t.TempDir(), "views"), projections.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	key, err := eventstore.NewLogKey(bytes.Repeat([]byte{7}, eventstore.LogKeySize))
	require.NoError(t, err)
	b := &writerBench{t: t, log: eventstore.NewMemoryLog(), key: key, store: store, now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC),
		ran: make(chan error, 1)}
	b.w = &gatedWriter{writer: &writer{store: store, clock: func() time.Time { return b.now }, logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
		broken: make(chan struct{})}}
	b.c = eventstore.NewCommitter[*request](b.log, b.w, eventstore.GroupConfig{LogKey: key, Clock: func() time.Time { return b.now }})
	require.NoError(t, b.c.Start(t.Context()))
	// The writer's own epoch record, as the service applies it.
	_, err = store.CatchUp(t.Context(), b.log, key)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { b.ran <- b.c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-b.ran; err != nil {
			t.Log(err)
		}
	})
	return b
}

// item is a command of a batch: its command id and body.
type item struct {
	id  string
	cmd domain.Command
}

// batch has the writer decide items together, in order, as one batch, and
// returns their outcomes.
func (b *writerBench) batch(items ...item) []outcome {
	b.t.Helper()
	ctx := b.t.Context()
	b.w.gate = &request{cmd: &domain.CreateWorkspace{Name: "w"}, meta: domain.Meta{Workspace: "w", CommandID: "ws", Actor: "tester"},
		done: make(chan outcome, 1)}
	b.w.entered, b.w.release = make(chan struct{}), make(chan struct{})
	require.NoError(b.t, b.c.Submit(ctx, b.w.gate))
	// The gate is decided alone: the items queue behind it and are decided
	// together, as one batch, once it is released (submitted while the
	// committer was still taking the gate, some would join the gate's batch).
	<-b.w.entered
	reqs := make([]*request, len(items))
	for i, it := range items {
		reqs[i] = &request{cmd: it.cmd, meta: domain.Meta{Workspace: "w", CommandID: it.id, Actor: "tester", Authenticated: true},
			done: make(chan outcome, 1)}
		require.NoError(b.t, b.c.Submit(ctx, reqs[i]))
	}
	close(b.w.release)
	<-b.w.gate.done
	outs := make([]outcome, len(items))
	for i, r := range reqs {
		outs[i] = <-r.done
	}
	// Answered, the batch is applied to the views before the next is decided.
	last, err := b.log.LastSeq(ctx)
	require.NoError(b.t, err)
	applied := make(chan error, 1)
	go func() { applied <- b.store.WaitFor(ctx, last) }()
	select {
	case err := <-applied:
		require.NoError(b.t, err)
	case <-b.w.broken:
		b.t.Fatal("the views could not apply a committed record")
	}
	return outs
}

// The writer's views take the states its decisions computed instead of
// applying the committed events again; they must equal, byte for byte, the
// views rebuilt from the log — and the states the next decision reads must
// equal those a replica reads — through refusals, retries answered with
// their first outcome (from the views and from earlier in the same batch),
// several commands on one task in one batch, and a batch decided again
// without a command whose event could not be encoded.
func TestWriterViewsFromDecidedStatesEqualViewsRebuiltFromTheLog(t *testing.T) {
	b := setupWriter(t)
	goal := domain.DeriveID(b.now, "goal")
	outs := b.batch(item{"ws", &domain.CreateWorkspace{Name: "w"}})
	require.NoError(t, outs[0].Err)

	// A goal and its plan in one batch, the goal's command repeated in it.
	spec := func(key string, deps ...string) domain.TaskSpec {
		return domain.TaskSpec{Key: key, Queue: "q", DependsOn: deps, Input: json.RawMessage(` { "key" : "` + key + `", "html": "<&>" } `)}
	}
	outs = b.batch(
		item{"goal", &domain.CreateGoal{GoalID: goal, Title: "g"}},
		item{"plan", &domain.SubmitPlan{GoalID: goal, Tasks: []domain.TaskSpec{spec("a"), spec("b", "a"), spec("c", "b")}}},
		item{"goal", &domain.CreateGoal{GoalID: goal, Title: "g"}},
	)
	for _, o := range outs {
		require.NoError(t, o.Err)
	}
	require.Equal(t, outs[0], outs[2], "a repeat in the same batch gets the first outcome")
	var plan domain.Reply
	require.NoError(t, json.Unmarshal(outs[1].Reply, &plan))
	require.Len(t, plan.Tasks, 3)
	a, bt := plan.Tasks[0].TaskID, plan.Tasks[1].TaskID

	// One batch: a claim, checkpoints and the report of the same task, a
	// checkpoint that cannot be encoded (the batch is decided again without
	// it), a refused claim, and retries of earlier commands.
	b.now = b.now.Add(time.Second)
	tok := func(task string, n int) string { return "token-" + task + "-" + string(rune('0'+n)) }
	outs = b.batch(
		item{"claim-a", &domain.ClaimTask{ClaimBody: domain.ClaimBody{TaskID: a, Executor: "x"}, TokenHash: domain.TokenHash(tok(a, 1))}},
		item{"cp-1", &domain.SaveCheckpoint{TaskID: a, Attempt: 1, Token: tok(a, 1), Checkpoint: json.RawMessage(`{ "at" : 1 }`)}},
		item{"cp-bad", &domain.SaveCheckpoint{TaskID: a, Attempt: 1, Token: tok(a, 1), Checkpoint: json.RawMessage(`{ "at" :`)}},
		item{"claim-none", &domain.ClaimTask{ClaimBody: domain.ClaimBody{TaskID: domain.DeriveID(b.now, "none"), Executor: "x"},
			TokenHash: domain.TokenHash("t")}},
		item{"done-a", &domain.ReportSuccess{TaskID: a, Attempt: 1, Token: tok(a, 1), Result: json.RawMessage(` {"ok": true, "html": "<&>"} `)}},
		item{"goal", &domain.CreateGoal{GoalID: goal, Title: "g"}},
		item{"claim-a", &domain.ClaimTask{ClaimBody: domain.ClaimBody{TaskID: a, Executor: "x"}, TokenHash: domain.TokenHash(tok(a, 1))}},
	)
	require.NoError(t, outs[0].Err)
	require.NoError(t, outs[1].Err)
	require.Error(t, outs[2].Err, "a checkpoint that is not JSON cannot be encoded")
	var de *domain.Error
	require.ErrorAs(t, outs[3].Err, &de, "a claim of a task that does not exist is refused")
	require.NoError(t, outs[4].Err)
	require.NoError(t, outs[5].Err)
	require.NoError(t, outs[6].Err)
	require.Equal(t, outs[0], outs[6])
	var done domain.Reply
	require.NoError(t, json.Unmarshal(outs[4].Reply, &done))
	require.Equal(t, domain.StateAccepted, done.State)

	// The next task, claimed and failed and claimed again, in one batch.
	b.now = b.now.Add(time.Second)
	outs = b.batch(
		item{"claim-b", &domain.ClaimTask{ClaimBody: domain.ClaimBody{TaskID: bt, Executor: "x"}, TokenHash: domain.TokenHash(tok(bt, 1))}},
		item{"fail-b", &domain.ReportFailure{TaskID: bt, Attempt: 1, Token: tok(bt, 1), Error: domain.ErrorInfo{Message: "flaky"}}},
		item{"claim-b-2", &domain.ClaimTask{ClaimBody: domain.ClaimBody{TaskID: bt, Executor: "x"}, TokenHash: domain.TokenHash(tok(bt, 2))}},
	)
	for _, o := range outs[:2] {
		require.NoError(t, o.Err)
	}

	last, err := b.log.LastSeq(t.Context())
	require.NoError(t, err)
	require.Equal(t, last, b.store.Checkpoint())
	require.EqualValues(t, 4, b.w.finals.Load(), "every record with events was applied from the decided states")

	rebuilt, err := projections.Rebuild(t.Context(), b.log, b.key, filepath.Join(t.TempDir(), "rebuilt"), projections.Options{}, nil)
	require.NoError(t, err)
	defer rebuilt.Close()
	var live, fresh bytes.Buffer
	require.NoError(t, b.store.Dump(&live))
	require.NoError(t, rebuilt.Dump(&fresh))
	require.True(t, bytes.Equal(live.Bytes(), fresh.Bytes()), "the writer's views equal the views rebuilt from the log, byte for byte")
	for _, task := range plan.Tasks {
		got, err := b.store.Task(task.TaskID)
		require.NoError(t, err)
		want, err := rebuilt.Task(task.TaskID)
		require.NoError(t, err)
		require.Equal(t, want, got, "the writer decides on the state the log replays to")
	}
	got, err := b.store.Goal(goal)
	require.NoError(t, err)
	want, err := rebuilt.Goal(goal)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// A reply the service writes by hand is the one json.Marshal writes (its
// result being what json.Marshal wrote).
func TestOKRepliesAreWhatEncodingJSONWrites(t *testing.T) {
	escaped, err := json.Marshal(map[string]any{"text": "x<&>\u2028", "n": []int{1}})
	require.NoError(t, err)
	for _, c := range []struct {
		raw json.RawMessage
		seq uint64
	}{{nil, 0}, {json.RawMessage(`{"id":"g-1","version":1}`), 42}, {json.RawMessage(`[]`), 0}, {nil, 7}, {escaped, 1 << 63}} {
		want, err := json.Marshal(schemas.Reply{OK: true, Result: c.raw, Seq: c.seq})
		require.NoError(t, err)
		require.Equal(t, string(want), string(okResponse(c.seq, c.raw)))
	}
}

// The identity of a request is the same whether its header was decoded
// now or remembered; a header that names no account names no caller.
func TestCallersAreRememberedAsDecoded(t *testing.T) {
	info := `{"acc":"CLIENTS","user":"UABC","rtt":1200,"server":"n1"}`
	for range 2 {
		c, ok := callerOf(micro.Headers{HeaderRequestInfo: {info}})
		require.True(t, ok)
		require.Equal(t, Caller{Account: "CLIENTS", User: "UABC"}, c)
	}
	for range 2 {
		_, ok := callerOf(micro.Headers{HeaderRequestInfo: {`{"user":"UABC"}`}})
		require.False(t, ok)
		_, ok = callerOf(micro.Headers{HeaderRequestInfo: {`not json`}})
		require.False(t, ok)
	}
}
