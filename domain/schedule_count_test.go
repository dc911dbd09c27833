package domain

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// Counting a cron spec's due slots a day at a time gives what walking them
// one by one gives — the count, the latest MaxSlotsPerFiring and the slot
// before them — across changes of offset (including zones whose clock
// skips midnight or moves by half an hour), month ends and leap days.
func TestCronSlotsCountedByDayAreTheWalkedOnes(t *testing.T) {
	specs := []string{"* * * * *", "*/7 * * * *", "0 9 * * 1-5", "30 2 * * *", "0,30 0-3 * * *", "15 1 1,15 * *",
		"0 0 29 2 *", "0 12 * 3,10 0", "5 4 13 * 5", "0 0 31 * *", "@daily", "@hourly", "0 0 1 1 *"}
	zones := []string{"UTC", "Europe/Paris", "America/Sao_Paulo", "Australia/Lord_Howe", "Asia/Kolkata", "America/Havana", "Pacific/Chatham"}
	rapid.Check(t, func(t *rapid.T) {
		spec := rapid.SampledFrom(specs).Draw(t, "spec")
		zone := rapid.SampledFrom(zones).Draw(t, "zone")
		sl, err := newSlots(ScheduleSpec{Cron: spec, TimeZone: zone}, time.Time{})
		require.NoError(t, err)
		start := time.Date(2015, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(rapid.Int64Range(0, 10*365*24).Draw(t, "start hour")) * time.Hour)
		start = start.Add(time.Duration(rapid.IntRange(0, 59).Draw(t, "start minute")) * time.Minute)
		first := sl.atOrAfter(start)
		if first.IsZero() {
			return
		}
		now := first.Add(time.Duration(rapid.Int64Range(0, 120*24*60).Draw(t, "minutes")) * time.Minute).
			Add(time.Duration(rapid.IntRange(0, 59).Draw(t, "seconds")) * time.Second)
		latest, n, before := sl.due(first, now)
		wl, wn, wb := sl.walk(first, now)
		require.Equal(t, wn, n, "%s in %s from %s to %s", spec, zone, first, now)
		require.Equal(t, wl, latest)
		require.Equal(t, wb, before)
	})
}

// A per-minute spec due down a year is counted, not walked: the writer
// decides such a firing in milliseconds (it walked 525,600 slots, ~1 s).
func TestAYearOfPerMinuteSlotsIsCountedQuickly(t *testing.T) {
	sl, err := newSlots(ScheduleSpec{Cron: "* * * * *", TimeZone: "Europe/Paris"}, time.Time{})
	require.NoError(t, err)
	now := time.Date(2026, 12, 1, 10, 30, 0, 0, time.UTC)
	first := sl.atOrAfter(now.AddDate(-1, 0, 0))
	calls := 0
	counting := &slots{cron: countingCron{sl.cron, &calls}, spec: sl.spec, loc: sl.loc}
	latest, n, before := counting.due(first, now)
	require.Equal(t, 525_600+1, n, "a year of minutes, both ends included")
	require.Len(t, latest, MaxSlotsPerFiring)
	require.Equal(t, now, latest[len(latest)-1])
	require.Equal(t, latest[0].Add(-time.Minute), before)
	require.Less(t, calls, 20_000, "slots walked one by one (the partial and changing days only)")
}

// countingCron counts the calls of Next.
type countingCron struct {
	spec  interface{ Next(time.Time) time.Time }
	calls *int
}

func (c countingCron) Next(t time.Time) time.Time { *c.calls++; return c.spec.Next(t) }
