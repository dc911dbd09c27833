package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// queue is the consumer of one work queue, as an executor has it. The test
// sets it up itself, under the service's name for it, to have leases
// shorter than queue.configure allows (and with no writer running).
type queue struct {
	t    *testing.T
	cons jetstream.Consumer
}

func (b *bundle) queue(t *testing.T, name string, ackWait time.Duration, maxDeliver int) *queue {
	t.Helper()
	ctx := context.Background()
	cons, err := b.jetstream(t).CreateOrUpdateConsumer(ctx, "DWR_WORK", jetstream.ConsumerConfig{
		Durable: "dwr-default-" + name, FilterSubject: handlers.WorkSubject("dwr", "default", name),
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: maxDeliver})
	require.NoError(t, err)
	return &queue{t: t, cons: cons}
}

// A worker's queue.configure makes the queue's consumer before it is
// answered, as the reply says; an executor then only binds to it.
func TestQueueConfigureMakesTheConsumer(t *testing.T) {
	b := setup(t)
	r, _ := b.mustCommand(t, "queue.configure", map[string]any{"queue": "q1", "lease_ms": 2500, "max_deliver": 3})
	require.EqualValues(t, 2500, r.LeaseMS)
	cons, err := b.jetstream(t).Consumer(context.Background(), "DWR_WORK", "dwr-default-q1")
	require.NoError(t, err, "the service made the queue's consumer before it answered")
	require.Equal(t, 2500*time.Millisecond, cons.CachedInfo().Config.AckWait)
	require.Equal(t, 3, cons.CachedInfo().Config.MaxDeliver)

	// Deleted by hand, it is made again by the next queue.configure, even one that changes nothing.
	// The server may not have finished deleting it: the service then answers unavailable, and the
	// client sends it again, as a client does.
	require.NoError(t, b.jetstream(t).DeleteConsumer(context.Background(), "DWR_WORK", "dwr-default-q1"))
	var again schemas.Reply
	require.Eventually(t, func() bool {
		again = b.command(t, "queue.configure", map[string]any{"queue": "q1", "lease_ms": 1000, "max_deliver": 1, "if_unset": true}, "")
		return again.OK || again.Error == nil || again.Error.Code != schemas.CodeUnavailable
	}, 10*time.Second, 10*time.Millisecond)
	require.True(t, again.OK, "%+v", again.Error)
	cons, err = b.jetstream(t).Consumer(context.Background(), "DWR_WORK", "dwr-default-q1")
	require.NoError(t, err)
	require.Equal(t, 2500*time.Millisecond, cons.CachedInfo().Config.AckWait, "if_unset keeps the queue's settings")
}

// next returns the next work item, waiting up to d.
func (q *queue) next(d time.Duration) (schemas.WorkItem, jetstream.Msg) {
	q.t.Helper()
	deadline := time.Now().Add(d)
	var ended error
	// A pull may end before its wait with a status (the service updated
	// the queue's consumer meanwhile, as it does when the queue stands
	// again): it is pulled again until the deadline.
	for wait := d; wait >= 10*time.Millisecond; wait = time.Until(deadline) {
		batch, err := q.cons.Fetch(1, jetstream.FetchMaxWait(wait))
		require.NoError(q.t, err)
		for m := range batch.Messages() {
			require.NoError(q.t, schemas.Validate(schemas.PathWorkItem, m.Data()), "a work item follows the wire contract")
			var it schemas.WorkItem
			require.NoError(q.t, json.Unmarshal(m.Data(), &it))
			return it, m
		}
		ended = batch.Error()
	}
	q.t.Fatalf("no work item within %s (the last pull ended with %v)", d, ended)
	return schemas.WorkItem{}, nil
}

