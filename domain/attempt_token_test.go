package domain

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// attemptCommands returns, for attempt n of task id, one command of each
// kind an attempt sends, each carrying token.
func attemptCommands(id string, n int, token string) []Command {
	until := epoch.Add(24 * time.Hour)
	return []Command{
		&SaveCheckpoint{TaskID: id, Attempt: n, Token: token, Checkpoint: json.RawMessage(`{"page":1}`)},
		&ReportSuccess{TaskID: id, Attempt: n, Token: token, Result: json.RawMessage(`"forged"`)},
		&ReportFailure{TaskID: id, Attempt: n, Token: token, Error: ErrorInfo{Message: "forged"}},
		&WaitTask{TaskID: id, Attempt: n, Token: token, Kind: WaitTimer, Until: &until},
		&RequestApproval{TaskID: id, Attempt: n, Token: token, ApprovalRequest: ApprovalRequest{Action: json.RawMessage(`{"pay":1}`)}},
		&Heartbeat{TaskID: id, Attempt: n, Token: token},
	}
}

func TestAnAttemptsCommandsNeedItsToken(t *testing.T) {
	w := setup(t)
	id := standalone(w, nil)
	n := w.claim(id)
	before := w.task(id)
	w.raw = true // send the commands exactly as written
	for _, token := range []string{"", "guessed", strings.Repeat("A", 43), TokenHash(w.token(id, n))} {
		for _, cmd := range attemptCommands(id, n, token) {
			de := w.refused(cmd, CodeForbidden)
			require.Equal(t, "/token", de.Field, "%s with token %q", cmd.CommandName(), token)
			require.True(t, strings.HasPrefix(de.Message, RefusedToken+": "), de.Message)
		}
	}
	require.Equal(t, before, w.task(id), "refused commands change nothing")

	// The token of the task's other attempt is not this one's either.
	w.raw = false
	w.must(&SaveCheckpoint{TaskID: id, Attempt: n, Checkpoint: json.RawMessage(`{"page":2}`)})
	w.fail(id, n, true)
	w.advance(time.Hour)
	w.must(&FireTimer{TaskID: id, Kind: TimerBackoff})
	n2 := w.claim(id)
	w.raw = true
	de := w.refused(&ReportSuccess{TaskID: id, Attempt: n2, Token: w.token(id, n)}, CodeForbidden)
	require.Equal(t, "/token", de.Field)
	// ... and the first attempt's own token only tells it that it is stale.
	de = w.refused(&ReportSuccess{TaskID: id, Attempt: n, Token: w.token(id, n)}, CodeConflict)
	require.Equal(t, "/attempt", de.Field)

	w.raw = false
	out := w.succeed(id, n2)
	require.Equal(t, StateAccepted, out.Reply.State)
	w.requireReplays()
}

func TestAnAttemptsCommandsComeFromItsClaimer(t *testing.T) {
	w := setup(t)
	w.actor = "executor-a"
	id := standalone(w, nil)
	n := w.claim(id)
	require.Equal(t, "executor-a", w.task(id).Running().ClaimedBy)

	// Another identity holding the right token is refused all the same.
	w.actor = "executor-b"
	for _, cmd := range attemptCommands(id, n, w.token(id, n)) {
		de := w.refused(cmd, CodeForbidden)
		require.Equal(t, "/token", de.Field)
		require.True(t, strings.HasPrefix(de.Message, RefusedClaimer+": "), de.Message)
	}

	w.actor = "executor-a"
	out := w.succeed(id, n)
	require.Equal(t, StateAccepted, out.Reply.State)
	w.requireReplays()
	w.requireReplaysFromWire()
}

func TestTheLogKeepsOnlyTheTokensHash(t *testing.T) {
	w := setup(t)
	id := standalone(w, nil)
	out := w.must(&ClaimTask{ClaimBody: ClaimBody{TaskID: id, Executor: "exec"}, TokenHash: TokenHash("the-secret-token")})
	started := eventOf[*AttemptStarted](t, out, id)
	require.Equal(t, TokenHash("the-secret-token"), started.TokenHash)
	require.Equal(t, TokenHash("the-secret-token"), w.task(id).Running().TokenHash)
	require.Len(t, started.TokenHash, 64)
	w.must(&ReportSuccess{TaskID: id, Attempt: 1, Token: "the-secret-token", Result: json.RawMessage(`1`)})
	for _, e := range w.history {
		b, err := json.Marshal(e.Event)
		require.NoError(t, err)
		require.NotContains(t, string(b), "the-secret-token", "%s", e.Event.EventType())
	}
	b, err := json.Marshal(w.task(id))
	require.NoError(t, err)
	require.NotContains(t, string(b), "the-secret-token")
}

