package domain

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/schemas"
)

// counted is a World whose queues that stand, and their bounds, are given.
type counted struct {
	World
	stands   map[queueKey]bool
	per, all int
	usedAt   map[queueKey]uint64
}

func (c counted) QueueUse(ws, queue string) (QueueUse, error) {
	u := QueueUse{Stands: c.stands[queueKey{ws, queue}], InAll: len(c.stands), PerWorkspace: c.per, All: c.all,
		UsedAt: c.usedAt[queueKey{ws, queue}]}
	for k := range c.stands {
		if k.ws == ws {
			u.InWorkspace++
		}
	}
	return u, nil
}

// roomRefusal asserts that err refuses a new queue at field, with a message
// that names what to do.
func roomRefusal(t *testing.T, err error, field, bound string) {
	t.Helper()
	var de *Error
	require.True(t, errors.As(err, &de), "refused: %v", err)
	require.Equal(t, CodeConflict, de.Code)
	require.Equal(t, field, de.Field)
	require.Contains(t, de.Message, bound)
	require.Contains(t, de.Message, "dwr queue ls")
}

// A workspace may have so many queues, and the service so many in all: a
// task, a plan or a queue configuration that would open one more is
// refused, naming the field, while the queues that stand stay open to new
// tasks. The queues opened by earlier commands of a batch count.
func TestNewQueuesAreBounded(t *testing.T) {
	w := setup(t)
	base := counted{World: w.o, per: 3, all: 4, stands: map[queueKey]bool{
		{"acme", "work"}: true, {"other", "x"}: true}}
	o := NewOverlay(base)
	n := 0
	run := func(cmd Command) error {
		n++
		_, err := o.Execute(cmd, Meta{CommandID: "c" + string(rune('a'+n)), Workspace: "acme", Actor: "tester", Now: epoch})
		return err
	}
	task := func(queue string) *CreateTask {
		s := spec("")
		s.Queue = queue
		return &CreateTask{TaskID: w.newID(), Spec: s}
	}
	require.NoError(t, run(task("work")), "a queue that stands")
	require.NoError(t, run(task("new1")), "the workspace's second queue")
	require.NoError(t, run(task("new1")), "opened by an earlier command of the batch, it stands")

	// The plan's second task would be the workspace's fourth queue.
	goal := &CreateGoal{GoalID: w.newID(), Title: "g", Tasks: []TaskSpec{
		{Key: "a", Title: "a", Queue: "new2"}, {Key: "b", Title: "b", Queue: "new3"}}}
	roomRefusal(t, run(goal), "/tasks/1/queue", "--max-queues-per-workspace")
	// Nothing of the refused plan opened a queue: its first task's queue is
	// still the third, and may be opened.
	require.NoError(t, run(task("new2")))
	roomRefusal(t, run(task("new3")), "/spec/queue", "--max-queues-per-workspace")
	v := task("work")
	v.Spec.Verification = &VerificationSpec{Queue: "checks"}
	roomRefusal(t, run(v), "/spec/verification/queue", "--max-queues-per-workspace")
	roomRefusal(t, run(&ConfigureQueue{Queue: "new3", LeaseMS: 30_000, MaxDeliver: 5}), "/queue", "--max-queues-per-workspace")
	require.NoError(t, run(&ConfigureQueue{Queue: "new1", LeaseMS: 30_000, MaxDeliver: 5}), "a queue that stands may be configured")

	var opened []queueKey
	o.OpenedQueues(func(ws, queue string) { opened = append(opened, queueKey{ws, queue}) })
	require.ElementsMatch(t, []queueKey{{"acme", "new1"}, {"acme", "new2"}}, opened)

	// Below its own bound, a workspace is held by the service's: four
	// queues stand in all.
	base.per = 10
	o = NewOverlay(base)
	require.NoError(t, run(task("new1")))
	require.NoError(t, run(task("new2")))
	roomRefusal(t, run(task("new3")), "/spec/queue", "--max-queues")

	// A world that knows no queues bounds none.
	o = NewOverlay(w.o)
	for _, q := range []string{"q1", "q2", "q3", "q4", "q5", "q6"} {
		require.NoError(t, run(task(q)))
	}
}

// A schedule's slot whose plan would open a queue past the bounds starts
// no goal: it is recorded as skipped, refused, and the schedule goes on.
func TestAScheduleSlotPastTheQueueBoundIsSkipped(t *testing.T) {
	w := setup(t)
	w.must(report("ten", "10m")) // its plan: queues research and mail
	w.o = NewOverlay(counted{World: w.o, per: 1, stands: map[queueKey]bool{{"acme", "research"}: true}})
	w.now = *w.schedule("ten").NextSlot
	out := w.fire("ten")
	require.Empty(t, goalsOf(w, out))
	skipped := lastEvent[*ScheduleSkipped](out)
	require.NotNil(t, skipped)
	require.Equal(t, schemas.SkipRefused, skipped.Reason)
	require.True(t, w.schedule("ten").NextSlot.After(w.now), "the schedule goes on")
}

