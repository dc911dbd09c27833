package handlers

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers/embedded"
	"github.com/dwr-run/dwr/schemas"
)

// startJetStream starts an embedded server for the test and returns
// JetStream on a connection to it.
func startJetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	srv, err := embedded.Start(embedded.Config{DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect()
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// countingJS counts the consumer creations and updates sent to JetStream.
type countingJS struct {
	jetstream.JetStream
	writes atomic.Int64
}

func (c *countingJS) CreateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	c.writes.Add(1)
	return c.JetStream.CreateConsumer(ctx, stream, cfg)
}

func (c *countingJS) CreateOrUpdateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	c.writes.Add(1)
	return c.JetStream.CreateOrUpdateConsumer(ctx, stream, cfg)
}

// Dispatching a work item on a configured queue writes its consumer only
// when its settings changed: an update writes and syncs the consumer's
// metadata, which made every dispatch pay a file write, an fsync and a
// rename. queue.configure still applies its settings every time.
func TestDispatchWritesAQueuesConsumerOnlyWhenItsSettingsChange(t *testing.T) {
	plain := startJetStream(t)
	js := &countingJS{JetStream: plain}
	ctx := t.Context()
	d, err := newDispatcher(ctx, js, Config{Logger: slog.New(slog.DiscardHandler)}.withDefaults())
	require.NoError(t, err)

	for range 10 {
		require.NoError(t, d.ensureQueueWith(ctx, "default", "q", nil))
	}
	require.EqualValues(t, 1, js.writes.Load(), "a queue never configured: its consumer is made once")

	qc := &domain.QueueConfig{Name: "q", LeaseMS: 2000, MaxDeliver: 3}
	for range 10 {
		require.NoError(t, d.ensureQueueWith(ctx, "default", "q", qc))
	}
	require.EqualValues(t, 2, js.writes.Load(), "configured: its consumer is updated once")
	cons, err := plain.Consumer(ctx, "DWR_WORK", "dwr-default-q")
	require.NoError(t, err)
	require.Equal(t, 3, cons.CachedInfo().Config.MaxDeliver)

	changed := &domain.QueueConfig{Name: "q", LeaseMS: 4000, MaxDeliver: 3}
	require.NoError(t, d.ensureQueueWith(ctx, "default", "q", changed))
	require.NoError(t, d.ensureQueueWith(ctx, "default", "q", changed))
	require.EqualValues(t, 3, js.writes.Load(), "changed settings are applied once")

	require.NoError(t, d.ensureConsumer(ctx, "default", "q", changed))
	require.EqualValues(t, 4, js.writes.Load(), "queue.configure applies its settings every time")

}

// An execute item carries its task unless, with it, the item would be
// larger than schemas.MaxItemTaskBytes: then it goes without, and its
// executor claims first.
func TestAnExecuteItemCarriesItsTaskWithinItsBound(t *testing.T) {
	d := &dispatcher{prefix: "dwr"}
	small := &domain.Task{ID: "01Q3G99648H87N2YG8NR952X83", Workspace: "default", State: domain.StateReady,
		Spec: domain.TaskSpec{Queue: "q", Input: json.RawMessage(`{"n":1}`)}, Versioned: domain.Versioned{Commands: []string{"5:alice:cmd-1"}}}
	var it schemas.WorkItem
	m, err := d.msg(workItemOf(small, nil, 0))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(m.Data, &it))
	require.NotNil(t, it.Task)
	require.Empty(t, it.Task.Commands)
	require.Equal(t, []string{"5:alice:cmd-1"}, small.Commands)

	big := small.Clone()
	big.Spec.Input = json.RawMessage(`"` + strings.Repeat("a", schemas.MaxItemTaskBytes) + `"`)
	m, err = d.msg(workItemOf(big, nil, 0))
	require.NoError(t, err)
	it = schemas.WorkItem{}
	require.NoError(t, json.Unmarshal(m.Data, &it))
	require.Nil(t, it.Task, "too large: the item goes without its task")
	require.Equal(t, 1, it.Attempt)
	require.Less(t, len(m.Data), 1024)
}

// tasks is an aggregates of tasks held in a map.
type tasks map[string]*domain.Task

func (m tasks) Task(id string) (*domain.Task, error)        { return m[id], nil }
func (m tasks) Goal(string) (*domain.Goal, error)           { return nil, nil }
func (m tasks) Workspace(string) (*domain.Workspace, error) { return nil, nil }

