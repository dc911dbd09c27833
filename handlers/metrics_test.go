package handlers_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// metered starts the closed service on an in-memory log, keeping its
// metrics on a registry of its own (on clock when it is set).
func metered(t *testing.T, clock *servicetest.Clock, cfg handlers.Config) *bundle {
	t.Helper()
	cfg.WriterID, cfg.Metrics = "test-writer", handlers.NewMetricsRegistry()
	return bundleOf(servicetest.Start(t, "", servicetest.Options{Secure: true, Clock: clock, Log: eventstore.NewMemoryLog(), Config: cfg}))
}

func (b *bundle) scrape(t *testing.T) servicetest.Metrics {
	t.Helper()
	return servicetest.ScrapeHandler(t, b.svc.Metrics())
}

// counted returns dwr_commands_total of command with outcome.
func counted(m servicetest.Metrics, command, outcome string) float64 {
	v, _ := m.Value("dwr_commands_total", "command", command, "outcome", outcome)
	return v
}

// Each command answered is counted once under its type and outcome: ok, or
// the code of its refusal; the writer's appends, batches and commit
// latencies are counted, and the views' lag and the writer's state shown.
func TestMetricsCountCommandsByOutcome(t *testing.T) {
	b := metered(t, nil, handlers.Config{})
	before := b.scrape(t)
	g, _ := b.mustCommand(t, "goal.create", map[string]any{"title": "g"})
	b.mustCommand(t, "goal.create", map[string]any{"title": "h"})
	require.Equal(t, "invalid", b.command(t, "goal.create", map[string]any{}, "").Error.Code)
	require.Equal(t, "invalid", b.command(t, "plan.submit", map[string]any{"goal_id": g.ID, "tasks": []map[string]any{
		{"key": "a", "queue": "q", "depends_on": []string{"a"}}}}, "").Error.Code)
	require.Equal(t, "not_found", b.command(t, "plan.submit", map[string]any{"goal_id": "01ARZ3NDEKTSV4RRFFQ69G5FAV",
		"tasks": []map[string]any{{"key": "a", "queue": "q"}}}, "").Error.Code)
	require.Equal(t, "too_large", b.command(t, "goal.create", bytes.Repeat([]byte(" "), 600<<10), "").Error.Code)
	id := b.newTask(t, "pay")
	claim := b.peer(t, "executor").claim(t, id, "claim-1", 0)
	requireRefused(t, b.peer(t, "rescuer").supersede(t, id, 1, "rescue-1"), domain.CodeConflict)
	requireRefused(t, b.peer(t, "intruder").succeed(t, id, 1, claim.Token, "succeed."+id+".1", "stolen"), domain.CodeForbidden)

	m := b.scrape(t)
	for _, c := range []struct {
		command, outcome string
		want             float64
	}{
		{"goal.create", "ok", 2}, {"goal.create", "invalid", 1}, {"goal.create", "too_large", 1}, {"task.succeed", "forbidden", 1},
		{"plan.submit", "invalid", 1}, {"plan.submit", "not_found", 1}, {"plan.submit", "ok", 0},
		{"task.create", "ok", 1}, {"task.claim", "ok", 1}, {"task.claim", "conflict", 1},
	} {
		require.Equal(t, c.want, counted(m, c.command, c.outcome)-counted(before, c.command, c.outcome), "%s %s", c.command, c.outcome)
	}
	for _, o := range m.LabelValues("dwr_commands_total", "outcome") {
		require.Contains(t, []string{"ok", "invalid", "not_found", "conflict", "forbidden", "too_large", "unavailable", "internal"}, o)
	}

	appends, _ := m.Value("dwr_log_appends_total")
	appendsBefore, _ := before.Value("dwr_log_appends_total")
	require.GreaterOrEqual(t, appends-appendsBefore, 4.0, "goal.create ×2, task.create, task.claim each appended a record")
	bytesAppended, _ := m.Value("dwr_log_appended_bytes_total")
	require.Positive(t, bytesAppended)
	batches, requests, ok := m.Histogram("dwr_commit_batch_requests")
	require.True(t, ok)
	batchesBefore, requestsBefore, _ := before.Histogram("dwr_commit_batch_requests")
	require.GreaterOrEqual(t, requests-requestsBefore, 4.0, "every accepted command was in a batch")
	commits, seconds, _ := m.Histogram("dwr_commit_seconds")
	require.Equal(t, batches, commits, "one latency per batch")
	require.Positive(t, seconds)
	require.Greater(t, batches, batchesBefore)

	writer, _ := m.Value("dwr_writer")
	require.Equal(t, 1.0, writer)
	last, ok := m.Value("dwr_log_last_sequence")
	require.True(t, ok)
	require.Equal(t, float64(b.lastSeq(t)), last)
	applied, _ := m.Value("dwr_views_applied_sequence")
	require.LessOrEqual(t, applied, last)
	servicetest.Eventually(t, 10*time.Second, func() bool {
		lag, ok := b.scrape(t).Value("dwr_views_lag_records")
		return ok && lag == 0
	})

	// The queue's consumer is the service's: its item was delivered to
	// nobody (the claim was made without it), and it is the oldest.
	pending, ok := m.Value("dwr_queue_pending", "workspace", "default", "queue", "pay")
	require.True(t, ok, "the queue's depth is reported")
	require.Equal(t, 1.0, pending)
	inFlight, _ := m.Value("dwr_queue_in_flight", "workspace", "default", "queue", "pay")
	require.Equal(t, 0.0, inFlight)
	paused, ok := m.Value("dwr_queue_paused", "workspace", "default", "queue", "pay")
	require.True(t, ok)
	require.Equal(t, 0.0, paused)
	b.mustCommand(t, "queue.pause", map[string]any{"queue": "pay"})
	paused, _ = b.scrape(t).Value("dwr_queue_paused", "workspace", "default", "queue", "pay")
	require.Equal(t, 1.0, paused, "paused when the admin hears it")
	b.mustCommand(t, "queue.resume", map[string]any{"queue": "pay"})
	age, ok := m.Value("dwr_queue_oldest_item_age_seconds", "workspace", "default", "queue", "pay")
	require.True(t, ok)
	require.GreaterOrEqual(t, age, 0.0)
	queues, _ := m.Value("dwr_queues")
	require.Equal(t, 1.0, queues, "one queue stands")
	most, _ := m.Value("dwr_queues_max")
	require.Equal(t, float64(handlers.DefaultMaxQueues), most)
	_, ok = m.Value("go_goroutines")
	require.True(t, ok, "the Go collector is registered")
	_, ok = m.Value("process_cpu_seconds_total")
	require.True(t, ok, "the process collector is registered")
}

