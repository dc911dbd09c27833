package servicetest

import (
	"testing"
	"time"
)

// pollEvery is how often Eventually and Within look again.
const pollEvery = 20 * time.Millisecond

// Eventually calls cond every 20 ms until it returns true, and fails the test
// if it has not within d. describe, if given, says what was awaited and what
// was last seen; it is called once, on failure. cond runs on the test's
// goroutine, so it may fail the test itself.
func Eventually(t testing.TB, d time.Duration, cond func() bool, describe ...func() string) {
	t.Helper()
	if Within(d, cond) {
		return
	}
	what := "the condition did not hold"
	if len(describe) > 0 && describe[0] != nil {
		what = describe[0]()
	}
	t.Fatalf("servicetest: not within %s: %s", d, what)
}

// Within calls cond every 20 ms until it returns true (Within returns true),
// or d has passed (false): Eventually for a caller that decides what a
// timeout means.
func Within(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}
