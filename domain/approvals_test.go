package domain

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/schemas"
)

// keyOf returns a fixed key pair for name, so tests are deterministic.
func keyOf(name string) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte("test key " + name))
	return ed25519.NewKeyFromSeed(seed[:])
}

func pubOf(k ed25519.PrivateKey) string {
	return base64.StdEncoding.EncodeToString(k.Public().(ed25519.PublicKey))
}

// approver registers name with role in the workspace and returns its key.
func (w *world) approver(name, role string) ed25519.PrivateKey {
	w.t.Helper()
	k := keyOf(name)
	w.must(&RegisterApprover{Name: name, Role: role, PublicKey: pubOf(k)})
	return k
}

// approval returns approval id as the world has it.
func (w *world) approval(id string) *Approval {
	w.t.Helper()
	taskID, _, ok := ParseApprovalID(id)
	require.True(w.t, ok, "approval id %q", id)
	a := w.task(taskID).Approval(id)
	require.NotNil(w.t, a, "approval %s", id)
	return a
}

// pending returns the approval task id waits on.
func (w *world) pending(taskID string) *Approval {
	w.t.Helper()
	a := w.task(taskID).PendingApproval()
	require.NotNil(w.t, a, "task %s waits on no approval (state %s)", taskID, w.state(taskID))
	return a
}

// decision returns approver's decision of approval a, signed with key.
func decision(a *Approval, approver string, key ed25519.PrivateKey, response string) *DecideApproval {
	return &DecideApproval{ApprovalID: a.ID, Approver: approver, Response: response, ActionDigest: a.ActionDigest,
		Signature: SignDecision(key, a.ID, response, a.ActionDigest)}
}

func gated(key string, deps ...string) TaskSpec {
	s := spec(key, deps...)
	s.Input = json.RawMessage(`{"amount": 120, "to": "acct-7"}`)
	s.Approval = &ApprovalSpec{Role: "owner"}
	return s
}

func TestActionDigestIsCanonical(t *testing.T) {
	a, err := ActionDigest(json.RawMessage(`{"to":"acct-7","amount":120.50, "memo": "<x>"}`))
	require.NoError(t, err)
	b, err := ActionDigest(json.RawMessage("{ \"memo\":\"<x>\",\n \"amount\": 120.50, \"to\": \"acct-7\" }"))
	require.NoError(t, err)
	require.Equal(t, a, b, "key order and space do not change the digest")
	c, err := ActionDigest(json.RawMessage(`{"to":"acct-7","amount":120.51, "memo": "<x>"}`))
	require.NoError(t, err)
	require.NotEqual(t, a, c, "an altered action has another digest")
	require.Regexp(t, `^sha256:[0-9a-f]{64}$`, a)
	_, err = ActionDigest(json.RawMessage(`{"a":1} {"b":2}`))
	require.Error(t, err)
}

func TestApprovalIDs(t *testing.T) {
	id := DeriveID(epoch, "x")
	got, n, ok := ParseApprovalID(ApprovalID(id, 12))
	require.True(t, ok)
	require.Equal(t, id, got)
	require.Equal(t, 12, n)
	for _, bad := range []string{"", id, id + "-0", id + "-x", "nope-1", "-1"} {
		_, _, ok := ParseApprovalID(bad)
		require.False(t, ok, bad)
	}
}

func TestRegisterApprover(t *testing.T) {
	w := setup(t)
	k := w.approver("alice", "owner")
	ws, _ := w.o.Workspace(w.ws)
	require.Len(t, ws.Approvers, 1)
	require.Equal(t, KeyID(k.Public().(ed25519.PublicKey)), ws.Approvers[0].KeyID)
	require.Empty(t, w.must(&RegisterApprover{Name: "alice", Role: "owner", PublicKey: pubOf(k)}).Changes, "the same key again is a no-op")

	require.Equal(t, "/public_key", w.refused(&RegisterApprover{Name: "bob", Role: "owner", PublicKey: "abc"}, CodeInvalid).Field)
	require.Equal(t, "/public_key", w.refused(&RegisterApprover{Name: "bob", Role: "owner",
		PublicKey: base64.StdEncoding.EncodeToString(make([]byte, 31))}, CodeInvalid).Field)
	require.Equal(t, "/name", w.refused(&RegisterApprover{Name: "Bob Smith", Role: "owner", PublicKey: pubOf(k)}, CodeInvalid).Field)
	require.Equal(t, "/role", w.refused(&RegisterApprover{Name: "bob", Role: "", PublicKey: pubOf(k)}, CodeInvalid).Field)

	// A new key replaces the old one: the old key decides nothing any more.
	k2 := keyOf("alice-2")
	w.must(&RegisterApprover{Name: "alice", Role: "owner", PublicKey: pubOf(k2)})
	ws, _ = w.o.Workspace(w.ws)
	require.Len(t, ws.Approvers, 1)
	id := w.newID()
	w.must(&CreateTask{TaskID: id, Spec: gated("")})
	a := w.pending(id)
	_ = w.recorded(decision(a, "alice", k, ResponseApprove), CodeForbidden, RefusedBadSignature)
	w.must(decision(a, "alice", k2, ResponseApprove))
	w.requireReplays()
}

