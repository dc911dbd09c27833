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

// A paused queue (queue.pause) hands out no job: its consumer delivers
// nothing and no report hands its sender the queue's next task, while the
// jobs already out run on and report. Tasks keep joining it; queue.resume
// lets them out, in the order they joined. Settings set meanwhile keep the
// pause. (Only an admin may publish either command: TestPermissionMatrix.)
func TestAPausedQueueHandsOutNothing(t *testing.T) {
	b := setup(t)
	ctx := t.Context()

	// Paused before anything configured it: the defaults, paused.
	r, _ := b.mustCommand(t, "queue.pause", map[string]any{"queue": "shell"})
	require.True(t, r.Paused)
	require.Equal(t, int64(domain.DefaultLeaseMS), r.LeaseMS)
	cons, err := b.jetstream(t).Consumer(ctx, "DWR_WORK", "dwr-default-shell")
	require.NoError(t, err)
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	require.True(t, info.Paused, "the consumer is paused when the admin hears it")
	var queues []schemas.QueueConfig
	b.query(t, "queue.list", schemas.Query{}, b.lastSeq(t), &queues)
	require.Equal(t, []schemas.QueueConfig{{Name: "shell", LeaseMS: domain.DefaultLeaseMS, MaxDeliver: domain.DefaultMaxDeliver,
		Paused: true, DefaultSettings: true}}, queues)

	// An executor's settings if unset replace the defaults; the pause stays.
	r, _ = b.mustCommand(t, "queue.configure", map[string]any{"queue": "shell", "lease_ms": 20_000, "max_deliver": 4, "if_unset": true})
	require.Equal(t, int64(20_000), r.LeaseMS)
	require.True(t, r.Paused)
	info, err = cons.Info(ctx)
	require.NoError(t, err)
	require.True(t, info.Paused, "new settings keep the pause")
	require.Equal(t, 20*time.Second, info.Config.AckWait)

	fetch := func(n int) []jetstream.Msg { return fetched(t, cons, n, time.Second) }
	first, second := b.newTask(t, "shell"), b.newTask(t, "shell")
	require.Empty(t, fetch(2), "a paused queue delivers nothing")
	var listed []schemas.Queue
	b.query(t, "queue.list", schemas.Query{}, b.lastSeq(t), &listed)
	require.Len(t, listed, 1)
	require.Equal(t, uint64(2), listed[0].Pending, "the tasks joined the queue, and wait")
	require.Zero(t, listed[0].InFlight)
	require.Nil(t, listed[0].LastDelivered, "nothing delivered yet")

	// An executor polling the paused queue is a waiting pull, which the
	// resume serves: what joined meanwhile goes out, in order.
	polled := make(chan []jetstream.Msg, 1)
	go func() {
		var got []jetstream.Msg
		if batch, err := cons.Fetch(2, jetstream.FetchMaxWait(30*time.Second)); err == nil {
			for m := range batch.Messages() {
				got = append(got, m)
			}
		}
		polled <- got
	}()
	servicetest.Eventually(t, 20*time.Second, func() bool {
		listed = nil
		b.query(t, "queue.list", schemas.Query{}, 0, &listed)
		return listed[0].WaitingPulls == 1
	})
	select {
	case <-polled:
		t.Fatal("a paused queue answered a pull")
	default:
	}

	r, _ = b.mustCommand(t, "queue.resume", map[string]any{"queue": "shell"})
	require.False(t, r.Paused)
	items := <-polled
	require.Len(t, items, 2, "resumed: what joined meanwhile goes out")
	var got []string
	for _, m := range items {
		var it schemas.WorkItem
		require.NoError(t, json.Unmarshal(m.Data(), &it))
		got = append(got, it.TaskID)
		require.NoError(t, m.Ack())
	}
	require.Equal(t, []string{first, second}, got, "in the order they joined")
	listed = nil
	b.query(t, "queue.list", schemas.Query{}, 0, &listed)
	require.NotNil(t, listed[0].LastDelivered)
	again, _ := b.mustCommand(t, "queue.resume", map[string]any{"queue": "shell"})
	require.False(t, again.Paused)
	require.True(t, again.Duplicate, "a queue not paused: nothing changes")

	// A job out when the queue is paused runs on and reports; its report
	// hands on nothing, and the next task waits as a work item.
	exec := b.peer(t, "executor")
	_, plan, _ := chain3(t, b)
	a, next := plan.Tasks[0].TaskID, plan.Tasks[1].TaskID
	items = fetch(1)
	require.Len(t, items, 1)
	token := exec.claim(t, a, "", 0).Token
	b.mustCommand(t, "queue.pause", map[string]any{"queue": "shell"})
	require.NoError(t, items[0].Ack(), "an acknowledgement is taken while paused")
	_, rep := exec.succeedNext(t, a, 1, token, "")
	require.Nil(t, rep.Next, "nothing is handed on from a paused queue")
	var tk domain.Task
	b.query(t, "task.get", schemas.Query{ID: a}, b.lastSeq(t), &tk)
	require.Equal(t, domain.StateAccepted, tk.State, "the job out ran on and reported")
	require.Empty(t, fetch(1), "the next task waits")

	b.mustCommand(t, "queue.resume", map[string]any{"queue": "shell"})
	items = fetch(1)
	require.Len(t, items, 1, "the next task goes out as a work item")
	var it schemas.WorkItem
	require.NoError(t, json.Unmarshal(items[0].Data(), &it))
	require.Equal(t, next, it.TaskID)

	// A queue that stands without settings (a task was given it) resumes
	// as it is; resuming one that never stood names it.
	b.newTask(t, "given")
	r, _ = b.mustCommand(t, "queue.resume", map[string]any{"queue": "given"})
	require.True(t, r.Duplicate)
	res := b.command(t, "queue.resume", map[string]any{"queue": "nowhere"}, "")
	require.False(t, res.OK)
	require.Equal(t, string(domain.CodeNotFound), res.Error.Code)
}

