package domain

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/schemas"
)

// report returns a schedule that starts a one-task goal at each slot of
// spec (a cron spec, or an every period such as "10m").
func report(name, spec string) *CreateSchedule {
	c := &CreateSchedule{Name: name, ScheduleSpec: ScheduleSpec{
		Goal:  json.RawMessage(`{"title": "Report", "success_criteria": ["mailed"]}`),
		Tasks: json.RawMessage(`[{"key": "collect", "queue": "research"}, {"key": "mail", "queue": "mail", "depends_on": ["collect"]}]`),
	}}
	if d, err := time.ParseDuration(spec); err == nil {
		c.Every = schemas.Duration(d)
	} else {
		c.Cron = spec
	}
	return c
}

func (w *world) schedule(name string) *Schedule {
	w.t.Helper()
	return present(w.t, w.o.Schedule, "schedule", ScheduleID(w.ws, name))
}

// fire fires the schedule's timer at its next slot, as the service's
// timers do, at the world's time.
func (w *world) fire(name string) *Outcome {
	w.t.Helper()
	s := w.schedule(name)
	require.NotNil(w.t, s.NextSlot, "schedule %s waits for no slot", name)
	return w.must(&FireTimer{Schedule: name, Kind: TimerSchedule, Due: *s.NextSlot})
}

// goalsOf returns the goals an outcome created, by the slot they were
// started for.
func goalsOf(w *world, out *Outcome) map[time.Time]string {
	got := map[time.Time]string{}
	for _, c := range out.Changes {
		if ev, ok := c.Event.(*GoalCreated); ok {
			require.NotNil(w.t, ev.Schedule)
			got[ev.Schedule.Slot] = c.AggregateID
		}
	}
	return got
}

func TestScheduleCreateRefusesABadSpecNamingTheField(t *testing.T) {
	w := setup(t)
	for _, tc := range []struct {
		field string
		mod   func(c *CreateSchedule)
	}{
		{"/cron", func(c *CreateSchedule) { c.Cron = "61 * * * *" }},
		{"/cron", func(c *CreateSchedule) { c.Cron = "@every 5m" }},
		{"/cron", func(c *CreateSchedule) { c.Cron, c.Every = "", 0 }},
		{"/cron", func(c *CreateSchedule) { c.Cron = "0 0 30 2 *" }}, // February 30th
		{"/every", func(c *CreateSchedule) { c.Every = schemas.Duration(time.Hour) }},
		{"/time_zone", func(c *CreateSchedule) { c.TimeZone = "Mars/Olympus_Mons" }},
		{"/time_zone", func(c *CreateSchedule) { c.TimeZone = "Local" }},
		{"/catch_up", func(c *CreateSchedule) { c.CatchUp = "some" }},
		{"/overlap", func(c *CreateSchedule) { c.Overlap = "queue" }},
		{"/name", func(c *CreateSchedule) { c.Name = "Nightly Report" }},
		{"/goal/title", func(c *CreateSchedule) { c.Goal = json.RawMessage(`{"description": "no title"}`) }},
		{"/goal/goal_id", func(c *CreateSchedule) {
			c.Goal = json.RawMessage(`{"title": "T", "goal_id": "01JWQY7Z60QK2D2PJSCYPTA0E1"}`)
		}},
		{"/tasks/1/depends_on/0", func(c *CreateSchedule) {
			c.Tasks = json.RawMessage(`[{"key": "a", "queue": "q"}, {"key": "b", "queue": "q", "depends_on": ["nope"]}]`)
		}},
	} {
		c := report("nightly", "0 9 * * *")
		tc.mod(c)
		err := w.refused(c, CodeInvalid)
		require.Equal(t, tc.field, err.Field, "%+v: %v", c.ScheduleSpec, err)
	}
	short := report("fast", "500ms")
	require.Equal(t, "/every", w.refused(short, CodeInvalid).Field)
}

