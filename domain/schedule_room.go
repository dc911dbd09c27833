package domain

import (
	"fmt"
	"strings"
)

// ScheduleCounter is a World that knows how many schedules each workspace
// has (deleted ones left out), and the most it may have: each schedule's
// slots are fired by the service's own timers, which every workspace's
// timers wait behind, so a member cannot make schedules without end. A
// World without it bounds none.
type ScheduleCounter interface {
	ScheduleCount(ws string) (n, most int, err error)
}

// ScheduleCount is the base's count of the schedules of ws, with those the
// overlay's commands created counted in and those they deleted counted
// out; most is 0 (no bound) when the base counts none.
func (o *Overlay) ScheduleCount(ws string) (n, most int, err error) {
	sc, ok := o.base.(ScheduleCounter)
	if !ok {
		return 0, 0, nil
	}
	if n, most, err = sc.ScheduleCount(ws); err != nil || most <= 0 {
		return n, most, err
	}
	prefix := ScheduleID(ws, "")
	for id, s := range o.schedules {
		if !strings.HasPrefix(id, prefix) {
			continue
		}
		before, err := o.base.Schedule(id)
		if err != nil {
			return 0, 0, err
		}
		n += stands(s) - stands(before)
	}
	return n, most, nil
}

// stands is 1 for a schedule that stands (not deleted), else 0.
func stands(s *Schedule) int {
	if s == nil || s.Deleted {
		return 0
	}
	return 1
}

// roomForSchedule refuses a new schedule of ws past the bound on its
// schedules.
func (x *tx) roomForSchedule(ws string) error {
	n, most, err := x.o.ScheduleCount(ws)
	if err != nil {
		return err
	}
	if most > 0 && n >= most {
		return NoRoomForSchedule(ws, n)
	}
	return nil
}

// NoRoomForSchedule is the refusal of a new schedule of ws, which has n
// schedules, the most it may have.
func NoRoomForSchedule(ws string, n int) error {
	return &Error{Code: CodeConflict, Field: "/name", Message: fmt.Sprintf(
		"workspace %q has %d schedules, the most it may have: delete one it no longer needs first (dwr schedule list; dwr schedule delete NAME; the bound is dwr serve --max-schedules-per-workspace)",
		ws, n)}
}
