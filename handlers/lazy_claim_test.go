package handlers_test

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/schemas"
)

// The lazy claim on a real service: a short job's report carries its claim,
// and the service starts and ends the attempt in one commit — for an
// executor of the task's queue, and only while the task is ready for that
// attempt.

// executor returns a connection of an executor member of queues.
func (b *bundle) executor(t *testing.T, name string, queues ...string) *peer {
	t.Helper()
	if b.peers == nil {
		b.peers = map[string]*peer{}
	}
	p := &peer{nc: b.st.Member(t, "default", name, domain.RoleExecutor, queues...), actor: name}
	b.peers[name] = p
	return p
}

func lazySucceed(id string, attempt int, result any) map[string]any {
	return map[string]any{"task_id": id, "attempt": attempt, "result": result,
		"claim": map[string]any{"executor": "shell", "executor_version": "1.0"}}
}

func TestAShortJobsReportCarriesItsClaimInOneCommit(t *testing.T) {
	b := setup(t)
	w := b.executor(t, "worker", "pay")
	id := b.newTask(t, "pay")

	before := b.lastSeq(t)
	sdkID := "succeed." + id + ".1"
	r := w.send(t, "task.succeed", lazySucceed(id, 1, "done"), sdkID)
	require.True(t, r.OK, "%+v", r.Error)
	require.Equal(t, before+1, b.lastSeq(t), "one commit record: the attempt's start and end together")
	var rep domain.Reply
	require.NoError(t, json.Unmarshal(r.Result, &rep))
	require.Equal(t, domain.StateAccepted, rep.State)
	require.Empty(t, rep.Token, "the token of an attempt that has ended is handed to nobody")

	var done domain.Task
	b.query(t, "task.get", schemas.Query{ID: id}, r.Seq, &done)
	require.Len(t, done.Attempts, 1)
	a := done.Attempts[0]
	require.Equal(t, "worker", a.ClaimedBy, "claimed by the sender")
	require.Equal(t, "shell", a.Executor)
	require.Equal(t, domain.OperationKey(id), a.OperationKey)
	require.Len(t, a.TokenHash, 64, "a token hash, as a claim records")
	require.JSONEq(t, `"done"`, string(a.Result))

	// A retry of the report gets the first outcome and appends nothing.
	again := w.send(t, "task.succeed", lazySucceed(id, 1, "done"), sdkID)
	require.True(t, again.OK, "%+v", again.Error)
	require.Equal(t, before+1, b.lastSeq(t))
	require.JSONEq(t, string(r.Result), string(again.Result), "the retry is answered with the first outcome")

	// A failure's report may carry its claim too.
	f := b.newTask(t, "pay")
	r = w.send(t, "task.fail", map[string]any{"task_id": f, "attempt": 1, "error": map[string]any{"code": "boom", "message": "no"},
		"retryable": true, "claim": map[string]any{"executor": "shell"}}, "fail."+f+".1")
	require.True(t, r.OK, "%+v", r.Error)
	require.NoError(t, json.Unmarshal(r.Result, &rep))
	require.Equal(t, domain.StateBackoff, rep.State)
}