func TestScheduleSlotsAreComputedInItsTimeZone(t *testing.T) {
	w := setup(t) // 2030-01-02 03:04:05 UTC: winter, Paris is UTC+1
	c := report("paris", "0 9 * * *")
	c.TimeZone = "Europe/Paris"
	out := w.must(c)
	ev := eventOf[*ScheduleCreated](t, out, ScheduleID(w.ws, "paris"))
	require.Equal(t, time.Date(2030, 1, 2, 8, 0, 0, 0, time.UTC), ev.NextSlot, "09:00 in Paris is 08:00 UTC in winter")
	require.Equal(t, schemas.CatchUpOne, ev.CatchUp, "the defaults are recorded")
	require.Equal(t, schemas.OverlapSkip, ev.Overlap)

	w.must(report("utc", "0 9 * * *"))
	require.Equal(t, time.Date(2030, 1, 2, 9, 0, 0, 0, time.UTC), *w.schedule("utc").NextSlot)
	// Summer: 09:00 in Paris is 07:00 UTC.
	w.now = time.Date(2030, 7, 1, 12, 0, 0, 0, time.UTC)
	c = report("summer", "0 9 * * *")
	c.TimeZone = "Europe/Paris"
	w.must(c)
	require.Equal(t, time.Date(2030, 7, 2, 7, 0, 0, 0, time.UTC), *w.schedule("summer").NextSlot)
	w.requireReplays()
	w.requireReplaysFromWire()
}

func TestScheduleCatchUpAfterTwoMissedSlots(t *testing.T) {
	for _, tc := range []struct {
		catchUp string
		goals   int
	}{{schemas.CatchUpSkip, 0}, {schemas.CatchUpOne, 1}, {schemas.CatchUpAll, 2}} {
		t.Run(tc.catchUp, func(t *testing.T) {
			w := setup(t) // 03:04:05
			c := report("five", "*/5 * * * *")
			c.CatchUp = tc.catchUp
			w.must(c)
			// Down across 03:05 and 03:10; the timer fires at 03:12.
			w.now = time.Date(2030, 1, 2, 3, 12, 0, 0, time.UTC)
			out := w.fire("five")
			goals := goalsOf(w, out)
			require.Len(t, goals, tc.goals)
			s := w.schedule("five")
			require.Equal(t, uint64(tc.goals), s.Fired)
			require.Equal(t, uint64(2-tc.goals), s.Skipped)
			require.Equal(t, time.Date(2030, 1, 2, 3, 10, 0, 0, time.UTC), *s.LastSlot)
			require.Equal(t, time.Date(2030, 1, 2, 3, 15, 0, 0, time.UTC), *s.NextSlot, "the next slot after now")
			if tc.catchUp == schemas.CatchUpOne {
				require.Contains(t, goals, time.Date(2030, 1, 2, 3, 10, 0, 0, time.UTC), "one: the latest slot")
			}
			for slot, id := range goals {
				require.Equal(t, ScheduleGoalID(ScheduleID(w.ws, "five"), slot), id)
				g := w.goal(id)
				require.Equal(t, "Report", g.Title)
				require.Len(t, g.Plan, 2, "the goal and its plan in the same commit")
			}
			w.requireReplays()
			w.requireReplaysFromWire()
		})
	}
}

func TestScheduleSlotOnTimeStartsWhateverItsCatchUp(t *testing.T) {
	w := setup(t)
	c := report("five", "*/5 * * * *")
	c.CatchUp = schemas.CatchUpSkip
	w.must(c)
	w.now = time.Date(2030, 1, 2, 3, 5, 30, 0, time.UTC) // 30s late
	require.Len(t, goalsOf(w, w.fire("five")), 1)
}

