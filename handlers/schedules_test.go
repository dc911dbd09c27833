package handlers_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// reportSchedule is the body of a schedule.create of schedule name: a
// two-task goal at each slot of spec (cron), or every period (every).
func reportSchedule(name string, spec map[string]any) map[string]any {
	body := map[string]any{"name": name,
		"goal": map[string]any{"title": "Report", "success_criteria": []string{"mailed"}},
		"tasks": []map[string]any{
			{"key": "collect", "queue": "shell"},
			{"key": "mail", "queue": "shell", "depends_on": []string{"collect"}},
		}}
	for k, v := range spec {
		body[k] = v
	}
	return body
}

// schedule reads schedule name.
func (b *bundle) schedule(t *testing.T, name string) schemas.Schedule {
	t.Helper()
	return get[schemas.Schedule](t, b, "schedule.get", name)
}

// waitSchedule waits until schedule name has fired and skipped slots as
// many as given.
func (b *bundle) waitSchedule(t *testing.T, name string, fired, skipped uint64) schemas.Schedule {
	t.Helper()
	var s schemas.Schedule
	servicetest.Eventually(t, 10*time.Second, func() bool {
		s = b.schedule(t, name)
		return s.Fired == fired && s.Skipped == skipped
	}, func() string {
		return fmt.Sprintf("schedule %s: fired %d, skipped %d; want %d, %d", name, s.Fired, s.Skipped, fired, skipped)
	})
	return s
}

// scheduledGoals returns the goals schedule name started, by slot.
func (b *bundle) scheduledGoals(t *testing.T, name string) map[time.Time]string {
	t.Helper()
	var goals []schemas.GoalView
	b.query(t, "goal.list", schemas.Query{Limit: 1000}, 0, &goals)
	out := map[time.Time]string{}
	for _, g := range goals {
		if g.Schedule != nil && g.Schedule.Name == name {
			_, dup := out[g.Schedule.Slot]
			require.False(t, dup, "two goals for slot %s", g.Schedule.Slot)
			out[g.Schedule.Slot] = g.ID
		}
	}
	return out
}

// The service is down across two slots of a schedule (03:05 and 03:10,
// back at 03:12): catch-up one starts one goal, for 03:10; skip none; all
// two — each decided once, in the commit of its schedule.fired.
func TestScheduleCatchUpAcrossADownService(t *testing.T) {
	for _, tc := range []struct {
		catchUp string
		goals   int
	}{{"skip", 0}, {"one", 1}, {"all", 2}} {
		t.Run(tc.catchUp, func(t *testing.T) {
			clock := servicetest.NewClock(epoch) // 03:04:05
			dir := t.TempDir()
			b := startClocked(t, dir, clock)
			b.mustCommand(t, "schedule.create", reportSchedule("five", map[string]any{"cron": "*/5 * * * *", "catch_up": tc.catchUp}))
			require.Equal(t, time.Date(2030, 1, 2, 3, 5, 0, 0, time.UTC), *b.schedule(t, "five").NextSlot)
			b.stop()

			clock.Set(time.Date(2030, 1, 2, 3, 12, 0, 0, time.UTC))
			b = startClocked(t, dir, clock)
			s := b.waitSchedule(t, "five", uint64(tc.goals), uint64(2-tc.goals))
			require.Equal(t, time.Date(2030, 1, 2, 3, 10, 0, 0, time.UTC), *s.LastSlot)
			require.Equal(t, time.Date(2030, 1, 2, 3, 15, 0, 0, time.UTC), *s.NextSlot)
			goals := b.scheduledGoals(t, "five")
			require.Len(t, goals, tc.goals)
			if tc.catchUp == "one" {
				require.Contains(t, goals, time.Date(2030, 1, 2, 3, 10, 0, 0, time.UTC), "one: the latest slot")
			}
			for _, id := range goals {
				require.Len(t, b.goalView(t, id).Nodes, 2, "the goal with its plan")
			}
		})
	}
}

func (b *bundle) goalView(t *testing.T, id string) schemas.GoalView {
	t.Helper()
	return get[schemas.GoalView](t, b, "goal.get", id)
}

