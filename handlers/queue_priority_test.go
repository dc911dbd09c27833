package handlers_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// newTaskOf creates a standalone task of queue with priority (0: none
// given).
func (b *bundle) newTaskOf(t *testing.T, queue string, priority int) string {
	t.Helper()
	spec := map[string]any{"queue": queue}
	if priority != 0 {
		spec["priority"] = priority
	}
	tk, _ := b.mustCommand(t, "task.create", map[string]any{"spec": spec})
	return tk.ID
}

// A queue whose order is priority (queue.configure order) hands out its
// tasks by their priority, 1 first, then as they became ready: the service
// holds its items and lets them into the queue one at a time as executors
// take them, so that the item an executor is handed is the first in that
// order when it asked — all but the one let out for the next executor to
// come while none waited. A held task cannot be claimed by its id; no
// report hands its sender the queue's next task; a queue in fifo order
// hands out items as their tasks became ready, whatever their priority, and
// putting a priority queue back to fifo lets out what it held at once.
func TestAPriorityQueueHandsOutItsTasksByPriority(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	conf, _ := b.mustCommand(t, "queue.configure", map[string]any{"queue": "triage", "lease_ms": 30_000, "max_deliver": 5, "order": "priority"})
	require.Equal(t, "priority", conf.Order)
	cons, err := b.jetstream(t).Consumer(ctx, "DWR_WORK", "dwr-default-triage")
	require.NoError(t, err)
	pending := func() uint64 {
		info, err := cons.Info(ctx)
		require.NoError(t, err)
		return info.NumPending
	}

	// Nobody polls: the first task's item goes into the queue for whoever
	// comes first; the others wait in the service, in their order.
	first := b.newTaskOf(t, "triage", 5)
	servicetest.Eventually(t, 10*time.Second, func() bool { return pending() == 1 })
	p3, p5, p1, p2, p1b, none := b.newTaskOf(t, "triage", 3), b.newTaskOf(t, "triage", 5), b.newTaskOf(t, "triage", 1),
		b.newTaskOf(t, "triage", 2), b.newTaskOf(t, "triage", 1), b.newTaskOf(t, "triage", 0)
	for deadline := time.Now().Add(500 * time.Millisecond); time.Now().Before(deadline); {
		require.Equal(t, uint64(1), pending(), "items do not pile up in the queue while nobody takes them")
	}

	exec := b.peer(t, "executor")
	r := exec.send(t, "task.claim", map[string]any{"task_id": p1, "executor": "e"}, "")
	requireRefused(t, r, domain.CodeConflict)
	require.Contains(t, r.Error.Message, "its turn in its queue's order by priority")
	r = exec.send(t, "task.succeed", map[string]any{"task_id": p1, "attempt": 1, "claim": map[string]any{"executor": "e"}}, "")
	requireRefused(t, r, domain.CodeConflict)

	got, _ := itemsOf(t, b, cons, 7)
	require.Equal(t, []string{first, p1, p1b, p2, p3, none, p5}, got,
		"the one let out first, then by priority (none given: 3), then as they became ready")

	// No report hands on the next task of a priority queue: it takes its
	// turn.
	nothingHandedOn(t, b, cons, exec, "triage", map[string]any{"priority": 1})

	// Back to fifo: what the queue held goes out at once, and what comes
	// then goes out as it came.
	servicetest.Eventually(t, 10*time.Second, func() bool { return pending() == 0 })
	held := []string{b.newTaskOf(t, "triage", 4), b.newTaskOf(t, "triage", 2), b.newTaskOf(t, "triage", 3)}
	conf, _ = b.mustCommand(t, "queue.configure", map[string]any{"queue": "triage", "lease_ms": 30_000, "max_deliver": 5, "order": "fifo"})
	require.Empty(t, conf.Order)
	servicetest.Eventually(t, 10*time.Second, func() bool { return pending() == uint64(len(held)) })
	later := []string{b.newTaskOf(t, "triage", 5), b.newTaskOf(t, "triage", 1)}
	servicetest.Eventually(t, 10*time.Second, func() bool { return pending() == uint64(len(held)+len(later)) })
	got, _ = itemsOf(t, b, cons, len(held)+len(later))
	require.ElementsMatch(t, held, got[:len(held)])
	require.Equal(t, later, got[len(held):], "fifo: as they became ready, whatever their priority")
}

