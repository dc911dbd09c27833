package client_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// A client creates a schedule, reads it, sees its slot start a goal that
// names it, pauses, resumes and deletes it; a bad spec is an ErrInvalid
// naming the field.
func TestClientSchedules(t *testing.T) {
	clock := servicetest.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	s := servicetest.Start(t, t.TempDir(), servicetest.Options{Secure: true, Listen: "127.0.0.1:0", Clock: clock})
	ctx := within(t, 30*time.Second)
	c := connectAs(t, s, "caller", domain.RoleClient)
	spec := schemas.ScheduleSpec{Cron: "0 9 * * *", TimeZone: "Europe/Paris",
		Goal:  json.RawMessage(`{"title": "Daily report"}`),
		Tasks: json.RawMessage(`[{"key": "collect", "queue": "ci"}]`)}
	r, err := c.CreateSchedule(ctx, schemas.CreateSchedule{Name: "daily", ScheduleSpec: spec})
	require.NoError(t, err)
	require.Equal(t, "daily", r.ID)
	got, err := c.Schedule(ctx, "daily")
	require.NoError(t, err)
	eight := time.Date(2030, 1, 2, 8, 0, 0, 0, time.UTC)
	require.Equal(t, eight, *got.NextSlot, "09:00 in Paris")
	require.Equal(t, schemas.CatchUpOne, got.CatchUp)

	clock.Set(eight)
	servicetest.Eventually(t, 10*time.Second, func() bool {
		got, err = c.Schedule(ctx, "daily")
		require.NoError(t, err)
		return got.LastGoal != ""
	})
	g, err := c.Goal(ctx, got.LastGoal)
	require.NoError(t, err)
	require.Equal(t, &schemas.ScheduleRef{Name: "daily", Slot: eight}, g.Schedule)

	_, err = c.PauseSchedule(ctx, "daily")
	require.NoError(t, err)
	_, err = c.ResumeSchedule(ctx, "daily")
	require.NoError(t, err)
	var names []string
	for s, err := range c.Schedules(ctx) {
		require.NoError(t, err)
		names = append(names, s.Name)
	}
	require.Equal(t, []string{"daily"}, names)
	_, err = c.DeleteSchedule(ctx, "daily")
	require.NoError(t, err)
	_, err = c.Schedule(ctx, "daily")
	require.ErrorIs(t, err, client.ErrNotFound)

	spec.TimeZone = "Europe/Atlantis"
	_, err = c.CreateSchedule(ctx, schemas.CreateSchedule{Name: "bad", ScheduleSpec: spec})
	require.ErrorIs(t, err, client.ErrInvalid)
	var we *schemas.Error
	require.ErrorAs(t, err, &we)
	require.Equal(t, "/time_zone", we.Fields[0].Pointer)
}
