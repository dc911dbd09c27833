package domain

import (
	"cmp"

	"github.com/dwr-run/dwr/schemas"
)

// Bounds on a queue's settings (queue.configure).
const (
	MinLeaseMS    = 1_000      // a lease of at least a second
	MaxLeaseMS    = 86_400_000 // and at most a day
	MinMaxDeliver = 1
	MaxMaxDeliver = 1_000
	// MaxMaxRunning bounds a queue's limit of jobs running at once.
	MaxMaxRunning = 100_000
	// MaxRateLimit bounds how many items a queue's rate limit lets out in
	// a period, which is between MinRatePeriodMS and MaxRatePeriodMS
	// (DefaultRatePeriodMS when not given).
	MaxRateLimit        = 100_000
	MinRatePeriodMS     = 1_000
	MaxRatePeriodMS     = 86_400_000
	DefaultRatePeriodMS = 1_000

	// The orders a queue hands out its items in (QueueConfig.Order).
	QueueOrderFIFO     = schemas.QueueOrderFIFO
	QueueOrderPriority = schemas.QueueOrderPriority
	// DefaultPriority is the priority of a task that gives none, of a
	// goal that gives none.
	DefaultPriority = schemas.DefaultPriority

	// The settings of a queue no queue.configure has set.
	DefaultLeaseMS    = 30_000
	DefaultMaxDeliver = 5
)

// QueueConfig is a queue's settings, which its work items' consumer follows:
// how long an executor holds a work item before it is delivered again, and
// how many times it is delivered before it is quarantined.
type QueueConfig = schemas.QueueConfig

// queueReply answers a queue.configure with the settings in effect.
func queueReply(w *Workspace, q *QueueConfig, duplicate bool) Reply {
	return Reply{ID: w.Name, Version: w.Version, Queue: q.Name, LeaseMS: q.LeaseMS, MaxDeliver: q.MaxDeliver, MaxRunning: q.MaxRunning,
		RateLimit: q.RateLimit, RatePeriodMS: q.RatePeriodMS, Order: q.Order, Paused: q.Paused, Duplicate: duplicate}
}

