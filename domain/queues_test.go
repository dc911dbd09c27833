package domain

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestConfigureQueue(t *testing.T) {
	w := setup(t)
	require.Nil(t, w.workspace().Queue("build"))

	out := w.must(&ConfigureQueue{Queue: "build", LeaseMS: 30_000, MaxDeliver: 5})
	require.Equal(t, []string{"workspace.queue_configured"}, events(out, w.ws))
	require.Equal(t, &QueueConfigured{Queue: "build", LeaseMS: 30_000, MaxDeliver: 5}, out.Changes[0].Event)
	require.Equal(t, Reply{ID: w.ws, Version: 2, Queue: "build", LeaseMS: 30_000, MaxDeliver: 5}, out.Reply)
	require.Equal(t, &QueueConfig{Name: "build", LeaseMS: 30_000, MaxDeliver: 5}, w.workspace().Queue("build"))

	// The same settings again change nothing, and answer them.
	out = w.must(&ConfigureQueue{Queue: "build", LeaseMS: 30_000, MaxDeliver: 5})
	require.Empty(t, out.Changes)
	require.Equal(t, Reply{ID: w.ws, Version: 2, Queue: "build", LeaseMS: 30_000, MaxDeliver: 5, Duplicate: true}, out.Reply)

	// Other settings replace them.
	out = w.must(&ConfigureQueue{Queue: "build", LeaseMS: 60_000, MaxDeliver: 5})
	require.Equal(t, []string{"workspace.queue_configured"}, events(out, w.ws))
	require.Equal(t, Reply{ID: w.ws, Version: 3, Queue: "build", LeaseMS: 60_000, MaxDeliver: 5}, out.Reply)
	w.must(&ConfigureQueue{Queue: "test", LeaseMS: 1_000, MaxDeliver: 1})
	ws := w.workspace()
	require.Equal(t, []QueueConfig{{Name: "build", LeaseMS: 60_000, MaxDeliver: 5}, {Name: "test", LeaseMS: 1_000, MaxDeliver: 1}}, ws.Queues)
	w.requireReplays()
	w.requireReplaysFromWire()
}

// With if_unset, a queue already configured keeps its settings, and the
// reply says what they are; a queue not yet configured takes the ones given.
func TestConfigureQueueIfUnset(t *testing.T) {
	w := setup(t)
	out := w.must(&ConfigureQueue{Queue: "build", LeaseMS: 30_000, MaxDeliver: 5, IfUnset: true})
	require.Len(t, out.Changes, 1, "an unset queue is configured")
	require.Equal(t, int64(30_000), out.Reply.LeaseMS)

	out = w.must(&ConfigureQueue{Queue: "build", LeaseMS: 90_000, MaxDeliver: 7, IfUnset: true})
	require.Empty(t, out.Changes, "the queue is set: nothing changes")
	require.Equal(t, Reply{ID: w.ws, Version: 2, Queue: "build", LeaseMS: 30_000, MaxDeliver: 5, Duplicate: true}, out.Reply,
		"the reply carries the settings in effect, not the ones asked for")
	require.Equal(t, &QueueConfig{Name: "build", LeaseMS: 30_000, MaxDeliver: 5}, w.workspace().Queue("build"))

	// A retry under the same command id answers the settings in effect too.
	id := w.nextCommandID()
	_, err := w.runID(id, &ConfigureQueue{Queue: "deploy", LeaseMS: 5_000, MaxDeliver: 2})
	require.NoError(t, err)
	out = w.duplicate(id, &ConfigureQueue{Queue: "deploy", LeaseMS: 5_000, MaxDeliver: 2})
	require.Equal(t, "deploy", out.Reply.Queue)
	require.Equal(t, int64(5_000), out.Reply.LeaseMS)
	require.Equal(t, 2, out.Reply.MaxDeliver)
	w.requireReplays()
}

