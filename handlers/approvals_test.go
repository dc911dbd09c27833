package handlers_test

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

func testKey(name string) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte("handlers test key " + name))
	return ed25519.NewKeyFromSeed(seed[:])
}

// register registers approver name with role and returns its key.
func (b *bundle) register(t *testing.T, name, role string) ed25519.PrivateKey {
	t.Helper()
	k := testKey(name)
	b.mustCommand(t, "approver.register", map[string]any{"name": name, "role": role,
		"public_key": base64.StdEncoding.EncodeToString(k.Public().(ed25519.PublicKey))})
	return k
}

func (b *bundle) approval(t *testing.T, id string) projections.ApprovalView {
	t.Helper()
	return get[projections.ApprovalView](t, b, "approval.get", id)
}

func decide(a projections.ApprovalView, approver string, key ed25519.PrivateKey, response string) map[string]any {
	return map[string]any{"approval_id": a.ID, "approver": approver, "response": response,
		"action_digest": a.ActionDigest, "signature": domain.SignDecision(key, a.ID, response, a.ActionDigest)}
}

func TestApprovalsOverTheWire(t *testing.T) {
	clock := servicetest.NewClock(epoch)
	b := setupClocked(t, clock)
	alice := b.register(t, "alice", "ops")
	bob := b.register(t, "bob", "intern")
	var approvers []domain.Approver
	b.query(t, "approver.list", schemas.Query{}, 0, &approvers)
	require.Len(t, approvers, 2)

	gate := map[string]any{"role": "ops", "expires_in": "1h"}
	refund, _ := b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "payments", "title": "refund order 7",
		"input": map[string]any{"refund": 120, "order": "o-7"}, "approval": gate}})
	expiring, _ := b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "payments",
		"input": map[string]any{"refund": 5}, "approval": map[string]any{"role": "ops", "expires_in": "30m", "on_expiry": "reject"}}})
	require.Equal(t, domain.StateWaiting, refund.State)

	// The inbox lists both, for role ops; none for another role.
	var inbox []projections.ApprovalView
	b.query(t, "approval.list", schemas.Query{Role: "ops"}, 0, &inbox)
	require.Len(t, inbox, 2)
	require.Equal(t, "refund order 7", inbox[0].Summary)
	require.Equal(t, "payments", inbox[0].Queue)
	b.query(t, "approval.list", schemas.Query{Role: "finance"}, 0, &inbox)
	require.Empty(t, inbox)
	r := b.request(t, "dwr.q.default.approval.list", schemas.Query{State: "maybe"}, nil)
	require.False(t, r.OK)
	require.Equal(t, "/state", r.Error.Fields[0].Pointer)

	// An unauthorized decision is refused, answered as an error, and recorded.
	a := b.approval(t, domain.ApprovalID(refund.ID, 1))
	// Each approver decides on a connection of its own: an authenticated
	// identity decides only as itself.
	r = b.peer(t, "bob").send(t, "approval.decide", decide(a, "bob", bob, "approve"), "bob-tries")
	require.False(t, r.OK)
	require.Equal(t, string(domain.CodeForbidden), r.Error.Code)
	require.True(t, strings.HasPrefix(r.Error.Message, domain.RefusedUnauthorized+":"), r.Error.Message)
	require.Equal(t, "/approver", r.Error.Fields[0].Pointer)
	again := b.peer(t, "bob").send(t, "approval.decide", decide(a, "bob", bob, "approve"), "bob-tries")
	require.Equal(t, r.Error, again.Error, "a retry of a refused decision gets the same answer")
	a = b.approval(t, a.ID)
	require.Len(t, a.Refusals, 1, "the retry was not recorded twice")
	require.Equal(t, domain.ApprovalStatePending, a.State)
	require.Equal(t, domain.StateWaiting, b.c.Task(t, refund.ID).State)

	// The right approver decides; the task is ready and a work item is due.
	okr := b.peer(t, "alice").send(t, "approval.decide", decide(a, "alice", alice, "approve"), "")
	require.True(t, okr.OK, "%+v", okr.Error)
	var ok domain.Reply
	require.NoError(t, json.Unmarshal(okr.Result, &ok))
	require.Equal(t, domain.StateReady, ok.State)
	require.Equal(t, a.ID, ok.ApprovalID)
	a = b.approval(t, a.ID)
	require.Equal(t, "alice", a.Decision.Approver)
	require.Equal(t, "ops", a.Decision.Role)
	b.query(t, "approval.list", schemas.Query{}, 0, &inbox)
	require.Len(t, inbox, 1, "a decided approval leaves the pending inbox")
	b.query(t, "approval.list", schemas.Query{State: "decided"}, 0, &inbox)
	require.Len(t, inbox, 1)

	// The other one expires: its expiry branch (reject) is taken, once.
	clock.Advance(30 * time.Minute)
	b.c.WaitState(t, expiring.ID, domain.StateRejected, 10*time.Second)
	e := b.approval(t, domain.ApprovalID(expiring.ID, 1))
	require.Equal(t, domain.ApprovalStateExpired, e.State)
	r = b.peer(t, "alice").send(t, "approval.decide", decide(e, "alice", alice, "approve"), "")
	require.False(t, r.OK)
	require.Equal(t, string(domain.CodeConflict), r.Error.Code)
	require.True(t, strings.HasPrefix(r.Error.Message, domain.RefusedExpired+":"), r.Error.Message)
	n := 0
	for _, ev := range b.events(t, expiring.ID) {
		if ev.Type == "task.approval_expired" {
			n++
		}
	}
	require.Equal(t, 1, n)

	// A running attempt asks; the approval is in the inbox with its action.
	claim, _ := b.mustCommand(t, "task.claim", map[string]any{"task_id": refund.ID, "executor": "test"})
	req, _ := b.mustCommand(t, "task.request_approval", map[string]any{"task_id": refund.ID, "attempt": claim.Attempt,
		"action": map[string]any{"transfer": 120, "to": "acct-7"}, "summary": "wire 120 to acct-7"})
	require.Equal(t, domain.StateWaiting, req.State)
	asked := b.approval(t, req.ApprovalID)
	require.JSONEq(t, `{"transfer": 120, "to": "acct-7"}`, string(asked.Action))
	require.Equal(t, claim.Attempt, asked.Attempt)
	want, err := domain.ActionDigest(json.RawMessage(`{"to":"acct-7","transfer":120}`))
	require.NoError(t, err)
	require.Equal(t, want, asked.ActionDigest)
}