func TestAHostileMergedReportIsRefusedAndRecordedNowhere(t *testing.T) {
	b := setup(t)
	honest := b.executor(t, "worker", "pay")
	elsewhere := b.executor(t, "other-worker", "mail")
	client := &peer{nc: b.st.Member(t, "default", "app", domain.RoleClient), actor: "app"}
	id := b.newTask(t, "pay")
	sdkID := "succeed." + id + ".1"

	before := b.lastSeq(t)
	// A client is no executor: its credential may not even publish a
	// report (NATS refuses it), and were it to reach the service, the
	// service refuses it too (handlers.TestPermissions... cover the role).
	denied := make(chan error, 1)
	client.nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case denied <- err:
		default:
		}
	})
	raw, err := json.Marshal(lazySucceed(id, 1, "forged"))
	require.NoError(t, err)
	require.NoError(t, client.nc.Publish("dwr.cmd.default.task.succeed", raw))
	require.NoError(t, client.nc.Flush())
	select {
	case err := <-denied:
		require.ErrorIs(t, err, nats.ErrPermissionViolation)
	case <-time.After(10 * time.Second):
		t.Fatal("a client's report was not refused")
	}
	// An executor of another queue: forbidden.
	r := elsewhere.send(t, "task.succeed", lazySucceed(id, 1, "forged"), sdkID)
	require.False(t, r.OK)
	require.Equal(t, string(domain.CodeForbidden), r.Error.Code, r.Error.Message)
	// A claim and a token together: invalid.
	body := lazySucceed(id, 1, "forged")
	body["token"] = forgedToken
	r = honest.send(t, "task.succeed", body, "")
	require.False(t, r.OK)
	require.Equal(t, string(domain.CodeInvalid), r.Error.Code, r.Error.Message)
	require.Equal(t, before, b.lastSeq(t), "nothing was appended")

	// Claimed by someone else: the merged report of the same attempt is a
	// conflict, and nothing is recorded; the holder's attempt stands.
	claim := b.peer(t, "holder").claim(t, id, "claim-1", 0)
	before = b.lastSeq(t)
	stale := b.svc.Refused()[handlers.RefusedStale]
	r = honest.send(t, "task.succeed", lazySucceed(id, 1, "late"), sdkID)
	require.False(t, r.OK)
	require.Equal(t, string(domain.CodeConflict), r.Error.Code, r.Error.Message)
	require.Equal(t, before, b.lastSeq(t), "a refused merged report appends nothing")
	require.Equal(t, stale+1, b.svc.Refused()[handlers.RefusedStale], "counted as a stale attempt's command")
	r = b.peer(t, "holder").succeed(t, id, 1, claim.Token, "", "holder's")
	require.True(t, r.OK, "%+v", r.Error)
}

// A merged report racing a claim of the same attempt: exactly one of them
// starts it.
func TestAMergedReportRacingAClaimOneWins(t *testing.T) {
	b := setup(t)
	lazy := b.executor(t, "lazy", "pay")
	eager := b.peer(t, "eager")
	const n = 16
	ids := make([]string, n)
	for i := range ids {
		ids[i] = b.newTask(t, "pay")
	}
	type result struct{ merged, claim schemas.Reply }
	results := make([]result, n)
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			results[i].merged = lazy.send(t, "task.succeed", lazySucceed(id, 1, "lazy"), "succeed."+id+".1")
		})
		wg.Go(func() {
			results[i].claim = eager.send(t, "task.claim", map[string]any{"task_id": id, "executor": "eager"}, "claim."+id+".1.1")
		})
	}
	wg.Wait()
	for i, id := range ids {
		res := results[i]
		claimStarted := false
		if res.claim.OK {
			var rep domain.Reply
			require.NoError(t, json.Unmarshal(res.claim.Result, &rep))
			claimStarted = rep.State == domain.StateRunning
		}
		require.True(t, res.merged.OK != claimStarted, "task %d: exactly one wins (merged %+v, claim %+v)", i, res.merged.Error, res.claim.Error)
		var tk domain.Task
		b.query(t, "task.get", schemas.Query{ID: id}, max(res.merged.Seq, res.claim.Seq), &tk)
		require.Len(t, tk.Attempts, 1, "one attempt was started")
		if res.merged.OK {
			require.Equal(t, "lazy", tk.Attempts[0].ClaimedBy)
			require.Equal(t, domain.StateAccepted, tk.State)
		} else {
			require.Equal(t, string(domain.CodeConflict), res.merged.Error.Code)
			require.Equal(t, "eager", tk.Attempts[0].ClaimedBy)
			require.Equal(t, domain.StateRunning, tk.State)
		}
	}
}