func TestApprovalGateBranches(t *testing.T) {
	t.Run("approve resumes: the first attempt starts", func(t *testing.T) {
		w := setup(t)
		k := w.approver("alice", "owner")
		g := w.createGoal(Envelope{})
		ids, out := w.plan(g, gated("a"), gated("b", "a"))
		a, b := ids["a"], ids["b"]
		require.Equal(t, []string{"task.created", "task.approval_requested"}, events(out, a))
		ap := w.pending(a)
		require.Equal(t, ApprovalID(a, 1), ap.ID)
		require.Equal(t, "owner", ap.Role)
		require.Equal(t, []string{ResponseApprove, ResponseReject}, ap.Responses)
		want, _ := ActionDigest(json.RawMessage(`{"to":"acct-7","amount":120}`))
		require.Equal(t, want, ap.ActionDigest, "a gate's action is the task's input")
		require.Equal(t, StatePending, w.state(b), "b's gate is asked only when its dependencies are met")
		_ = w.refused(&ClaimTask{ClaimBody: ClaimBody{TaskID: a, Executor: "e"}}, CodeConflict)

		out = w.must(decision(ap, "alice", k, ResponseApprove))
		require.Equal(t, []string{"task.approval_decided", "task.ready"}, events(out, a))
		require.True(t, w.task(a).Approved)
		d := w.approval(ap.ID).Decision
		require.Equal(t, "alice", d.Approver)
		require.Equal(t, "owner", d.Role)
		require.Equal(t, BranchResume, d.Branch)
		require.Equal(t, w.now, d.DecidedAt)

		out = w.succeed(a, w.claim(a))
		require.Equal(t, []string{"task.approval_requested"}, events(out, b))
		w.must(decision(w.pending(b), "alice", k, ResponseApprove))
		w.succeed(b, w.claim(b))
		require.Equal(t, GoalStateAchieved, w.goal(g).State)
		w.requireReplays()
	})
	t.Run("reject rejects the task and fails its dependents", func(t *testing.T) {
		w := setup(t)
		k := w.approver("alice", "owner")
		g := w.createGoal(Envelope{})
		ids, _ := w.plan(g, gated("a"), spec("b", "a"))
		d := decision(w.pending(ids["a"]), "alice", k, ResponseReject)
		d.Comment = "too risky"
		out := w.must(d)
		require.Equal(t, []string{"task.approval_decided", "task.rejected"}, events(out, ids["a"]))
		require.Contains(t, w.task(ids["a"]).Reason, "too risky")
		require.Equal(t, ReasonDependencyFailed, eventOf[*TaskFailed](t, out, ids["b"]).Reason)
		require.Equal(t, []string{"goal.failed"}, events(out, g))
	})
	t.Run("revise of a gate rejects; of an attempt's request resumes", func(t *testing.T) {
		w := setup(t)
		k := w.approver("alice", "owner")
		id := w.newID()
		s := gated("")
		s.Approval.Responses = []string{ResponseApprove, ResponseRevise}
		w.must(&CreateTask{TaskID: id, Spec: s})
		out := w.must(decision(w.pending(id), "alice", k, ResponseRevise))
		require.Equal(t, []string{"task.approval_decided", "task.rejected"}, events(out, id))
	})
	t.Run("escalate asks the escalation role", func(t *testing.T) {
		w := setup(t)
		alice := w.approver("alice", "owner")
		carol := w.approver("carol", "director")
		id := w.newID()
		s := gated("")
		s.Approval.Responses = []string{ResponseApprove, ResponseReject, ResponseEscalate}
		s.Approval.EscalateTo = "director"
		w.must(&CreateTask{TaskID: id, Spec: s})
		first := w.pending(id)
		out := w.must(decision(first, "alice", alice, ResponseEscalate))
		require.Equal(t, []string{"task.approval_decided", "task.approval_requested"}, events(out, id))
		second := w.pending(id)
		require.Equal(t, ApprovalID(id, 2), second.ID)
		require.Equal(t, "director", second.Role)
		require.Equal(t, first.ActionDigest, second.ActionDigest)
		require.NotContains(t, second.Responses, ResponseEscalate, "an escalation is not escalated again")
		require.Equal(t, [2]string{"", first.Role}, [2]string{first.EscalatedFrom, first.AskedRole}, "the first request asked its own role")
		require.Equal(t, [2]string{first.ID, first.Role}, [2]string{second.EscalatedFrom, second.AskedRole},
			"the escalation's approval is still the first role's request")
		_ = w.recorded(decision(second, "alice", alice, ResponseApprove), CodeForbidden, RefusedUnauthorized)
		w.must(decision(second, "carol", carol, ResponseApprove))
		require.Equal(t, StateReady, w.state(id))
		require.Equal(t, "/escalate_to", w.refused(&CreateTask{TaskID: w.newID(), Spec: func() TaskSpec {
			s := gated("")
			s.Approval.Responses = []string{ResponseEscalate}
			return s
		}()}, CodeInvalid).Field[len("/spec/approval"):])
	})
	t.Run("custom branches", func(t *testing.T) {
		w := setup(t)
		k := w.approver("alice", "owner")
		id := w.newID()
		s := gated("")
		s.Approval.Branches = map[string]string{ResponseReject: BranchFail}
		w.must(&CreateTask{TaskID: id, Spec: s})
		w.must(decision(w.pending(id), "alice", k, ResponseReject))
		require.Equal(t, StateFailed, w.state(id))
		require.Equal(t, ReasonApproval, w.task(id).Reason)
		require.Equal(t, "/spec/approval/branches/approve", w.refused(&CreateTask{TaskID: w.newID(), Spec: func() TaskSpec {
			s := gated("")
			s.Approval.Branches = map[string]string{ResponseApprove: "maybe"}
			return s
		}()}, CodeInvalid).Field)
	})
	t.Run("approval then start time", func(t *testing.T) {
		w := setup(t)
		k := w.approver("alice", "owner")
		id := w.newID()
		s := gated("")
		at := w.now.Add(10 * time.Minute)
		s.StartAt = &at
		w.must(&CreateTask{TaskID: id, Spec: s})
		out := w.must(decision(w.pending(id), "alice", k, ResponseApprove))
		require.Equal(t, []string{"task.approval_decided", "task.waiting"}, events(out, id))
		require.Equal(t, &Wait{Kind: WaitTimer, Until: &at}, w.task(id).Wait)
		w.advance(10 * time.Minute)
		w.must(&FireTimer{TaskID: id, Kind: TimerWait, Due: at})
		require.Equal(t, StateReady, w.state(id))
	})
}

