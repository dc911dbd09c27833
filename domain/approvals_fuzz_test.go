package domain

import (
	"crypto/ed25519"
	"encoding/base64"
	"testing"
)

// FuzzDecideApproval sends arbitrary decisions to a pending approval: none
// panics, none that is refused changes anything but the record of refusals,
// and one is taken only when it is alice's (role owner) and its signature
// verifies with her registered key over exactly this approval, response and
// action digest — accepted forgeries are 0.
func FuzzDecideApproval(f *testing.F) {
	alice, mallory := keyOf("alice"), keyOf("mallory")
	f.Add("alice", "approve", "", "", []byte{}, uint8(0))
	f.Add("alice", "reject", "", "", []byte{}, uint8(1))
	f.Add("mallory", "approve", "", "", []byte{}, uint8(2))
	f.Add("bob", "approve", "-2", "sha256:00", []byte{1, 2, 3}, uint8(3))
	f.Add("alice", "escalate", "-1", "", []byte("junk"), uint8(4))
	f.Fuzz(func(t *testing.T, approver, response, idSuffix, digest string, sig []byte, how uint8) {
		w := setup(t)
		w.approver("alice", "owner")
		w.approver("bob", "intern")
		id := w.newID()
		w.must(&CreateTask{TaskID: id, Spec: gated("")})
		a := w.pending(id)
		c := &DecideApproval{ApprovalID: a.ID + idSuffix, Approver: approver, Response: response, ActionDigest: digest}
		if c.ActionDigest == "" {
			c.ActionDigest = a.ActionDigest
		}
		switch how % 4 { // a signature made by a real key now and then, over the fuzzed fields
		case 0:
			c.Signature = SignDecision(alice, c.ApprovalID, c.Response, c.ActionDigest)
		case 1:
			c.Signature = SignDecision(mallory, c.ApprovalID, c.Response, c.ActionDigest)
		case 2:
			c.Signature = SignDecision(alice, a.ID, ResponseApprove, a.ActionDigest) // replayed onto the fuzzed fields
		default:
			c.Signature = base64.StdEncoding.EncodeToString(sig)
		}
		before := len(w.history)
		out, err := w.run(c)
		if err != nil || out.Refusal != nil {
			if out != nil {
				for _, ch := range out.Changes {
					if _, ok := ch.Event.(*ApprovalRefused); !ok {
						t.Fatalf("a refused decision changed more than the refusals: %T", ch.Event)
					}
				}
			} else if len(w.history) != before {
				t.Fatal("a refused command appended changes")
			}
			if got := w.task(id).Approval(a.ID); got.State != ApprovalStatePending {
				t.Fatalf("a refused decision moved the approval to %s", got.State)
			}
			return
		}
		got := w.task(id).Approval(a.ID)
		if got.State != ApprovalStateDecided {
			t.Fatalf("an accepted decision left the approval %s", got.State)
		}
		raw, _ := base64.StdEncoding.DecodeString(c.Signature)
		if c.Approver != "alice" || c.ApprovalID != a.ID || c.ActionDigest != a.ActionDigest ||
			!ed25519.Verify(alice.Public().(ed25519.PublicKey), DecisionMessage(a.ID, c.Response, a.ActionDigest), raw) {
			t.Fatalf("a forged decision was taken: %+v", c)
		}
		w.requireReplays()
	})
}