// A claim that supersedes an attempt whose lease lapsed counts a lease
// expiry; a durable timer's firing is observed with its lateness (fire time
// minus due time, on the service's clock), by kind; an approval waiting for
// a decision is counted until it is decided.
func TestMetricsCountLeaseExpiriesTimersAndApprovals(t *testing.T) {
	const lease, grace = 10 * time.Second, time.Second
	clock := servicetest.NewClock(epoch)
	b := metered(t, clock, handlers.Config{})
	b.workConsumer(t, "pay", lease)
	expiries := func() float64 {
		v, _ := b.scrape(t).Value("dwr_attempt_lease_expiries_total")
		return v
	}
	require.Equal(t, 0.0, expiries())

	id := b.newTask(t, "pay")
	b.peer(t, "executor").claim(t, id, "claim-1", 0)
	clock.Advance(lease + grace)
	require.Equal(t, 2, b.peer(t, "rescuer").claim(t, id, "rescue-1", 1).Attempt)
	// Counted once the record is committed, which may be just after the
	// claim's reply leaves.
	require.Eventually(t, func() bool { return expiries() == 1.0 }, 5*time.Second, 10*time.Millisecond,
		"the superseded attempt counts one lease expiry")

	until := clock.Now().Add(time.Minute)
	sleeper := b.sleeper(t, until)
	clock.Set(until.Add(3 * time.Second))
	b.c.WaitState(t, sleeper, domain.StateReady, 10*time.Second)
	// Observed once the firing's command is answered, which may be just
	// after the views show its task ready.
	var n uint64
	var sum float64
	servicetest.Eventually(t, 10*time.Second, func() bool {
		var ok bool
		n, sum, ok = b.scrape(t).Histogram("dwr_timer_lateness_seconds", "kind", domain.TimerWait)
		return ok && n > 0
	})
	require.Equal(t, uint64(1), n)
	require.InDelta(t, 3.0, sum, 0.001, "fired 3 s after it was due, on the service's clock")

	pendingApprovals := func() float64 {
		v, _ := b.scrape(t).Value("dwr_approvals_pending", "workspace", "default")
		return v
	}
	require.Equal(t, 0.0, pendingApprovals())
	b.approvalPending(t)
	servicetest.Eventually(t, 10*time.Second, func() bool { return pendingApprovals() == 1 }) // once the views applied it
}