func TestApprovalExpiry(t *testing.T) {
	for _, tc := range []struct {
		onExpiry, state string
		events          []string
	}{
		{"", StateFailed, []string{"task.approval_expired", "task.failed"}},
		{BranchReject, StateRejected, []string{"task.approval_expired", "task.rejected"}},
		{BranchResume, StateReady, []string{"task.approval_expired", "task.ready"}},
		{BranchEscalate, StateWaiting, []string{"task.approval_expired", "task.approval_requested"}},
	} {
		t.Run("on_expiry="+tc.onExpiry, func(t *testing.T) {
			w := setup(t)
			k := w.approver("alice", "owner")
			id := w.newID()
			s := gated("")
			s.Approval.ExpiresIn = Duration(time.Hour)
			s.Approval.OnExpiry = tc.onExpiry
			s.Approval.EscalateTo = "director"
			w.must(&CreateTask{TaskID: id, Spec: s})
			a := w.pending(id)
			require.Equal(t, w.now.Add(time.Hour), *a.ExpiresAt)
			fire := &FireTimer{TaskID: id, Kind: TimerApproval, Attempt: 1, Due: *a.ExpiresAt}
			w.advance(time.Hour - time.Nanosecond)
			_ = w.refused(fire, CodeConflict)
			w.advance(time.Nanosecond)
			_ = w.recorded(decision(a, "alice", k, ResponseApprove), CodeConflict, RefusedExpired)
			out := w.must(fire)
			require.Equal(t, tc.events, events(out, id))
			require.Equal(t, tc.state, w.state(id))
			require.Equal(t, ApprovalStateExpired, w.approval(a.ID).State)
			if tc.onExpiry == BranchEscalate {
				next := w.pending(id)
				require.Equal(t, [3]string{"director", a.ID, a.Role}, [3]string{next.Role, next.EscalatedFrom, next.AskedRole})
			}
			require.Empty(t, w.must(fire).Changes, "an expiry fires once")
			_ = w.recorded(decision(a, "alice", k, ResponseApprove), CodeConflict, RefusedExpired)
			w.requireReplays()
		})
	}
}