// A pause is the log's, not only the consumer's: a writer's start makes a
// queue's consumer deleted by hand stand again paused, its item waiting.
func TestAPauseOutlastsARestartAndALostConsumer(t *testing.T) {
	b := setupJetStream(t)
	ctx := t.Context()
	b.mustCommand(t, "queue.pause", map[string]any{"queue": "shell"})
	id := b.newTask(t, "shell")
	require.NoError(t, b.jetstream(t).DeleteConsumer(ctx, "DWR_WORK", "dwr-default-shell"))
	b.stop()

	b2 := start(t, b.dir)
	cons, err := b2.jetstream(t).Consumer(ctx, "DWR_WORK", "dwr-default-shell")
	require.NoError(t, err, "the writer's start makes the consumer stand again")
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	require.True(t, info.Paused, "paused, as the log has it")
	require.Equal(t, uint64(1), info.NumPending)
	require.Empty(t, fetched(t, cons, 1, time.Second), "a paused queue delivers nothing")

	b2.mustCommand(t, "queue.resume", map[string]any{"queue": "shell"})
	var got []string
	for _, m := range fetched(t, cons, 1, 10*time.Second) {
		var it schemas.WorkItem
		require.NoError(t, json.Unmarshal(m.Data(), &it))
		got = append(got, it.TaskID)
	}
	require.Equal(t, []string{id}, got)
}

// A queue.configure sent again after a restart of the writer answers its
// first outcome, and does not set the queue's consumer back to the settings
// of that outcome: a pause recorded since stands.
func TestARetriedConfigureAfterARestartKeepsTheQueuePaused(t *testing.T) {
	b := setupJetStream(t)
	ctx := t.Context()
	body := map[string]any{"queue": "shell", "lease_ms": 30_000, "max_deliver": 5}
	first := b.command(t, "queue.configure", body, "configure-1")
	require.True(t, first.OK, "%+v", first.Error)
	b.mustCommand(t, "queue.pause", map[string]any{"queue": "shell"})
	b.stop()

	b2 := start(t, b.dir)
	again := b2.command(t, "queue.configure", body, "configure-1")
	require.True(t, again.OK, "%+v", again.Error)
	require.Equal(t, first.Seq, again.Seq, "the first outcome, not a new configuration")
	cons, err := b2.jetstream(t).Consumer(ctx, "DWR_WORK", "dwr-default-shell")
	require.NoError(t, err)
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	require.True(t, info.Paused, "the pause recorded since stands")
}