func TestTaskDeadlineFailsTheTask(t *testing.T) {
	clock := servicetest.NewClock(epoch)
	b := setupClocked(t, clock)
	at := clock.Now().Add(time.Hour)
	tk, _ := b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "slow",
		"deadline": at.Format(time.RFC3339Nano)}})
	b.mustCommand(t, "task.claim", map[string]any{"task_id": tk.ID, "executor": "test"})
	sentinel := b.sleeper(t, at.Add(-time.Second))
	clock.Set(at.Add(-time.Second))
	b.loopLooked(t, sentinel)
	require.Equal(t, domain.StateRunning, b.c.Task(t, tk.ID).State)
	clock.Set(at)
	b.c.WaitState(t, tk.ID, domain.StateFailed, 10*time.Second)
	got := b.c.Task(t, tk.ID)
	require.Equal(t, domain.ReasonDeadline, got.Reason)
	require.Equal(t, domain.AttemptStateCancelled, got.Attempts[0].State)
}

// A goal's budget that runs out with on_exhausted approval: the task waits
// on a budget approval in the inbox of the extension role; approved by a
// signed decision, the goal's budget doubles and the task runs again.
func TestABudgetExtensionOverTheWire(t *testing.T) {
	b := setup(t)
	olga := b.register(t, "olga", "finance")
	goal, _ := b.mustCommand(t, "goal.create", map[string]any{"title": "research", "envelope": map[string]any{
		"budget": map[string]any{"tokens": 100}, "on_exhausted": "approval", "extension_role": "finance"},
		"tasks": []map[string]any{{"key": "a", "queue": "q"}}})
	taskID := goal.Tasks[0].TaskID
	claim, _ := b.mustCommand(t, "task.claim", map[string]any{"task_id": taskID, "executor": "test"})
	failed, seq := b.mustCommand(t, "task.fail", map[string]any{"task_id": taskID, "attempt": 1, "token": claim.Token,
		"error": map[string]any{"message": "try again"}, "retryable": true, "model_steps": []map[string]any{{"model": "m", "tokens": 120}}})
	require.Equal(t, domain.StateWaiting, failed.State)

	var inbox []projections.ApprovalView
	b.query(t, "approval.list", schemas.Query{Role: "finance"}, seq, &inbox)
	require.Len(t, inbox, 1)
	a := inbox[0]
	require.Equal(t, schemas.ApprovalKindBudget, a.Kind)
	require.Contains(t, a.Summary, "extend the budget of goal research")

	r := b.peer(t, "olga").send(t, "approval.decide", decide(a, "olga", olga, "approve"), "")
	require.True(t, r.OK, "%+v", r.Error)
	var decided domain.Reply
	require.NoError(t, json.Unmarshal(r.Result, &decided))
	require.Equal(t, domain.StateReady, decided.State)
	seq = r.Seq
	var g schemas.GoalView
	b.query(t, "goal.get", schemas.Query{ID: goal.ID}, seq, &g)
	require.Equal(t, int64(200), g.Envelope.Budget.Tokens)
	require.Equal(t, int64(120), g.Spent.Tokens)
}
