package domain

import (
	"github.com/dwr-run/dwr/schemas"
)

// Bounds on a queue's settings (queue.configure).
const (
	MinLeaseMS    = 1_000      // a lease of at least a second
	MaxLeaseMS    = 86_400_000 // and at most a day
	MinMaxDeliver = 1
	MaxMaxDeliver = 1_000
)

// QueueConfig is a queue's settings, which its work items' consumer follows:
// how long an executor holds a work item before it is delivered again, and
// how many times it is delivered before it is quarantined.
type QueueConfig = schemas.QueueConfig

// queueReply answers a queue.configure with the settings in effect.
func queueReply(w *Workspace, q *QueueConfig, duplicate bool) Reply {
	return Reply{ID: w.Name, Version: w.Version, Queue: q.Name, LeaseMS: q.LeaseMS, MaxDeliver: q.MaxDeliver, Duplicate: duplicate}
}

// configureQueue sets a queue's settings. The same settings again change
// nothing; with IfUnset, neither do other settings of a queue already
// configured. The reply carries the settings in effect either way.
func (x *tx) configureQueue(c *ConfigureQueue) (Reply, error) {
	w, dup, err := x.commandWorkspace()
	if err != nil {
		return Reply{}, err
	}
	if err := checkName("/queue", "queue", c.Queue); err != nil {
		return Reply{}, err
	}
	if dup {
		if q := w.Queue(c.Queue); q != nil {
			return queueReply(w, q, true), nil
		}
		return workspaceReply(w, true), nil
	}
	if c.LeaseMS < MinLeaseMS || c.LeaseMS > MaxLeaseMS {
		return Reply{}, invalid("/lease_ms", "must be between %d (1s) and %d (24h) milliseconds (got %d)", MinLeaseMS, MaxLeaseMS, c.LeaseMS)
	}
	if c.MaxDeliver < MinMaxDeliver || c.MaxDeliver > MaxMaxDeliver {
		return Reply{}, invalid("/max_deliver", "must be between %d and %d (got %d)", MinMaxDeliver, MaxMaxDeliver, c.MaxDeliver)
	}
	if q := w.Queue(c.Queue); q != nil && (c.IfUnset || (q.LeaseMS == c.LeaseMS && q.MaxDeliver == c.MaxDeliver)) {
		return queueReply(w, q, true), nil
	}
	if err := x.emit(w.Name, &QueueConfigured{Queue: c.Queue, LeaseMS: c.LeaseMS, MaxDeliver: c.MaxDeliver}); err != nil {
		return Reply{}, err
	}
	w, _ = x.o.Workspace(w.Name)
	return queueReply(w, w.Queue(c.Queue), false), nil
}