// queue.delete removes a queue that stands (or is configured): not one
// that does not, nor one a task was given after the service's scan for
// open tasks (ScannedAt) or earlier in the batch. Deleted, the queue no
// longer stands, and a task given it opens it again.
func TestDeletingAQueue(t *testing.T) {
	w := setup(t)
	w.must(&ConfigureQueue{Queue: "old", LeaseMS: 30_000, MaxDeliver: 5})
	base := counted{World: w.o, per: 3, stands: map[queueKey]bool{{"acme", "work"}: true, {"acme", "old"}: true},
		usedAt: map[queueKey]uint64{{"acme", "old"}: 7}}
	o := NewOverlay(base)
	n := 0
	run := func(cmd Command) (*Outcome, error) {
		n++
		return o.Execute(cmd, Meta{CommandID: "d" + string(rune('a'+n)), Workspace: "acme", Actor: "tester", Now: epoch})
	}
	refusal := func(err error, code Code, want string) {
		t.Helper()
		var de *Error
		require.True(t, errors.As(err, &de), "refused: %v", err)
		require.Equal(t, code, de.Code)
		require.Equal(t, "/queue", de.Field)
		require.Contains(t, de.Message, want)
	}
	_, err := run(&DeleteQueue{Queue: "none"})
	refusal(err, CodeNotFound, "does not stand")
	_, err = run(&DeleteQueue{Queue: "old", ScannedAt: 6})
	refusal(err, CodeConflict, "meanwhile")
	s := spec("")
	s.Queue = "work"
	_, err = run(&CreateTask{TaskID: w.newID(), Spec: s})
	require.NoError(t, err)
	_, err = run(&DeleteQueue{Queue: "work", ScannedAt: 100})
	refusal(err, CodeConflict, "meanwhile") // given a task earlier in the batch

	out, err := run(&DeleteQueue{Queue: "old", ScannedAt: 7})
	require.NoError(t, err)
	require.Len(t, out.Changes, 1)
	require.Equal(t, &QueueDeleted{Queue: "old"}, out.Changes[0].Event)
	ws, err := o.Workspace("acme")
	require.NoError(t, err)
	require.Nil(t, ws.Queue("old"), "its settings are gone")
	u, err := o.QueueUse("acme", "old")
	require.NoError(t, err)
	require.False(t, u.Stands)
	s.Queue = "old"
	_, err = run(&CreateTask{TaskID: w.newID(), Spec: s})
	require.NoError(t, err, "a task given the queue opens it again")
	u, err = o.QueueUse("acme", "old")
	require.NoError(t, err)
	require.True(t, u.Stands)
}

// A retry gives the task its queue again: a queue deleted meanwhile opens
// again within the bounds, or the retry is refused; and a queue a retried
// task is given earlier in the batch is not deleted.
func TestARetryGivesTheTaskItsQueueAgain(t *testing.T) {
	w := setup(t)
	s := spec("")
	s.Queue = "gone"
	id := w.newID()
	w.must(&CreateTask{TaskID: id, Spec: s})
	w.fail(id, w.claim(id), false)
	require.Equal(t, StateFailed, w.state(id))
	committed := w.o

	w.o = NewOverlay(counted{World: committed, per: 1, stands: map[queueKey]bool{{"acme", "work"}: true}})
	de := w.refused(&RetryTask{TaskID: id}, CodeConflict)
	require.Equal(t, "/task_id", de.Field)
	require.Contains(t, de.Message, `queue "gone" would be a new queue`)

	o := NewOverlay(counted{World: committed, per: 2, stands: map[queueKey]bool{{"acme", "work"}: true}})
	m := Meta{CommandID: "r1", Workspace: "acme", Actor: "tester", Now: epoch}
	_, err := o.Execute(&RetryTask{TaskID: id}, m)
	require.NoError(t, err)
	u, err := o.QueueUse("acme", "gone")
	require.NoError(t, err)
	require.True(t, u.Stands, "the retry opened the queue")
	m.CommandID = "r2"
	_, err = o.Execute(&DeleteQueue{Queue: "gone", ScannedAt: 1 << 40}, m)
	var dq *Error
	require.True(t, errors.As(err, &dq))
	require.Equal(t, CodeConflict, dq.Code, "the retried task is given the queue")
}
