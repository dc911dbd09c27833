package integration

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/schemas"
)

// command sends a command and requires it acked.
// A `dwr worker` command asks for approval of an action (exit 101 with the
// request in DWR_WAIT_FILE): the task waits with no process; a signed
// decision resumes it, and the resumed run reads DWR_APPROVAL and acts.
func TestShellWorkerWaitsForAnApproval(t *testing.T) {
	e := newExecEnv(t)
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	e.k.Command(t, "approver.register", domain.RegisterApprover{Name: "ada", Role: "ops",
		PublicKey: base64.StdEncoding.EncodeToString(pub)})
	e.worker("w", "refunds", 5*time.Second, 5, "approval.sh")
	input := `{"order": "o-17", "cents": 1250}`
	id := e.k.CreateTask(t, map[string]any{"queue": "refunds", "input": json.RawMessage(input)})

	start := time.Now()
	waiting := e.k.WaitTask(t, id, 20*time.Second, "waiting on a pending approval", func(t domain.Task) bool {
		return t.State == domain.StateWaiting && t.Wait != nil && t.Wait.Kind == domain.WaitApproval &&
			len(t.Approvals) == 1 && t.Approvals[0].State == domain.ApprovalStatePending
	})
	asked := time.Since(start)
	a := waiting.Approvals[0]
	require.Equal(t, a.ID, waiting.Wait.ApprovalID)
	require.Equal(t, 1, a.Attempt, "attempt 1 asked")
	require.JSONEq(t, input, string(a.Action))
	require.Equal(t, "refund an order", a.Summary)
	require.JSONEq(t, `{"asked_by_attempt": 1}`, string(a.Basis))
	require.Equal(t, "ops", a.Role)
	require.Equal(t, []string{"approve", "reject"}, a.Responses)
	require.NotNil(t, a.ExpiresAt, "expires_in was passed on")
	require.Len(t, waiting.Attempts, 1)
	require.Equal(t, domain.AttemptStateParked, waiting.Attempts[0].State)

	ada, _ := e.c.member(t, e.url, "ada", domain.RoleApprover) // ada decides as herself
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := ada.do(ctx, "approval.decide", domain.DecideApproval{ApprovalID: a.ID, Approver: "ada", Response: "approve",
		ActionDigest: a.ActionDigest, Comment: "ok", Signature: domain.SignDecision(priv, a.ID, "approve", a.ActionDigest)}, "ada-decides")
	require.Equal(t, acked, r.Outcome, "approval.decide: %v %s", r.Err, r.LastErr)
	decided := time.Now()
	done := e.k.WaitTask(t, id, 20*time.Second, "accepted", func(t domain.Task) bool { return t.State == domain.StateAccepted })
	resumed := time.Since(decided)
	require.Len(t, done.Attempts, 2)
	var res struct {
		Refunded bool `json:"refunded"`
		Attempt  int  `json:"attempt"`
		Decision struct {
			ApprovalID   string          `json:"approval_id"`
			ActionDigest string          `json:"action_digest"`
			Action       json.RawMessage `json:"action"`
			Response     string          `json:"response"`
			Approver     string          `json:"approver"`
			Role         string          `json:"role"`
			Comment      string          `json:"comment"`
		} `json:"decision"`
	}
	require.NoError(t, json.Unmarshal(done.Attempts[1].Result, &res), string(done.Attempts[1].Result))
	require.True(t, res.Refunded)
	require.Equal(t, 2, res.Attempt)
	require.Equal(t, a.ID, res.Decision.ApprovalID)
	require.Equal(t, a.ActionDigest, res.Decision.ActionDigest)
	require.JSONEq(t, input, string(res.Decision.Action))
	require.Equal(t, "approve", res.Decision.Response)
	require.Equal(t, "ada", res.Decision.Approver)
	require.Equal(t, "ops", res.Decision.Role)
	require.Equal(t, "ok", res.Decision.Comment)
	t.Logf("shell approval: asked within %s, resumed and accepted %s after the decision",
		asked.Round(time.Millisecond), resumed.Round(time.Millisecond))
}

// A `dwr worker` command waits for a signal, and another sleeps durably:
// each resumes as a new attempt, the first handed the signal's payload,
// the second its checkpoint, once the timer fired.
func TestShellWorkerWaitsForASignalAndATimer(t *testing.T) {
	e := newExecEnv(t)
	e.worker("w", "waits", 5*time.Second, 5, "waits.sh")
	sig := e.k.CreateTask(t, map[string]any{"queue": "waits", "input": "signal"})
	sleep := e.k.CreateTask(t, map[string]any{"queue": "waits", "input": "sleep"})

	e.k.WaitTask(t, sig, 20*time.Second, "waiting for signal go", func(t domain.Task) bool {
		return t.State == domain.StateWaiting && t.Wait != nil && t.Wait.Kind == domain.WaitSignal && t.Wait.Signal == "go"
	})
	out, err := exec.Command(e.bin, "--server", e.url, "--creds", e.adminCreds(), "signal", sig, "go", "--data", `{"paid": 42}`).CombinedOutput()
	require.NoError(t, err, string(out))
	done := e.k.WaitTask(t, sig, 20*time.Second, "accepted after the signal", func(t domain.Task) bool {
		return t.State == domain.StateAccepted
	})
	require.Len(t, done.Attempts, 2)
	require.Equal(t, domain.AttemptStateParked, done.Attempts[0].State)
	require.JSONEq(t, `{"attempt": 2, "signal": {"name": "go", "payload": {"paid": 42}}}`, string(done.Attempts[1].Result))

	// The sleep may be over already: when it was due is read from the
	// task's history.
	done = e.k.WaitTask(t, sleep, 20*time.Second, "accepted after the sleep", func(t domain.Task) bool {
		return t.State == domain.StateAccepted
	})
	require.Len(t, done.Attempts, 2)
	parked, woke := done.Attempts[0], done.Attempts[1]
	require.Equal(t, domain.AttemptStateParked, parked.State)
	require.NotNil(t, parked.EndedAt)
	require.JSONEq(t, `{"attempt": 2, "woke_from": {"slept_in_attempt": 1}}`, string(woke.Result))
	var until *time.Time
	var evs []json.RawMessage
	require.NoError(t, e.c.query("events", schemas.Query{ID: sleep}, 0, &evs))
	for _, raw := range evs {
		var ev struct {
			Type string             `json:"type"`
			Data domain.TaskWaiting `json:"data"`
		}
		require.NoError(t, json.Unmarshal(raw, &ev))
		if ev.Type == "task.waiting" {
			require.Nil(t, until, "one wait")
			require.Equal(t, domain.WaitTimer, ev.Data.Kind)
			until = ev.Data.Until
		}
	}
	require.NotNil(t, until, "the task waited on a timer")
	slept := until.Sub(*parked.EndedAt)
	require.InDelta(t, float64(time.Second), float64(slept), float64(500*time.Millisecond), "after: 1s counts from the command's exit")
	require.False(t, woke.StartedAt.Before(*until), "attempt 2 started %s before the timer was due", until.Sub(woke.StartedAt))
	t.Logf("shell sleep of 1s: attempt 1 parked until %s after its end; attempt 2 started %s after that",
		slept.Round(time.Millisecond), woke.StartedAt.Sub(*until).Round(time.Millisecond))
}
