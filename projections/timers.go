package projections

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
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

// timerKey returns t's key in the index of every timer by its moment.
func timerKey(t Timer) []byte {
	return appendTimer(append([]byte(pTimer), '/'), t)
}

// timerByWSKey returns t's key in the index of each workspace's timers by
// their moments.
func timerByWSKey(t Timer) []byte {
	return appendTimer(append([]byte(pTimerByWS+"/"), t.Workspace+"/"...), t)
}

// appendTimer appends what follows a timer index's prefix: its moment, its
// aggregate, its kind and its attempt.
func appendTimer(b []byte, t Timer) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(max(t.Due.UnixNano(), 0))) //nolint:gosec // clamped at 0
	return append(b, "/"+t.id()+"/"+t.Kind+"/"+strconv.Itoa(t.Attempt)...)
}

func parseTimerKey(k, v []byte) (Timer, error) {
	if len(k) < timerPrefixLen {
		return Timer{}, fmt.Errorf("projections: malformed timer key %q", k)
	}
	return parseTimer(k, k[timerPrefixLen:], string(v))
}

// parseTimerByWSKey parses a key of the index by workspace.
func parseTimerByWSKey(k []byte) (Timer, error) {
	ws, rest, ok := strings.Cut(string(k[len(pTimerByWS)+1:]), "/")
	if !ok {
		return Timer{}, fmt.Errorf("projections: malformed timer key %q", k)
	}
	return parseTimer(k, []byte(rest), ws)
}