func TestApprovalForgeries(t *testing.T) {
	w := setup(t)
	alice := w.approver("alice", "owner")
	bob := w.approver("bob", "intern")
	mallory := keyOf("mallory")
	one, two := w.newID(), w.newID()
	w.must(&CreateTask{TaskID: one, Spec: gated("")})
	s := gated("")
	s.Input = json.RawMessage(`{"amount": 9000, "to": "acct-666"}`)
	w.must(&CreateTask{TaskID: two, Spec: s})
	a1, a2 := w.pending(one), w.pending(two)
	// A second approval on task one, to replay a signature within a task too.
	signedForOne := decision(a1, "alice", alice, ResponseApprove)

	cases := []struct {
		name   string
		cmd    *DecideApproval
		code   Code
		reason string
		field  string
	}{
		{"wrong key", decision(a2, "alice", mallory, ResponseApprove), CodeForbidden, RefusedBadSignature, "/signature"},
		{"unregistered approver", decision(a2, "mallory", mallory, ResponseApprove), CodeForbidden, RefusedUnknownApprover, "/approver"},
		{"unauthorized approver", decision(a2, "bob", bob, ResponseApprove), CodeForbidden, RefusedUnauthorized, "/approver"},
		{"response not permitted", decision(a2, "alice", alice, ResponseEscalate), CodeForbidden, RefusedNotPermitted, "/response"},
		{"signature replayed onto another approval", func() *DecideApproval {
			c := *signedForOne
			c.ApprovalID, c.ActionDigest = a2.ID, a2.ActionDigest
			return &c
		}(), CodeForbidden, RefusedBadSignature, "/signature"},
		{"decision on an altered action", func() *DecideApproval {
			c := decision(a2, "alice", alice, ResponseApprove)
			c.ActionDigest, _ = ActionDigest(json.RawMessage(`{"amount": 90, "to": "acct-666"}`))
			c.Signature = SignDecision(alice, a2.ID, ResponseApprove, c.ActionDigest)
			return c
		}(), CodeForbidden, RefusedActionMismatch, "/action_digest"},
		{"response swapped under a signature", func() *DecideApproval {
			c := decision(a2, "alice", alice, ResponseReject)
			c.Response = ResponseApprove
			return c
		}(), CodeForbidden, RefusedBadSignature, "/signature"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := w.task(two)
			err := w.recorded(tc.cmd, tc.code, tc.reason)
			require.Equal(t, tc.field, err.Field)
			after := w.task(two)
			require.Equal(t, StateWaiting, after.State)
			require.Equal(t, ApprovalStatePending, after.Approval(a2.ID).State)
			require.Len(t, after.Approval(a2.ID).Refusals, len(before.Approval(a2.ID).Refusals)+1)
			last := after.Approval(a2.ID).Refusals[len(after.Approval(a2.ID).Refusals)-1]
			require.Equal(t, tc.reason, last.Reason)
			require.Equal(t, tc.cmd.Approver, last.Approver)
		})
	}
	t.Run("malformed input is refused and not recorded", func(t *testing.T) {
		c := decision(a2, "alice", alice, ResponseApprove)
		c.Signature = "not base64!"
		require.Equal(t, "/signature", w.refused(c, CodeInvalid).Field)
		c = decision(a2, "alice", alice, "maybe")
		require.Equal(t, "/response", w.refused(c, CodeInvalid).Field)
		c = decision(a2, "alice", alice, ResponseApprove)
		c.ApprovalID = "nope"
		require.Equal(t, "/approval_id", w.refused(c, CodeInvalid).Field)
		c.ApprovalID = ApprovalID(two, 7)
		require.Equal(t, "/approval_id", w.refused(c, CodeNotFound).Field)
	})
	t.Run("second decision", func(t *testing.T) {
		w.must(decision(a2, "alice", alice, ResponseReject))
		require.Empty(t, w.must(decision(a2, "alice", alice, ResponseReject)).Changes, "the same signed decision again is a no-op")
		_ = w.recorded(decision(a2, "alice", alice, ResponseApprove), CodeConflict, RefusedAlreadyDecided)
		require.Equal(t, StateRejected, w.state(two))
	})
	t.Run("replay within a task names the approval it was made for", func(t *testing.T) {
		w.must(signedForOne)
		n := w.claim(one)
		w.must(&RequestApproval{TaskID: one, Attempt: n, ApprovalRequest: ApprovalRequest{Action: json.RawMessage(`{"step": 2}`)}})
		a := w.pending(one)
		c := *signedForOne
		c.ApprovalID, c.ActionDigest = a.ID, a.ActionDigest
		_ = w.recorded(&c, CodeForbidden, RefusedReplayed)
	})
	w.requireReplays()
}

