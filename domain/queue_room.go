package domain

import (
	"fmt"
	"maps"
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
}

// QueueCounter is a World that knows the queues that stand (the writer's
// views with the work stream's consumers). A World without it bounds no
// queue.
type QueueCounter interface {
	QueueUse(ws, queue string) (QueueUse, error)
}

// queueKey names one queue of one workspace.
type queueKey struct{ ws, queue string }

// QueueUse is the base's use of queue in ws with the queues that the
// overlay's commands opened counted in.
func (o *Overlay) QueueUse(ws, queue string) (QueueUse, error) {
	var u QueueUse
	if qc, ok := o.base.(QueueCounter); ok {
		var err error
		if u, err = qc.QueueUse(ws, queue); err != nil {
			return QueueUse{}, err
		}
	}
	for k := range o.opened {
		u.InAll++
		if k.ws == ws {
			u.InWorkspace++
			u.Stands = u.Stands || k.queue == queue
		}
	}
	return u, nil
}

// OpenedQueues calls f with each queue that the overlay's commands opened
// (gave a task, or configured, when it did not stand).
func (o *Overlay) OpenedQueues(f func(ws, queue string)) {
	for k := range o.opened {
		f(k.ws, k.queue)
	}
}

// mergeOpened keeps the queues an inner overlay opened.
func (o *Overlay) mergeOpened(inner *Overlay) {
	if len(inner.opened) == 0 {
		return
	}
	if o.opened == nil {
		o.opened = map[queueKey]struct{}{}
	}
	maps.Copy(o.opened, inner.opened)
}

// openQueue makes room for queue in workspace ws, which a task or a queue
// configuration at field would be given: nothing when it stands, else a
// conflict when the bounds are reached, else the queue counts as opened by
// this command from now on.
func (x *tx) openQueue(ws, queue, field string) error {
	u, err := x.o.QueueUse(ws, queue)
	if err != nil || u.Stands {
		return err
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
	if x.o.opened == nil {
		x.o.opened = map[queueKey]struct{}{}
	}
	x.o.opened[queueKey{ws, queue}] = struct{}{}
	return nil
}

// openQueues makes room for the queues of task spec s, at field, in ws:
// its own, and its verifier's.
func (x *tx) openQueues(ws, field string, s TaskSpec) error {
	if err := x.openQueue(ws, s.Queue, field+"/queue"); err != nil {
		return err
	}
	if v := s.Verification; v != nil {
		return x.openQueue(ws, v.Queue, field+"/verification/queue")
	}
	return nil
}
