package handlers_test

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// The timer tests move a manual clock instead of waiting for it: nothing
// here sleeps, and each firing follows a move of the clock at once (moving
// it wakes the timer loop), not at the loop's next poll.

// epoch is where the tests' clocks start: far from the wall clock, so that a
// time read from the wall clock by mistake shows.
var epoch = time.Date(2030, time.January, 2, 3, 4, 5, 0, time.UTC)

// startClocked is start on clock: the JetStream log on dir, for a test that
// restarts the service.
func startClocked(t *testing.T, dir string, clock *servicetest.Clock) *bundle {
	t.Helper()
	return bundleOf(servicetest.Start(t, dir, servicetest.Options{Secure: true, Clock: clock, Config: handlers.Config{WriterID: "test-writer"}}))
}

// setupClocked is setup on clock: an in-memory log.
func setupClocked(t *testing.T, clock *servicetest.Clock) *bundle {
	t.Helper()
	return bundleOf(servicetest.Start(t, "", servicetest.Options{Secure: true, Clock: clock, Log: eventstore.NewMemoryLog(),
		Config: handlers.Config{WriterID: "test-writer"}}))
}

// sleeper creates a task, claims it and parks its attempt until until
// (task.wait with kind timer); it returns the task's id.
func (b *bundle) sleeper(t *testing.T, until time.Time) string {
	t.Helper()
	tk, _ := b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "sleepers"}})
	claim, _ := b.mustCommand(t, "task.claim", map[string]any{"task_id": tk.ID, "executor": "test"})
	w, _ := b.mustCommand(t, "task.wait", map[string]any{"task_id": tk.ID, "attempt": claim.Attempt,
		"kind": domain.WaitTimer, "until": until.Format(time.RFC3339Nano)})
	require.Equal(t, domain.StateWaiting, w.State)
	return tk.ID
}

// loopLooked waits until sentinel, a sleeper due at the clock's present
// time, has fired: proof that the timer loop has looked for due timers with
// the clock where it stands (a moment just before the one under test).
func (b *bundle) loopLooked(t *testing.T, sentinel string) {
	t.Helper()
	b.c.WaitState(t, sentinel, domain.StateReady, 10*time.Second)
}

// requireNoDueTimer checks that the views hold no timer of task id due at
// the clock's time, so the timer loop cannot fire one.
func (b *bundle) requireNoDueTimer(t *testing.T, clock *servicetest.Clock, id string) {
	t.Helper()
	due, err := b.store.DueTimers(clock.Now(), 1000, 1000, "")
	require.NoError(t, err)
	for _, tm := range due.Timers {
		require.NotEqual(t, id, tm.TaskID, "a %s timer of task %s is due at %s", tm.Kind, id, tm.Due)
	}
}

type event struct {
	Type string          `json:"type"`
	Time time.Time       `json:"time"`
	Data json.RawMessage `json:"data"`
}

func (b *bundle) events(t *testing.T, id string) []event {
	t.Helper()
	var raw []json.RawMessage
	b.query(t, "events", schemas.Query{ID: id}, 0, &raw)
	out := make([]event, len(raw))
	for i, r := range raw {
		require.NoError(t, json.Unmarshal(r, &out[i]))
	}
	return out
}

// requireReadiedOnce checks that, after the last event of type after, task
// id has exactly one task.ready event, with reason, decided no earlier than
// due: a timer that fires early, or twice, fails it.
func (b *bundle) requireReadiedOnce(t *testing.T, id, after, reason string, due time.Time) {
	t.Helper()
	evs := b.events(t, id)
	last := -1
	for i, e := range evs {
		if e.Type == after {
			last = i
		}
	}
	require.GreaterOrEqual(t, last, 0, "task %s has no %s event", id, after)
	var readies []event
	for _, e := range evs[last+1:] {
		if e.Type == "task.ready" {
			readies = append(readies, e)
		}
	}
	require.Len(t, readies, 1, "exactly one task.ready follows %s", after)
	var r domain.TaskReady
	require.NoError(t, json.Unmarshal(readies[0].Data, &r))
	require.Equal(t, reason, r.Reason)
	require.False(t, readies[0].Time.Before(due), "readied at %s, before its moment %s", readies[0].Time, due)
}