func TestConfigureQueueBounds(t *testing.T) {
	w := setup(t)
	for _, tc := range []struct {
		cmd   ConfigureQueue
		field string
	}{
		{ConfigureQueue{Queue: "", LeaseMS: 30_000, MaxDeliver: 5}, "/queue"},
		{ConfigureQueue{Queue: "Build", LeaseMS: 30_000, MaxDeliver: 5}, "/queue"},
		{ConfigureQueue{Queue: "a.b", LeaseMS: 30_000, MaxDeliver: 5}, "/queue"},
		{ConfigureQueue{Queue: "build", LeaseMS: 0, MaxDeliver: 5}, "/lease_ms"},
		{ConfigureQueue{Queue: "build", LeaseMS: 999, MaxDeliver: 5}, "/lease_ms"},
		{ConfigureQueue{Queue: "build", LeaseMS: -30_000, MaxDeliver: 5}, "/lease_ms"},
		{ConfigureQueue{Queue: "build", LeaseMS: MaxLeaseMS + 1, MaxDeliver: 5}, "/lease_ms"},
		{ConfigureQueue{Queue: "build", LeaseMS: 30_000, MaxDeliver: 0}, "/max_deliver"},
		{ConfigureQueue{Queue: "build", LeaseMS: 30_000, MaxDeliver: -1}, "/max_deliver"},
		{ConfigureQueue{Queue: "build", LeaseMS: 30_000, MaxDeliver: MaxMaxDeliver + 1}, "/max_deliver"},
		{ConfigureQueue{Queue: "build", LeaseMS: 30_000, MaxDeliver: 0, IfUnset: true}, "/max_deliver"},
		{ConfigureQueue{Queue: "build", LeaseMS: 30_000, MaxDeliver: 5, MaxRunning: -2}, "/max_running"},
		{ConfigureQueue{Queue: "build", LeaseMS: 30_000, MaxDeliver: 5, MaxRunning: MaxMaxRunning + 1}, "/max_running"},
	} {
		c := tc.cmd
		require.Equal(t, tc.field, w.refused(&c, CodeInvalid).Field, "%+v", c)
	}
	// The bounds themselves are allowed.
	w.must(&ConfigureQueue{Queue: "fast", LeaseMS: MinLeaseMS, MaxDeliver: MinMaxDeliver})
	w.must(&ConfigureQueue{Queue: "slow", LeaseMS: MaxLeaseMS, MaxDeliver: MaxMaxDeliver, MaxRunning: MaxMaxRunning})
	require.Equal(t, int64(24*60*60*1000), int64(MaxLeaseMS), "24 h")
	require.Len(t, w.workspace().Queues, 2)
}

// A queue's limit of jobs running at once: set by a number, kept by 0
// (what executors that know nothing of it send), removed by -1.
func TestConfigureQueueMaxRunning(t *testing.T) {
	w := setup(t)
	out := w.must(&ConfigureQueue{Queue: "llm", LeaseMS: 30_000, MaxDeliver: 5, MaxRunning: 2})
	require.Equal(t, &QueueConfigured{Queue: "llm", LeaseMS: 30_000, MaxDeliver: 5, MaxRunning: 2}, out.Changes[0].Event)
	require.Equal(t, 2, out.Reply.MaxRunning)

	out = w.must(&ConfigureQueue{Queue: "llm", LeaseMS: 30_000, MaxDeliver: 5})
	require.Empty(t, out.Changes, "0 keeps the limit: nothing changes")
	require.Equal(t, 2, out.Reply.MaxRunning)
	out = w.must(&ConfigureQueue{Queue: "llm", LeaseMS: 60_000, MaxDeliver: 5})
	require.Equal(t, &QueueConfigured{Queue: "llm", LeaseMS: 60_000, MaxDeliver: 5, MaxRunning: 2}, out.Changes[0].Event,
		"other settings keep the limit")
	out = w.must(&ConfigureQueue{Queue: "llm", LeaseMS: 60_000, MaxDeliver: 5, MaxRunning: 3, IfUnset: true})
	require.Empty(t, out.Changes)
	require.Equal(t, 2, out.Reply.MaxRunning, "if_unset keeps a configured queue's")

	// The executors it holds back configure their lease, not the limit.
	w.actor, w.queues = "worker", []string{"llm"}
	require.Equal(t, "/max_running", w.refused(&ConfigureQueue{Queue: "llm", LeaseMS: 60_000, MaxDeliver: 5, MaxRunning: -1}, CodeForbidden).Field)
	out = w.must(&ConfigureQueue{Queue: "llm", LeaseMS: 90_000, MaxDeliver: 5})
	require.Equal(t, 2, out.Reply.MaxRunning, "an executor's settings keep the limit")
	w.actor, w.queues = "tester", nil

	out = w.must(&ConfigureQueue{Queue: "llm", LeaseMS: 60_000, MaxDeliver: 5, MaxRunning: -1})
	require.Equal(t, &QueueConfigured{Queue: "llm", LeaseMS: 60_000, MaxDeliver: 5}, out.Changes[0].Event)
	require.Zero(t, w.workspace().Queue("llm").MaxRunning, "-1 removes it")
	require.Empty(t, w.must(&ConfigureQueue{Queue: "llm", LeaseMS: 60_000, MaxDeliver: 5, MaxRunning: -1}).Changes)
	w.requireReplays()
	w.requireReplaysFromWire()
}