// A slot makes its goal once, whatever restarts come between: the firing
// is decided once in the log, and the goal's id is derived from the slot.
func TestScheduleSlotMakesOneGoalAcrossRestarts(t *testing.T) {
	clock := servicetest.NewClock(epoch)
	dir := t.TempDir()
	b := startClocked(t, dir, clock)
	b.mustCommand(t, "schedule.create", reportSchedule("ten", map[string]any{"every": "10m", "overlap": "allow"}))
	clock.Advance(10 * time.Minute)
	b.waitSchedule(t, "ten", 1, 0)
	b.stop()

	b = startClocked(t, dir, clock)
	clock.WakeTimers()
	clock.Advance(10 * time.Minute) // the next slot, just now
	b.waitSchedule(t, "ten", 2, 0)
	b.stop()

	b = startClocked(t, dir, clock)
	clock.WakeTimers()
	s := b.waitSchedule(t, "ten", 2, 0)
	require.Equal(t, epoch.Add(30*time.Minute), *s.NextSlot)
	goals := b.scheduledGoals(t, "ten")
	require.Len(t, goals, 2)
	for slot, id := range goals {
		require.Equal(t, domain.ScheduleGoalID(domain.ScheduleID("default", "ten"), slot), id)
	}
	require.Equal(t, goals[epoch.Add(20*time.Minute)], s.LastGoal)
}

func TestScheduleOverlapOverTheWire(t *testing.T) {
	clock := servicetest.NewClock(epoch)
	b := setupClocked(t, clock)
	b.mustCommand(t, "schedule.create", reportSchedule("skips", map[string]any{"every": "10m"}))
	b.mustCommand(t, "schedule.create", reportSchedule("allows", map[string]any{"every": "10m", "overlap": "allow"}))
	clock.Advance(10 * time.Minute)
	b.waitSchedule(t, "skips", 1, 0)
	b.waitSchedule(t, "allows", 1, 0)
	clock.Advance(10 * time.Minute) // their first goals are still open
	b.waitSchedule(t, "skips", 1, 1)
	b.waitSchedule(t, "allows", 2, 0)
	require.Len(t, b.scheduledGoals(t, "skips"), 1)
	require.Len(t, b.scheduledGoals(t, "allows"), 2)

	// goal.list lists a schedule's goals, and no other: not another
	// schedule's, nor one made by hand.
	_, seq := b.mustCommand(t, "goal.create", map[string]any{"title": "by hand"})
	for name, n := range map[string]int{"allows": 2, "skips": 1} {
		var goals []schemas.GoalView
		b.query(t, "goal.list", schemas.Query{Schedule: name}, seq, &goals)
		require.Len(t, goals, n, name)
		for _, g := range goals {
			require.Equal(t, name, g.Schedule.Name)
		}
		var open []schemas.GoalView
		b.query(t, "goal.list", schemas.Query{Schedule: name, State: schemas.GoalStateOpen, NewestFirst: true}, seq, &open)
		require.Len(t, open, n, "with a state, and the newest first")
	}
	for _, q := range []struct {
		name string
		body schemas.Query
	}{{"goal.list", schemas.Query{Schedule: "Not A Name"}}, {"task.list", schemas.Query{Schedule: "allows"}}} {
		r := b.request(t, "dwr.q.default."+q.name, q.body, nil)
		require.False(t, r.OK, q.name)
		require.Equal(t, [2]string{schemas.CodeInvalid, "/schedule"}, [2]string{r.Error.Code, r.Error.Fields[0].Pointer}, r.Error.Message)
	}
}

// A schedule that skipped a slot because its goal was still open waits
// for that goal to end, with no timer: an hour of slots passes and
// nothing fires; the goal's cancellation records them skipped in one
// event, and the next slot starts a goal again.
func TestAScheduleWaitsForItsOpenGoalOverTheWire(t *testing.T) {
	clock := servicetest.NewClock(epoch)
	b := setupClocked(t, clock)
	b.mustCommand(t, "schedule.create", reportSchedule("tick", map[string]any{"every": "1m"}))
	clock.Advance(time.Minute)
	b.waitSchedule(t, "tick", 1, 0)
	clock.Advance(time.Minute) // its goal is still open
	s := b.waitSchedule(t, "tick", 1, 1)
	require.Nil(t, s.NextSlot, "no timer while it waits")
	require.Equal(t, s.LastGoal, s.WaitsFor)
	clock.Advance(time.Hour)
	due, err := b.store.DueTimers(clock.Now(), 100, 100, "")
	require.NoError(t, err)
	for _, tm := range due.Timers {
		require.NotEqual(t, "tick", tm.Schedule, "no timer of the schedule is due an hour on: it waits for its goal")
	}

	b.mustCommand(t, "goal.cancel", map[string]any{"goal_id": s.LastGoal})
	s = b.waitSchedule(t, "tick", 1, 61) // the hour's 60 slots, in one event
	require.Empty(t, s.WaitsFor)
	require.NotNil(t, s.NextSlot)
	clock.Advance(time.Minute)
	b.waitSchedule(t, "tick", 2, 61)
	require.Len(t, b.scheduledGoals(t, "tick"), 2)
}