func TestADurableSleepEndsAtItsTimeAndNotBefore(t *testing.T) {
	clock := servicetest.NewClock(epoch)
	b := setupClocked(t, clock)
	until := clock.Now().Add(time.Hour)
	id := b.sleeper(t, until)
	sentinel := b.sleeper(t, until.Add(-time.Second))

	// A second early: the loop has looked (the sentinel fired), the sleeper has not moved.
	clock.Set(until.Add(-time.Second))
	b.loopLooked(t, sentinel)
	b.requireNoDueTimer(t, clock, id)
	require.Equal(t, domain.StateWaiting, b.c.Task(t, id).State)

	// At its moment it wakes, once.
	clock.Set(until)
	b.c.WaitState(t, id, domain.StateReady, 10*time.Second)
	b.requireReadiedOnce(t, id, "task.waiting", "timer", until)
	b.requireNoDueTimer(t, clock, id)
}

func TestARetryBackoffEndsAtItsTimeAndNotBefore(t *testing.T) {
	clock := servicetest.NewClock(epoch)
	b := setupClocked(t, clock)
	tk, _ := b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "flaky",
		"retry": map[string]any{"max_attempts": 3, "initial_backoff": "1m"}}})
	b.mustCommand(t, "task.claim", map[string]any{"task_id": tk.ID, "executor": "test"})
	failed, _ := b.mustCommand(t, "task.fail", map[string]any{"task_id": tk.ID, "attempt": 1,
		"error": map[string]any{"message": "flaky"}, "retryable": true})
	require.Equal(t, domain.StateBackoff, failed.State)
	got := b.c.Task(t, tk.ID)
	require.NotNil(t, got.BackoffUntil)
	until := *got.BackoffUntil
	require.True(t, until.Equal(clock.Now().Add(time.Minute)), "backoff until %s", until)
	sentinel := b.sleeper(t, until.Add(-time.Second))

	clock.Set(until.Add(-time.Second))
	b.loopLooked(t, sentinel)
	b.requireNoDueTimer(t, clock, tk.ID)
	require.Equal(t, domain.StateBackoff, b.c.Task(t, tk.ID).State)

	clock.Set(until)
	b.c.WaitState(t, tk.ID, domain.StateReady, 10*time.Second)
	b.requireReadiedOnce(t, tk.ID, "task.backoff_scheduled", "backoff_elapsed", until)
}

func TestAnAttemptTimesOutAtItsDeadlineAndNotBefore(t *testing.T) {
	clock := servicetest.NewClock(epoch)
	b := setupClocked(t, clock)
	tk, _ := b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "slow", "timeout": "10m"}})
	claim, _ := b.mustCommand(t, "task.claim", map[string]any{"task_id": tk.ID, "executor": "slowpoke"})
	require.NotNil(t, claim.Task)
	deadline := *claim.Task.Attempts[0].Deadline
	require.True(t, deadline.Equal(clock.Now().Add(10*time.Minute)), "deadline %s", deadline)
	sentinel := b.sleeper(t, deadline.Add(-time.Second))

	clock.Set(deadline.Add(-time.Second))
	b.loopLooked(t, sentinel)
	b.requireNoDueTimer(t, clock, tk.ID)
	got := b.c.Task(t, tk.ID)
	require.Equal(t, domain.StateRunning, got.State)
	require.Equal(t, domain.AttemptStateRunning, got.Attempts[0].State)

	clock.Set(deadline)
	servicetest.Eventually(t, 10*time.Second, func() bool { return b.c.Task(t, tk.ID).State != domain.StateRunning })
	got = b.c.Task(t, tk.ID)
	require.Equal(t, domain.StateBackoff, got.State, "a timeout is retryable")
	a := got.Attempts[0]
	require.Equal(t, domain.AttemptStateFailed, a.State)
	require.NotNil(t, a.Error)
	require.Equal(t, domain.ReasonTimeout, a.Error.Code)
	require.True(t, a.Retryable)
	require.False(t, a.EndedAt.Before(deadline), "timed out at %s, before its deadline %s", a.EndedAt, deadline)
	n := 0
	for _, e := range b.events(t, tk.ID) {
		if e.Type == "task.attempt_failed" {
			n++
		}
	}
	require.Equal(t, 1, n, "the attempt failed once")
}