// An execute item carries the accepted results of its task's dependencies,
// in the order of its depends_on — unless, with them, the item would be
// larger than its bound: then it goes without them first (its executor reads
// them), and keeps its task. A dependency not (yet) seen accepted leaves
// them all to the executor.
func TestAnExecuteItemCarriesItsDependenciesWithinItsBound(t *testing.T) {
	d := &dispatcher{prefix: "dwr"}
	dep := func(id, key, result string) *domain.Task {
		return &domain.Task{ID: id, Key: key, State: domain.StateAccepted, Attempts: []domain.Attempt{
			{N: 1, State: domain.AttemptStateFailed}, {N: 2, State: domain.AttemptStateSucceeded, Result: json.RawMessage(result)}}}
	}
	store := tasks{"01Q3G99648H87N2YG8NR952X81": dep("01Q3G99648H87N2YG8NR952X81", "a", `{"a":1}`),
		"01Q3G99648H87N2YG8NR952X82": dep("01Q3G99648H87N2YG8NR952X82", "b", `{"b":2}`)}
	task := &domain.Task{ID: "01Q3G99648H87N2YG8NR952X83", Workspace: "default", State: domain.StateReady, Key: "join",
		Spec: domain.TaskSpec{Queue: "q"}, DependsOn: []string{"01Q3G99648H87N2YG8NR952X82", "01Q3G99648H87N2YG8NR952X81"}}
	read := func(it schemas.WorkItem) schemas.WorkItem {
		m, err := d.msg(it)
		require.NoError(t, err)
		var got schemas.WorkItem
		require.NoError(t, json.Unmarshal(m.Data, &got))
		return got
	}
	it := read(workItemOf(task, store, 0))
	require.Equal(t, []schemas.Dependency{
		{Key: "b", TaskID: "01Q3G99648H87N2YG8NR952X82", Result: json.RawMessage(`{"b":2}`)},
		{Key: "a", TaskID: "01Q3G99648H87N2YG8NR952X81", Result: json.RawMessage(`{"a":1}`)}}, it.Dependencies,
		"the accepted attempt's result, in depends_on order")

	store["01Q3G99648H87N2YG8NR952X81"].Attempts[1].Result = json.RawMessage(`"` + strings.Repeat("a", schemas.MaxItemTaskBytes) + `"`)
	it = read(workItemOf(task, store, 0))
	require.Nil(t, it.Dependencies, "too large: the item goes without them")
	require.NotNil(t, it.Task, "and keeps its task")

	store["01Q3G99648H87N2YG8NR952X81"].State = domain.StateRunning
	require.Nil(t, workItemOf(task, store, 0).Dependencies, "not seen accepted: left to the executor")
}

// A verify item carries the earlier attempts and verdicts as context, each
// bounded but not their sum: when together they would pass the work
// stream's message bound, they are left out (the earlier attempts first),
// and the item with the input and the result to judge is still published —
// before, its publish failed forever and held every other item's retry.
func TestAVerifyItemStaysWithinTheStreamsMessageBound(t *testing.T) {
	js := startJetStream(t)
	ctx := t.Context()
	d, err := newDispatcher(ctx, js, Config{Logger: slog.New(slog.DiscardHandler)}.withDefaults())
	require.NoError(t, err)

	big := func(c byte) json.RawMessage {
		return json.RawMessage(`"` + strings.Repeat(string(c), domain.MaxInputBytes-16) + `"`)
	}
	task := &domain.Task{ID: "01J0000000000000000000TASK", Workspace: "default", State: domain.StateVerifying,
		Spec: domain.TaskSpec{Queue: "work", Input: big('i'), Verification: &domain.VerificationSpec{Queue: "check"}}}
	for n := 1; n <= 4; n++ {
		task.Attempts = append(task.Attempts, schemas.Attempt{N: n, State: domain.AttemptStateSucceeded, Result: big('r')})
	}
	for n := 1; n <= 3; n++ {
		task.Verifications = append(task.Verifications, schemas.Verification{Verdict: schemas.Verdict{Attempt: n, Outcome: domain.OutcomeFail, Evidence: big('e')}})
	}
	it := workItemOf(task, nil, 0)
	full, err := json.Marshal(it)
	require.NoError(t, err)
	require.Greater(t, len(full), 1<<20, "the whole item would not fit a message")

	m, err := d.msg(it)
	require.NoError(t, err)
	require.Less(t, len(m.Data), 2*domain.MaxInputBytes+16<<10, "about the input and the result alone")
	var sent schemas.WorkItem
	require.NoError(t, json.Unmarshal(m.Data, &sent))
	require.Nil(t, sent.PriorAttempts, "the earlier attempts went first")
	require.Nil(t, sent.Verifications)
	require.JSONEq(t, string(task.Spec.Input), string(sent.Input), "the input stays")
	require.JSONEq(t, string(task.Attempts[3].Result), string(sent.Result), "the result judged stays")
	require.Equal(t, domain.ResultDigest(task.Attempts[3].Result), sent.ResultDigest)
	_, err = js.PublishMsg(ctx, m)
	require.NoError(t, err, "the item fits the work stream")

	// Context that fits stays.
	task.Spec.Input = json.RawMessage(`{"doc":1}`)
	task.Attempts = task.Attempts[2:]
	task.Attempts[0].Result, task.Verifications = json.RawMessage(`{"ok":false}`), task.Verifications[:1]
	task.Verifications[0].Evidence = json.RawMessage(`"too short"`)
	m, err = d.msg(workItemOf(task, nil, 0))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(m.Data, &sent))
	require.Len(t, sent.PriorAttempts, 1)
	require.Len(t, sent.Verifications, 1)
}

// A max-deliveries advisory older than the item now at its sequence is
// about an item a single server lost (and whose number it gave again); on a
// cluster the two times come from two servers' clocks and are not compared:
// an advisory is taken as about the item at its sequence, whatever the skew.
func TestAnAdvisoryOlderThanItsItemIsSetAsideOnASingleServerOnly(t *testing.T) {
	fired := time.Unix(1_000_000, 0)
	require.True(t, storedAfter(fired.Add(time.Millisecond), fired, 1), "stored after the advisory fired: another item")
	require.False(t, storedAfter(fired.Add(-time.Minute), fired, 1), "stored before: the advisory's item")
	require.False(t, storedAfter(fired.Add(time.Minute), fired, 3), "a cluster: two clocks, not compared")
	require.False(t, storedAfter(fired, time.Time{}, 1), "an advisory without a time")
}