func TestAnAttemptWithoutATokenHashTakesNoCommand(t *testing.T) {
	// An attempt claimed before attempts had tokens has no hash: no token,
	// not even an empty one, is its.
	w := setup(t)
	id := standalone(w, nil)
	w.raw = true // no hash is filled in
	w.must(&ClaimTask{ClaimBody: ClaimBody{TaskID: id, Executor: "old"}})
	require.Empty(t, w.task(id).Running().TokenHash)
	for _, token := range []string{"", "anything"} {
		de := w.refused(&ReportSuccess{TaskID: id, Attempt: 1, Token: token}, CodeForbidden)
		require.Equal(t, "/token", de.Field)
	}
}

func TestSupersedingOnlyOnceTheLeaseLapsed(t *testing.T) {
	w := setup(t)
	id := standalone(w, nil)
	n := w.claim(id)
	before := w.task(id)

	// Alive within its lease: refused, saying from when it may be taken.
	lapse := w.now.Add(30 * time.Second)
	de := w.refused(&ClaimTask{ClaimBody: ClaimBody{TaskID: id, Executor: "exec-2", Supersedes: n}, SupersedeAfter: lapse}, CodeConflict)
	require.Equal(t, "/supersedes", de.Field)
	require.True(t, strings.HasPrefix(de.Message, RefusedLeaseHeld+": "), de.Message)
	require.Equal(t, lapse, de.RetryAfter)
	w.advance(29 * time.Second)
	_ = w.refused(&ClaimTask{ClaimBody: ClaimBody{TaskID: id, Executor: "exec-2", Supersedes: n}, SupersedeAfter: lapse}, CodeConflict)

	// Not knowing when it was last alive is no reason to supersede it.
	w.raw = true
	de = w.refused(&ClaimTask{ClaimBody: ClaimBody{TaskID: id, Executor: "exec-2", Supersedes: n}, TokenHash: TokenHash("t2")}, CodeConflict)
	require.Equal(t, "/supersedes", de.Field)
	require.True(t, de.RetryAfter.IsZero())
	w.raw = false
	require.Equal(t, before, w.task(id))

	// The holder is still it, and may report.
	w.must(&Heartbeat{TaskID: id, Attempt: n})

	// From the moment the lease lapsed, the claim supersedes it.
	w.advance(time.Second)
	out := w.must(&ClaimTask{ClaimBody: ClaimBody{TaskID: id, Executor: "exec-2", Supersedes: n}, SupersedeAfter: lapse})
	require.Equal(t, []string{"task.attempt_abandoned", "task.attempt_started"}, events(out, id))
	_ = w.refused(&ReportSuccess{TaskID: id, Attempt: n}, CodeConflict)
	w.requireReplays()
}

func TestAHeartbeatChangesNothing(t *testing.T) {
	w := setup(t)
	id := standalone(w, nil)
	n := w.claim(id)
	before := len(w.history)
	out := w.must(&Heartbeat{TaskID: id, Attempt: n})
	require.Empty(t, out.Changes)
	require.Equal(t, StateRunning, out.Reply.State)
	require.Equal(t, n, out.Reply.Attempt)
	require.Len(t, w.history, before)
	// The same heartbeat again (its id is not a command's) is answered the same.
	again, err := w.runID(w.history[len(w.history)-1].CommandID, &Heartbeat{TaskID: id, Attempt: n})
	require.NoError(t, err)
	require.Empty(t, again.Changes)

	w.succeed(id, n)
	de := w.refused(&Heartbeat{TaskID: id, Attempt: n}, CodeConflict)
	require.Equal(t, "/attempt", de.Field, "an attempt that ended is not alive")
}

func TestASquattedReportIDStaysTheHolders(t *testing.T) {
	w := setup(t)
	id := standalone(w, nil)

	// A squatter sends the report the holder will send, under the id the
	// holder will use, first: refused, it leaves the id free.
	w.actor = "executor"
	n := w.claim(id)
	w.actor = "squatter"
	squat := "succeed." + id + ".1"
	_, err := w.runID(squat, &ReportSuccess{TaskID: id, Attempt: n, Token: "forged", Result: json.RawMessage(`"forged"`)})
	require.Equal(t, CodeForbidden, CodeOf(err))

	w.actor = "executor"
	out, err := w.runID(squat, &ReportSuccess{TaskID: id, Attempt: n, Result: json.RawMessage(`"honest"`)})
	require.NoError(t, err)
	require.Equal(t, StateAccepted, out.Reply.State)
	require.False(t, out.Reply.Duplicate)
	require.JSONEq(t, `"honest"`, string(w.task(id).Attempts[0].Result))
	// Its retry is a duplicate ...
	w.duplicate(squat, &ReportSuccess{TaskID: id, Attempt: n, Result: json.RawMessage(`"honest"`)})
	// ... but nobody else's command under the same id is answered as one.
	w.actor = "squatter"
	_, err = w.runID(squat, &ReportSuccess{TaskID: id, Attempt: n, Token: "forged"})
	require.Equal(t, CodeForbidden, CodeOf(err))

	w.requireReplays()
}