func TestScheduleFiresEachSlotOnce(t *testing.T) {
	w := setup(t)
	w.must(report("ten", "10m"))
	due := *w.schedule("ten").NextSlot
	require.Equal(t, epoch.Add(10*time.Minute), due, "every counts from the creation")
	w.now = due
	fire := &FireTimer{Schedule: "ten", Kind: TimerSchedule, Due: due}
	id := w.nextCommandID()
	out, err := w.runID(id, fire)
	require.NoError(t, err)
	require.Len(t, goalsOf(w, out), 1)
	w.duplicate(id, fire)
	// The same timer under another command id (a restart that lost
	// nothing): stale, nothing changes.
	w.duplicate(w.nextCommandID(), fire)
	// Early: refused.
	early := &FireTimer{Schedule: "ten", Kind: TimerSchedule, Due: *w.schedule("ten").NextSlot}
	require.Equal(t, CodeConflict, w.refused(early, CodeConflict).Code)
	require.Equal(t, uint64(1), w.schedule("ten").Fired)
	require.NotContains(t, w.schedule("ten").Commands, CommandKey(w.actor, id), "a schedule keeps no firing's command: it fires without end")
}

func TestScheduleOverlap(t *testing.T) {
	for _, overlap := range []string{schemas.OverlapSkip, schemas.OverlapAllow} {
		t.Run(overlap, func(t *testing.T) {
			w := setup(t)
			c := report("ten", "10m")
			c.Overlap = overlap
			w.must(c)
			w.advance(10 * time.Minute)
			first := goalsOf(w, w.fire("ten"))
			require.Len(t, first, 1)
			w.advance(10 * time.Minute) // the first goal is still open
			second := goalsOf(w, w.fire("ten"))
			s := w.schedule("ten")
			if overlap == schemas.OverlapSkip {
				require.Empty(t, second)
				require.Equal(t, []uint64{1, 1}, []uint64{s.Fired, s.Skipped})
			} else {
				require.Len(t, second, 1)
				require.Equal(t, []uint64{2, 0}, []uint64{s.Fired, s.Skipped})
			}
			// Once the goal has ended, the next slot starts.
			w.must(&CancelGoal{GoalID: w.schedule("ten").LastGoal})
			w.advance(10 * time.Minute)
			require.Len(t, goalsOf(w, w.fire("ten")), 1)
			w.requireReplays()
		})
	}
}

func TestSchedulePauseResumeDelete(t *testing.T) {
	w := setup(t)
	w.must(report("ten", "10m"))
	slot := *w.schedule("ten").NextSlot
	w.must(&PauseSchedule{Name: "ten"})
	require.True(t, w.schedule("ten").Paused)
	require.Nil(t, w.schedule("ten").NextSlot, "a paused schedule sets no timer")
	w.duplicate(w.nextCommandID(), &PauseSchedule{Name: "ten"})
	w.now = slot.Add(time.Hour)
	w.duplicate(w.nextCommandID(), &FireTimer{Schedule: "ten", Kind: TimerSchedule, Due: slot}) // stale
	w.must(&ResumeSchedule{Name: "ten"})
	require.Equal(t, slot.Add(time.Hour+10*time.Minute), *w.schedule("ten").NextSlot, "the slots missed while paused are not caught up")
	w.now = w.now.Add(10 * time.Minute)
	require.Len(t, goalsOf(w, w.fire("ten")), 1)
	require.Equal(t, uint64(0), w.schedule("ten").Skipped)

	// The same spec again is the same schedule; another is a conflict.
	w.duplicate(w.nextCommandID(), report("ten", "10m"))
	_ = w.refused(report("ten", "20m"), CodeConflict)
	w.must(&DeleteSchedule{Name: "ten"})
	require.Nil(t, w.schedule("ten").NextSlot)
	_ = w.refused(&PauseSchedule{Name: "ten"}, CodeNotFound)
	// Deleted, the name can be created again.
	w.must(report("ten", "20m"))
	require.Equal(t, w.now.Add(20*time.Minute), *w.schedule("ten").NextSlot)
	w.requireReplays()
	w.requireReplaysFromWire()
}