func TestReadyTasksAreDispatchedInDependencyOrder(t *testing.T) {
	b := setup(t)
	q := b.queue(t, "shell", 30*time.Second, 5)
	_, plan, _ := chain3(t, b)
	for i, pt := range plan.Tasks {
		it, m := q.next(5 * time.Second)
		require.Equal(t, pt.TaskID, it.TaskID, "task %d is dispatched only when its dependency is accepted", i)
		require.Equal(t, 1, it.Attempt)
		require.Equal(t, domain.OperationKey(pt.TaskID), it.OperationKey)
		require.Equal(t, "shell", it.Queue)
		claim, _ := b.mustCommand(t, "task.claim", map[string]any{"task_id": it.TaskID, "executor": "test"})
		require.Equal(t, pt.Key, claim.Task.Key, "the claim's reply carries the task")
		b.mustCommand(t, "task.succeed", map[string]any{"task_id": it.TaskID, "attempt": it.Attempt})
		require.NoError(t, m.Ack())
	}
}

// An execute item carries the task as it was dispatched (without its
// command ids); the task crosses the wire once: a claim that says its
// claimer holds it (omit_task) is answered without it, an older claimer's
// with it, as it stands after the claim.
func TestAnExecuteItemCarriesItsTaskOnce(t *testing.T) {
	b := setup(t)
	q := b.queue(t, "lean", 30*time.Second, 5)
	task, created := b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "lean", "title": "lean",
		"input": map[string]any{"n": 1}, "timeout": "1h", "retry": map[string]any{"max_attempts": 2}}})
	it, m := q.next(5 * time.Second)
	var fields map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(m.Data(), &fields))
	require.ElementsMatch(t, []string{"kind", "task_id", "workspace", "queue", "attempt", "operation_key", "task", "seq"}, slices.Collect(maps.Keys(fields)))
	require.NotNil(t, it.Task)
	require.Equal(t, domain.StateReady, it.Task.State)
	require.JSONEq(t, `{"n":1}`, string(it.Task.Spec.Input))
	require.Empty(t, it.Task.Commands, "an item carries no command ids")
	it.Task = nil
	require.Equal(t, schemas.WorkItem{Kind: schemas.WorkKindExecute, TaskID: task.ID, Workspace: "default", Queue: "lean",
		Attempt: 1, OperationKey: domain.OperationKey(task.ID), Seq: created}, it, "the item names the record that made the task ready")

	lean, _ := b.mustCommand(t, "task.claim", map[string]any{"task_id": task.ID, "executor": "test", "omit_task": true})
	require.Nil(t, lean.Task, "the claimer holds the task: its item carried it")
	require.Equal(t, domain.StateRunning, lean.State)
	require.Len(t, lean.TokenHash, 64)

	// An older claimer, which does not say omit_task, gets the task.
	other, _ := b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "lean", "input": map[string]any{"n": 2}, "timeout": "1h"}})
	claim, _ := b.mustCommand(t, "task.claim", map[string]any{"task_id": other.ID, "executor": "test"})
	require.Equal(t, domain.StateRunning, claim.Task.State)
	require.JSONEq(t, `{"n":2}`, string(claim.Task.Spec.Input))
	require.Equal(t, time.Hour, claim.Task.Spec.Timeout.D())
	require.Equal(t, domain.OperationKey(other.ID), claim.Task.Running().OperationKey)
	require.NoError(t, m.Ack())
}

func TestBackoffAndTimeoutAreDurableTimers(t *testing.T) {
	b := setup(t)
	q := b.queue(t, "flaky", 30*time.Second, 5)
	task, _ := b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "flaky", "timeout": "300ms",
		"retry": map[string]any{"max_attempts": 3, "initial_backoff": "200ms"}}})

	// Attempt 1 fails: after the backoff a timer makes the task ready again.
	it, m := q.next(5 * time.Second)
	b.mustCommand(t, "task.claim", map[string]any{"task_id": task.ID, "executor": "test"})
	failed, _ := b.mustCommand(t, "task.fail", map[string]any{"task_id": task.ID, "attempt": it.Attempt,
		"error": map[string]any{"message": "flaky"}, "retryable": true})
	require.Equal(t, "backoff", failed.State)
	require.NoError(t, m.Ack())
	it, m = q.next(5 * time.Second)
	require.Equal(t, 2, it.Attempt)

	// Attempt 2 goes silent: its deadline fails it (a timeout is retryable).
	claim, _ := b.mustCommand(t, "task.claim", map[string]any{"task_id": task.ID, "executor": "test"})
	require.Len(t, claim.Task.Attempts, 2, "the claim's reply carries the task, its earlier attempt with it")
	require.Equal(t, "flaky", claim.Task.Attempts[0].Error.Message)
	require.NoError(t, m.Ack())
	it, m = q.next(5 * time.Second)
	require.Equal(t, 3, it.Attempt)
	require.NoError(t, m.Ack())

	var got domain.Task
	b.query(t, "task.get", schemas.Query{ID: task.ID}, 0, &got)
	require.Equal(t, "ready", got.State)
	require.Len(t, got.Attempts, 2)
	require.Equal(t, domain.ReasonTimeout, got.Attempts[1].Error.Code)
}