func TestAttemptRequestsApproval(t *testing.T) {
	w := setup(t)
	k := w.approver("alice", "owner")
	id := w.newID()
	s := spec("")
	s.Approval = &ApprovalSpec{Role: "owner", ExpiresIn: Duration(time.Hour)} // defaults for requests; the gate is passed first
	w.must(&CreateTask{TaskID: id, Spec: s})
	w.must(decision(w.pending(id), "alice", k, ResponseApprove))
	n := w.claim(id)

	action := json.RawMessage(`{"refund": 120, "order": "o-1"}`)
	req := &RequestApproval{TaskID: id, Attempt: n, ApprovalRequest: ApprovalRequest{Action: action,
		Summary: "refund order o-1", Basis: json.RawMessage(`{"ticket": "T-9"}`),
		Responses: []string{ResponseApprove, ResponseReject, ResponseRevise}}}
	require.Equal(t, "/attempt", w.refused(&RequestApproval{TaskID: id, Attempt: n + 1, ApprovalRequest: req.ApprovalRequest}, CodeConflict).Field)
	require.Equal(t, "/action", w.refused(&RequestApproval{TaskID: id, Attempt: n}, CodeInvalid).Field)
	out := w.must(req)
	require.Equal(t, ApprovalID(id, 2), out.Reply.ApprovalID)
	require.Equal(t, []string{"task.approval_requested"}, events(out, id))
	task := w.task(id)
	require.Equal(t, StateWaiting, task.State)
	require.Equal(t, AttemptStateParked, task.Attempts[0].State, "the worker is free: its attempt is parked")
	a := w.pending(id)
	require.Equal(t, "owner", a.Role, "the task's approval settings are the request's defaults")
	require.Equal(t, w.now.Add(time.Hour), *a.ExpiresAt)
	require.Equal(t, n, a.Attempt)

	// revise: a new attempt, handed the decision, proposes another action.
	d := decision(a, "alice", k, ResponseRevise)
	d.Comment = "refund 100 only"
	out = w.must(d)
	require.Equal(t, []string{"task.approval_decided", "task.ready"}, events(out, id))
	n2 := w.claim(id)
	require.Equal(t, n+1, n2)
	last := w.task(id).LastDecision()
	require.Equal(t, ResponseRevise, last.Decision.Response)
	require.Equal(t, "refund 100 only", last.Decision.Comment)

	revised := json.RawMessage(`{"refund": 100, "order": "o-1"}`)
	w.must(&RequestApproval{TaskID: id, Attempt: n2, ApprovalRequest: ApprovalRequest{Action: revised}})
	a = w.pending(id)
	w.must(decision(a, "alice", k, ResponseApprove))
	n3 := w.claim(id)
	last = w.task(id).LastDecision()
	digest, _ := ActionDigest(revised)
	require.Equal(t, digest, last.ActionDigest, "the attempt is handed the approved action's digest")
	require.JSONEq(t, string(revised), string(last.Action))
	w.succeed(id, n3)
	require.Equal(t, StateAccepted, w.state(id))
	w.requireReplays()
}

func TestPendingApprovalWithdrawnWhenTaskEnds(t *testing.T) {
	w := setup(t)
	w.approver("alice", "owner")
	id := w.newID()
	w.must(&CreateTask{TaskID: id, Spec: gated("")})
	a := w.pending(id)
	w.must(&CancelTask{TaskID: id})
	require.Equal(t, ApprovalStateWithdrawn, w.approval(a.ID).State)
	_ = w.recorded(decision(a, "alice", keyOf("alice"), ResponseApprove), CodeConflict, RefusedExpired)
}

func TestTaskDeadline(t *testing.T) {
	w := setup(t)
	id := w.newID()
	s := spec("")
	at := w.now.Add(time.Hour)
	s.Deadline = &at
	s.Timeout = Duration(10 * time.Hour)
	w.must(&CreateTask{TaskID: id, Spec: s})
	n := w.claim(id)
	fire := &FireTimer{TaskID: id, Kind: TimerTask, Due: at}
	w.advance(59 * time.Minute)
	_ = w.refused(fire, CodeConflict)
	w.advance(time.Minute)
	out := w.must(fire)
	require.Equal(t, []string{"task.failed"}, events(out, id))
	task := w.task(id)
	require.Equal(t, ReasonDeadline, task.Reason)
	require.Equal(t, AttemptStateCancelled, task.Attempts[0].State)
	require.Empty(t, w.must(fire).Changes)
	_ = w.refused(&ReportSuccess{TaskID: id, Attempt: n}, CodeConflict)
}

// A task keeps what it asked approval for, and every event of it rewrites
// all of that: an attempt cannot make it grow without end by asking again
// and again (each time it resumes), nor with large actions and bases. The
// limit's refusal says what to do instead; an escalation past it fails the
// task rather than asking once more.
func TestATaskAsksABoundedNumberOfApprovals(t *testing.T) {
	w := setup(t)
	k := w.approver("alice", "owner")
	id := w.newID()
	s := spec("")
	s.Approval = &ApprovalSpec{Role: "owner"}
	w.must(&CreateTask{TaskID: id, Spec: s})
	w.must(decision(w.pending(id), "alice", k, ResponseApprove)) // the gate: approval 1
	ask := func(n, i int, extra func(*ApprovalRequest)) *RequestApproval {
		r := ApprovalRequest{Action: json.RawMessage(fmt.Sprintf(`{"step": %d}`, i)), Responses: []string{ResponseApprove, ResponseRevise}}
		if extra != nil {
			extra(&r)
		}
		return &RequestApproval{TaskID: id, Attempt: n, ApprovalRequest: r}
	}
	for i := 2; i < schemas.MaxTaskApprovals; i++ {
		n := w.claim(id)
		w.must(ask(n, i, nil))
		w.must(decision(w.pending(id), "alice", k, ResponseRevise)) // a new attempt, which asks again
	}
	// The last one the task may ask expires, and would escalate.
	n := w.claim(id)
	w.must(ask(n, schemas.MaxTaskApprovals, func(r *ApprovalRequest) {
		r.ExpiresIn, r.OnExpiry, r.EscalateTo = Duration(time.Minute), BranchEscalate, "director"
	}))
	require.Len(t, w.task(id).Approvals, schemas.MaxTaskApprovals)
	a := w.pending(id)
	w.advance(time.Minute)
	out := w.must(&FireTimer{TaskID: id, Kind: TimerApproval, Attempt: schemas.MaxTaskApprovals, Due: *a.ExpiresAt})
	require.Equal(t, []string{"task.approval_expired", "task.failed"}, events(out, id))
	task := w.task(id)
	require.Equal(t, StateFailed, task.State)
	require.Contains(t, task.Error.Message, "not escalated")
	require.Contains(t, task.Error.Message, fmt.Sprintf("has asked %d approvals", schemas.MaxTaskApprovals))
	require.Len(t, task.Approvals, schemas.MaxTaskApprovals)
	w.requireReplays()

	// Their actions and bases are bounded too.
	id = w.newID()
	w.must(&CreateTask{TaskID: id, Spec: spec("")})
	big := json.RawMessage(`"` + strings.Repeat("a", MaxInputBytes-16) + `"`)
	held := 0
	for {
		n := w.claim(id)
		req := ask(n, 0, func(r *ApprovalRequest) { r.Action, r.Basis, r.Role = big, big, "owner" })
		if held+2*len(big) > schemas.MaxTaskApprovalBytes {
			e := w.refused(req, CodeConflict)
			require.Contains(t, e.Message, "keep evidence in artifacts", "the refusal says what to do")
			require.Equal(t, StateRunning, w.state(id), "a refused request changes nothing")
			break
		}
		w.must(req)
		held += 2 * len(big)
		w.must(decision(w.pending(id), "alice", k, ResponseRevise))
	}
	require.Len(t, w.task(id).Approvals, schemas.MaxTaskApprovalBytes/(2*len(big)))
	w.requireReplays()
}