func TestSchedulePauseResumeDeleteOverTheWire(t *testing.T) {
	clock := servicetest.NewClock(epoch)
	b := setupClocked(t, clock)
	b.mustCommand(t, "schedule.create", reportSchedule("ten", map[string]any{"every": "10m"}))
	rep, _ := b.mustCommand(t, "schedule.create", reportSchedule("ten", map[string]any{"every": "10m"}))
	require.True(t, rep.Duplicate, "the same spec again")
	r := b.command(t, "schedule.create", reportSchedule("ten", map[string]any{"every": "20m"}), "")
	require.False(t, r.OK)
	require.Equal(t, schemas.CodeConflict, r.Error.Code)

	b.mustCommand(t, "schedule.pause", map[string]any{"name": "ten"})
	s := b.schedule(t, "ten")
	require.True(t, s.Paused)
	require.Nil(t, s.NextSlot)
	clock.Advance(25 * time.Minute)
	b.requireNoDueTimer(t, clock, "")
	_, seq := b.mustCommand(t, "schedule.resume", map[string]any{"name": "ten"})
	b.query(t, "schedule.get", schemas.Query{ID: "ten"}, seq, &s)
	require.Equal(t, epoch.Add(30*time.Minute), *s.NextSlot, "the slots missed while paused are not caught up")
	require.Equal(t, uint64(0), s.Fired+s.Skipped)
	clock.Advance(5 * time.Minute)
	b.waitSchedule(t, "ten", 1, 0)

	b.mustCommand(t, "schedule.delete", map[string]any{"name": "ten"})
	r = b.request(t, "dwr.q.default.schedule.get", schemas.Query{ID: "ten"}, nil)
	require.False(t, r.OK)
	require.Equal(t, schemas.CodeNotFound, r.Error.Code)
	var list []schemas.Schedule
	b.query(t, "schedule.list", schemas.Query{}, 0, &list)
	require.Empty(t, list)
	clock.Advance(time.Hour)
	require.Len(t, b.scheduledGoals(t, "ten"), 1, "a deleted schedule fires no more")
	var events []event
	servicetest.Eventually(t, 5*time.Second, func() bool {
		events = b.events(t, "ten")
		return len(events) > 0 && events[len(events)-1].Type == "schedule.deleted"
	})
}

func TestScheduleCreateRefusesBadSpecsNamingTheField(t *testing.T) {
	b := setup(t)
	for field, spec := range map[string]map[string]any{
		"/cron":        {"cron": "*/5 * * *"},
		"/time_zone":   {"cron": "0 9 * * *", "time_zone": "Europe/Atlantis"},
		"/every":       {"cron": "0 9 * * *", "every": "10m"},
		"/tasks/0/key": {"every": "10m", "tasks": []map[string]any{{"key": "bad key!", "queue": "shell"}}},
	} {
		body := reportSchedule("bad", nil)
		for k, v := range spec {
			body[k] = v
		}
		r := b.command(t, "schedule.create", body, "")
		require.False(t, r.OK, field)
		require.Equal(t, schemas.CodeInvalid, r.Error.Code, r.Error.Message)
		require.NotEmpty(t, r.Error.Fields, r.Error.Message)
		require.Equal(t, field, r.Error.Fields[0].Pointer, r.Error.Message)
	}
	var list []schemas.Schedule
	b.query(t, "schedule.list", schemas.Query{}, 0, &list)
	require.Empty(t, list)
}

// "0 9 * * *" in Europe/Paris is 08:00 UTC in winter: the slot, and the
// goal's, are computed in the schedule's zone.
func TestScheduleTimeZoneOverTheWire(t *testing.T) {
	clock := servicetest.NewClock(epoch)
	b := setupClocked(t, clock)
	b.mustCommand(t, "schedule.create", reportSchedule("paris", map[string]any{"cron": "0 9 * * *", "time_zone": "Europe/Paris"}))
	eight := time.Date(2030, 1, 2, 8, 0, 0, 0, time.UTC)
	require.Equal(t, eight, *b.schedule(t, "paris").NextSlot)
	clock.Set(eight.Add(-time.Second))
	clock.Set(eight)
	b.waitSchedule(t, "paris", 1, 0)
	goals := b.scheduledGoals(t, "paris")
	require.Contains(t, goals, eight)
	var list []schemas.Schedule
	b.query(t, "schedule.list", schemas.Query{}, 0, &list)
	require.Len(t, list, 1)
	require.Equal(t, "Europe/Paris", list[0].TimeZone)
	require.Equal(t, eight.Add(24*time.Hour), *list[0].NextSlot)
}