func TestPoisonWorkItemIsQuarantinedAndTheQueueFlows(t *testing.T) {
	b := setup(t)
	q := b.queue(t, "poison", 200*time.Millisecond, 2)
	bad, _ := b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "poison"}})
	// Two deliveries that are never acknowledged (an executor crashing on them).
	for range 2 {
		it, _ := q.next(5 * time.Second)
		require.Equal(t, bad.ID, it.TaskID)
	}
	servicetest.Eventually(t, 10*time.Second, func() bool {
		// Executors keep asking for work; the server notices the exhausted
		// item when it would deliver it again.
		if batch, err := q.cons.Fetch(1, jetstream.FetchMaxWait(50*time.Millisecond)); err == nil {
			for range batch.Messages() {
			}
		}
		var got domain.Task
		b.query(t, "task.get", schemas.Query{ID: bad.ID}, 0, &got)
		return got.State == domain.StateFailed && got.Reason == domain.ReasonQuarantined
	})
	good, _ := b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "poison"}})
	it, m := q.next(5 * time.Second)
	require.Equal(t, good.ID, it.TaskID, "the quarantined item is gone; the next one flows")
	require.NoError(t, m.Ack())
}

// A max-deliveries advisory older than the item now at its sequence is about
// an item the work stream no longer has (a single server killed loses the
// stream's last items and numbers the next ones from there): it quarantines
// nothing, and the newer item stays.
func TestAnAdvisoryOlderThanTheItemAtItsSequenceQuarantinesNothing(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	q := b.queue(t, "renumbered", 30*time.Second, 5)
	task, _ := b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "renumbered"}})
	it, m := q.next(5 * time.Second)
	require.Equal(t, task.ID, it.TaskID)
	meta, err := m.Metadata()
	require.NoError(t, err)
	advisory, err := json.Marshal(map[string]any{"type": "io.nats.jetstream.advisory.v1.max_deliver", "id": "renumbered",
		"timestamp": meta.Timestamp.Add(-time.Minute), "stream": "DWR_WORK", "consumer": "dwr-default-renumbered",
		"stream_seq": meta.Sequence.Stream, "deliveries": 5})
	require.NoError(t, err)
	require.NoError(t, b.svcNC.Publish("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.DWR_WORK.dwr-default-renumbered", advisory))
	advisories, err := b.jetstream(t).Stream(ctx, "DWR_ADVISORIES")
	require.NoError(t, err)
	servicetest.Eventually(t, 10*time.Second, func() bool {
		info, err := advisories.Info(ctx)
		return err == nil && info.State.LastSeq == 1 && info.State.Msgs == 0 // taken and dealt with
	})
	var got domain.Task
	b.query(t, "task.get", schemas.Query{ID: task.ID}, 0, &got)
	require.Equal(t, domain.StateReady, got.State, "not quarantined")
	work, err := b.jetstream(t).Stream(ctx, "DWR_WORK")
	require.NoError(t, err)
	_, err = work.GetMsg(ctx, meta.Sequence.Stream)
	require.NoError(t, err, "the item stays")
	require.NoError(t, m.Ack())
}

