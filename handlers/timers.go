package handlers

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
)

// timerPoll bounds how long the timer loop sleeps without looking again, so
// that a clock that moves (tests, or a wall clock step) is noticed.
const timerPoll = time.Second

// runTimers fires the durable timers that are due — backoffs, attempt
// deadlines, timed waits — while this replica is the writer. The timers live
// in the views (derived from the log), so one whose moment passed while no
// writer ran fires as soon as one does; each firing carries the timer's own
// command id, so it applies once. The domain refuses a timer that is early.
func (s *Service) runTimers(ctx context.Context, wake <-chan struct{}) {
	// A timer read again as due before the views applied its firing is
	// not fired again: it is decided (its lateness observed) once.
	var fired sync.Map // command id → the sequence of its firing
	after := ""        // the workspace the last round served last
	for ctx.Err() == nil {
		applied := s.store.Checkpoint()
		fired.Range(func(id, seq any) bool {
			if seq.(uint64) <= applied { // the views no longer list it as due
				fired.Delete(id)
			}
			return true
		})
		now := s.cfg.Clock()
		page, err := s.store.DueTimers(now, timersPerRound, timersPerWorkspace, after)
		if err != nil {
			s.cfg.Logger.Error("handlers: reading due timers", "err", err)
		}
		due := page.Timers
		after = page.Next
		// Fire them together: they are decided in the same batches.
		var failed atomic.Bool
		var wg sync.WaitGroup
		skipped := 0
		for _, t := range due {
			if _, ok := fired.Load(t.CommandID()); ok {
				skipped++
				continue
			}
			wg.Go(func() {
				o := s.execute(ctx, &domain.FireTimer{TaskID: t.TaskID, GoalID: t.GoalID, Schedule: t.Schedule, Kind: t.Kind, Attempt: t.Attempt, Due: t.Due},
					domain.Meta{Workspace: t.Workspace, CommandID: t.CommandID(), Actor: actorTimer})
				if o.Err != nil {
					// A full disk is logged once, where it is watched.
					if ctx.Err() == nil && !errors.Is(o.Err, errNotWriter) && !errors.Is(o.Err, eventstore.ErrStopped) && !errors.Is(o.Err, eventstore.ErrStorageFull) {
						s.cfg.Logger.Warn("handlers: firing a timer failed; will retry", "task", t.TaskID, "schedule", t.Schedule, "kind", t.Kind, "err", o.Err)
					}
					failed.Store(true)
					return
				}
				fired.Store(t.CommandID(), o.Seq)
				s.metrics.timerFired(t.Kind, t.Due, s.cfg.Clock())
			})
		}
		wg.Wait()
		stuck := failed.Load()
		if page.More && !stuck && skipped < len(due) {
			continue // more are due
		}
		wait := timerPoll
		if next, ok, err := s.store.NextTimer(); err == nil && ok && !stuck {
			wait = min(max(next.Due.Sub(s.cfg.Clock()), time.Millisecond), timerPoll)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-wake:
		case <-ctx.Done():
		}
		t.Stop()
	}
}

// A round of the timer loop fires up to timersPerRound timers together,
// up to timersPerWorkspace of each workspace before more of any: one
// workspace's flood of timers due at once (say, a million waits that end
// at the same moment) does not put another's behind all of it.
const (
	timersPerRound     = 256
	timersPerWorkspace = 32
)

// WakeTimers makes the writer's timer loop look for due timers at once
// instead of at its next poll (at most timerPoll later): a test that moves
// its clock calls it so as not to wait. It never blocks, and it does nothing
// when this replica is not the writer.
func (s *Service) WakeTimers() {
	s.mu.RLock()
	wake := s.timerWake
	s.mu.RUnlock()
	if wake == nil {
		return
	}
	select {
	case wake <- struct{}{}:
	default: // a wake is already pending
	}
}

// setsTimer reports whether a committed record may have added a timer.
func setsTimer(c *eventstore.Commit) bool {
	for i := range c.Events {
		switch c.Events[i].Type {
		case "task.backoff_scheduled", "task.attempt_started", "task.waiting", "task.created", "goal.created",
			"task.approval_requested", "schedule.created", "schedule.resumed", "schedule.fired", "schedule.skipped":
			return true
		}
	}
	return false
}
