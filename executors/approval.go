package executors

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/dwr-run/dwr/schemas"
)

// Approval responses: what a person may answer to an approval request
// (the wire values of schemas.Response*).
const (
	ResponseApprove  = schemas.ResponseApprove
	ResponseReject   = schemas.ResponseReject
	ResponseRevise   = schemas.ResponseRevise
	ResponseEscalate = schemas.ResponseEscalate
	// ResponseExpired is not a person's answer: nobody decided before the
	// approval expired, and its expiry branch (on_expiry: resume) started a
	// new attempt. The Decision has no Approver; its DecidedAt is the expiry.
	ResponseExpired = "expired"
)

// Branches: what follows a response, or an approval's expiry (the wire
// values of schemas.Branch*).
const (
	// BranchResume starts a new attempt of the task, handed the decision.
	BranchResume = schemas.BranchResume
	// BranchReject ends the task rejected.
	BranchReject = schemas.BranchReject
	// BranchFail ends the task failed.
	BranchFail = schemas.BranchFail
	// BranchEscalate asks again, of the request's EscalateTo role.
	BranchEscalate = schemas.BranchEscalate
)

// ApprovalRequest is what a job asks a person to approve before it makes a
// consequential side effect: the concrete action, and the rules of the
// decision. Only Action is required; the service fills in the rest from
// the task's approval settings and its defaults.
type ApprovalRequest struct {
	// Action is the exact action to approve, marshalled to JSON (a
	// json.RawMessage is kept as it is). A decision authorizes only this
	// action: its canonical digest (ActionDigest) is what the approver
	// signs. At most MaxPayloadBytes.
	Action any
	// Summary says in a line what is asked; approval inboxes show it.
	Summary string
	// Basis is the evidence the approver decides on (marshalled to JSON):
	// what the job found, a diff, the reasoning. At most MaxPayloadBytes.
	Basis any
	// Role is the role whose approvers may decide; "" for any registered
	// approver (or the role of the task's approval settings).
	Role string
	// Responses are the responses permitted (ResponseApprove,
	// ResponseReject, ResponseRevise, ResponseEscalate); default approve
	// and reject.
	Responses []string
	// Branches maps a response to what follows it (BranchResume,
	// BranchReject, BranchFail, BranchEscalate). By default approve and
	// revise resume the task, reject rejects it, escalate escalates.
	Branches map[string]string
	// OnExpiry is the branch taken when nobody decides within ExpiresIn;
	// default BranchFail.
	OnExpiry string
	// EscalateTo is the role asked after an escalation; required when
	// escalate is a permitted response.
	EscalateTo string
	// ExpiresIn bounds how long the request stands; zero for no expiry
	// (or the task's approval settings).
	ExpiresIn time.Duration
	// Quorum is how many distinct approvers (of Role) must approve before
	// the approve branch is taken — four eyes within one role; 0 for one
	// (or the task's approval settings, which it may exceed, not lower),
	// at most 10. Any other response decides at once.
	Quorum int
	// ExcludeRequester keeps the identity that created the task from
	// approving (separation of duties): its approval is refused, and
	// another approver must. The task's approval settings may already ask
	// it; a request cannot lift it.
	ExcludeRequester bool
}

// Decision is a decision a person took on one of the task's approvals, as
// a job is handed it.
type Decision struct {
	ApprovalID   string          `json:"approval_id"`   // "<task id>-<n>"
	ActionDigest string          `json:"action_digest"` // the digest of the action decided on
	Action       json.RawMessage `json:"action,omitempty"`
	Response     string          `json:"response"` // approve | reject | revise | escalate
	Comment      string          `json:"comment,omitempty"`
	Approver     string          `json:"approver"`
	Role         string          `json:"role,omitempty"` // the approver's role
	DecidedAt    time.Time       `json:"decided_at"`
	// AskedRole is the role the job's request asked to decide ("" for any
	// approver): the approval's own role, or for an approval an escalation
	// made, the role of the request it escalated.
	AskedRole string `json:"asked_role,omitempty"`
	// Approvers are, for an approval that needed several (its quorum),
	// every approver who approved it, in order: Approver, who made the
	// quorum, last. Empty otherwise.
	Approvers []string `json:"approvers,omitempty"`
}

// Approved reports whether the decision approves its action; false for nil.
func (d *Decision) Approved() bool { return d != nil && d.Response == ResponseApprove }

// Approval returns the latest decision taken on the task's approvals — the
// one a task resumed by a decision is handed — or nil when there is none.
func (j *Job) Approval() *Decision {
	if len(j.Decisions) == 0 {
		return nil
	}
	d := j.Decisions[len(j.Decisions)-1]
	return &d
}