func TestWorkItemsAreDerivedAgainAfterARestart(t *testing.T) {
	b := setupJetStream(t)
	task, _ := b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "shell"}})
	st, err := b.jetstream(t).Stream(context.Background(), "DWR_WORK")
	require.NoError(t, err)
	servicetest.Eventually(t, 5*time.Second, func() bool {
		info, err := st.Info(context.Background())
		return err == nil && info.State.Msgs == 1
	})
	require.NoError(t, st.Purge(context.Background())) // the item is lost
	dir := b.dir
	b.stop()
	b2 := start(t, dir)
	it, m := b2.queue(t, "shell", 30*time.Second, 5).next(5 * time.Second)
	require.Equal(t, task.ID, it.TaskID)
	require.NoError(t, m.Ack())
}

// A ready task whose item its queue lost while the writer serves gets its
// item again once the queue has nothing to deliver and nothing in flight.
// Here an executor acknowledges the item without running it; after a kill
// -9 of a single server, an executor still holding an item from before the
// crash does the same to the item that took its sequence number (the work
// stream is not fsynced, and a stream that lost its last messages numbers
// the next ones again from there). An item its queue holds, or has
// delivered and awaits the acknowledgement of, is not published twice; one
// lost in a queue that stays busy is found among the items it holds.
func TestALostWorkItemIsPublishedAgain(t *testing.T) {
	b := setup(t)
	lostQ := b.queue(t, "lost", 30*time.Second, 5)
	heldQ := b.queue(t, "held", 30*time.Second, 5)
	keptQ := b.queue(t, "kept", 30*time.Second, 5)
	lost, _ := b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "lost"}})
	held, _ := b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "held"}})
	kept, _ := b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "kept"}})

	it, m := lostQ.next(5 * time.Second)
	require.Equal(t, lost.ID, it.TaskID)
	require.NoError(t, m.DoubleAck(context.Background()), "acknowledged, never claimed: the item is gone, the task ready")
	it, _ = heldQ.next(5 * time.Second) // held, not acknowledged
	require.Equal(t, held.ID, it.TaskID)

	// In a queue that stays busy (an item held by an executor), the lost
	// item is found among the items the queue holds.
	busyQ := b.queue(t, "busy", 30*time.Second, 5)
	busy, _ := b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "busy"}})
	it, _ = busyQ.next(5 * time.Second) // held for the rest of the test
	require.Equal(t, busy.ID, it.TaskID)
	dropped, _ := b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "busy"}})
	it, m = busyQ.next(5 * time.Second)
	require.Equal(t, dropped.ID, it.TaskID)
	require.NoError(t, m.DoubleAck(context.Background()))

	// A verifying task's item (a result to judge) is found as well.
	draftQ, checksQ := b.queue(t, "draft", 30*time.Second, 5), b.queue(t, "checks", 30*time.Second, 5)
	judged, _ := b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "draft",
		"verification": map[string]any{"queue": "checks"}}})
	it, m = draftQ.next(5 * time.Second)
	b.mustCommand(t, "task.claim", map[string]any{"task_id": judged.ID, "executor": "writer"})
	b.mustCommand(t, "task.succeed", map[string]any{"task_id": judged.ID, "attempt": it.Attempt, "result": map[string]any{"text": "v1"}})
	require.NoError(t, m.Ack())
	it, m = checksQ.next(5 * time.Second)
	require.Equal(t, schemas.WorkKindVerify, it.Kind)
	require.NoError(t, m.DoubleAck(context.Background()))

	again, m := lostQ.next(15 * time.Second)
	require.Equal(t, lost.ID, again.TaskID, "the lost item is published again")
	require.Equal(t, 1, again.Attempt)
	require.NotNil(t, again.Task, "with its task, as the first")
	require.NoError(t, m.Ack())
	again, m = busyQ.next(15 * time.Second)
	require.Equal(t, dropped.ID, again.TaskID, "the item lost in a busy queue is published again")
	require.NoError(t, m.Ack())
	again, m = checksQ.next(15 * time.Second)
	require.Equal(t, judged.ID, again.TaskID, "the lost verify item is published again")
	require.Equal(t, schemas.WorkKindVerify, again.Kind)
	require.Equal(t, 1, again.Attempt)
	require.NoError(t, m.Ack())

	// Two audits at least have run by now (a task is found without its item
	// twice before it is published again): neither other queue got a second item.
	info, err := keptQ.cons.Info(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 1, info.NumPending, "the item kept in its queue is not doubled")
	info, err = heldQ.cons.Info(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 0, info.NumPending, "the item held by an executor is not doubled")
	require.EqualValues(t, 1, info.NumAckPending)
	it, _ = keptQ.next(time.Second)
	require.Equal(t, kept.ID, it.TaskID)
}

