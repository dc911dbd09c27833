package projections

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/dwr-run/dwr/domain"
)

// Timer is a moment a task, a goal or a schedule waits for: the end of a backoff, an
// attempt's, a task's or a goal's deadline, an approval's expiry, the
// time a waiting task resumes, or a schedule's next slot. The writer fires each one
// (domain.FireTimer) when it is due; the index is derived from the tasks'
// state, so it is rebuilt with the views and survives every restart.
type Timer struct {
	Due       time.Time
	Workspace string
	TaskID    string // the task, for every kind but domain.TimerGoal
	GoalID    string // the goal, for domain.TimerGoal
	// Schedule is, for domain.TimerSchedule, the schedule's name.
	Schedule string
	Kind     string // domain.TimerBackoff, TimerAttempt, TimerWait, TimerTask, TimerApproval, TimerGoal or TimerSchedule
	Attempt  int    // the attempt, for TimerAttempt; the approval's number, for TimerApproval
}

// id returns the aggregate the timer belongs to.
func (t Timer) id() string {
	switch t.Kind {
	case domain.TimerGoal:
		return t.GoalID
	case domain.TimerSchedule:
		return domain.ScheduleID(t.Workspace, t.Schedule)
	}
	return t.TaskID
}

// CommandID returns the idempotency key of firing t: the same timer fired
// twice (say, before and after a restart) is applied once.
func (t Timer) CommandID() string {
	return fmt.Sprintf("timer.%s.%s.%d.%d", t.id(), t.Kind, t.Attempt, t.Due.UnixNano())
}

// timersOf returns the timers a task in state t waits for.
func timersOf(t *domain.Task) []Timer {
	if t == nil || domain.Terminal(t.State) {
		return nil
	}
	var out []Timer
	add := func(due time.Time, kind string, attempt int) {
		out = append(out, Timer{Due: due, Workspace: t.Workspace, TaskID: t.ID, Kind: kind, Attempt: attempt})
	}
	switch {
	case t.State == domain.StateBackoff && t.BackoffUntil != nil:
		add(*t.BackoffUntil, domain.TimerBackoff, 0)
	case t.State == domain.StateWaiting && t.Wait != nil && t.Wait.Kind == domain.WaitTimer && t.Wait.Until != nil:
		add(*t.Wait.Until, domain.TimerWait, 0)
	}
	if a := t.Running(); a != nil && a.Deadline != nil {
		add(*a.Deadline, domain.TimerAttempt, a.N)
	}
	if t.Spec.Deadline != nil {
		add(*t.Spec.Deadline, domain.TimerTask, 0)
	}
	for i, a := range t.Approvals {
		if a.State == domain.ApprovalStatePending && a.ExpiresAt != nil {
			add(*a.ExpiresAt, domain.TimerApproval, i+1)
		}
	}
	return out
}

const timerPrefixLen = len(pTimer) + 1

func timerKey(t Timer) []byte {
	b := append([]byte(pTimer), '/')
	b = binary.BigEndian.AppendUint64(b, uint64(max(t.Due.UnixNano(), 0))) //nolint:gosec // clamped at 0
	return append(b, "/"+t.id()+"/"+t.Kind+"/"+strconv.Itoa(t.Attempt)...)
}

func parseTimerKey(k, v []byte) (Timer, error) {
	p := timerPrefixLen
	if len(k) < p+9 {
		return Timer{}, fmt.Errorf("projections: malformed timer key %q", k)
	}
	due := int64(binary.BigEndian.Uint64(k[p : p+8])) //nolint:gosec // written from a non-negative int64
	parts := strings.Split(string(k[p+9:]), "/")
	if len(parts) != 3 {
		return Timer{}, fmt.Errorf("projections: malformed timer key %q", k)
	}
	n, err := strconv.Atoi(parts[2])
	if err != nil {
		return Timer{}, fmt.Errorf("projections: malformed timer key %q", k)
	}
	t := Timer{Due: time.Unix(0, due).UTC(), Workspace: string(v), Kind: parts[1], Attempt: n}
	switch t.Kind {
	case domain.TimerGoal:
		t.GoalID = parts[0]
	case domain.TimerSchedule:
		t.Schedule = strings.TrimPrefix(parts[0], t.Workspace+":")
	default:
		t.TaskID = parts[0]
	}
	return t, nil
}

// goalTimersOf returns the timers a goal in state g waits for: its deadline
// while it is open.
func goalTimersOf(g *domain.Goal) []Timer {
	if g == nil || g.State != domain.GoalStateOpen || g.Envelope.Budget.Deadline == nil {
		return nil
	}
	return []Timer{{Due: *g.Envelope.Budget.Deadline, Workspace: g.Workspace, GoalID: g.ID, Kind: domain.TimerGoal}}
}

// scheduleTimersOf returns the timer of a schedule in state x: its next
// slot, unless it is paused or deleted.
func scheduleTimersOf(x *domain.Schedule) []Timer {
	if x == nil || x.Deleted || x.Paused || x.NextSlot == nil {
		return nil
	}
	return []Timer{{Due: *x.NextSlot, Workspace: x.Workspace, Schedule: x.Name, Kind: domain.TimerSchedule}}
}

// moveTimers replaces the timers of a task's state before with those of its
// state after, in batch b.
func moveTimers(b *pebble.Batch, before, after *domain.Task) error {
	return replaceTimers(b, timersOf(before), timersOf(after))
}

// replaceTimers deletes old and sets cur, in batch b.
func replaceTimers(b *pebble.Batch, old, cur []Timer) error {
	for _, t := range old {
		if err := b.Delete(timerKey(t), nil); err != nil {
			return err
		}
	}
	for _, t := range cur {
		if err := b.Set(timerKey(t), []byte(t.Workspace), nil); err != nil {
			return err
		}
	}
	return nil
}

// DueTimers returns up to limit timers due at or before now, earliest first.
func (s *Store) DueTimers(now time.Time, limit int) ([]Timer, error) {
	var out []Timer
	upto := timerKey(Timer{Due: now.Add(time.Nanosecond)})[:timerPrefixLen+8]
	err := s.scanRange([]byte(pTimer+"/"), upto, func(k, v []byte) error {
		if len(out) >= limit {
			return errStop
		}
		t, err := parseTimerKey(k, v)
		if err != nil {
			return err
		}
		out = append(out, t)
		return nil
	})
	return out, err
}

// NextTimer returns the earliest timer, or false when there is none.
func (s *Store) NextTimer() (Timer, bool, error) {
	var out Timer
	found := false
	err := s.scan([]byte(pTimer+"/"), func(k, v []byte) error {
		t, err := parseTimerKey(k, v)
		if err != nil {
			return err
		}
		out, found = t, true
		return errStop
	})
	return out, found, err
}