// The roles of the schedule subjects: admins and clients create, pause,
// resume and delete; viewers read; executors and approvers neither.
func TestSchedulePermissionsPerRole(t *testing.T) {
	b := setup(t)
	b.mustCommand(t, "schedule.create", reportSchedule("nightly", map[string]any{"cron": "@daily"}))
	for _, role := range domain.Roles {
		nc := b.st.Member(t, "default", "m-"+string(role), role, queuesOf(role)...)
		may := role == domain.RoleAdmin || role == domain.RoleClient
		name := "by-" + string(role)
		for _, cmd := range []struct {
			name string
			body any
		}{
			{"schedule.create", reportSchedule(name, map[string]any{"every": "1h"})},
			{"schedule.pause", map[string]any{"name": "nightly"}},
			{"schedule.resume", map[string]any{"name": "nightly"}},
			{"schedule.delete", map[string]any{"name": name}},
		} {
			require.Equal(t, may, answered(t, nc, "dwr.cmd.default."+cmd.name, cmd.body, may), "%s sends %s", role, cmd.name)
		}
		mayRead := role != domain.RoleExecutor && role != domain.RoleApprover
		for qn, q := range map[string]schemas.Query{"schedule.get": {ID: "nightly"}, "schedule.list": {}} {
			require.Equal(t, mayRead, answered(t, nc, "dwr.q.default."+qn, q, mayRead), "%s queries %s", role, qn)
		}
	}
}

// A member cannot make schedules without end: each fires on the writer's
// timers, which fire in the order of their moments, 256 at a time: a
// member's thousands of per-second schedules would put every other
// workspace's retries, deadlines and waits behind theirs, and append a goal
// each a second past the per-caller limits (the service sends these
// commands itself). Past the workspace's bound a schedule.create
// is refused, naming the field, and nothing is recorded; a deleted
// schedule makes room; another workspace has its own.
func TestAMemberCannotMakeSchedulesWithoutEnd(t *testing.T) {
	b := bundleOf(servicetest.Start(t, "", servicetest.Options{Secure: true,
		Config: handlers.Config{WriterID: "test-writer", MaxSchedulesPerWorkspace: 3}}))
	mallory := servicetest.NewClient(b.st.Member(t, "default", "mallory", domain.RoleClient), "default")
	createAs := func(c *servicetest.Client, ws, name, id string) schemas.Reply {
		return c.Request(t, "dwr.cmd."+ws+".schedule.create", reportSchedule(name, map[string]any{"every": "1s", "overlap": "allow"}),
			nats.Header{schemas.HeaderCommandID: []string{id}})
	}
	create := func(c *servicetest.Client, ws, name string) schemas.Reply {
		return createAs(c, ws, name, "create-"+ws+"-"+name)
	}
	var seq uint64
	for i := range 3 {
		r := create(mallory, "default", fmt.Sprintf("s%d", i))
		require.True(t, r.OK, "%+v", r.Error)
		seq = r.Seq
	}
	r := createAs(mallory, "default", "s2", "create-default-s2")
	require.True(t, r.OK, "the last one sent again, at the bound: its first outcome (%+v)", r.Error)
	var again schemas.CommandResult
	require.NoError(t, json.Unmarshal(r.Result, &again))
	require.Equal(t, "s2", again.ID)
	require.Equal(t, seq, r.Seq, "the record of its first outcome")
	r = create(mallory, "default", "s3")
	require.False(t, r.OK)
	require.Equal(t, schemas.CodeConflict, r.Error.Code)
	require.Equal(t, "/name", r.Error.Fields[0].Pointer)
	require.Contains(t, r.Error.Message, "--max-schedules-per-workspace")

	require.True(t, mallory.Request(t, "dwr.cmd.default.schedule.delete", map[string]any{"name": "s0"}, nats.Header{}).OK)
	r = create(mallory, "default", "s3")
	require.True(t, r.OK, "a deleted schedule makes room: %+v", r.Error)
	require.Greater(t, r.Seq, seq)

	servicetest.NewClient(b.st.Admin, "other").Command(t, "workspace.create", schemas.CreateWorkspace{Name: "other"})
	other := servicetest.NewClient(b.st.Admin, "other")
	require.True(t, create(other, "other", "s0").OK, "another workspace has its own room")
}