func TestVerifyingTasksAreDispatchedToTheirVerifier(t *testing.T) {
	b := setup(t)
	exec := b.queue(t, "draft", 30*time.Second, 5)
	checks := b.queue(t, "checks", 30*time.Second, 5)
	task, _ := b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "draft",
		"verification": map[string]any{"queue": "checks"}}})
	it, m := exec.next(5 * time.Second)
	b.mustCommand(t, "task.claim", map[string]any{"task_id": task.ID, "executor": "writer"})
	_, succeeded := b.mustCommand(t, "task.succeed", map[string]any{"task_id": task.ID, "attempt": it.Attempt, "result": map[string]any{"text": "v1"}})
	require.NoError(t, m.Ack())

	v, vm := checks.next(5 * time.Second)
	require.Equal(t, schemas.WorkKindVerify, v.Kind)
	require.Equal(t, 1, v.Attempt)
	require.JSONEq(t, `{"text":"v1"}`, string(v.Result))
	require.Equal(t, domain.ResultDigest(v.Result), v.ResultDigest)
	// The item names the record that dispatched it: it left before the
	// views applied that record, and a read at least as of it sees the
	// result judged.
	require.Equal(t, succeeded, v.Seq)
	var seen schemas.Task
	b.query(t, "task.get", schemas.Query{ID: task.ID}, v.Seq, &seen)
	require.JSONEq(t, `{"text":"v1"}`, string(seen.Attempt(v.Attempt).Result))
	// FAIL: a new attempt is dispatched, handed the evidence.
	b.mustCommand(t, "task.verify", map[string]any{"task_id": task.ID, "attempt": v.Attempt, "outcome": "FAIL",
		"verifier": "checker", "result_digest": v.ResultDigest, "evidence": map[string]any{"missing": "a title"}})
	require.NoError(t, vm.Ack())
	it, m = exec.next(5 * time.Second)
	require.Equal(t, 2, it.Attempt)
	claim, _ := b.mustCommand(t, "task.claim", map[string]any{"task_id": task.ID, "executor": "writer"})
	require.Len(t, claim.Task.Verifications, 1, "the claim's reply carries the task, the verifier's evidence with it")
	require.JSONEq(t, `{"missing":"a title"}`, string(claim.Task.Verifications[0].Evidence))
	require.NoError(t, m.Ack())
}