// Four eyes within one role: an approval with a quorum of two waits for two
// distinct approvers of its role to approve; one approver counts once, and
// any other response decides at once.
func TestAQuorumNeedsDistinctApprovers(t *testing.T) {
	setupQuorum := func(t *testing.T) (*world, string, map[string]ed25519.PrivateKey) {
		w := setup(t)
		keys := map[string]ed25519.PrivateKey{"ada": w.approver("ada", "owner"), "bo": w.approver("bo", "owner"),
			"cy": w.approver("cy", "other")}
		id := w.newID()
		s := gated("")
		s.Approval.Quorum = 2
		w.must(&CreateTask{TaskID: id, Spec: s})
		return w, id, keys
	}
	t.Run("two approve", func(t *testing.T) {
		w, id, k := setupQuorum(t)
		a := w.pending(id)
		require.Equal(t, 2, a.Quorum)
		out := w.must(decision(a, "ada", k["ada"], ResponseApprove))
		require.Equal(t, []string{"task.approval_signed_off"}, events(out, id))
		require.Equal(t, StateWaiting, w.state(id), "one approval of two: still waiting")
		a = w.approval(a.ID)
		require.Equal(t, ApprovalStatePending, a.State)
		require.Len(t, a.SignOffs, 1)
		require.Equal(t, [3]string{"ada", "owner", ResponseApprove}, [3]string{a.SignOffs[0].Approver, a.SignOffs[0].Role, a.SignOffs[0].Response})

		require.Empty(t, w.must(decision(a, "ada", k["ada"], ResponseApprove)).Changes, "the same signed approval again: a duplicate")
		// Registered again with a new key, the same approver is still one
		// of the quorum: the sign-off of the old key no longer counts, the
		// new key's takes its place.
		ada2 := keyOf("ada, again")
		w.must(&RegisterApprover{Name: "ada", Role: "owner", PublicKey: pubOf(ada2)})
		w.must(decision(a, "ada", ada2, ResponseApprove))
		a = w.approval(a.ID)
		require.Len(t, a.SignOffs, 1)
		require.Equal(t, KeyID(ada2.Public().(ed25519.PublicKey)), a.SignOffs[0].KeyID)
		require.Empty(t, w.must(decision(a, "ada", ada2, ResponseApprove)).Changes, "the same signed approval again: a duplicate")
		_ = w.recorded(decision(a, "cy", k["cy"], ResponseApprove), CodeForbidden, RefusedUnauthorized)

		out = w.must(decision(a, "bo", k["bo"], ResponseApprove))
		require.Equal(t, []string{"task.approval_decided", "task.ready"}, events(out, id))
		a = w.approval(a.ID)
		require.Equal(t, ApprovalStateDecided, a.State)
		require.Equal(t, "bo", a.Decision.Approver, "the approval that makes the quorum decides")
		require.Len(t, a.SignOffs, 1)
		_ = w.recorded(decision(a, "ada", k["ada"], ResponseReject), CodeConflict, RefusedAlreadyDecided)
		w.requireReplays()
	})
	t.Run("an approver counts once", func(t *testing.T) {
		// Ed25519 as Go signs is deterministic, so a second approval of one
		// key is the first sent again (a duplicate); a signer with random
		// nonces makes another valid signature. The log holds one here.
		w, id, k := setupQuorum(t)
		a := w.pending(id)
		first := decision(a, "ada", k["ada"], ResponseApprove)
		signed := schemas.SignedResponse{Response: ResponseApprove, Branch: BranchResume, Approver: "ada", Role: "owner",
			KeyID: KeyID(k["ada"].Public().(ed25519.PublicKey)), Signature: "another valid signature of ada's key"}
		r := Recorded{CommandID: "randomized", Actor: "ada", Time: w.now}
		require.NoError(t, w.o.Apply(Change{AggregateType: AggTask, AggregateID: id, Workspace: w.ws, Version: w.task(id).Version + 1,
			Event: &ApprovalSignedOff{ApprovalID: a.ID, SignedResponse: signed}}, r))
		e := w.recorded(first, CodeConflict, RefusedAlreadySigned)
		require.Contains(t, e.Message, "another approver must")
	})
	t.Run("a revoked approver's sign-off no longer counts", func(t *testing.T) {
		w, id, k := setupQuorum(t)
		a := w.pending(id)
		w.must(decision(a, "ada", k["ada"], ResponseApprove))
		w.must(&RevokeApprover{Name: "ada"})
		// Before the next approval records it, a reader of the approval
		// sees ada's sign-off as not counted; the state is untouched.
		stored := w.approval(a.ID)
		settled := SettleSignOffs(w.workspace(), stored)
		require.Empty(t, settled.SignOffs, "ada no longer counts")
		require.Equal(t, "ada", settled.DroppedSignOffs[0].Approver)
		require.Len(t, stored.SignOffs, 1, "the stored approval is not changed")
		require.Empty(t, stored.DroppedSignOffs)
		tk := w.task(id)
		require.Equal(t, settled.DroppedSignOffs, SettleTaskSignOffs(w.workspace(), tk).Approval(a.ID).DroppedSignOffs)
		require.Empty(t, w.task(id).Approval(a.ID).DroppedSignOffs, "the stored task is not changed")

		out := w.must(decision(a, "bo", k["bo"], ResponseApprove))
		require.Equal(t, []string{"task.approval_signed_off"}, events(out, id), "bo's approval is the only one that counts: still waiting")
		require.Equal(t, []string{"ada"}, out.Changes[0].Event.(*ApprovalSignedOff).Dropped)
		a = w.approval(a.ID)
		require.Equal(t, ApprovalStatePending, a.State)
		require.Equal(t, []string{"bo"}, []string{a.SignOffs[0].Approver}, "the approval keeps the sign-offs that count")
		require.Len(t, a.SignOffs, 1)
		require.Equal(t, settled.DroppedSignOffs, a.DroppedSignOffs, "the log's record of the drop is what the reader saw")
		require.Same(t, a, SettleSignOffs(w.workspace(), a), "nothing more to drop")
		w.must(&RegisterApprover{Name: "cy", Role: "owner", PublicKey: pubOf(k["cy"])})
		out = w.must(decision(a, "cy", k["cy"], ResponseApprove))
		require.Equal(t, []string{"task.approval_decided", "task.ready"}, events(out, id))
		w.requireReplays()
	})
	t.Run("one rejects", func(t *testing.T) {
		w, id, k := setupQuorum(t)
		a := w.pending(id)
		w.must(decision(a, "ada", k["ada"], ResponseApprove))
		out := w.must(decision(a, "bo", k["bo"], ResponseReject))
		require.Equal(t, []string{"task.approval_decided", "task.rejected"}, events(out, id))
		require.Equal(t, StateRejected, w.state(id))
		w.requireReplays()
	})
	t.Run("expires short of the quorum", func(t *testing.T) {
		w := setup(t)
		ada := w.approver("ada", "owner")
		id := w.newID()
		s := gated("")
		s.Approval.Quorum, s.Approval.ExpiresIn = 3, Duration(time.Hour)
		w.must(&CreateTask{TaskID: id, Spec: s})
		a := w.pending(id)
		w.must(decision(a, "ada", ada, ResponseApprove))
		w.advance(time.Hour)
		out := w.must(&FireTimer{TaskID: id, Kind: TimerApproval, Attempt: 1, Due: *a.ExpiresAt})
		require.Equal(t, []string{"task.approval_expired", "task.failed"}, events(out, id))
		w.requireReplays()
	})
	t.Run("bounds", func(t *testing.T) {
		w := setup(t)
		for _, q := range []int{-1, schemas.MaxQuorum + 1} {
			s := gated("")
			s.Approval.Quorum = q
			require.Equal(t, "/spec/approval/quorum", w.refused(&CreateTask{TaskID: w.newID(), Spec: s}, CodeInvalid).Field)
		}
	})
}

