package handlers_test

import (
	"encoding/json"
	"maps"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// itemsOf pulls n items of cons one at a time, acknowledging each and
// cancelling its task (a task left ready after its item was acknowledged
// has lost its item, which the service would let out again), and returns
// their tasks and when the stream stored each.
func itemsOf(t *testing.T, b *bundle, cons jetstream.Consumer, n int) (tasks []string, stored []time.Time) {
	t.Helper()
	for len(tasks) < n {
		got := fetched(t, cons, 1, 10*time.Second)
		require.Len(t, got, 1, "item %d of %d is let out", len(tasks)+1, n)
		var it schemas.WorkItem
		require.NoError(t, json.Unmarshal(got[0].Data(), &it))
		md, err := got[0].Metadata()
		require.NoError(t, err)
		tasks, stored = append(tasks, it.TaskID), append(stored, md.Timestamp)
		require.NoError(t, got[0].Ack())
		b.mustCommand(t, "task.cancel", map[string]any{"task_id": it.TaskID})
	}
	return tasks, stored
}

// nothingHandedOn runs the first of a two-step plan on queue, whose items
// cons delivers, as exec, and requires that its report hands nothing on: the
// second step (its spec with more) goes out as a work item, through the
// gate.
func nothingHandedOn(t *testing.T, b *bundle, cons jetstream.Consumer, exec *peer, queue string, more map[string]any) {
	t.Helper()
	second := map[string]any{"key": "b", "queue": queue, "depends_on": []string{"a"}}
	maps.Copy(second, more)
	g, _ := b.mustCommand(t, "goal.create", map[string]any{"title": "two steps"})
	plan, _ := b.mustCommand(t, "plan.submit", map[string]any{"goal_id": g.ID, "tasks": []map[string]any{{"key": "a", "queue": queue}, second}})
	a := plan.Tasks[0].TaskID
	items := fetched(t, cons, 1, 10*time.Second)
	require.Len(t, items, 1)
	var it schemas.WorkItem
	require.NoError(t, json.Unmarshal(items[0].Data(), &it))
	require.Equal(t, a, it.TaskID)
	token := exec.claim(t, a, "", 0).Token
	_, rep := exec.succeedNext(t, a, 1, token, "")
	require.NoError(t, items[0].Ack())
	require.Nil(t, rep.Next, "nothing is handed on from a queue whose items are held")
	next, _ := itemsOf(t, b, cons, 1)
	require.Equal(t, plan.Tasks[1].TaskID, next[0], "the next task goes out as a work item, through the gate")
}

// A queue with a rate limit (queue.configure rate_limit, rate_period_ms)
// hands out at most that many items in any period, across its executors,
// in the order its tasks became ready: the service lets them into the
// queue one at a time as executors take them, so that they do not pile up
// while nobody polls and go out at once when someone does. No report hands
// its sender the queue's next task; lifting the limit lets out what it
// held at once.
func TestARateLimitedQueueHandsOutItemsAtItsRate(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	conf, _ := b.mustCommand(t, "queue.configure", map[string]any{"queue": "llm", "lease_ms": 30_000, "max_deliver": 5,
		"rate_limit": 2, "rate_period_ms": 1_000})
	require.Equal(t, [2]int64{2, 1_000}, [2]int64{int64(conf.RateLimit), conf.RatePeriodMS})
	cons, err := b.jetstream(t).Consumer(ctx, "DWR_WORK", "dwr-default-llm")
	require.NoError(t, err)

	var made []string
	for range 7 {
		made = append(made, b.newTask(t, "llm"))
	}
	// Nobody polls: one item waits in the queue, the others in the service,
	// however long nobody comes.
	pending := func() uint64 {
		info, err := cons.Info(ctx)
		require.NoError(t, err)
		return info.NumPending
	}
	servicetest.Eventually(t, 10*time.Second, func() bool { return pending() == 1 })
	for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); {
		require.LessOrEqual(t, pending(), uint64(1), "items do not pile up in the queue while nobody takes them")
	}

	// A task whose item is held cannot be claimed by its id, first or
	// lazily: no executor was handed it.
	exec := b.peer(t, "executor")
	r := exec.send(t, "task.claim", map[string]any{"task_id": made[6], "executor": "e"}, "")
	requireRefused(t, r, domain.CodeConflict)
	require.Contains(t, r.Error.Message, "rate limit")
	r = exec.send(t, "task.succeed", map[string]any{"task_id": made[6], "attempt": 1, "claim": map[string]any{"executor": "e"}}, "")
	requireRefused(t, r, domain.CodeConflict)

	got, stored := itemsOf(t, b, cons, len(made))
	require.Equal(t, made, got, "each once, in the order they became ready")
	for i := 2; i < len(stored); i++ {
		require.GreaterOrEqual(t, stored[i].Sub(stored[i-2]), time.Second, "at most 2 items in any second: %v", stored)
	}

	// A report hands on nothing from a rate-limited queue: the next task
	// goes through the limit too.
	nothingHandedOn(t, b, cons, exec, "llm", nil)

	// Held items go out at once when the limit is lifted, and new ones are
	// no longer held.
	held := []string{b.newTask(t, "llm"), b.newTask(t, "llm"), b.newTask(t, "llm")}
	b.mustCommand(t, "queue.configure", map[string]any{"queue": "llm", "lease_ms": 30_000, "max_deliver": 5, "rate_limit": -1})
	held = append(held, b.newTask(t, "llm"))
	servicetest.Eventually(t, 10*time.Second, func() bool { return pending() == uint64(len(held)) })
	got, _ = itemsOf(t, b, cons, len(held))
	require.ElementsMatch(t, held, got)
}

// A writer's start finds the ready tasks of a rate-limited queue again, and
// lets them out at its rate.
func TestARateLimitOutlastsARestart(t *testing.T) {
	b := setupJetStream(t)
	ctx := t.Context()
	b.mustCommand(t, "queue.configure", map[string]any{"queue": "llm", "lease_ms": 30_000, "max_deliver": 5, "rate_limit": 1, "rate_period_ms": 1_000})
	var made []string
	for range 3 {
		made = append(made, b.newTask(t, "llm"))
	}
	b.stop()

	b2 := start(t, b.dir)
	cons, err := b2.jetstream(t).Consumer(ctx, "DWR_WORK", "dwr-default-llm")
	require.NoError(t, err)
	got, stored := itemsOf(t, b2, cons, len(made))
	require.Equal(t, made, got)
	require.GreaterOrEqual(t, stored[2].Sub(stored[1]), time.Second, "at its rate: %v", stored)
}

// A task whose item is out comes through the gate again with each record
// that leaves it ready (a signal it buffers, say): that is no new item, and
// does not use the limit up.
func TestALaterRecordOfATaskOutIsNoNewItem(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	b.mustCommand(t, "queue.configure", map[string]any{"queue": "llm", "lease_ms": 30_000, "max_deliver": 5,
		"rate_limit": 2, "rate_period_ms": domain.MaxRatePeriodMS})
	cons, err := b.jetstream(t).Consumer(ctx, "DWR_WORK", "dwr-default-llm")
	require.NoError(t, err)
	a := b.newTask(t, "llm")
	items := fetched(t, cons, 1, 10*time.Second)
	require.Len(t, items, 1)
	b.mustCommand(t, "task.signal", map[string]any{"task_id": a, "name": "more", "payload": map[string]any{"n": 1}})
	second := b.newTask(t, "llm")
	got, _ := itemsOf(t, b, cons, 1)
	require.Equal(t, []string{second}, got, "the day's second item is the second task's")
	require.NoError(t, items[0].Ack())
}