// A writer that cannot renew its lease loses it, and says so in
// dwr_writer_lease_losses_total and dwr_writer.
func TestMetricsCountWriterLeaseLosses(t *testing.T) {
	b := metered(t, nil, handlers.Config{LeaseTTL: time.Second})
	b.svc.PauseLease(true)
	servicetest.Eventually(t, 10*time.Second, func() bool {
		v, _ := b.scrape(t).Value("dwr_writer_lease_losses_total")
		return v == 1
	})
	b.svc.PauseLease(false)
	servicetest.Eventually(t, 10*time.Second, func() bool {
		v, _ := b.scrape(t).Value("dwr_writer")
		return v == 1
	})
}

// A renewal of the writer's lease that landed though its answer was lost
// (the bucket's leader went away with it) is the writer's own: the next
// renewal, refused for the revision it expected, finds the writer's name at
// a later revision and goes on from there, rather than stepping down.
func TestALeaseRenewalWhoseAnswerWasLostIsKept(t *testing.T) {
	b := metered(t, nil, handlers.Config{LeaseTTL: time.Second})
	js, err := jetstream.New(b.svcNC)
	require.NoError(t, err)
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, "dwr-writer")
	require.NoError(t, err)
	var landed uint64
	servicetest.Eventually(t, 10*time.Second, func() bool {
		e, err := kv.Get(ctx, "partition-0")
		if err != nil || string(e.Value()) != "test-writer" {
			return false
		}
		// What the writer's renewal would have written, had it landed unanswered.
		landed, err = kv.Update(ctx, "partition-0", []byte("test-writer"), e.Revision())
		return err == nil
	})
	servicetest.Eventually(t, 10*time.Second, func() bool {
		e, err := kv.Get(ctx, "partition-0")
		return err == nil && e.Revision() > landed && string(e.Value()) == "test-writer"
	})
	v, _ := b.scrape(t).Value("dwr_writer_lease_losses_total")
	require.Zero(t, v, "the writer kept its lease")
	require.True(t, b.svc.HoldsLease())
}

// A work item delivered and not acknowledged is in flight, and the queue's
// oldest; once it was delivered as often as its queue allows, its task is
// quarantined, counted, and the queue is empty again.
func TestMetricsCountQuarantinesAndQueueDepth(t *testing.T) {
	b := metered(t, nil, handlers.Config{})
	q := b.queue(t, "poison", 200*time.Millisecond, 2)
	queue := func(name string) float64 {
		v, ok := b.scrape(t).Value(name, "workspace", "default", "queue", "poison")
		require.True(t, ok, name)
		return v
	}
	bad, _ := b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "poison"}})
	it, _ := q.next(5 * time.Second) // delivered, never acknowledged (an executor crashing on it)
	require.Equal(t, bad.ID, it.TaskID)
	require.Equal(t, 1.0, queue("dwr_queue_in_flight")+queue("dwr_queue_pending"), "one item, in flight or back to pending once its lease ran out")
	require.Positive(t, queue("dwr_queue_oldest_item_age_seconds"))
	q.next(5 * time.Second)
	servicetest.Eventually(t, 10*time.Second, func() bool {
		// The server notices the exhausted item when it would deliver it again.
		if batch, err := q.cons.Fetch(1, jetstream.FetchMaxWait(50*time.Millisecond)); err == nil {
			for range batch.Messages() {
			}
		}
		v, _ := b.scrape(t).Value("dwr_quarantines_total")
		return v == 1
	})
	servicetest.Eventually(t, 10*time.Second, func() bool {
		return queue("dwr_queue_pending") == 0 && queue("dwr_queue_in_flight") == 0 && queue("dwr_queue_oldest_item_age_seconds") == 0
	})
}

