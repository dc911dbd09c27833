package domain

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/dwr-run/dwr/schemas"
)

// A schedule starts a goal with its first plan at each of its slots — the
// moments of a cron spec, or every period from its creation — in its time
// zone. The schedule keeps its next slot, which the views turn into a
// durable timer (TimerSchedule); firing it decides, once in the log, the
// goals of every slot due by then, in the same commit as its events.
type (
	// Schedule is the state of a schedule aggregate.
	Schedule = schemas.Schedule
	// ScheduleSpec is what a schedule fires and when.
	ScheduleSpec = schemas.ScheduleSpec
	// ScheduleRef names the schedule and the slot a goal was started for.
	ScheduleRef = schemas.ScheduleRef
)

// ScheduleCreated records a schedule, its spec as the defaults complete
// it, and its first slot.
type ScheduleCreated struct {
	Name string `json:"name"`
	ScheduleSpec
	NextSlot time.Time `json:"next_slot"`
}

// SchedulePaused records that a schedule fires no more until resumed.
type SchedulePaused struct{}

// ScheduleResumed records that a paused schedule fires again, from
// NextSlot, the first slot after it was resumed — or, with GoalID, that the
// goal the schedule waited for ended before its next slot.
type ScheduleResumed struct {
	NextSlot time.Time `json:"next_slot"`
	GoalID   string    `json:"goal_id,omitempty"`
}

// ScheduleDeleted records the end of a schedule.
type ScheduleDeleted struct{}

// ScheduleFired records that a slot started the goal GoalID (created in
// the same commit). NextSlot is the slot the schedule waits for next.
type ScheduleFired struct {
	Slot     time.Time `json:"slot"`
	GoalID   string    `json:"goal_id"`
	NextSlot time.Time `json:"next_slot"`
}

// ScheduleSkipped records that Count slots, from First to Slot, started no
// goal, for Reason (schemas.SkipMissed, SkipOverlap, SkipRefused). NextSlot
// is the slot the schedule waits for next (zero: none, as when it waits
// for a goal).
type ScheduleSkipped struct {
	Slot     time.Time `json:"slot"`
	First    time.Time `json:"first"`
	Count    int       `json:"count"`
	Reason   string    `json:"reason"`
	NextSlot time.Time `json:"next_slot,omitzero"`
	// WaitsFor, with SkipOverlap, is the open goal whose end the schedule
	// waits for instead of a slot (NextSlot is zero): a schedule whose goal
	// stays open records nothing until it ends.
	WaitsFor string `json:"waits_for,omitempty"`
}

// TimerSchedule is a schedule's next slot; FireTimer.Schedule names it.
const TimerSchedule = "schedule"

// MaxSlotsPerFiring bounds the goals one firing starts; older due slots are
// recorded skipped (missed).
const MaxSlotsPerFiring = 100

// OnTime is how old a slot may be and still count as on time: a firing
// starts every on-time slot whatever its catch-up policy.
const OnTime = time.Minute

// MinEvery is the shortest period of an every schedule.
const MinEvery = time.Second

// ScheduleID returns the aggregate id of the schedule name of workspace ws:
// "<ws>:<name>" (names hold no ':').
func ScheduleID(ws, name string) string { return ws + ":" + name }

// ScheduleGoalID returns the id of the goal that slot of schedule id
// starts: derived from both, so that a slot can never make two goals.
func ScheduleGoalID(id string, slot time.Time) string {
	return DeriveID(slot, "schedule/"+id+"/"+slot.UTC().Format(time.RFC3339Nano))
}

// slots computes a schedule's slots.
type slots struct {
	cron   cron.Schedule      // nil for every
	spec   *cron.SpecSchedule // cron's bit sets, for counting its slots a day at a time (dueCron); nil: walked
	every  time.Duration
	anchor time.Time // every's slots are anchor + k*every
	loc    *time.Location
}

// newSlots returns the slot computation of spec, anchored at anchor (its
// creation), or invalid naming /cron, /every or /time_zone. Zone data is
// read with time.LoadLocation.
func newSlots(spec ScheduleSpec, anchor time.Time) (*slots, error) {
	loc, err := loadZone(spec.TimeZone)
	if err != nil {
		return nil, err
	}
	switch {
	case spec.Cron != "" && spec.Every != 0:
		return nil, invalid("/every", "a schedule has cron or every, not both")
	case spec.Cron != "":
		if strings.HasPrefix(strings.TrimSpace(spec.Cron), "@every") {
			return nil, invalid("/cron", "@every is not a cron spec here: give every instead (dwr schedule create --every 10m)")
		}
		c, err := cron.ParseStandard(spec.Cron)
		if err != nil {
			return nil, invalid("/cron", "%q is not a cron spec (5 fields: minute hour day-of-month month day-of-week, or @hourly, @daily...): %v", spec.Cron, err)
		}
		spec, _ := c.(*cron.SpecSchedule)
		return &slots{cron: c, spec: spec, loc: loc}, nil
	case spec.Every < schemas.Duration(MinEvery):
		if spec.Every == 0 {
			return nil, invalid("/cron", "a schedule needs cron or every")
		}
		return nil, invalid("/every", "is %s; a schedule's period is at least %s", spec.Every.D(), MinEvery)
	}
	return &slots{every: spec.Every.D(), anchor: anchor, loc: loc}, nil
}

