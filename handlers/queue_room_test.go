package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// startBounded starts the closed service on dir (fresh when empty), writing
// the JetStream log, with at most perWS queues a workspace and all in all.
func startBounded(t *testing.T, dir string, perWS, all int) *bundle {
	t.Helper()
	return bundleOf(servicetest.Start(t, dir, servicetest.Options{Secure: true,
		Config: handlers.Config{WriterID: "test-writer", MaxQueues: all, MaxQueuesPerWorkspace: perWS}}))
}

// A client that names a new queue for every task cannot make queues
// without end: each is a durable consumer of the work stream, and JetStream
// allows the stream so many (1,000 by default) — past them, the tasks of any
// workspace's next queue waited for ever. A task, or a plan, that would open
// a queue past its workspace's bound or the service's is refused, naming
// the field, and nothing is recorded; the queues that stand take new tasks,
// which run; another workspace keeps its own room; and a restarted service
// counts the queues its predecessor made.
func TestAClientCannotMakeQueuesWithoutEnd(t *testing.T) {
	b := startBounded(t, "", 3, 5)
	type member struct {
		c  *servicetest.Client
		ws string
	}
	memberOf := func(ws, name string) member {
		return member{servicetest.NewClient(b.st.Member(t, ws, name, domain.RoleClient), ws), ws}
	}
	mallory := memberOf("default", "mallory")
	send := func(m member, name string, body any) schemas.Reply {
		return m.c.Request(t, "dwr.cmd."+m.ws+"."+name, body, nats.Header{})
	}
	task := func(queue string) map[string]any {
		return map[string]any{"spec": map[string]any{"queue": queue, "title": "t"}}
	}
	var seq uint64
	for i := range 3 {
		r := send(mallory, "task.create", task(fmt.Sprintf("q%d", i)))
		require.True(t, r.OK, "queue %d of 3: %+v", i, r.Error)
		seq = r.Seq
	}
	var queues []schemas.QueueConfig
	mallory.c.Query(t, "queue.list", schemas.Query{}, &queues)
	require.Equal(t, []schemas.QueueConfig{{Name: "q0", LeaseMS: 30_000, MaxDeliver: 5}, {Name: "q1", LeaseMS: 30_000, MaxDeliver: 5},
		{Name: "q2", LeaseMS: 30_000, MaxDeliver: 5}}, queues, "queue.list shows the queues that stand, with their settings")
	r := send(mallory, "task.create", task("q3"))
	require.False(t, r.OK, "a fourth queue of the workspace")
	require.Equal(t, schemas.CodeConflict, r.Error.Code)
	require.Equal(t, "/spec/queue", r.Error.Fields[0].Pointer)
	require.Contains(t, r.Error.Message, "--max-queues-per-workspace")
	r = send(mallory, "goal.create", map[string]any{"title": "g", "tasks": []map[string]any{
		{"key": "a", "title": "a", "queue": "q0"}, {"key": "b", "title": "b", "queue": "q9", "depends_on": []string{"a"}}}})
	require.False(t, r.OK, "a plan whose pending task would open a fourth queue")
	require.Equal(t, "/tasks/1/queue", r.Error.Fields[0].Pointer)

	// The queues that stand take new tasks, which are dispatched.
	q := b.queue(t, "q1", 30*time.Second, 5)
	created := send(mallory, "task.create", task("q1"))
	require.True(t, created.OK, "%+v", created.Error)
	require.Equal(t, seq+1, created.Seq, "nothing refused was recorded")
	var res schemas.CommandResult
	require.NoError(t, json.Unmarshal(created.Result, &res))
	first, _ := q.next(5 * time.Second) // the queue's first task's
	second, _ := q.next(5 * time.Second)
	require.Contains(t, []string{first.TaskID, second.TaskID}, res.ID)

	// Another workspace has room of its own, up to the service's bound.
	servicetest.NewClient(b.st.Admin, "other").Command(t, "workspace.create", schemas.CreateWorkspace{Name: "other"})
	bob := memberOf("other", "bob")
	for i := range 2 {
		r := send(bob, "task.create", task(fmt.Sprintf("b%d", i)))
		require.True(t, r.OK, "%+v", r.Error)
	}
	r = send(bob, "task.create", task("b2"))
	require.False(t, r.OK, "the service's sixth queue")
	require.Contains(t, r.Error.Message, "--max-queues")

	// Each queue that stands is a consumer; the stream allows no more.
	cons := consumerNames(t, b)
	require.Len(t, cons, 5)
	info, err := b.jetstream(t).Stream(context.Background(), "DWR_WORK")
	require.NoError(t, err)
	require.Equal(t, 5, info.CachedInfo().Config.MaxConsumers)

	// A restarted service counts the queues that stand.
	b.stop()
	b = startBounded(t, b.dir, 3, 5)
	bob = memberOf("other", "bob2")
	r = send(bob, "task.create", task("b3"))
	require.False(t, r.OK, "still the service's sixth queue after a restart")
	require.True(t, send(bob, "task.create", task("b1")).OK)
}