// Separation of duties: an approval that excludes its requester refuses
// the approval of the identity that created the task — as the decision and
// toward a quorum — and lets it reject; without it, the requester approves.
func TestAnApprovalMayExcludeItsRequester(t *testing.T) {
	setupGate := func(t *testing.T, exclude bool, quorum int) (*world, string, map[string]ed25519.PrivateKey) {
		w := setup(t)
		keys := map[string]ed25519.PrivateKey{"ada": w.approver("ada", "owner"), "bo": w.approver("bo", "owner"),
			"cy": w.approver("cy", "owner")}
		w.actor = "ada" // ada creates the task
		id := w.newID()
		s := gated("")
		s.Approval.ExcludeRequester, s.Approval.Quorum = exclude, quorum
		w.must(&CreateTask{TaskID: id, Spec: s})
		w.actor = "tester"
		require.Equal(t, "ada", w.task(id).CreatedBy)
		return w, id, keys
	}
	t.Run("the requester's approval is refused", func(t *testing.T) {
		w, id, k := setupGate(t, true, 0)
		a := w.pending(id)
		require.Equal(t, [2]any{"ada", true}, [2]any{a.RequestedBy, a.ExcludeRequester})
		e := w.recorded(decision(a, "ada", k["ada"], ResponseApprove), CodeForbidden, RefusedSelfApproval)
		require.Equal(t, "/approver", e.Field)
		require.Contains(t, e.Message, "another approver must")
		require.Equal(t, StateWaiting, w.state(id))
		require.Equal(t, ApprovalStatePending, w.approval(a.ID).State)
		out := w.must(decision(a, "bo", k["bo"], ResponseApprove))
		require.Equal(t, []string{"task.approval_decided", "task.ready"}, events(out, id))
		w.requireReplays()
	})
	t.Run("the requester may reject", func(t *testing.T) {
		w, id, k := setupGate(t, true, 0)
		out := w.must(decision(w.pending(id), "ada", k["ada"], ResponseReject))
		require.Equal(t, []string{"task.approval_decided", "task.rejected"}, events(out, id))
	})
	t.Run("without it the requester approves", func(t *testing.T) {
		w, id, k := setupGate(t, false, 0)
		a := w.pending(id)
		require.Equal(t, [2]any{"ada", false}, [2]any{a.RequestedBy, a.ExcludeRequester}, "who asked is recorded either way")
		out := w.must(decision(a, "ada", k["ada"], ResponseApprove))
		require.Equal(t, []string{"task.approval_decided", "task.ready"}, events(out, id))
	})
	t.Run("a quorum counts the others", func(t *testing.T) {
		w, id, k := setupGate(t, true, 2)
		a := w.pending(id)
		_ = w.recorded(decision(a, "ada", k["ada"], ResponseApprove), CodeForbidden, RefusedSelfApproval)
		require.Empty(t, w.approval(a.ID).SignOffs, "the requester's approval does not count toward the quorum")
		w.must(decision(a, "bo", k["bo"], ResponseApprove))
		out := w.must(decision(a, "cy", k["cy"], ResponseApprove))
		require.Equal(t, []string{"task.approval_decided", "task.ready"}, events(out, id))
		w.requireReplays()
	})
	t.Run("a job's request keeps its task's settings", func(t *testing.T) {
		w, id, k := setupGate(t, true, 2)
		a := w.pending(id)
		w.must(decision(a, "bo", k["bo"], ResponseApprove))
		w.must(decision(a, "cy", k["cy"], ResponseApprove))
		n := w.claim(id)
		w.must(&RequestApproval{TaskID: id, Attempt: n, ApprovalRequest: ApprovalRequest{Action: json.RawMessage(`{"step": 2}`), Quorum: 1}})
		b := w.pending(id)
		require.Equal(t, [3]any{"ada", true, 2}, [3]any{b.RequestedBy, b.ExcludeRequester, b.Quorum},
			"a job asks more of its task's approvers, never fewer")
		_ = w.recorded(decision(b, "ada", k["ada"], ResponseApprove), CodeForbidden, RefusedSelfApproval)
	})
	t.Run("a plan's tasks are requested by who planned them", func(t *testing.T) {
		w := setup(t)
		ada := w.approver("ada", "owner")
		g := w.createGoal(Envelope{})
		w.actor = "ada"
		s := gated("pay")
		s.Approval.ExcludeRequester = true
		ids, _ := w.plan(g, s)
		w.actor = "tester"
		a := w.pending(ids["pay"])
		require.Equal(t, "ada", a.RequestedBy)
		_ = w.recorded(decision(a, "ada", ada, ResponseApprove), CodeForbidden, RefusedSelfApproval)
	})
	t.Run("an escalation keeps it", func(t *testing.T) {
		w := setup(t)
		ops, dir := w.approver("ops", "ops"), w.approver("dee", "director")
		w.actor = "dee"
		id := w.newID()
		s := gated("")
		s.Approval = &ApprovalSpec{Role: "ops", Responses: []string{ResponseApprove, ResponseReject, ResponseEscalate},
			EscalateTo: "director", ExcludeRequester: true}
		w.must(&CreateTask{TaskID: id, Spec: s})
		w.actor = "tester"
		w.must(decision(w.pending(id), "ops", ops, ResponseEscalate))
		b := w.pending(id)
		require.Equal(t, [3]any{"director", "dee", true}, [3]any{b.Role, b.RequestedBy, b.ExcludeRequester})
		_ = w.recorded(decision(b, "dee", dir, ResponseApprove), CodeForbidden, RefusedSelfApproval)
		w.requireReplays()
	})
}