func loadZone(name string) (*time.Location, error) {
	if name == "Local" {
		return nil, invalid("/time_zone", "the service's local zone is not a schedule's zone: name one, such as Europe/Paris, or UTC")
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, invalid("/time_zone", "%q is not a time zone: give an IANA name such as Europe/Paris, or UTC", name)
	}
	return loc, nil
}

// after returns the first slot strictly after t, in UTC, or the zero time
// when there is none (a cron spec that never matches).
func (s *slots) after(t time.Time) time.Time {
	if s.cron == nil {
		k := t.Sub(s.anchor)/s.every + 1
		if t.Before(s.anchor) {
			k = 0
		}
		return s.anchor.Add(k * s.every).UTC()
	}
	next := s.cron.Next(t.In(s.loc))
	if next.IsZero() {
		return next
	}
	return next.UTC()
}

// due lists the slots from first up to now: the latest MaxSlotsPerFiring
// of them, oldest first, how many there were in all, and the slot just
// before the ones listed (zero when they are all).
func (s *slots) due(first, now time.Time) (latest []time.Time, n int, before time.Time) {
	if first.IsZero() || first.After(now) {
		return nil, 0, time.Time{}
	}
	if s.cron == nil {
		n = int(now.Sub(first)/s.every) + 1
		k := max(n-MaxSlotsPerFiring, 0)
		if k > 0 {
			before = first.Add(time.Duration(k-1) * s.every).UTC()
		}
		for i := k; i < n; i++ {
			latest = append(latest, first.Add(time.Duration(i)*s.every).UTC())
		}
		return latest, n, before
	}
	return s.dueCron(first, now)
}

// ApplySchedule applies e to x (nil before the first event) and returns the
// new state; x itself is not modified.
func ApplySchedule(x *Schedule, id, workspace string, e Event, r Recorded) (*Schedule, error) {
	if ev, ok := e.(*ScheduleCreated); ok {
		if x != nil && !x.Deleted {
			return nil, fmt.Errorf("domain: schedule %s created twice", id)
		}
		s := &Schedule{Workspace: workspace, Name: ev.Name, ScheduleSpec: ev.ScheduleSpec, NextSlot: slotAt(ev.NextSlot), Versioned: created(r)}
		if x != nil { // created again after a delete: its versions go on
			s.Versioned = x.Versioned
			s.Commands = append([]string(nil), x.Commands...)
			s.CreatedAt = r.Time
			applied(&s.Versioned, r)
		}
		return s, nil
	}
	if x == nil || x.Deleted {
		return nil, fmt.Errorf("domain: %s of schedule %s, which does not exist", e.EventType(), id)
	}
	x = x.Clone()
	switch ev := e.(type) {
	case *SchedulePaused:
		x.Paused, x.NextSlot, x.WaitsFor = true, nil, ""
	case *ScheduleResumed:
		x.Paused, x.NextSlot, x.WaitsFor = false, slotAt(ev.NextSlot), ""
	case *ScheduleDeleted:
		x.Deleted, x.Paused, x.NextSlot, x.WaitsFor = true, false, nil, ""
	case *ScheduleFired:
		slot := ev.Slot
		x.LastSlot, x.LastGoal, x.NextSlot, x.WaitsFor = &slot, ev.GoalID, slotAt(ev.NextSlot), ""
		x.Fired++
	case *ScheduleSkipped:
		slot := ev.Slot
		x.LastSlot, x.NextSlot, x.WaitsFor = &slot, slotAt(ev.NextSlot), ev.WaitsFor
		x.Skipped += uint64(max(ev.Count, 0)) //nolint:gosec // clamped at 0
	default:
		return nil, fmt.Errorf("domain: schedule cannot apply %s", e.EventType())
	}
	if reacted(e) {
		// A firing's command (the timer's) is not kept: a schedule fires
		// without end, and a firing already decided is known by its slot
		// (the timer's due is no longer the next slot). Nor is the command
		// that ended the goal a schedule waited for.
		x.Version++
		x.UpdatedAt = r.Time
	} else {
		applied(&x.Versioned, r)
	}
	return x, nil
}

// reacted reports whether schedule event e was recorded for a firing or a
// goal's end, not for a command sent to the schedule.
func reacted(e Event) bool {
	switch ev := e.(type) {
	case *ScheduleFired, *ScheduleSkipped:
		return true
	case *ScheduleResumed:
		return ev.GoalID != ""
	}
	return false
}

// slotAt returns t, or nil for the zero time (no slot comes).
func slotAt(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