func TestATimerDueWhileTheServiceWasDownFiresOnceAtStart(t *testing.T) {
	clock := servicetest.NewClock(epoch)
	b := startClocked(t, t.TempDir(), clock)
	until := clock.Now().Add(time.Hour)
	id := b.sleeper(t, until)
	dir := b.dir
	b.stop()

	clock.Advance(2 * time.Hour) // the moment passes while no writer runs
	b2 := startClocked(t, dir, clock)
	b2.c.WaitState(t, id, domain.StateReady, 10*time.Second)
	b2.requireReadiedOnce(t, id, "task.waiting", "timer", until)
	b2.requireNoDueTimer(t, clock, id)
}

// One workspace's flood of timers due does not put another workspace's
// behind all of it: the writer fires each workspace's in turn. A member of
// one workspace creates many tasks whose deadlines fall at one moment;
// another workspace's task's deadline falls just after it.
func TestOneWorkspacesTimersDoNotHoldBackAnothers(t *testing.T) {
	clock := servicetest.NewClock(epoch)
	b := setupClocked(t, clock)
	other := servicetest.NewClient(b.st.Admin, "other")
	other.Command(t, "workspace.create", schemas.CreateWorkspace{Name: "other"})
	at := clock.Now().Add(time.Hour)
	const flood = 300 // more than a round of the timer loop
	ids := make([]string, flood)
	inParallel(flood, func(i int) {
		r := b.command(t, "task.create", map[string]any{"spec": map[string]any{"queue": "flood", "deadline": at.Format(time.RFC3339Nano)}}, "")
		var tk domain.Reply
		if assert.True(t, r.OK, "%+v", r.Error) && assert.NoError(t, json.Unmarshal(r.Result, &tk)) {
			ids[i] = tk.ID
		}
	})
	require.False(t, t.Failed())
	var tk domain.Reply
	require.NoError(t, json.Unmarshal(other.Command(t, "task.create", map[string]any{"spec": map[string]any{"queue": "q",
		"deadline": at.Add(time.Second).Format(time.RFC3339Nano)}}), &tk))
	other.WaitState(t, tk.ID, domain.StateReady, 10*time.Second) // in the views, with its timer

	clock.Set(at.Add(time.Second))
	other.WaitState(t, tk.ID, domain.StateFailed, 30*time.Second)
	failedAt := func(c *servicetest.Client, id string) string { // the id of its task.failed: ULIDs rise with the log
		var raw []schemas.Event
		c.Query(t, "events", schemas.Query{ID: id}, &raw)
		for _, e := range raw {
			if e.Type == "task.failed" {
				return e.ID
			}
		}
		return "~" // not yet: after every id
	}
	mine := failedAt(other, tk.ID)
	failed := make([]string, flood)
	inParallel(flood, func(i int) { failed[i] = failedAt(b.c, ids[i]) })
	before := 0
	for i, id := range failed {
		if id < mine {
			before++
		}
		if id == "~" {
			b.c.WaitState(t, ids[i], domain.StateFailed, 30*time.Second) // every one fires
		}
	}
	// Its turn came in the first round: fewer of the flood's fired before
	// it than a round holds (when timers fired by their moments, a round's
	// worth did).
	require.Less(t, before, 256, "%d of the flood's %d timers fired before the other workspace's", before, flood)
}

// inParallel calls fn(i) for i in [0, n), eight at a time.
func inParallel(n int, fn func(i int)) {
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				fn(i)
			}
		})
	}
	wg.Wait()
}
