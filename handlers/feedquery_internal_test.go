package handlers

import (
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"pgregory.net/rapid"
)

// storedFilter matches the stored subject of every event whose whole subject the filter
// matches — the feed query's consumer never leaves out an event the filter
// asks for — and, when it says it is exact, of no other.
func TestFeedSubjectFilters(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		agg := rapid.SampledFrom([]string{"goal", "task", "workspace", "ritual"}).Draw(t, "agg")
		id := rapid.SampledFrom([]string{"01J0A", "01J0B", "default:nightly"}).Draw(t, "id")
		ev := rapid.SampledFrom([]string{"created", "accepted", "attempt_started"}).Draw(t, "event")
		// Each token is a wildcard, the subject's own at that place, or
		// another; the filter is one to four tokens long, some ending in >.
		var tokens []string
		for i, own := range []string{agg, id, ev, "extra"}[:rapid.IntRange(1, 4).Draw(t, "n")] {
			tokens = append(tokens, rapid.SampledFrom([]string{"*", own, own, "x"}).Draw(t, "token"+string(rune('0'+i))))
		}
		if rapid.Bool().Draw(t, "rest") {
			tokens = append(tokens, ">")
		}
		filter := strings.Join(tokens, ".")
		if subjectFilterProblem(filter) != "" {
			t.Skip("not a filter")
		}
		whole := "dwr.ev.default." + agg + "." + id + "." + ev
		full := "dwr.ev.default." + filter
		matches := server.SubjectMatchesFilter(whole, full)
		stored := "dwr.evs.default." + agg + "." + ev
		sf, exact := storedFilter("dwr", "default", filter)
		if matches && !server.SubjectMatchesFilter(stored, sf) {
			t.Fatalf("filter %q matches %q, but its stored filter %q leaves out %q", full, whole, sf, stored)
		}
		if exact && !matches && server.SubjectMatchesFilter(stored, sf) {
			t.Fatalf("stored filter %q said exact takes %q, whose whole subject %q filter %q does not match", sf, stored, whole, full)
		}
	})
}
