package domain

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dwr-run/dwr/schemas"
)

func (x *tx) createSchedule(c *CreateSchedule) (Reply, error) {
	if err := checkName("/name", "schedule", c.Name); err != nil {
		return Reply{}, err
	}
	spec, err := completeSpec(c.ScheduleSpec)
	if err != nil {
		return Reply{}, err
	}
	sl, err := newSlots(spec, x.m.Now)
	if err != nil {
		return Reply{}, err
	}
	next := sl.after(x.m.Now)
	if next.IsZero() {
		return Reply{}, invalid("/cron", "%q has no slot in the next five years", spec.Cron)
	}
	// The goal each slot starts: refused now rather than at every slot.
	if _, err := x.trialGoal(spec, next); err != nil {
		return Reply{}, err
	}
	id := ScheduleID(x.m.Workspace, c.Name)
	s, err := x.o.Schedule(id)
	if err != nil {
		return Reply{}, err
	}
	if s != nil && !s.Deleted {
		if s.HasCommand(x.m.Key()) || sameSpec(s.ScheduleSpec, spec) {
			return Reply{ID: c.Name, Version: s.Version, Duplicate: true}, nil
		}
		return Reply{}, conflict("schedule %q already exists with another spec: delete it first (dwr schedule delete %s)", c.Name, c.Name)
	}
	if err := x.roomForSchedule(x.m.Workspace); err != nil {
		return Reply{}, err
	}
	if err := x.emit(id, &ScheduleCreated{Name: c.Name, ScheduleSpec: spec, NextSlot: next}); err != nil {
		return Reply{}, err
	}
	s, err = x.o.Schedule(id)
	if err != nil {
		return Reply{}, err
	}
	return Reply{ID: c.Name, Version: s.Version}, nil
}

// completeSpec returns spec with its defaults filled in and its goal and
// tasks compacted, or invalid naming the field that is not one.
func completeSpec(spec ScheduleSpec) (ScheduleSpec, error) {
	if spec.TimeZone == "" {
		spec.TimeZone = "UTC"
	}
	switch spec.CatchUp {
	case "":
		spec.CatchUp = schemas.CatchUpOne
	case schemas.CatchUpSkip, schemas.CatchUpOne, schemas.CatchUpAll:
	default:
		return spec, invalid("/catch_up", "%q is not one of skip, one, all", spec.CatchUp)
	}
	switch spec.Overlap {
	case "":
		spec.Overlap = schemas.OverlapSkip
	case schemas.OverlapSkip, schemas.OverlapAllow:
	default:
		return spec, invalid("/overlap", "%q is not one of skip, allow", spec.Overlap)
	}
	var err error
	if spec.Goal, err = compactJSON("/goal", spec.Goal); err != nil {
		return spec, err
	}
	spec.Tasks, err = compactJSON("/tasks", spec.Tasks)
	return spec, err
}

func compactJSON(field string, b json.RawMessage) (json.RawMessage, error) {
	if len(b) == 0 {
		return nil, invalid(field, "is required")
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return nil, invalid(field, "is not JSON: %v", err)
	}
	return out.Bytes(), nil
}

// sameSpec reports whether a and b say the same in canonical JSON.
func sameSpec(a, b ScheduleSpec) bool {
	canon := func(s ScheduleSpec) []byte {
		raw, err := json.Marshal(s)
		if err != nil {
			return nil
		}
		c, err := schemas.CanonicalJSON(raw)
		if err != nil {
			return nil
		}
		return c
	}
	ca := canon(a)
	return ca != nil && bytes.Equal(ca, canon(b))
}

// scheduleGoal returns the goal.create a schedule's slot makes, as the
// wire would carry it, or invalid naming the field of the spec at fault.
func scheduleGoal(spec ScheduleSpec, goalID string) (*CreateGoal, error) {
	var goal map[string]json.RawMessage
	if err := json.Unmarshal(spec.Goal, &goal); err != nil || goal == nil {
		return nil, invalid("/goal", "must be an object: what goal.create takes, without goal_id and tasks")
	}
	for _, k := range []string{"goal_id", "tasks"} {
		if _, ok := goal[k]; ok {
			return nil, invalid("/goal/"+k, "is the schedule's own: each slot's goal has an id derived from the slot, and its tasks are the schedule's tasks")
		}
	}
	goal["goal_id"], _ = json.Marshal(goalID)
	goal["tasks"] = spec.Tasks
	body, err := json.Marshal(goal)
	if err != nil {
		return nil, invalid("/goal", "does not encode: %v", err)
	}
	if len(body) > MaxRenderedBytes {
		return nil, &Error{Code: CodeTooLarge, Field: "/tasks", Message: fmt.Sprintf("the goal and tasks are more than a goal.create may hold (%d bytes)", MaxRenderedBytes)}
	}
	if err := schemas.ValidateCommand("goal.create", body); err != nil {
		return nil, asScheduleField(err)
	}
	var cg CreateGoal
	if err := json.Unmarshal(body, &cg); err != nil {
		return nil, invalid("/goal", "does not decode as goal.create: %v", err)
	}
	return &cg, nil
}

