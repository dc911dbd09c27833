package handlers_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// The handoff on a real service: a report that asks for it (next: true)
// starts, in its own commit, the attempt of the task it left ready on the
// reporter's queue, and its reply hands the reporter that attempt's token
// and work item; no work item goes through the work stream for it. The
// writer keeps such an attempt's lease itself.

// succeedNext reports attempt n of task id with token, asking for the
// handoff, and returns the reply's result.
func (p *peer) succeedNext(t *testing.T, id string, n int, token, cmdID string) (schemas.Reply, domain.Reply) {
	t.Helper()
	r := p.send(t, "task.succeed", map[string]any{"task_id": id, "attempt": n, "token": token, "result": id, "next": true}, cmdID)
	require.True(t, r.OK, "%+v", r.Error)
	var rep domain.Reply
	require.NoError(t, json.Unmarshal(r.Result, &rep))
	return r, rep
}

// requireHanded requires h to hand attempt 1 of task id, claimed by actor,
// with its token and its work item.
func requireHanded(t *testing.T, h *schemas.Handoff, id, dep string) {
	t.Helper()
	require.NotNil(t, h, "the reply hands the next task of the chain")
	require.Equal(t, id, h.TaskID)
	require.Equal(t, 1, h.Attempt)
	require.Len(t, h.Token, 43, "with its token")
	require.Equal(t, domain.TokenHash(h.Token), h.TokenHash)
	require.NotNil(t, h.Item, "and its work item")
	raw, err := json.Marshal(h.Item)
	require.NoError(t, err)
	require.NoError(t, schemas.Validate(schemas.PathWorkItem, raw), "a handed item follows the wire contract")
	require.Equal(t, id, h.Item.TaskID)
	require.Equal(t, 1, h.Item.Attempt)
	require.Equal(t, schemas.StateRunning, h.Item.Task.State, "its task as the commit left it: running the handed attempt")
	require.Len(t, h.Item.Dependencies, 1, "with the outcome of what it depends on")
	require.Equal(t, dep, h.Item.Dependencies[0].TaskID)
	require.JSONEq(t, `"`+dep+`"`, string(h.Item.Dependencies[0].Result))
}

func TestAReportHandsItsSenderTheNextTaskOfTheChain(t *testing.T) {
	b := setup(t)
	q := b.queue(t, "shell", 30*time.Second, 5)
	exec, other := b.peer(t, "executor"), b.peer(t, "other")
	_, plan, _ := chain3(t, b)
	a, bID, c := plan.Tasks[0].TaskID, plan.Tasks[1].TaskID, plan.Tasks[2].TaskID

	it, m := q.next(5 * time.Second)
	require.Equal(t, a, it.TaskID)
	require.NoError(t, m.Ack())
	claim := exec.claim(t, a, "claim-a", 0)
	before := b.lastSeq(t)
	r, rep := exec.succeedNext(t, a, 1, claim.Token, "succeed-a")
	require.Equal(t, before+1, b.lastSeq(t), "one commit: the report, and the next attempt's start")
	require.Equal(t, domain.StateAccepted, rep.State)
	requireHanded(t, rep.Next, bID, a)

	// The handed attempt is the sender's, as a claim's would be.
	var bt domain.Task
	b.query(t, "task.get", schemas.Query{ID: bID}, r.Seq, &bt)
	require.Equal(t, domain.StateRunning, bt.State)
	ba := bt.Attempts[0]
	require.Equal(t, "executor", ba.ClaimedBy)
	require.Equal(t, "executor", ba.Executor, "the reported attempt's executor")
	require.True(t, ba.Handed)
	require.Equal(t, rep.Next.TokenHash, ba.TokenHash)

	// A retry of the report is answered with the same handoff, token and all.
	again := exec.send(t, "task.succeed", map[string]any{"task_id": a, "attempt": 1, "token": claim.Token, "result": a, "next": true}, "succeed-a")
	require.True(t, again.OK, "%+v", again.Error)
	var rep2 domain.Reply
	require.NoError(t, json.Unmarshal(again.Result, &rep2))
	require.Equal(t, rep.Next.Token, rep2.Next.Token)
	require.Equal(t, before+1, b.lastSeq(t))

	// Its token is the sender's alone.
	requireRefused(t, other.succeed(t, bID, 1, rep.Next.Token, "", "forged"), domain.CodeForbidden)
	// Nobody sets the token's hash from the wire.
	bad := exec.send(t, "task.succeed", map[string]any{"task_id": bID, "attempt": 1, "token": rep.Next.Token, "next": true,
		"next_token_hash": rep.Next.TokenHash}, "")
	require.False(t, bad.OK)
	require.Equal(t, string(domain.CodeInvalid), bad.Error.Code, bad.Error.Message)

	// The sender runs it with the token, and is handed the last one.
	_, rep = exec.succeedNext(t, bID, 1, rep.Next.Token, "succeed-b")
	requireHanded(t, rep.Next, c, bID)
	_, rep = exec.succeedNext(t, c, 1, rep.Next.Token, "succeed-c")
	require.Nil(t, rep.Next, "nothing is left to hand")

	// None of the handed tasks went out as a work item: the next item of
	// the queue is that of a task created afterwards.
	later := b.newTask(t, "shell")
	it, m = q.next(5 * time.Second)
	require.Equal(t, later, it.TaskID, "the handed tasks were never published")
	require.NoError(t, m.Ack())
	b.requireRebuildEqual(t)
}