// A queue's rate limit: set with its period (a second when not given),
// kept by 0 and by other settings, removed by -1; an operator's, not its
// executors'.
func TestConfigureQueueRateLimit(t *testing.T) {
	w := setup(t)
	out := w.must(&ConfigureQueue{Queue: "llm", LeaseMS: 30_000, MaxDeliver: 5, RateLimit: 60, RatePeriodMS: 60_000})
	require.Equal(t, &QueueConfigured{Queue: "llm", LeaseMS: 30_000, MaxDeliver: 5, RateLimit: 60, RatePeriodMS: 60_000}, out.Changes[0].Event)
	require.Equal(t, [2]int64{60, 60_000}, [2]int64{int64(out.Reply.RateLimit), out.Reply.RatePeriodMS})
	require.Empty(t, w.must(&ConfigureQueue{Queue: "llm", LeaseMS: 30_000, MaxDeliver: 5}).Changes, "0 keeps it: nothing changes")
	out = w.must(&ConfigureQueue{Queue: "llm", LeaseMS: 60_000, MaxDeliver: 5})
	require.Equal(t, 60, out.Changes[0].Event.(*QueueConfigured).RateLimit, "other settings keep it")
	out = w.must(&ConfigureQueue{Queue: "llm", LeaseMS: 60_000, MaxDeliver: 5, RateLimit: 10})
	require.Equal(t, &QueueConfigured{Queue: "llm", LeaseMS: 60_000, MaxDeliver: 5, RateLimit: 10, RatePeriodMS: DefaultRatePeriodMS}, out.Changes[0].Event,
		"a limit without its period: a second's")

	w.actor, w.queues = "worker", []string{"llm"}
	require.Equal(t, "/rate_limit", w.refused(&ConfigureQueue{Queue: "llm", LeaseMS: 60_000, MaxDeliver: 5, RateLimit: -1}, CodeForbidden).Field)
	out = w.must(&ConfigureQueue{Queue: "llm", LeaseMS: 90_000, MaxDeliver: 5})
	require.Equal(t, 10, out.Reply.RateLimit, "an executor's settings keep the limit")
	w.actor, w.queues = "tester", nil

	for _, c := range []ConfigureQueue{
		{Queue: "llm", LeaseMS: 60_000, MaxDeliver: 5, RateLimit: -2},
		{Queue: "llm", LeaseMS: 60_000, MaxDeliver: 5, RateLimit: MaxRateLimit + 1},
		{Queue: "llm", LeaseMS: 60_000, MaxDeliver: 5, RateLimit: 1, RatePeriodMS: 999},
		{Queue: "llm", LeaseMS: 60_000, MaxDeliver: 5, RateLimit: 1, RatePeriodMS: MaxRatePeriodMS + 1},
		{Queue: "llm", LeaseMS: 60_000, MaxDeliver: 5, RatePeriodMS: 60_000},
	} {
		field := w.refused(&c, CodeInvalid).Field
		require.Contains(t, []string{"/rate_limit", "/rate_period_ms"}, field, "%+v", c)
	}
	out = w.must(&ConfigureQueue{Queue: "llm", LeaseMS: 60_000, MaxDeliver: 5, RateLimit: -1})
	require.Equal(t, &QueueConfigured{Queue: "llm", LeaseMS: 60_000, MaxDeliver: 5}, out.Changes[0].Event)
	require.Zero(t, w.workspace().Queue("llm").RateLimit, "-1 removes it")
	w.requireReplays()
	w.requireReplaysFromWire()
}

