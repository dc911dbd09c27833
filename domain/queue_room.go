package domain

import (
	"fmt"
	"math"
)

// QueueUse is what the service knows of a queue a task would be given:
// whether the queue stands already, how many stand, and the bounds on them.
// Each queue that stands costs the NATS server a durable consumer (a
// goroutine, its state and a file of its own), so a client cannot make
// queues without end by naming new ones.
type QueueUse struct {
	// Stands is set when the queue stands already: its tasks may be
	// given it whatever the bounds.
	Stands bool
	// InWorkspace and InAll count the queues that stand in the workspace
	// and in every workspace.
	InWorkspace, InAll int
	// PerWorkspace and All bound them; 0: no bound.
	PerWorkspace, All int
	// UsedAt is the log sequence of the last record that gave a task the
	// queue, as far as the service knows (0: none it knows of).
	UsedAt uint64
}

// QueueCounter is a World that knows the queues that stand (the writer's
// views with the work stream's consumers). A World without it bounds no
// queue.
type QueueCounter interface {
	QueueUse(ws, queue string) (QueueUse, error)
}

// queueKey names one queue of one workspace.
type queueKey struct{ ws, queue string }

// QueueUse is the base's use of queue in ws with what the overlay's
// commands did counted in: the queues they opened stand and count, those
// they deleted do not stand, and one they gave a task was used after any
// record (UsedAt is the largest sequence).
func (o *Overlay) QueueUse(ws, queue string) (QueueUse, error) {
	var u QueueUse
	if qc, ok := o.base.(QueueCounter); ok {
		var err error
		if u, err = qc.QueueUse(ws, queue); err != nil {
			return QueueUse{}, err
		}
	}
	k := queueKey{ws, queue}
	if _, ok := o.deleted[k]; ok {
		u.Stands = false
	}
	for q, opened := range o.used {
		if !opened {
			continue
		}
		u.InAll++
		if q.ws == ws {
			u.InWorkspace++
		}
	}
	if opened, ok := o.used[k]; ok {
		u.Stands = u.Stands || opened
		u.UsedAt = math.MaxUint64
	}
	return u, nil
}

// OpenedQueues calls f with each queue that the overlay's commands opened
// (gave a task, or configured, when it did not stand).
func (o *Overlay) OpenedQueues(f func(ws, queue string)) {
	for k, opened := range o.used {
		if opened {
			f(k.ws, k.queue)
		}
	}
}

// mergeQueues keeps what an inner overlay's command did to queues.
func (o *Overlay) mergeQueues(inner *Overlay) {
	for k, opened := range inner.used {
		if o.used == nil {
			o.used = map[queueKey]bool{}
		}
		o.used[k] = o.used[k] || opened
	}
	for k := range inner.deleted {
		if o.deleted == nil {
			o.deleted = map[queueKey]struct{}{}
		}
		o.deleted[k] = struct{}{}
	}
}

// openQueue makes room for queue in workspace ws, which a task or a queue
// configuration at field would be given: nothing when it stands, else a
// conflict when the bounds are reached, else the queue counts as opened by
// this command from now on.
func (x *tx) openQueue(ws, queue, field string) error {
	u, err := x.o.QueueUse(ws, queue)
	if err != nil {
		return err
	}
	if x.o.used == nil {
		x.o.used = map[queueKey]bool{}
	}
	k := queueKey{ws, queue}
	if u.Stands {
		if _, ok := x.o.used[k]; !ok {
			x.o.used[k] = false // given a task, not opened
		}
		return nil
	}
	switch {
	case u.PerWorkspace > 0 && u.InWorkspace >= u.PerWorkspace:
		return &Error{Code: CodeConflict, Field: field, Message: fmt.Sprintf(
			"queue %q would be a new queue of workspace %q, which has %d, the most it may have: give the task one of its queues (dwr queue ls; the bound is dwr serve --max-queues-per-workspace)",
			queue, ws, u.InWorkspace)}
	case u.All > 0 && u.InAll >= u.All:
		return &Error{Code: CodeConflict, Field: field, Message: fmt.Sprintf(
			"queue %q would be a new queue, and the service has %d in all, the most it may have: give the task one of the workspace's queues (dwr queue ls; the bound is dwr serve --max-queues)",
			queue, u.InAll)}
	}
	x.o.used[k] = true
	return nil
}

// openQueues makes room for the queues of task spec s, at field, in ws:
// its own (at field/queue), and its verifier's.
func (x *tx) openQueues(ws, field string, s TaskSpec) error {
	return x.openQueuesAt(ws, s, field+"/queue", field+"/verification/queue")
}

// reopenQueues makes room for the queues of a task that a retry (of the
// task at /task_id, or of its dependency) gives them again.
func (x *tx) reopenQueues(ws string, s TaskSpec) error {
	return x.openQueuesAt(ws, s, "/task_id", "/task_id")
}

func (x *tx) openQueuesAt(ws string, s TaskSpec, field, verifierField string) error {
	if err := x.openQueue(ws, s.Queue, field); err != nil {
		return err
	}
	if v := s.Verification; v != nil {
		return x.openQueue(ws, v.Queue, verifierField)
	}
	return nil
}

// deleteQueue removes a queue that stands, or is configured, in the
// command's workspace, unless a task was given it after the service last
// found no open task given it (ScannedAt), or by an earlier command of the
// batch.
func (x *tx) deleteQueue(c *DeleteQueue) (Reply, error) {
	w, dup, err := x.queueCommand(c.Queue)
	if err != nil {
		return Reply{}, err
	}
	if dup {
		return workspaceReply(w, true), nil
	}
	u, err := x.o.QueueUse(w.Name, c.Queue)
	if err != nil {
		return Reply{}, err
	}
	if !u.Stands && w.Queue(c.Queue) == nil {
		return Reply{}, notFound("/queue", "queue %q does not stand in workspace %q (dwr queue ls)", c.Queue, w.Name)
	}
	if u.UsedAt > c.ScannedAt || x.o.givesQueue(w.Name, c.Queue) {
		return Reply{}, &Error{Code: CodeConflict, Field: "/queue", Message: fmt.Sprintf(
			"a task was given queue %q meanwhile: a queue is deleted only while no task that has not ended is given it; send the command again", c.Queue)}
	}
	if err := x.emit(w.Name, &QueueDeleted{Queue: c.Queue}); err != nil {
		return Reply{}, err
	}
	if x.o.deleted == nil {
		x.o.deleted = map[queueKey]struct{}{}
	}
	x.o.deleted[queueKey{w.Name, c.Queue}] = struct{}{}
	w, _ = x.o.Workspace(w.Name)
	return workspaceReply(w, false), nil
}

// givesQueue reports whether a task the overlay (or an overlay it is on)
// holds, one that has not ended, is given queue in ws: a command of the
// batch created, revived or read it.
func (o *Overlay) givesQueue(ws, queue string) bool {
	for _, t := range o.tasks {
		if t != nil && t.Workspace == ws && !Terminal(t.State) &&
			(t.Spec.Queue == queue || (t.Spec.Verification != nil && t.Spec.Verification.Queue == queue)) {
			return true
		}
	}
	if b, ok := o.base.(*Overlay); ok {
		return b.givesQueue(ws, queue)
	}
	return false
}
