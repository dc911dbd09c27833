package domain

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// gatedTask creates a standalone task waiting on its gate (role owner) and
// returns the approval it waits on.
func (w *world) gatedTask() *Approval {
	w.t.Helper()
	id := w.newID()
	w.must(&CreateTask{TaskID: id, Spec: gated("")})
	return w.pending(id)
}

func TestRevokeApprover(t *testing.T) {
	w := setup(t)
	k := w.approver("alice", "owner")
	w.advance(time.Minute)

	out := w.must(&RevokeApprover{Name: "alice"})
	require.Equal(t, []string{"workspace.approver_revoked"}, events(out, w.ws))
	ap := w.workspace().Approver("alice")
	require.Equal(t, &ApproverRevoked{Name: "alice", KeyID: ap.KeyID}, out.Changes[0].Event)
	require.NotNil(t, ap.RevokedAt)
	require.Equal(t, w.now, *ap.RevokedAt)
	require.False(t, ap.Active(w.now))

	// A decision by a revoked approver is refused and recorded, even with a
	// signature that verifies.
	a := w.gatedTask()
	e := w.recorded(decision(a, "alice", k, ResponseApprove), CodeForbidden, RefusedRevoked)
	require.Equal(t, "/approver", e.Field)
	require.Equal(t, ApprovalStatePending, w.approval(a.ID).State)
	require.Equal(t, RefusedRevoked, w.approval(a.ID).Refusals[0].Reason)

	// Revoking again changes nothing; an unknown name is not found.
	out = w.must(&RevokeApprover{Name: "alice"})
	require.Empty(t, out.Changes)
	require.True(t, out.Reply.Duplicate)
	require.Equal(t, "/name", w.refused(&RevokeApprover{Name: "bob"}, CodeNotFound).Field)
	require.Equal(t, "/name", w.refused(&RevokeApprover{Name: "Bob"}, CodeInvalid).Field)

	// Registering the name again lifts the revocation, even with the same
	// key.
	out = w.must(&RegisterApprover{Name: "alice", Role: "owner", PublicKey: pubOf(k)})
	require.Len(t, out.Changes, 1, "the same key of a revoked approver is registered again")
	require.Nil(t, w.workspace().Approver("alice").RevokedAt)
	w.must(decision(a, "alice", k, ResponseApprove))
	require.Equal(t, StateReady, w.state(a.TaskID))
	w.requireReplays()
	w.requireReplaysFromWire()
}

func TestApproverKeyExpires(t *testing.T) {
	w := setup(t)
	k := keyOf("alice")
	past, expiry := w.now.Add(-time.Second), w.now.Add(time.Hour)
	require.Equal(t, "/expires_at", w.refused(&RegisterApprover{Name: "alice", Role: "owner", PublicKey: pubOf(k), ExpiresAt: &past}, CodeInvalid).Field)
	now := w.now
	require.Equal(t, "/expires_at", w.refused(&RegisterApprover{Name: "alice", Role: "owner", PublicKey: pubOf(k), ExpiresAt: &now}, CodeInvalid).Field)

	out := w.must(&RegisterApprover{Name: "alice", Role: "owner", PublicKey: pubOf(k), ExpiresAt: &expiry})
	ev := eventOf[*ApproverRegistered](t, out, w.ws)
	require.Equal(t, expiry, *ev.ExpiresAt)
	require.Equal(t, expiry, *w.workspace().Approver("alice").ExpiresAt)

	// The same registration again is a no-op; another expiry, or none, is
	// registered.
	same := expiry.In(time.FixedZone("CET", 3600))
	require.Empty(t, w.must(&RegisterApprover{Name: "alice", Role: "owner", PublicKey: pubOf(k), ExpiresAt: &same}).Changes,
		"the same instant in another zone is the same expiry")
	later := expiry.Add(time.Hour)
	require.Len(t, w.must(&RegisterApprover{Name: "alice", Role: "owner", PublicKey: pubOf(k), ExpiresAt: &later}).Changes, 1)
	require.Len(t, w.must(&RegisterApprover{Name: "alice", Role: "owner", PublicKey: pubOf(k), ExpiresAt: &expiry}).Changes, 1)

	// Before its expiry the key decides; from its expiry on it does not.
	w.must(decision(w.gatedTask(), "alice", k, ResponseApprove))
	a := w.gatedTask()
	w.now = expiry.Add(-time.Millisecond)
	require.True(t, w.workspace().Approver("alice").Active(w.now))
	b := w.gatedTask()
	w.must(decision(b, "alice", k, ResponseApprove))
	w.now = expiry
	require.False(t, w.workspace().Approver("alice").Active(w.now))
	e := w.recorded(decision(a, "alice", k, ResponseApprove), CodeForbidden, RefusedKeyExpired)
	require.Equal(t, "/approver", e.Field)
	w.advance(time.Hour)
	_ = w.recorded(decision(a, "alice", k, ResponseReject), CodeForbidden, RefusedKeyExpired)
	require.Equal(t, ApprovalStatePending, w.approval(a.ID).State)

	// A new registration without expiry decides again.
	w.must(&RegisterApprover{Name: "alice", Role: "owner", PublicKey: pubOf(k)})
	require.Nil(t, w.workspace().Approver("alice").ExpiresAt)
	w.must(decision(a, "alice", k, ResponseApprove))
	w.requireReplays()
	w.requireReplaysFromWire()
}

