package domain

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// scheduled is a World whose views hold n schedules in every workspace,
// and bound them to most.
type scheduled struct {
	World
	n, most int
}

func (s scheduled) ScheduleCount(string) (int, int, error) { return s.n, s.most, nil }

// A workspace may have so many schedules: each fires on the service's own
// timers, which every workspace's wait behind. A schedule.create past the
// bound is refused, naming /name and what to do, and records nothing; the
// schedules created and deleted by earlier commands of the batch count; a
// schedule that stands is answered as before.
func TestSchedulesAreBoundedPerWorkspace(t *testing.T) {
	w := setup(t)
	w.must(report("a", "10m")) // in the views
	inner := w.o
	w.o = NewOverlay(scheduled{World: inner, n: 1, most: 3})
	w.must(report("b", "10m"))
	w.must(report("c", "10m"))
	e := w.refused(report("d", "10m"), CodeConflict)
	require.Equal(t, "/name", e.Field)
	require.Contains(t, e.Message, "has 3 schedules")
	require.Contains(t, e.Message, "dwr schedule delete")
	require.Contains(t, e.Message, "--max-schedules-per-workspace")
	out := w.must(report("b", "10m"))
	require.Empty(t, out.Changes, "the same schedule again: nothing new")

	w.must(&DeleteSchedule{Name: "a"})
	w.must(report("d", "10m")) // a's room
	require.Equal(t, "/name", w.refused(report("e", "10m"), CodeConflict).Field)

	// A World that counts no schedules bounds none.
	w.o = NewOverlay(inner)
	for _, name := range []string{"e", "f", "g", "h"} {
		w.must(report(name, "10m"))
	}
}