func TestScheduleCatchUpAllIsBounded(t *testing.T) {
	w := setup(t)
	c := report("second", "1s")
	c.CatchUp = schemas.CatchUpAll
	c.Overlap = schemas.OverlapAllow
	w.must(c)
	w.advance(time.Hour) // 3,600 slots
	out := w.fire("second")
	require.Len(t, goalsOf(w, out), MaxSlotsPerFiring)
	s := w.schedule("second")
	require.Equal(t, []uint64{MaxSlotsPerFiring, 3600 - MaxSlotsPerFiring}, []uint64{s.Fired, s.Skipped})
	sk := eventOf[*ScheduleSkipped](t, out, ScheduleID(w.ws, "second"))
	require.Equal(t, schemas.SkipMissed, sk.Reason)
	require.Equal(t, epoch.Add(time.Second), sk.First)
	require.Equal(t, epoch.Add((3600-MaxSlotsPerFiring)*time.Second), sk.Slot)
}

// With overlap skip, a schedule whose goal is still open at a slot waits
// for that goal to end instead of for each slot: a per-second schedule
// whose goal stays open an hour records one skip when it parks and one for
// the hour's slots when the goal ends — not 3,600 — and then waits for its
// next slot. A goal that ends before the next slot resumes it from there;
// a pause while it waits, and a resume, arm it as usual.
func TestAnOverlapSkipWaitsForTheGoalToEnd(t *testing.T) {
	w := setup(t)
	w.must(report("tick", "1s"))
	w.advance(time.Second)
	first := goalsOf(w, w.fire("tick"))
	require.Len(t, first, 1)
	w.advance(time.Second)
	out := w.fire("tick")
	require.Empty(t, goalsOf(w, out))
	s := w.schedule("tick")
	require.Nil(t, s.NextSlot, "no slot while the goal is open")
	require.Equal(t, s.LastGoal, s.WaitsFor)
	require.Equal(t, []uint64{1, 1}, []uint64{s.Fired, s.Skipped})

	before := len(w.history)
	w.advance(time.Hour)
	out = w.must(&CancelGoal{GoalID: s.LastGoal})
	skipped := lastEvent[*ScheduleSkipped](out)
	require.NotNil(t, skipped, "the goal's end records the slots that passed")
	require.Equal(t, schemas.SkipOverlap, skipped.Reason)
	require.Equal(t, 3600, skipped.Count)
	s = w.schedule("tick")
	require.Equal(t, []uint64{1, 3601}, []uint64{s.Fired, s.Skipped})
	require.Empty(t, s.WaitsFor)
	require.Equal(t, w.now.Add(time.Second), *s.NextSlot)
	require.Less(t, len(w.history)-before, 10, "an hour of an open goal is a handful of events, not one a slot")
	w.advance(time.Second)
	require.Len(t, goalsOf(w, w.fire("tick")), 1, "the next slot starts a goal")

	// A goal that ends before the next slot: the schedule resumes from it.
	w.advance(time.Second)
	require.Empty(t, goalsOf(w, w.fire("tick")))
	s = w.schedule("tick")
	require.Nil(t, s.NextSlot)
	out = w.must(&CancelGoal{GoalID: s.LastGoal})
	resumed := lastEvent[*ScheduleResumed](out)
	require.NotNil(t, resumed)
	require.Equal(t, s.LastGoal, resumed.GoalID)
	require.Equal(t, w.now.Add(time.Second), *w.schedule("tick").NextSlot)

	// Paused while it waits, it waits for nothing; resumed, for its next slot.
	w.advance(time.Second)
	w.fire("tick")
	w.advance(time.Second)
	w.fire("tick")
	require.NotEmpty(t, w.schedule("tick").WaitsFor)
	w.must(&PauseSchedule{Name: "tick"})
	require.Empty(t, w.schedule("tick").WaitsFor)
	w.must(&CancelGoal{GoalID: w.schedule("tick").LastGoal})
	require.Nil(t, w.schedule("tick").NextSlot, "a paused schedule stays paused when its goal ends")
	w.must(&ResumeSchedule{Name: "tick"})
	require.Equal(t, w.now.Add(time.Second), *w.schedule("tick").NextSlot)
	w.requireReplays()
}