// consumerNames lists the work stream's consumers.
func consumerNames(t *testing.T, b *bundle) []string {
	t.Helper()
	s, err := b.jetstream(t).Stream(context.Background(), "DWR_WORK")
	require.NoError(t, err)
	var names []string
	l := s.ConsumerNames(context.Background())
	for n := range l.Name() {
		names = append(names, n)
	}
	require.NoError(t, l.Err())
	return names
}

// A workspace's admin deletes a queue that no unfinished task is given: its
// consumer goes, it no longer counts against the bound, and a task given it
// later opens it again. A queue an open task is given is not deleted (the
// refusal names the task), nor one that does not stand; a client may not
// delete queues.
func TestAnAdminDeletesAQueueNoOpenTaskIsGiven(t *testing.T) {
	b := startBounded(t, "", 2, 10)
	task := func(queue string) map[string]any {
		return map[string]any{"spec": map[string]any{"queue": queue, "title": "t"}}
	}
	a, _ := b.mustCommand(t, "task.create", task("a"))
	b.mustCommand(t, "task.create", task("b"))
	r := b.command(t, "task.create", task("c"), "")
	require.False(t, r.OK, "the workspace has its two queues")

	r = b.command(t, "queue.delete", map[string]any{"queue": "a"}, "")
	require.False(t, r.OK, "an open task is given queue a")
	require.Equal(t, schemas.CodeConflict, r.Error.Code)
	require.Contains(t, r.Error.Message, a.ID)
	require.Equal(t, "/queue", r.Error.Fields[0].Pointer)
	r = b.command(t, "queue.delete", map[string]any{"queue": "zzz"}, "")
	require.False(t, r.OK)
	require.Equal(t, schemas.CodeNotFound, r.Error.Code)
	mallory := b.st.Member(t, "default", "mallory", domain.RoleClient)
	_, err := mallory.Request("dwr.cmd.default.queue.delete", []byte(`{"queue": "b"}`), time.Second)
	require.Error(t, err, "a client may not delete queues: its NATS permissions do not reach the subject")

	b.mustCommand(t, "task.cancel", map[string]any{"task_id": a.ID})
	b.mustCommand(t, "queue.delete", map[string]any{"queue": "a"})
	require.Equal(t, []string{"dwr-default-b"}, consumerNames(t, b), "queue a's consumer is gone")
	c, seq := b.mustCommand(t, "task.create", task("c"))
	var queues []schemas.QueueConfig
	b.query(t, "queue.list", schemas.Query{}, seq, &queues)
	require.Equal(t, []string{"b", "c"}, []string{queues[0].Name, queues[1].Name})

	// Given a task again, queue a stands again (once there is room), and
	// its task is dispatched.
	b.mustCommand(t, "task.cancel", map[string]any{"task_id": c.ID})
	b.mustCommand(t, "queue.delete", map[string]any{"queue": "c"})
	again, _ := b.mustCommand(t, "task.create", task("a"))
	q := b.queue(t, "a", 30*time.Second, 5)
	it, _ := q.next(5 * time.Second)
	require.Equal(t, again.ID, it.TaskID, "the cancelled task's item went with the queue")
}