// A report that does not ask, or whose next ready task is on another
// queue, hands nothing: the task goes out as a work item, as ever.
func TestAHandoffStaysOnTheReportersQueue(t *testing.T) {
	b := setup(t)
	shell, mail := b.queue(t, "shell", 30*time.Second, 5), b.queue(t, "mail", 30*time.Second, 5)
	exec := b.peer(t, "executor")
	g, _ := b.mustCommand(t, "goal.create", map[string]any{"title": "two queues"})
	plan, _ := b.mustCommand(t, "plan.submit", map[string]any{"goal_id": g.ID, "tasks": []map[string]any{
		{"key": "a", "queue": "shell"},
		{"key": "b", "queue": "mail", "depends_on": []string{"a"}},
		{"key": "c", "queue": "shell", "depends_on": []string{"b"}},
	}})
	a, bID, c := plan.Tasks[0].TaskID, plan.Tasks[1].TaskID, plan.Tasks[2].TaskID
	_, m := shell.next(5 * time.Second)
	require.NoError(t, m.Ack())
	_, rep := exec.succeedNext(t, a, 1, exec.claim(t, a, "", 0).Token, "")
	require.Nil(t, rep.Next, "b is on another queue")
	it, m := mail.next(5 * time.Second)
	require.Equal(t, bID, it.TaskID)
	require.NoError(t, m.Ack())

	// Without next, b's report hands nothing either.
	r := exec.succeed(t, bID, 1, exec.claim(t, bID, "", 0).Token, "", "done")
	require.True(t, r.OK, "%+v", r.Error)
	require.NotContains(t, string(r.Result), `"next"`)
	it, m = shell.next(5 * time.Second)
	require.Equal(t, c, it.TaskID)
	require.NoError(t, m.Ack())
}

// A handed attempt has no work item to be redelivered: the writer abandons
// it once its sender is silent past the queue's lease and the grace, and
// the task is ready again, as a work item any executor takes. Heartbeats
// keep it, as they keep a claimed attempt.
func TestAHandedAttemptIsAbandonedWhenItsLeaseLapses(t *testing.T) {
	const lease, grace = 10 * time.Second, time.Second // grace: handlers.Config.LeaseGrace's default
	b, clock := leased(t, "", "shell", lease)
	exec, rescuer := b.peer(t, "executor"), b.peer(t, "rescuer")

	// Two chains: one whose handed attempt goes silent, one whose sender
	// heartbeats.
	_, silent, _ := chain3(t, b)
	_, beating, _ := chain3(t, b)
	var handed [2]*schemas.Handoff
	for i, p := range []domain.Reply{silent, beating} {
		a := p.Tasks[0].TaskID
		_, rep := exec.succeedNext(t, a, 1, exec.claim(t, a, "", 0).Token, "")
		handed[i] = rep.Next
		require.NotNil(t, handed[i])
	}
	clock.Advance(8 * time.Second)
	hb := exec.send(t, "task.heartbeat", map[string]any{"task_id": handed[1].TaskID, "attempt": 1, "token": handed[1].Token}, "")
	require.True(t, hb.OK, "%+v", hb.Error)
	// Past the silent one's lease, within the beating one's.
	clock.Advance(lease + grace - 8*time.Second)
	b.c.WaitState(t, handed[0].TaskID, domain.StateReady, 10*time.Second)
	var tk domain.Task
	b.query(t, "task.get", schemas.Query{ID: handed[0].TaskID}, b.lastSeq(t), &tk)
	require.Equal(t, domain.AttemptStateAbandoned, tk.Attempts[0].State)
	require.Equal(t, domain.ReasonLeaseLost, tk.Attempts[0].Reason)
	// The pass that abandoned it looked at the other too: still running.
	b.query(t, "task.get", schemas.Query{ID: handed[1].TaskID}, b.lastSeq(t), &tk)
	require.Equal(t, domain.StateRunning, tk.State, "a heartbeat keeps a handed attempt's lease")

	// The silent sender's late report is fenced; anyone may take the task.
	r := exec.succeed(t, handed[0].TaskID, 1, handed[0].Token, "", "late")
	requireRefused(t, r, domain.CodeConflict)
	rescued := rescuer.claim(t, handed[0].TaskID, "", 0)
	require.Equal(t, 2, rescued.Attempt)
	require.True(t, rescuer.succeed(t, handed[0].TaskID, 2, rescued.Token, "", "rescued").OK)

	// The beating one lapses a lease after its heartbeat.
	clock.Advance(8 * time.Second)
	b.c.WaitState(t, handed[1].TaskID, domain.StateReady, 10*time.Second)
}