// A task whose history outgrows a reply — each of its payloads is bounded,
// their sum is not — is still dispatched with its task and still claimed:
// the item and the claim's reply leave out its oldest results and say so;
// the events query reads them. Before, the claim's record was larger than
// the log takes, every claim was refused, and the task could not run again.
func TestATaskWhoseHistoryOutgrowsAReplyIsStillClaimed(t *testing.T) {
	b := setup(t)
	exec := b.queue(t, "draft", 30*time.Second, 5)
	checks := b.queue(t, "checks", 30*time.Second, 5)
	result := func(n int) string { return strings.Repeat(fmt.Sprint(n), 240<<10) }
	task, _ := b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "draft",
		"input": map[string]any{"text": strings.Repeat("i", 200<<10)}, "retry": map[string]any{"max_attempts": 10},
		"verification": map[string]any{"queue": "checks", "on_fail": "retry"}}})
	for n := 1; n <= 5; n++ {
		it, m := exec.next(5 * time.Second)
		require.Equal(t, n, it.Attempt)
		require.NotNil(t, it.Task, "attempt %d: the item carries the task", n)
		require.LessOrEqual(t, len(m.Data()), schemas.MaxItemTaskBytes)
		require.Len(t, it.Task.Attempts, n-1)
		claim, _ := b.mustCommand(t, "task.claim", map[string]any{"task_id": task.ID, "executor": "writer"})
		require.NoError(t, m.Ack())
		require.Len(t, claim.Task.Attempts, n, "attempt %d: every attempt stays in the claim's task", n)
		require.Equal(t, strings.Repeat("i", 200<<10), textOf(t, claim.Task.Spec.Input, "text"), "the input stays")
		require.Empty(t, claim.Task.Commands, "a claim's task carries no command ids")
		sent, err := json.Marshal(claim.Task)
		require.NoError(t, err)
		require.LessOrEqual(t, len(sent), schemas.MaxReplyTaskBytes)
		if n >= 3 {
			require.Equal(t, "/attempts/0/result", claim.Task.Omitted[0], "attempt %d: the oldest result is left out first", n)
			require.Nil(t, claim.Task.Attempts[0].Result)
			require.Equal(t, it.Task.Omitted, claim.Task.Omitted, "the item's task was fitted alike")
			last := claim.Task.Verifications[len(claim.Task.Verifications)-1]
			require.JSONEq(t, fmt.Sprintf(`{"attempt":%d}`, n-1), string(last.Evidence), "the latest verdict's evidence stays")
		}
		b.mustCommand(t, "task.succeed", map[string]any{"task_id": task.ID, "attempt": n, "result": map[string]any{"text": result(n)}})
		v, vm := checks.next(5 * time.Second)
		b.mustCommand(t, "task.verify", map[string]any{"task_id": task.ID, "attempt": v.Attempt, "outcome": "FAIL",
			"verifier": "checker", "result_digest": v.ResultDigest, "evidence": map[string]any{"attempt": n}})
		require.NoError(t, vm.Ack())
	}

	// task.get fits it to the reply; the events hold every result.
	var got schemas.Task
	b.query(t, "task.get", schemas.Query{ID: task.ID}, 0, &got)
	require.Len(t, got.Attempts, 5)
	require.Contains(t, got.Omitted, "/attempts/0/result")
	require.Equal(t, result(5), textOf(t, got.Attempts[4].Result, "text"), "the latest result stays")
	events, _ := b.listAll(t, "events", schemas.Query{ID: task.ID})
	var all strings.Builder
	for _, e := range events {
		all.Write(e)
	}
	for n := 1; n <= 5; n++ {
		require.Contains(t, all.String(), result(n), "attempt %d's result is in the task's events", n)
	}
}

// textOf returns the string member name of the JSON object raw.
func textOf(t *testing.T, raw json.RawMessage, name string) string {
	t.Helper()
	var m map[string]string
	require.NoError(t, json.Unmarshal(raw, &m))
	return m[name]
}

func TestAGoalsDeadlineIsADurableTimer(t *testing.T) {
	b := setup(t)
	deadline := time.Now().Add(500 * time.Millisecond).UTC()
	g, _ := b.mustCommand(t, "goal.create", map[string]any{"title": "in time", "envelope": map[string]any{
		"budget": map[string]any{"deadline": deadline.Format(time.RFC3339Nano)}}})
	plan, _ := b.mustCommand(t, "plan.submit", map[string]any{"goal_id": g.ID, "tasks": []map[string]any{{"key": "slow", "queue": "q"}}})
	b.mustCommand(t, "task.claim", map[string]any{"task_id": plan.Tasks[0].TaskID, "executor": "slowpoke"})
	b.c.WaitGoalState(t, g.ID, domain.GoalStateFailed, 10*time.Second)
	var tk domain.Task
	b.query(t, "task.get", schemas.Query{ID: plan.Tasks[0].TaskID}, 0, &tk)
	require.Equal(t, domain.ReasonDeadline, tk.Reason)
	require.False(t, tk.Attempts[0].EndedAt.Before(deadline), "never early")
}