// parseTimer parses what follows a timer key's prefix (k is the whole key,
// for errors).
func parseTimer(k, rest []byte, ws string) (Timer, error) {
	if len(rest) < 9 {
		return Timer{}, fmt.Errorf("projections: malformed timer key %q", k)
	}
	due := int64(binary.BigEndian.Uint64(rest[:8])) //nolint:gosec // written from a non-negative int64
	parts := strings.Split(string(rest[9:]), "/")
	if len(parts) != 3 {
		return Timer{}, fmt.Errorf("projections: malformed timer key %q", k)
	}
	n, err := strconv.Atoi(parts[2])
	if err != nil {
		return Timer{}, fmt.Errorf("projections: malformed timer key %q", k)
	}
	t := Timer{Due: time.Unix(0, due).UTC(), Workspace: ws, Kind: parts[1], Attempt: n}
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

// replaceTimers deletes old and sets cur, in batch b, in both indexes (a
// timer in both is left as it is).
func replaceTimers(b *pebble.Batch, old, cur []Timer) error {
	for _, t := range old {
		if slices.ContainsFunc(cur, t.equal) {
			continue
		}
		if err := b.Delete(timerKey(t), nil); err != nil {
			return err
		}
		if err := b.Delete(timerByWSKey(t), nil); err != nil {
			return err
		}
	}
	for _, t := range cur {
		if slices.ContainsFunc(old, t.equal) {
			continue
		}
		if err := b.Set(timerKey(t), []byte(t.Workspace), nil); err != nil {
			return err
		}
		if err := b.Set(timerByWSKey(t), nil, nil); err != nil {
			return err
		}
	}
	return nil
}

func (t Timer) equal(o Timer) bool {
	return t.Due.Equal(o.Due) && t.Workspace == o.Workspace && t.TaskID == o.TaskID && t.GoalID == o.GoalID &&
		t.Schedule == o.Schedule && t.Kind == o.Kind && t.Attempt == o.Attempt
}

// indexTimersByWorkspace writes the index of each workspace's timers in
// views written before it was kept, from the index of every timer, once.
func (s *Store) indexTimersByWorkspace() error {
	_, closer, err := s.db.Get([]byte(pTimersByWSKept))
	if err == nil {
		return closer.Close()
	}
	if !errors.Is(err, pebble.ErrNotFound) {
		return fmt.Errorf("%w: read %s: %w", ErrDamaged, pTimersByWSKept, err)
	}
	b := s.db.NewBatch()
	defer func() { _ = b.Close() }()
	err = s.scan([]byte(pTimer+"/"), func(k, v []byte) error {
		t, err := parseTimerKey(k, v)
		if err != nil {
			return err
		}
		return b.Set(timerByWSKey(t), nil, nil)
	})
	if err != nil {
		return fmt.Errorf("%w: index the timers by workspace: %w", ErrDamaged, err)
	}
	if err := b.Set([]byte(pTimersByWSKept), nil, nil); err != nil {
		return err
	}
	return b.Commit(pebble.NoSync)
}

// DuePage is what DueTimers returns: timers due, and where to go on.
type DuePage struct {
	Timers []Timer
	// Next is the workspace the next call should begin after.
	Next string
	// More reports whether timers due were left out.
	More bool
}

// DueTimers returns up to limit timers due at or before now, taking each
// workspace in turn, beginning with the one after the workspace after ("",
// the first): up to per of each (its earliest first), then more of those
// that had more, up to limit. One workspace's many timers due do not hold
// back another's: each call serves every workspace with timers due (while
// limit allows; the next call goes on after the last one served). It costs
// a read of the timers due in the order of their moments when no more
// than limit are (then all are served at once), else a seek per workspace
// that has timers.
func (s *Store) DueTimers(now time.Time, limit, per int, after string) (page DuePage, err error) {
	var first []Timer
	upto := timerKey(Timer{Due: now.Add(time.Nanosecond)})[:timerPrefixLen+8]
	err = s.scanRange([]byte(pTimer+"/"), upto, func(k, v []byte) error {
		if len(first) > limit {
			return errStop
		}
		t, err := parseTimerKey(k, v)
		first = append(first, t)
		return err
	})
	if err != nil || len(first) <= limit {
		return DuePage{Timers: first, Next: after}, err
	}
	return s.dueInTurn(now, limit, per, after)
}

// dueInTurn is DueTimers when more than limit timers are due.
func (s *Store) dueInTurn(now time.Time, limit, per int, after string) (page DuePage, err error) {
	if !s.enter() {
		return DuePage{}, ErrClosed
	}
	defer s.leave()
	defer s.recoverInto(&err)
	s.pebbleGets.Add(1)
	prefix := []byte(pTimerByWS + "/")
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upperBound(prefix)})
	if err != nil {
		return DuePage{}, s.damagedErr(err)
	}
	defer func() { _ = it.Close() }()
	upto := uint64(max(now.UnixNano(), 0)) //nolint:gosec // clamped at 0
	// take appends the timers due of the workspace whose keys begin with
	// ws from the iterator's place on, up to n; it reports whether one due
	// is left, and leaves the iterator on it.
	take := func(ws []byte, n int) (bool, error) {
		for ; it.Valid() && bytes.HasPrefix(it.Key(), ws); it.Next() {
			k := it.Key()
			if len(k) < len(ws)+8 || binary.BigEndian.Uint64(k[len(ws):]) > upto {
				return false, nil
			}
			if n == 0 {
				return true, nil
			}
			t, err := parseTimerByWSKey(k)
			if err != nil {
				return false, err
			}
			page.Timers = append(page.Timers, t)
			n--
		}
		return false, nil
	}
	type rest struct{ ws, from []byte }
	var left []rest
	// The workspaces after after, then from the first to after.
	from, stop := prefix, []byte(nil)
	if after != "" {
		from = append(append(slices.Clone(prefix), after...), '/'+1) // past after's keys
		stop = from
	}
	wrapped := after == ""
	for len(page.Timers) < limit {
		if !it.SeekGE(from) || (wrapped && stop != nil && bytes.Compare(it.Key(), stop) >= 0) {
			if wrapped {
				break
			}
			wrapped, from = true, prefix
			continue
		}
		k := it.Key()
		end := bytes.IndexByte(k[len(prefix):], '/')
		if end < 0 {
			return DuePage{}, fmt.Errorf("projections: malformed timer key %q", k)
		}
		ws := slices.Clone(k[:len(prefix)+end+1]) // <prefix><workspace>/
		page.Next = string(ws[len(prefix) : len(ws)-1])
		more, err := take(ws, min(per, limit-len(page.Timers)))
		if err != nil {
			return DuePage{}, err
		}
		if more {
			left = append(left, rest{ws, slices.Clone(it.Key())})
		}
		from = append(ws[:len(ws)-1:len(ws)-1], '/'+1) // past the workspace's keys
	}
	page.More = len(page.Timers) == limit // workspaces not looked at may have timers due
	for _, r := range left {
		it.SeekGE(r.from)
		more, err := take(r.ws, limit-len(page.Timers))
		if err != nil {
			return DuePage{}, err
		}
		page.More = page.More || more
	}
	return page, s.damagedErr(it.Error())
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