// trialGoal decides, without keeping it, the goal slot would start: a
// refusal names the schedule's field at fault.
func (x *tx) trialGoal(spec ScheduleSpec, slot time.Time) (*CreateGoal, error) {
	cg, err := scheduleGoal(spec, DeriveID(slot, "trial"))
	if err != nil {
		return nil, err
	}
	if _, err := Execute(x.o, cg, x.m); err != nil {
		return nil, asScheduleField(err)
	}
	return cg, nil
}

// asScheduleField returns err, a refusal of a goal.create made from a
// schedule's spec, naming the spec's field: "/tasks/..." stays, any other
// becomes "/goal/...".
func asScheduleField(err error) error {
	err = asDomainError(err)
	var de *Error
	if !errors.As(err, &de) {
		return err
	}
	out := *de
	if !strings.HasPrefix(out.Field, "/tasks") {
		out.Field = "/goal" + out.Field
	}
	out.Message = "the goal a slot starts would be refused: " + de.Message
	return &out
}

// schedule returns the live schedule name of this workspace, or not_found
// naming /name.
func (x *tx) schedule(name string) (string, *Schedule, error) {
	if err := checkName("/name", "schedule", name); err != nil {
		return "", nil, err
	}
	id := ScheduleID(x.m.Workspace, name)
	s, err := x.o.Schedule(id)
	if err != nil {
		return "", nil, err
	}
	if s == nil || s.Deleted && !s.HasCommand(x.m.Key()) {
		return "", nil, notFound("/name", "schedule %q not found in workspace %q", name, x.m.Workspace)
	}
	return id, s, nil
}

func (x *tx) pauseSchedule(c *PauseSchedule) (Reply, error) {
	id, s, err := x.schedule(c.Name)
	if err != nil || s.HasCommand(x.m.Key()) || s.Paused {
		return Reply{ID: c.Name, Version: versionOf(s), Duplicate: err == nil}, err
	}
	return x.emitSchedule(id, c.Name, &SchedulePaused{})
}

func (x *tx) resumeSchedule(c *ResumeSchedule) (Reply, error) {
	id, s, err := x.schedule(c.Name)
	if err != nil || s.HasCommand(x.m.Key()) || !s.Paused {
		return Reply{ID: c.Name, Version: versionOf(s), Duplicate: err == nil}, err
	}
	sl, err := newSlots(s.ScheduleSpec, s.CreatedAt)
	if err != nil {
		return Reply{}, err
	}
	return x.emitSchedule(id, c.Name, &ScheduleResumed{NextSlot: sl.after(x.m.Now)})
}

func (x *tx) deleteSchedule(c *DeleteSchedule) (Reply, error) {
	id, s, err := x.schedule(c.Name)
	if err != nil || s.HasCommand(x.m.Key()) {
		return Reply{ID: c.Name, Version: versionOf(s), Duplicate: err == nil}, err
	}
	return x.emitSchedule(id, c.Name, &ScheduleDeleted{})
}

func versionOf(s *Schedule) uint64 {
	if s == nil {
		return 0
	}
	return s.Version
}

// emitSchedule emits e to schedule id and answers its new version.
func (x *tx) emitSchedule(id, name string, e Event) (Reply, error) {
	if err := x.emit(id, e); err != nil {
		return Reply{}, err
	}
	s, err := x.o.Schedule(id)
	if err != nil {
		return Reply{}, err
	}
	return Reply{ID: name, Version: s.Version}, nil
}

// fireSchedule decides the slots of a schedule due by now: the goals they
// start, made in this commit, and the slots skipped; then the schedule
// waits for its first slot after now. A stale timer (the schedule paused,
// deleted or fired since) changes nothing; an early one is refused.
func (x *tx) fireSchedule(c *FireTimer) (Reply, error) {
	id := ScheduleID(x.m.Workspace, c.Schedule)
	s, err := x.o.Schedule(id)
	if err != nil {
		return Reply{}, err
	}
	if s == nil || s.Deleted || s.NextSlot == nil || !s.NextSlot.Equal(c.Due) {
		return Reply{ID: c.Schedule, Version: versionOf(s), Duplicate: true}, nil
	}
	if x.m.Now.Before(*s.NextSlot) {
		return Reply{}, conflict("schedule %s is not due until %s", c.Schedule, s.NextSlot.Format(time.RFC3339Nano))
	}
	sl, err := newSlots(s.ScheduleSpec, s.CreatedAt)
	if err != nil {
		return Reply{}, err
	}
	due, n, before := sl.due(*s.NextSlot, x.m.Now)
	start, missed := pickSlots(s.CatchUp, due, n, x.m.Now)
	f := &firing{x: x, id: id, s: s, next: sl.after(x.m.Now)}
	if missed > 0 {
		last := before // the latest missed slot
		if k := len(due) - len(start); k > 0 {
			last = due[k-1]
		}
		if err := f.skip(*s.NextSlot, last, missed, schemas.SkipMissed); err != nil {
			return Reply{}, err
		}
	}
	if len(start) > 0 && s.Overlap == schemas.OverlapSkip && f.lastGoalOpen() {
		// The schedule then waits for that goal to end rather than for
		// each slot, so that a goal that stays open costs one record, not
		// one a slot (onScheduledGoalEnded).
		err := f.x.emit(f.id, &ScheduleSkipped{Slot: start[len(start)-1], First: start[0], Count: len(start),
			Reason: schemas.SkipOverlap, WaitsFor: s.LastGoal})
		return f.reply(err)
	}
	for _, slot := range start {
		if err := f.start(slot); err != nil {
			return Reply{}, err
		}
	}
	return f.reply(nil)
}