// An authenticated identity decides only as itself; unauthenticated (the
// insecure-open mode) the approver named is not checked against the actor.
func TestDecisionBoundToAuthenticatedIdentity(t *testing.T) {
	w := setup(t)
	k := w.approver("alice", "owner")
	a := w.gatedTask()

	w.actor, w.authn = "bob", true
	e := w.recorded(decision(a, "alice", k, ResponseApprove), CodeForbidden, RefusedNotApprover)
	require.Equal(t, "/approver", e.Field)
	require.Contains(t, e.Message, `"bob"`)
	refusal := w.approval(a.ID).Refusals[0]
	require.Equal(t, "alice", refusal.Approver, "the refusal records the approver named")

	// Not even the exact decision alice could send is taken from bob.
	w.actor = ""
	_ = w.recorded(decision(a, "alice", k, ResponseApprove), CodeForbidden, RefusedNotApprover)

	w.actor = "alice"
	out := w.must(decision(a, "alice", k, ResponseApprove))
	require.Equal(t, "alice", eventOf[*ApprovalDecided](t, out, a.TaskID).Approver)

	// Once decided, a replay of the same decision by another identity is
	// still refused as not_approver; by alice it is a duplicate.
	w.actor = "bob"
	_ = w.recorded(decision(a, "alice", k, ResponseApprove), CodeForbidden, RefusedNotApprover)
	w.actor = "alice"
	out = w.must(decision(a, "alice", k, ResponseApprove))
	require.Empty(t, out.Changes)

	// Unauthenticated, the actor is only what the client said: it is not
	// bound, and the signature alone decides.
	b := w.gatedTask()
	w.actor, w.authn = "bob", false
	w.must(decision(b, "alice", k, ResponseApprove))
	require.Equal(t, StateReady, w.state(b.TaskID))

	// The binding does not stand in for the signature: alice authenticated
	// with another's signature is refused as before.
	c := w.gatedTask()
	w.actor, w.authn = "alice", true
	forged := decision(c, "alice", keyOf("mallory"), ResponseApprove)
	_ = w.recorded(forged, CodeForbidden, RefusedBadSignature)
	w.requireReplays()
}

// The refusals are checked in order: the identity first, then the
// approval's state, then the approver's standing.
func TestApproverRefusalOrder(t *testing.T) {
	w := setup(t)
	k := w.approver("alice", "owner")
	a := w.gatedTask()
	w.must(decision(a, "alice", k, ResponseApprove))
	w.must(&RevokeApprover{Name: "alice"})
	_ = w.recorded(decision(a, "alice", k, ResponseReject), CodeConflict, RefusedAlreadyDecided)
	w.actor, w.authn = "bob", true
	_ = w.recorded(decision(a, "alice", k, ResponseApprove), CodeForbidden, RefusedNotApprover)
	w.actor = "alice"
	b := w.gatedTask()
	_ = w.recorded(decision(b, "alice", k, ResponseApprove), CodeForbidden, RefusedRevoked)
}