// A writer's start finds the ready tasks of a priority queue again, and
// lets them out in their order.
func TestAPriorityOrderOutlastsARestart(t *testing.T) {
	b := setupJetStream(t)
	ctx := t.Context()
	b.mustCommand(t, "queue.configure", map[string]any{"queue": "triage", "lease_ms": 30_000, "max_deliver": 5, "order": "priority"})
	first := b.newTaskOf(t, "triage", 5)
	cons, err := b.jetstream(t).Consumer(ctx, "DWR_WORK", "dwr-default-triage")
	require.NoError(t, err)
	servicetest.Eventually(t, 10*time.Second, func() bool {
		info, err := cons.Info(ctx)
		require.NoError(t, err)
		return info.NumPending == 1 // the first let out, for whoever comes first
	})
	made := []string{first, b.newTaskOf(t, "triage", 4), b.newTaskOf(t, "triage", 0), b.newTaskOf(t, "triage", 1)}
	b.stop()

	b2 := start(t, b.dir)
	cons, err = b2.jetstream(t).Consumer(ctx, "DWR_WORK", "dwr-default-triage")
	require.NoError(t, err)
	got, _ := itemsOf(t, b2, cons, len(made))
	require.Equal(t, []string{first, made[3], made[2], made[1]}, got, "the one in the queue already, then by priority")
}

// A goal's priority (goal.create, goal.prioritize) is that of its tasks
// that give none: they take their turn by it, and a change moves those
// still held at once; a task's own priority stands over its goal's.
func TestAGoalsPriorityOrdersItsTasks(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	b.mustCommand(t, "queue.configure", map[string]any{"queue": "triage", "lease_ms": 30_000, "max_deliver": 5, "order": "priority"})
	cons, err := b.jetstream(t).Consumer(ctx, "DWR_WORK", "dwr-default-triage")
	require.NoError(t, err)
	first := b.newTaskOf(t, "triage", 5)
	servicetest.Eventually(t, 10*time.Second, func() bool {
		info, err := cons.Info(ctx)
		require.NoError(t, err)
		return info.NumPending == 1
	})

	keyed := func(r domain.Reply) map[string]string {
		ids := map[string]string{}
		for _, pt := range r.Tasks {
			ids[pt.Key] = pt.TaskID
		}
		return ids
	}
	low, seq := b.mustCommand(t, "goal.create", map[string]any{"title": "routine", "priority": 4, "tasks": []map[string]any{
		{"key": "takes-its-goals", "queue": "triage"}, {"key": "own", "queue": "triage", "priority": 1}}})
	var g schemas.Goal
	b.query(t, "goal.get", schemas.Query{ID: low.ID}, seq, &g)
	require.Equal(t, 4, g.Priority)
	plain, _ := b.mustCommand(t, "goal.create", map[string]any{"title": "plain", "tasks": []map[string]any{{"key": "x", "queue": "triage"}}})
	two := b.newTaskOf(t, "triage", 2)
	lows, plains := keyed(low), keyed(plain)

	// The escalation: the routine goal's tasks that give no priority of
	// their own go before those of priority 2 now.
	r, _ := b.mustCommand(t, "goal.prioritize", map[string]any{"goal_id": low.ID, "priority": 1})
	require.False(t, r.Duplicate)
	got, _ := itemsOf(t, b, cons, 5)
	require.Equal(t, []string{first, lows["own"], lows["takes-its-goals"], two, plains["x"]}, got)
}
