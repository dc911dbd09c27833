package executors

import (
	"context"
	"fmt"

	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/schemas"
)

// DecisionResult is what Decide did: the approval as it stood, the key and
// digest it signed with, and, once the decision was accepted, its result and
// the branch taken.
type DecisionResult struct {
	// Approval is the approval as Decide fetched it, before deciding.
	Approval *schemas.ApprovalView
	// KeyID names the key that signed (KeyID of its public half).
	KeyID string
	// ActionDigest is the digest signed: the approval's, checked against
	// its action.
	ActionDigest string
	// Result is the decision command's result (the task it changed), nil
	// until the decision is accepted.
	Result *client.Result
	// Branch is the branch taken, as the service recorded it; the approval's
	// rule for the response when the record could not be read back; "" when
	// the approval still waits (Waiting).
	Branch string
	// Waiting says the approval still waits for more distinct approvers
	// (its Quorum): this approval is one of its SignOffs, as many as
	// SignedOff.
	Waiting   bool
	SignedOff int
}

// DigestMismatchError is Decide's refusal to sign an approval whose action
// does not have the digest the approval names.
type DigestMismatchError struct {
	ApprovalID string
	Named      string // the digest the approval names
	Computed   string // the action's digest ("" if it does not encode)
}

// Error says which digests differ and that nothing was signed.
func (e *DigestMismatchError) Error() string {
	return fmt.Sprintf("approval %s names action digest %s, but the action shown digests to %s: not signing", e.ApprovalID, e.Named, e.Computed)
}

// Decide decides approval approvalID as approver: it fetches the approval,
// checks that its action has the digest it names, signs (approval id,
// response, digest) with key and sends the decision (with opts, e.g.
// client.CommandID), then reads back the branch taken.
//
// It returns the result, or the error of the fetch (nil result), a
// *DigestMismatchError (nil result), or the decision's refusal as c returns
// it (a *schemas.Error; a refused decision is recorded on the approval) with
// the result so far — the approval, key id and digest it signed.
func Decide(ctx context.Context, c *client.Client, approvalID, response, comment string, key *SigningKey, approver string,
	opts ...client.CallOption) (*DecisionResult, error) {
	v, err := c.Approval(ctx, approvalID)
	if err != nil {
		return nil, err
	}
	// Sign only the action as shown: its digest must be the one named.
	digest, err := ActionDigest(v.Action)
	if err != nil || digest != v.ActionDigest {
		return nil, &DigestMismatchError{ApprovalID: v.ID, Named: v.ActionDigest, Computed: digest}
	}
	d := &DecisionResult{Approval: v, KeyID: KeyID(key.Public()), ActionDigest: digest, Branch: v.Branches[response]}
	sig := SignDecision(key.Private, v.ID, response, digest)
	d.Result, err = c.DecideApproval(ctx, schemas.DecideApproval{ApprovalID: v.ID, Approver: approver,
		Response: response, ActionDigest: digest, Comment: comment, Signature: sig}, opts...)
	if err != nil {
		return d, err
	}
	if after, err := c.Approval(ctx, v.ID, client.MinSeq(d.Result.Seq)); err == nil {
		switch {
		case after.Decision != nil:
			d.Branch = after.Decision.Branch
		case after.State == schemas.ApprovalStatePending:
			d.Branch, d.Waiting, d.SignedOff = "", true, len(after.SignOffs)
		}
	}
	return d, nil
}
