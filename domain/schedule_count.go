package domain

import (
	"math/bits"
	"time"

	"github.com/robfig/cron/v3"
)

// A cron schedule's slots due over a long stretch (a firing after an
// outage, the end of a goal an overlap-skip schedule waited for) are
// counted a day at a time, not a slot at a time: a per-minute spec down a
// year is 525,600 slots, and walking them held the writer for about a
// second — a workspace's members could make it walk that for each of its
// schedules. A whole day whose wall clock runs 24 hours from midnight to
// midnight holds, when its month and day match the spec, one slot for each
// hour, minute and second the spec names; days with a change of offset,
// the days before them, and the stretch's partial first and last days are
// walked slot by slot (TestCronSlotsCountedByDayAreTheWalkedOnes).

// spanOfWalk is the stretch below which the slots are walked one by one.
const spanOfWalk = 48 * time.Hour

// dueCron is due for a cron spec: the latest MaxSlotsPerFiring slots from
// first up to now (oldest first), how many there were in all, and the slot
// just before the ones listed (zero when they are all). It follows the
// walk — each slot the spec's next after the one before — but where the
// walk enters a plain day followed by a plain day (plainDay) at the day's
// first slot, it counts that day's slots by the spec and goes on from the
// next day's first slot, which is where the walk would go.
func (s *slots) dueCron(first, now time.Time) (latest []time.Time, n int, before time.Time) {
	if s.spec == nil || now.Sub(first) < spanOfWalk {
		return s.walk(first, now)
	}
	type mark struct {
		t time.Time // the first slot of a day, on the walk
		n int       // the slots before it
	}
	var marks []mark
	t, opens := first, false // opens: t is the first slot of its day
	for !t.IsZero() && !t.After(now) {
		day := midnight(t.In(s.loc))
		if opens {
			marks = append(marks, mark{t, n})
		}
		if next := dayAfter(day); opens && !next.After(now) && plainDay(day) && plainDay(next) {
			n += slotsOfDay(s.spec, day)
			t = s.atOrAfter(next)
			continue
		}
		n++
		u := s.after(t)
		opens = !u.IsZero() && !midnight(u.In(s.loc)).Equal(day)
		t = u
	}
	// The latest slots are walked from the last day's first slot with more
	// than MaxSlotsPerFiring from it on (at most a day's slots more).
	for i := len(marks) - 1; i >= 0; i-- {
		if n-marks[i].n > MaxSlotsPerFiring {
			latest, k, before := s.walk(marks[i].t, now)
			if k == n-marks[i].n {
				return latest, n, before
			}
			break // not expected: the walk is the reference
		}
	}
	return s.walk(first, now)
}

// walk lists the slots from first up to now one by one: the latest
// MaxSlotsPerFiring, how many in all, and the slot just before the listed.
func (s *slots) walk(first, now time.Time) (latest []time.Time, n int, before time.Time) {
	for t := first; !t.IsZero() && !t.After(now); t = s.after(t) {
		if len(latest) == MaxSlotsPerFiring {
			before, latest = latest[0], latest[1:]
		}
		latest = append(latest, t)
		n++
	}
	return latest, n, before
}

// atOrAfter returns the first slot at or after t (zero when none follows).
func (s *slots) atOrAfter(t time.Time) time.Time {
	return s.after(t.Add(-time.Nanosecond))
}

// plainDay reports whether the day from midnight d runs 24 hours of wall
// clock, from 00:00 to 00:00. Cron's search for the next slot crosses a
// change of offset in its own way (a midnight the clock skips, a change by
// half an hour, where it may pass a slot over): a day is counted by its
// spec only when it and the day after it are plain.
func plainDay(d time.Time) bool {
	next := dayAfter(d)
	return d.Hour() == 0 && d.Minute() == 0 && next.Hour() == 0 && next.Minute() == 0 && next.Sub(d) == 24*time.Hour
}

// slotsOfDay returns the slots spec has on the day of d, a day whose wall
// clock runs 24 hours: none unless its month and day match, else one for
// each hour, minute and second the spec names.
func slotsOfDay(spec *cron.SpecSchedule, d time.Time) int {
	const star = 1 << 63
	dom := spec.Dom&(1<<uint(d.Day())) != 0
	dow := spec.Dow&(1<<uint(d.Weekday())) != 0
	day := dom || dow
	if spec.Dom&star != 0 || spec.Dow&star != 0 { // as cron's dayMatches
		day = dom && dow
	}
	if !day || spec.Month&(1<<uint(d.Month())) == 0 {
		return 0
	}
	return bits.OnesCount64(spec.Hour&(1<<24-1)) * bits.OnesCount64(spec.Minute&(1<<60-1)) * bits.OnesCount64(spec.Second&(1<<60-1))
}

// midnight returns the start of t's day in t's location (the first moment
// of that date, which is not 00:00 where the clock skips midnight).
func midnight(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, t.Location())
}

// dayAfter returns the midnight of the day after midnight d.
func dayAfter(d time.Time) time.Time {
	return time.Date(d.Year(), d.Month(), d.Day()+1, 0, 0, 0, 0, d.Location())
}