// RequestApproval asks a person to approve r.Action before the job performs
// it. Call it right before the side effect; it runs on every attempt:
//
//   - When the task already holds a decision on exactly this action asked
//     of this role (the latest one whose action digest is
//     ActionDigest(r.Action) and whose AskedRole is r.Role, or the task's
//     approval role when r.Role is empty), it returns that decision and
//     nil: on ResponseApprove perform exactly r.Action;
//     on another response do what the response asks — for revise, revise
//     the action from the decision's Comment and ask again (an altered
//     action has another digest, so it is a new request: an approval of
//     one action never authorizes another). A decision asked of one role
//     never stands for another's: a job that needs two sign-offs on the
//     same action asks each role in turn, and the second request, finding
//     no decision of its role, is a new approval.
//   - Otherwise it records the request (task.request_approval, for this
//     attempt) and returns a *WaitError. Return it from the handler:
//     return executors.Result{}, err. The request itself parked the
//     attempt and the task waits durably, holding no worker, until someone
//     decides (`dwr approvals`); then, as the request's branches say, a new
//     attempt runs (handed the decision, so that its RequestApproval of the
//     same action returns it), or the task ends rejected or failed.
//
// Save what the next attempt needs with SaveCheckpoint before asking. A
// decision is of the task, not of one attempt: a retry after a failure is
// handed it again, so key the side effect by OperationKey as usual.
//
// It returns a plain error when the action or basis do not encode or are
// too large, an error wrapping ErrCancelled or ErrLeaseLost when the
// attempt no longer holds the task (the job's context is then cancelled),
// Permanent(*CommandError) when the service refuses the request as invalid
// (a role that is not a valid name, an escalation without EscalateTo, ...),
// a *CommandError for another refusal, and ctx's error when ctx ends before
// the service answers. A job built by NewJob (as executortest does) sends
// nothing: it returns the *WaitError with an empty ApprovalID.
func (j *Job) RequestApproval(ctx context.Context, r ApprovalRequest) (*Decision, error) {
	body, digest, err := approvalBodyOf(j, r)
	if err != nil {
		return nil, fmt.Errorf("executors: approval request of task %s: %w", j.TaskID, err)
	}
	role := cmp.Or(r.Role, j.approvalRole)
	for i := len(j.Decisions) - 1; i >= 0; i-- {
		if j.Decisions[i].ActionDigest == digest && j.Decisions[i].AskedRole == role {
			d := j.Decisions[i]
			return &d, nil
		}
	}
	w := &WaitError{Approval: &r, ActionDigest: digest}
	if j.ask == nil {
		return nil, w
	}
	if w.ApprovalID, err = j.ask(ctx, body, digest); err != nil {
		return nil, err
	}
	return nil, w
}

// approvalFunc records an approval request for a job, of the action whose
// digest is digest, and returns the approval's id.
type approvalFunc func(ctx context.Context, body schemas.RequestApproval, digest string) (string, error)

// approvalBodyOf returns the command that asks for r, whose action is the
// canonical JSON of r.Action, and the action's digest.
func approvalBodyOf(j *Job, r ApprovalRequest) (b schemas.RequestApproval, digest string, err error) {
	b = schemas.RequestApproval{TaskID: j.TaskID, Attempt: j.Attempt, Token: j.Token, ApprovalRequest: schemas.ApprovalRequest{
		Summary: r.Summary, Role: r.Role, Responses: r.Responses, Branches: r.Branches, OnExpiry: r.OnExpiry,
		EscalateTo: r.EscalateTo, ExpiresIn: schemas.Duration(r.ExpiresIn), Quorum: r.Quorum,
		ExcludeRequester: r.ExcludeRequester}}
	action, err := encodeJSON(r.Action)
	switch {
	case err != nil:
		return b, "", fmt.Errorf("the action does not encode to JSON: %w", err)
	case action == nil:
		return b, "", errors.New("the action is required: the concrete action to approve")
	}
	if b.Action, err = schemas.CanonicalJSON(action); err != nil {
		return b, "", err
	}
	if len(b.Action) > MaxPayloadBytes {
		return b, "", fmt.Errorf("the action is %d bytes; at most %d are allowed", len(b.Action), MaxPayloadBytes)
	}
	if b.Basis, err = encodeJSON(r.Basis); err != nil {
		return b, "", fmt.Errorf("the basis does not encode to JSON: %w", err)
	}
	if len(b.Basis) > MaxPayloadBytes {
		return b, "", fmt.Errorf("the basis is %d bytes; at most %d are allowed (store larger evidence as an artifact)", len(b.Basis), MaxPayloadBytes)
	}
	if digest, err = schemas.ActionDigest(b.Action); err != nil {
		return b, "", err
	}
	return b, digest, nil
}

// approvalCommandID is the command id of the request an attempt makes for
// an action: the same for a retry of the same request, another for another
// action. At most 105 bytes (a task id is a 26-character ULID).
func approvalCommandID(taskID string, attempt int, digest string) string {
	return fmt.Sprintf("approval.%s.%d.%s", taskID, attempt, digest[len(schemas.ActionDigestPrefix):])
}

// ActionDigest returns the digest the service computes for an action, and
// the one an approver signs: "sha256:" and the hex SHA-256 of the action's
// canonical JSON (schemas.ActionDigest). The action is marshalled to JSON
// (a json.RawMessage is kept as it is), then re-encoded with object keys
// sorted, no insignificant space, numbers as written and no HTML escaping.
// Two encodings of the same action have the same digest; any change to the
// action changes it.
func ActionDigest(action any) (string, error) {
	raw, err := encodeJSON(action)
	if err != nil {
		return "", fmt.Errorf("executors: the action does not encode to JSON: %w", err)
	}
	if raw == nil {
		raw = json.RawMessage("null")
	}
	return schemas.ActionDigest(raw)
}