// queue.pause and queue.resume: a pause outlasts new settings, and a queue
// paused before any settings takes the defaults, which settings if unset
// still replace. Pausing a paused queue, or resuming one that is not,
// changes nothing; resuming a queue that does not stand is not found
// (one that stands without settings: TestAPausedQueueHandsOutNothing).
func TestPauseAndResumeAQueue(t *testing.T) {
	w := setup(t)
	out := w.must(&PauseQueue{Queue: "build"})
	require.Equal(t, []string{"workspace.queue_paused"}, events(out, w.ws))
	require.Equal(t, Reply{ID: w.ws, Version: 2, Queue: "build", LeaseMS: DefaultLeaseMS, MaxDeliver: DefaultMaxDeliver, Paused: true}, out.Reply)
	require.Equal(t, &QueueConfig{Name: "build", LeaseMS: DefaultLeaseMS, MaxDeliver: DefaultMaxDeliver, Paused: true, DefaultSettings: true},
		w.workspace().Queue("build"))
	out = w.must(&PauseQueue{Queue: "build"})
	require.Empty(t, out.Changes, "paused already")
	require.True(t, out.Reply.Paused)
	require.True(t, out.Reply.Duplicate)

	out = w.must(&ConfigureQueue{Queue: "build", LeaseMS: 60_000, MaxDeliver: 3, IfUnset: true})
	require.Len(t, out.Changes, 1, "the defaults are not settings: if_unset sets them")
	require.Equal(t, &QueueConfig{Name: "build", LeaseMS: 60_000, MaxDeliver: 3, Paused: true}, w.workspace().Queue("build"),
		"the pause outlasts the settings")
	require.True(t, out.Reply.Paused)
	require.Empty(t, w.must(&ConfigureQueue{Queue: "build", LeaseMS: 90_000, MaxDeliver: 3, IfUnset: true}).Changes, "set now")

	out = w.must(&ResumeQueue{Queue: "build"})
	require.Equal(t, []string{"workspace.queue_resumed"}, events(out, w.ws))
	require.Equal(t, &QueueConfig{Name: "build", LeaseMS: 60_000, MaxDeliver: 3}, w.workspace().Queue("build"))
	require.False(t, out.Reply.Paused)
	require.Empty(t, w.must(&ResumeQueue{Queue: "build"}).Changes, "not paused")

	require.Equal(t, "/queue", w.refused(&ResumeQueue{Queue: "nowhere"}, CodeNotFound).Field)
	require.Equal(t, "/queue", w.refused(&PauseQueue{Queue: "Not A Name"}, CodeInvalid).Field)

	w.requireReplays()
	w.requireReplaysFromWire()
}

// queue.configure's order: an admin's, kept by settings that do not name
// it, fifo puts it back; a task's priority is bounded, and kept in its
// spec.
func TestConfigureQueueOrderAndTaskPriority(t *testing.T) {
	w := setup(t)
	out := w.must(&ConfigureQueue{Queue: "triage", LeaseMS: 30_000, MaxDeliver: 5, Order: QueueOrderPriority})
	require.Equal(t, &QueueConfigured{Queue: "triage", LeaseMS: 30_000, MaxDeliver: 5, Order: QueueOrderPriority}, out.Changes[0].Event)
	require.Equal(t, QueueOrderPriority, out.Reply.Order)
	require.Empty(t, w.must(&ConfigureQueue{Queue: "triage", LeaseMS: 30_000, MaxDeliver: 5}).Changes, "absent keeps it: nothing changes")
	require.Empty(t, w.must(&ConfigureQueue{Queue: "triage", LeaseMS: 30_000, MaxDeliver: 5, Order: QueueOrderPriority}).Changes)
	out = w.must(&ConfigureQueue{Queue: "triage", LeaseMS: 60_000, MaxDeliver: 5})
	require.Equal(t, QueueOrderPriority, out.Changes[0].Event.(*QueueConfigured).Order, "other settings keep it")

	w.actor, w.queues = "worker", []string{"triage"}
	require.Equal(t, "/order", w.refused(&ConfigureQueue{Queue: "triage", LeaseMS: 60_000, MaxDeliver: 5, Order: QueueOrderFIFO}, CodeForbidden).Field)
	require.Equal(t, QueueOrderPriority, w.must(&ConfigureQueue{Queue: "triage", LeaseMS: 90_000, MaxDeliver: 5}).Reply.Order,
		"an executor's settings keep the order")
	w.actor, w.queues = "tester", nil

	require.Equal(t, "/order", w.refused(&ConfigureQueue{Queue: "triage", LeaseMS: 60_000, MaxDeliver: 5, Order: "lifo"}, CodeInvalid).Field)
	out = w.must(&ConfigureQueue{Queue: "triage", LeaseMS: 90_000, MaxDeliver: 5, Order: QueueOrderFIFO})
	require.Equal(t, &QueueConfigured{Queue: "triage", LeaseMS: 90_000, MaxDeliver: 5}, out.Changes[0].Event, "fifo is the default: stored as none")
	require.Empty(t, w.workspace().Queue("triage").Order)

	goal := w.createGoal(Envelope{})
	for _, p := range []int{-1, 6} {
		require.Equal(t, "/tasks/0/priority", w.refused(&SubmitPlan{GoalID: goal, Tasks: []TaskSpec{{Key: "a", Queue: "triage", Priority: p}}}, CodeInvalid).Field)
	}
	ids, _ := w.plan(goal, TaskSpec{Key: "a", Queue: "triage", Priority: 1}, TaskSpec{Key: "b", Queue: "triage"})
	require.Equal(t, 1, w.task(ids["a"]).Spec.Priority)
	require.Zero(t, w.task(ids["b"]).Spec.Priority, "none given: the default's, not stored")
	w.requireReplays()
	w.requireReplaysFromWire()
}