// pickSlots returns the slots of due (the latest of n, oldest first) that
// catchUp starts, and how many of the n it leaves out: every on-time slot
// (at most OnTime old) starts; of the late ones, all starts all (up to
// MaxSlotsPerFiring), one the latest when none is on time, skip none.
func pickSlots(catchUp string, due []time.Time, n int, now time.Time) (start []time.Time, missed int) {
	onTime := 0
	for i := len(due) - 1; i >= 0 && now.Sub(due[i]) <= OnTime; i-- {
		onTime++
	}
	switch {
	case catchUp == schemas.CatchUpAll:
		start = due
	case onTime > 0:
		start = due[len(due)-onTime:]
	case catchUp == schemas.CatchUpOne && len(due) > 0:
		start = due[len(due)-1:]
	}
	return start, n - len(start)
}

// firing is one firing of a schedule being decided.
type firing struct {
	x    *tx
	id   string
	s    *Schedule
	next time.Time
}

// lastGoalOpen reports whether the goal the schedule started last, before
// this firing, is still open.
func (f *firing) lastGoalOpen() bool {
	if f.s.LastGoal == "" {
		return false
	}
	g, err := f.x.o.Goal(f.s.LastGoal)
	return err == nil && g != nil && g.State == GoalStateOpen
}

func (f *firing) skip(first, last time.Time, count int, reason string) error {
	return f.x.emit(f.id, &ScheduleSkipped{Slot: last, First: first, Count: count, Reason: reason, NextSlot: f.next})
}

// start makes the goal of slot, as goal.create with tasks would, and
// records it fired.
func (f *firing) start(slot time.Time) error {
	goalID := ScheduleGoalID(f.id, slot)
	cg, err := scheduleGoal(f.s.ScheduleSpec, goalID)
	if err != nil {
		return err
	}
	if g, err := f.x.o.Goal(goalID); err != nil || g != nil {
		return err // made already: a slot makes one goal
	}
	if _, err := Execute(f.x.o, cg, f.x.m); err != nil {
		// Refused now (the workspace changed since the schedule was
		// made): recorded, and the schedule goes on.
		return f.skip(slot, slot, 1, schemas.SkipRefused)
	}
	if _, err := f.x.createGoalFrom(cg, goalOrigin{schedule: &ScheduleRef{Name: f.s.Name, Slot: slot}}); err != nil {
		return fmt.Errorf("domain: schedule %s: the goal of slot %s: %w", f.id, slot.Format(time.RFC3339), err)
	}
	return f.x.emit(f.id, &ScheduleFired{Slot: slot, GoalID: goalID, NextSlot: f.next})
}

func (f *firing) reply(err error) (Reply, error) {
	if err != nil {
		return Reply{}, err
	}
	s, err := f.x.o.Schedule(f.id)
	if err != nil {
		return Reply{}, err
	}
	return Reply{ID: f.s.Name, Version: s.Version}, nil
}

// onScheduledGoalEnded makes the schedule that waits for goal id's end (an
// overlap skip found it open) wait for its next slot again: the slots that
// passed meanwhile are recorded skipped (overlap) in one event, which
// names the next slot; when none passed, the schedule resumes from it.
func (x *tx) onScheduledGoalEnded(id string) error {
	g, err := x.o.Goal(id)
	if err != nil || g == nil || g.Schedule == nil {
		return err
	}
	sid := ScheduleID(g.Workspace, g.Schedule.Name)
	s, err := x.o.Schedule(sid)
	if err != nil || s == nil || s.Deleted || s.Paused || s.WaitsFor != g.ID {
		return err
	}
	sl, err := newSlots(s.ScheduleSpec, s.CreatedAt)
	if err != nil {
		return err
	}
	next := sl.after(x.m.Now)
	if s.LastSlot != nil {
		if first := sl.after(*s.LastSlot); !first.IsZero() && !first.After(x.m.Now) {
			due, n, _ := sl.due(first, x.m.Now) // first is due: due holds it, or later slots
			return x.emit(sid, &ScheduleSkipped{Slot: due[len(due)-1], First: first, Count: n, Reason: schemas.SkipOverlap, NextSlot: next})
		}
	}
	return x.emit(sid, &ScheduleResumed{NextSlot: next, GoalID: g.ID})
}