// Without a registry, the service keeps no metrics and has no handler.
func TestMetricsAreOffWithoutARegistry(t *testing.T) {
	b := setup(t)
	require.Nil(t, b.svc.Metrics())
}

// approvalPending makes a running attempt ask for an approval, which then
// waits for a decision.
func (b *bundle) approvalPending(t *testing.T) {
	t.Helper()
	id := b.newTask(t, "refunds")
	claim, _ := b.mustCommand(t, "task.claim", map[string]any{"task_id": id, "executor": "test"})
	req, _ := b.mustCommand(t, "task.request_approval", map[string]any{"task_id": id, "attempt": claim.Attempt,
		"action": map[string]any{"transfer": 120}, "summary": "wire 120"})
	require.Equal(t, domain.StateWaiting, req.State)
}

// The bytes each workspace appends to the log are counted under its name:
// which workspaces grow the log, that every workspace shares.
func TestMetricsCountEachWorkspacesLogBytes(t *testing.T) {
	b := metered(t, nil, handlers.Config{})
	value := func(m servicetest.Metrics, ws string) float64 {
		v, _ := m.Value("dwr_log_workspace_bytes_total", "workspace", ws)
		return v
	}
	// A record is counted once its commands are answered: the counts are
	// waited for, not read at the answer.
	servicetest.NewClient(b.st.Admin, "other").Command(t, "workspace.create", schemas.CreateWorkspace{Name: "other"})
	servicetest.Eventually(t, 10*time.Second, func() bool { return value(b.scrape(t), "other") > 0 })
	before := b.scrape(t)
	b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "q", "input": map[string]any{"pad": strings.Repeat("g", 10<<10)}}})
	servicetest.NewClient(b.st.Admin, "other").Command(t, "goal.create", map[string]any{"title": "small"})
	grown := func(ws string) float64 { return value(b.scrape(t), ws) - value(before, ws) }
	servicetest.Eventually(t, 10*time.Second, func() bool { return grown("default") >= float64(10<<10) && grown("other") > 0 },
		func() string { return "the task's input counted under default, the goal under other" })
	require.Less(t, grown("other"), float64(1<<10))
	// What each workspace holds of the log, as the views count it: all
	// its bytes since the log's first record, not since this process began.
	servicetest.Eventually(t, 10*time.Second, func() bool {
		m := b.scrape(t)
		held, _ := m.Value("dwr_log_workspace_held_bytes", "workspace", "default")
		other, _ := m.Value("dwr_log_workspace_held_bytes", "workspace", "other")
		return held >= value(m, "default") && held >= float64(10<<10) && other >= value(m, "other") && other > 0
	}, func() string { return "the bytes held by default and other" })
}

// dwr_queue_held counts the items a rate-limited queue holds back on
// the writer: past its one item a day, the other two.
func TestMetricsCountTheItemsARateLimitHolds(t *testing.T) {
	b := metered(t, nil, handlers.Config{})
	b.mustCommand(t, "queue.configure", map[string]any{"queue": "llm", "lease_ms": 30_000, "max_deliver": 5,
		"rate_limit": 1, "rate_period_ms": domain.MaxRatePeriodMS})
	for range 3 {
		b.newTask(t, "llm")
	}
	servicetest.Eventually(t, 10*time.Second, func() bool {
		held, _ := b.scrape(t).Value("dwr_queue_held", "workspace", "default", "queue", "llm")
		pending, _ := b.scrape(t).Value("dwr_queue_pending", "workspace", "default", "queue", "llm")
		return held == 2 && pending == 1
	})
}