// With encryption on, the handed item reaches its sender opened, as a
// claim's task does — input and dependency results — while the stored
// reply names the attempt only.
func TestAHandedItemIsOpenedForItsSender(t *testing.T) {
	var out servicetest.Output
	st := encrypted(t, t.TempDir(), &out)
	c := servicetest.NewClient(st.Conn, "default")
	var g schemas.CommandResult
	require.NoError(t, json.Unmarshal(c.Command(t, "goal.create", map[string]any{"title": "sealed", "tasks": []map[string]any{
		{"key": "a", "queue": "q"},
		{"key": "b", "queue": "q", "depends_on": []string{"a"}, "input": map[string]string{"secret": "MARK-B-INPUT"}},
	}}), &g))
	a, bID := g.Tasks[0].TaskID, g.Tasks[1].TaskID
	var claim schemas.CommandResult
	require.NoError(t, json.Unmarshal(c.Command(t, "task.claim", map[string]any{"task_id": a, "executor": "e"}), &claim))
	var rep schemas.CommandResult
	require.NoError(t, json.Unmarshal(c.Command(t, "task.succeed", map[string]any{"task_id": a, "attempt": 1, "token": claim.Token,
		"result": "MARK-A-RESULT", "next": true}), &rep))
	require.NotNil(t, rep.Next, "a sealing service hands the next task too")
	require.Equal(t, bID, rep.Next.TaskID)
	require.NotNil(t, rep.Next.Item)
	require.JSONEq(t, `{"secret":"MARK-B-INPUT"}`, string(rep.Next.Item.Task.Spec.Input), "the input, opened")
	require.Len(t, rep.Next.Item.Dependencies, 1)
	require.JSONEq(t, `"MARK-A-RESULT"`, string(rep.Next.Item.Dependencies[0].Result), "the dependency's result, opened")
	require.True(t, c.Command(t, "task.succeed", map[string]any{"task_id": bID, "attempt": 1, "token": rep.Next.Token, "result": "ok"}) != nil)
	require.Equal(t, domain.StateAccepted, c.WaitState(t, bID, domain.StateAccepted, 10*time.Second).State)
}

// A new writer finds the handed attempts in the views and keeps their
// leases: counted from its takeover (as for every running attempt), a
// silent one is abandoned a lease after it, and the task is ready again.
func TestANewWriterKeepsTheHandedLeases(t *testing.T) {
	const lease, grace = 10 * time.Second, time.Second
	b, clock := leased(t, t.TempDir(), "shell", lease)
	exec := b.peer(t, "executor")
	_, plan, _ := chain3(t, b)
	a := plan.Tasks[0].TaskID
	_, rep := exec.succeedNext(t, a, 1, exec.claim(t, a, "", 0).Token, "")
	require.NotNil(t, rep.Next)
	b.stop()

	clock.Advance(time.Hour) // the lease passed while no writer ran
	b2 := startClocked(t, b.dir, clock)
	var tk domain.Task
	b2.query(t, "task.get", schemas.Query{ID: rep.Next.TaskID}, b2.lastSeq(t), &tk)
	require.Equal(t, domain.StateRunning, tk.State, "a new writer counts the attempt alive at its takeover")
	clock.Advance(lease + grace)
	b2.c.WaitState(t, rep.Next.TaskID, domain.StateReady, 10*time.Second)
	b2.query(t, "task.get", schemas.Query{ID: rep.Next.TaskID}, b2.lastSeq(t), &tk)
	require.Equal(t, domain.ReasonLeaseLost, tk.Attempts[0].Reason)
}