// configureQueue sets a queue's settings. The same settings again change
// nothing; with IfUnset, neither do other settings of a queue already
// configured (a queue only paused has the defaults, which it sets). A pause
// outlasts new settings. The reply carries the settings in effect either
// way.
func (x *tx) configureQueue(c *ConfigureQueue) (Reply, error) {
	w, dup, err := x.queueCommand(c.Queue)
	if err != nil {
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
	if c.MaxRunning < -1 || c.MaxRunning > MaxMaxRunning {
		return Reply{}, invalid("/max_running", "must be between 1 and %d jobs, -1 (no limit) or 0 (as it is) (got %d)", MaxMaxRunning, c.MaxRunning)
	}
	if c.MaxRunning != 0 && x.m.Executor {
		// An operator's limit: the executors it holds back may not lift it.
		return Reply{}, &Error{Code: CodeForbidden, Field: "/max_running",
			Message: "only a workspace admin may set a queue's limit of jobs running at once (dwr queue set); an executor configures its lease and deliveries"}
	}
	if c.RateLimit < -1 || c.RateLimit > MaxRateLimit {
		return Reply{}, invalid("/rate_limit", "must be between 1 and %d items a period, -1 (no limit) or 0 (as it is) (got %d)", MaxRateLimit, c.RateLimit)
	}
	if c.RatePeriodMS != 0 && (c.RatePeriodMS < MinRatePeriodMS || c.RatePeriodMS > MaxRatePeriodMS) {
		return Reply{}, invalid("/rate_period_ms", "must be between %d (1s) and %d (24h) milliseconds (got %d)", MinRatePeriodMS, MaxRatePeriodMS, c.RatePeriodMS)
	}
	if c.RatePeriodMS != 0 && c.RateLimit <= 0 {
		return Reply{}, invalid("/rate_period_ms", "goes with a rate_limit of 1 or more: the period of that many items")
	}
	if c.RateLimit != 0 && x.m.Executor {
		return Reply{}, &Error{Code: CodeForbidden, Field: "/rate_limit",
			Message: "only a workspace admin may set a queue's rate limit (dwr queue set); an executor configures its lease and deliveries"}
	}
	switch {
	case c.Order != "" && c.Order != QueueOrderFIFO && c.Order != QueueOrderPriority:
		return Reply{}, invalid("/order", "%q is not one of fifo, priority", c.Order)
	case c.Order != "" && x.m.Executor:
		return Reply{}, &Error{Code: CodeForbidden, Field: "/order",
			Message: "only a workspace admin may set a queue's order (dwr queue set); an executor configures its lease and deliveries"}
	}
	q := w.Queue(c.Queue)
	if q == nil {
		if err := x.openQueue(w.Name, c.Queue, "/queue"); err != nil {
			return Reply{}, err
		}
	}
	running := 0 // no limit: a queue configured before, or -1
	switch {
	case c.MaxRunning > 0:
		running = c.MaxRunning
	case c.MaxRunning == 0 && q != nil:
		running = q.MaxRunning
	}
	var rate int // no limit: a queue configured before, or -1
	var period int64
	switch {
	case c.RateLimit > 0:
		rate, period = c.RateLimit, cmp.Or(c.RatePeriodMS, DefaultRatePeriodMS)
	case c.RateLimit == 0 && q != nil:
		rate, period = q.RateLimit, q.RatePeriodMS
	}
	var order string // fifo: a queue configured before, or fifo
	switch {
	case c.Order == QueueOrderPriority:
		order = c.Order
	case c.Order == "" && q != nil:
		order = q.Order
	}
	if q != nil && !q.DefaultSettings && (c.IfUnset || (q.LeaseMS == c.LeaseMS && q.MaxDeliver == c.MaxDeliver && q.MaxRunning == running &&
		q.RateLimit == rate && q.RatePeriodMS == period && q.Order == order)) {
		return queueReply(w, q, true), nil
	}
	if err := x.emit(w.Name, &QueueConfigured{Queue: c.Queue, LeaseMS: c.LeaseMS, MaxDeliver: c.MaxDeliver, MaxRunning: running,
		RateLimit: rate, RatePeriodMS: period, Order: order}); err != nil {
		return Reply{}, err
	}
	w, _ = x.o.Workspace(w.Name)
	return queueReply(w, w.Queue(c.Queue), false), nil
}

// pauseQueue pauses (queue.pause) or resumes (queue.resume) a queue of the
// command's workspace. Pausing a queue as it is changes nothing; a queue
// without settings is paused with the defaults (it counts as a queue as a
// configured one does). Resuming a queue that is not paused changes
// nothing, and one that does not stand is not found.
func (x *tx) pauseQueue(queue string, pause bool) (Reply, error) {
	w, dup, err := x.queueCommand(queue)
	if err != nil {
		return Reply{}, err
	}
	q := w.Queue(queue)
	switch {
	case dup && q != nil:
		return queueReply(w, q, true), nil
	case dup:
		return workspaceReply(w, true), nil
	case q != nil && q.Paused == pause:
		return queueReply(w, q, true), nil
	case q == nil && !pause:
		u, err := x.o.QueueUse(w.Name, queue)
		if err != nil {
			return Reply{}, err
		}
		if !u.Stands {
			return Reply{}, notFound("/queue", "queue %q does not stand in workspace %q (dwr queue ls)", queue, w.Name)
		}
		return workspaceReply(w, true), nil // a queue never paused
	case q == nil:
		if err := x.openQueue(w.Name, queue, "/queue"); err != nil {
			return Reply{}, err
		}
	}
	var e Event = &QueueResumed{Queue: queue}
	if pause {
		e = &QueuePaused{Queue: queue}
	}
	if err := x.emit(w.Name, e); err != nil {
		return Reply{}, err
	}
	w, _ = x.o.Workspace(w.Name)
	return queueReply(w, w.Queue(queue), false), nil
}

// queueCommand is the workspace of a command about queue (its name checked
// at /queue), and whether the command was applied to it already.
func (x *tx) queueCommand(queue string) (*Workspace, bool, error) {
	w, dup, err := x.commandWorkspace()
	if err != nil {
		return nil, false, err
	}
	return w, dup, checkName("/queue", "queue", queue)
}