// fetched is what one pull of at most n items from cons brings within wait.
func fetched(t *testing.T, cons jetstream.Consumer, n int, wait time.Duration) []jetstream.Msg {
	t.Helper()
	batch, err := cons.Fetch(n, jetstream.FetchMaxWait(wait))
	require.NoError(t, err)
	var got []jetstream.Msg
	for m := range batch.Messages() {
		got = append(got, m)
	}
	return got
}

// A queue's limit of jobs running at once (queue.configure max_running) is
// its consumer's limit of items delivered and not acknowledged, across
// every executor: a third item waits while two run. No report hands its
// sender the next task of such a queue, whose attempt would hold no item.
func TestAQueuesLimitOfRunningJobs(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	conf, _ := b.mustCommand(t, "queue.configure", map[string]any{"queue": "shell", "lease_ms": 30_000, "max_deliver": 5, "max_running": 2})
	require.Equal(t, 2, conf.MaxRunning)
	cons, err := b.jetstream(t).Consumer(ctx, "DWR_WORK", "dwr-default-shell")
	require.NoError(t, err)
	require.Equal(t, 2, cons.CachedInfo().Config.MaxAckPending)

	for range 3 {
		b.newTask(t, "shell")
	}
	fetch := func(n int) []jetstream.Msg { return fetched(t, cons, n, time.Second) }
	running := fetch(3)
	require.Len(t, running, 2, "two run; the third waits")
	require.NoError(t, running[0].Ack())
	third := fetch(3)
	require.Len(t, third, 1, "one ended: the third runs")
	for _, m := range append(running[1:], third...) {
		require.NoError(t, m.Ack())
	}

	exec := b.peer(t, "executor")
	_, plan, _ := chain3(t, b)
	a, next := plan.Tasks[0].TaskID, plan.Tasks[1].TaskID
	items := fetch(1)
	require.Len(t, items, 1)
	require.NoError(t, items[0].Ack())
	_, rep := exec.succeedNext(t, a, 1, exec.claim(t, a, "", 0).Token, "")
	require.Nil(t, rep.Next, "nothing is handed on a limited queue")
	items = fetch(1)
	require.Len(t, items, 1, "the next task goes out as a work item")
	var it schemas.WorkItem
	require.NoError(t, json.Unmarshal(items[0].Data(), &it))
	require.Equal(t, next, it.TaskID)
	require.NoError(t, items[0].Ack())

	// -1 removes the limit.
	conf, _ = b.mustCommand(t, "queue.configure", map[string]any{"queue": "shell", "lease_ms": 30_000, "max_deliver": 5, "max_running": -1})
	require.Zero(t, conf.MaxRunning)
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	require.Greater(t, info.Config.MaxAckPending, 2, "the server's default again")
}

// A queue's consumer follows the log's latest configuration: neither the
// writer's dispatch of a configuration nor a retried older configure (its
// stored reply) sets the consumer back to what came before.
func TestARetriedQueueConfigurationDoesNotUndoALaterOne(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	first := b.command(t, "queue.configure", map[string]any{"queue": "shell", "lease_ms": 30_000, "max_deliver": 5, "max_running": 2}, "configure-1")
	require.True(t, first.OK, "%+v", first.Error)
	later, _ := b.mustCommand(t, "queue.configure", map[string]any{"queue": "shell", "lease_ms": 20_000, "max_deliver": 4, "max_running": 3})
	require.Equal(t, 3, later.MaxRunning)
	limit := func() int {
		cons, err := b.jetstream(t).Consumer(ctx, "DWR_WORK", "dwr-default-shell")
		require.NoError(t, err)
		return cons.CachedInfo().Config.MaxAckPending
	}
	require.Equal(t, 3, limit(), "the consumer stands as the reply says")

	again := b.command(t, "queue.configure", map[string]any{"queue": "shell", "lease_ms": 30_000, "max_deliver": 5, "max_running": 2}, "configure-1")
	require.True(t, again.OK, "%+v", again.Error)
	require.Equal(t, first.Seq, again.Seq, "the first outcome, not a new configuration")
	cons, err := b.jetstream(t).Consumer(ctx, "DWR_WORK", "dwr-default-shell")
	require.NoError(t, err)
	cfg := cons.CachedInfo().Config
	require.Equal(t, 3, cfg.MaxAckPending, "the later limit stands")
	require.Equal(t, 20*time.Second, cfg.AckWait)
	require.Equal(t, 4, cfg.MaxDeliver)
}
