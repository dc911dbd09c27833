package domain

import (
	"cmp"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dwr-run/dwr/schemas"
)

// Approval responses: what a person may answer to an approval request
// (wire values, defined in schemas).
const (
	ResponseApprove  = schemas.ResponseApprove
	ResponseReject   = schemas.ResponseReject
	ResponseRevise   = schemas.ResponseRevise
	ResponseEscalate = schemas.ResponseEscalate
)

// Responses lists every approval response (schemas.Responses).
var Responses = schemas.Responses

// Branches: what follows a response or an expiry (the resumption rule; wire
// values, defined in schemas).
const (
	BranchResume   = schemas.BranchResume   // the task goes on
	BranchReject   = schemas.BranchReject   // the task ends rejected
	BranchFail     = schemas.BranchFail     // the task ends failed
	BranchEscalate = schemas.BranchEscalate // asked again, of the escalation role
)

// Branches lists every branch (schemas.Branches).
var Branches = schemas.Branches

// Approval states.
const (
	ApprovalStatePending   = schemas.ApprovalStatePending
	ApprovalStateDecided   = schemas.ApprovalStateDecided
	ApprovalStateExpired   = schemas.ApprovalStateExpired
	ApprovalStateWithdrawn = schemas.ApprovalStateWithdrawn // the task ended before anyone decided
)

// Refusal reasons recorded for a decision that is not taken.
const (
	RefusedUnknownApprover = "unknown_approver"
	RefusedUnauthorized    = "unauthorized"
	RefusedBadSignature    = "bad_signature"
	RefusedReplayed        = "replayed"
	RefusedActionMismatch  = "action_mismatch"
	RefusedExpired         = "expired"
	RefusedAlreadyDecided  = "already_decided"
	// RefusedAlreadySigned: the approver already approved an approval that
	// needs more distinct approvers (its quorum): another must.
	RefusedAlreadySigned = "already_signed"
	// RefusedSelfApproval: the approver created the task, and the approval
	// excludes its requester (ApprovalSpec.ExcludeRequester).
	RefusedSelfApproval = "self_approval"
	RefusedNotPermitted = "response_not_permitted"
	// RefusedRevoked: the approver named was revoked (approver.revoke).
	RefusedRevoked = "revoked"
	// RefusedKeyExpired: the approver's key expired (its expires_at).
	RefusedKeyExpired = "key_expired"
	// RefusedNotApprover: the authenticated identity that sent the decision
	// is not the approver it names (see Meta.Authenticated).
	RefusedNotApprover = "not_approver"
)

// ReasonApproval is the reason of a task ended by an approval's branch.
const ReasonApproval = "approval"

// DefaultBranches returns the resumption rule a request uses for the
// responses it does not name: approve resumes, reject rejects, escalate asks
// the escalation role; revise resumes an attempt's request (the executor
// revises its action) and rejects a gate (its action is the task's input,
// which only a plan revision changes).
func DefaultBranches(gate bool) map[string]string {
	revise := BranchResume
	if gate {
		revise = BranchReject
	}
	return map[string]string{ResponseApprove: BranchResume, ResponseReject: BranchReject,
		ResponseRevise: revise, ResponseEscalate: BranchEscalate}
}

// An approval and what it keeps are wire data, defined once in schemas.
type (
	// Approval is a person's decision point inside a task: the proposed
	// action and its digest, the basis, who may decide, how long the request
	// stands, and what each response leads to; then the decision, or the
	// refusals (the latest MaxRefusalsKept).
	Approval = schemas.Approval
	// Refusal is a decision that was refused, as an approval's state keeps
	// it.
	Refusal = schemas.Refusal
	// ApprovalDecision is a decision that was taken: who, with what
	// authority and key, what, and the signature that proves it.
	ApprovalDecision = schemas.ApprovalDecision
	// ApprovalRequest is what an attempt asks to be approved, or a gate's
	// settings applied to a task's input.
	ApprovalRequest = schemas.ApprovalRequest
)

// MaxRefusalsKept bounds the refusals an approval's state keeps; the log
// keeps every one.
const MaxRefusalsKept = 20

// Approver is a person registered in a workspace to decide approvals
// (schemas.Approver, with Active).
type Approver = schemas.Approver

// ApprovalID returns the id of a task's n-th approval (n from 1).
func ApprovalID(taskID string, n int) string { return taskID + "-" + strconv.Itoa(n) }

// ParseApprovalID splits an approval id into its task id and number.
func ParseApprovalID(id string) (taskID string, n int, ok bool) {
	i := strings.LastIndexByte(id, '-')
	if i < 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(id[i+1:])
	if err != nil || n < 1 || strconv.Itoa(n) != id[i+1:] || !ValidID(id[:i]) {
		return "", 0, false
	}
	return id[:i], n, true
}

// KeyID returns the short id of a public key: the first 16 hex digits of
// its SHA-256.
func KeyID(pub ed25519.PublicKey) string {
	h := sha256.Sum256(pub)
	return hex.EncodeToString(h[:8])
}

// ActionDigest returns the canonical digest of a proposed action
// (schemas.ActionDigest): "sha256:" and the hex SHA-256 of its canonical
// JSON.
func ActionDigest(action json.RawMessage) (string, error) { return schemas.ActionDigest(action) }

// DecisionPurpose opens every signed decision, so that a signature made for
// dwr approvals cannot be taken for anything else, nor one made elsewhere
// for a decision.
const DecisionPurpose = "dwr approval decision v1"

// DecisionMessage returns the bytes an approver signs to decide an approval:
// the purpose, the approval id, the response and the action digest, one per
// line. A signature over them decides only that approval, with that response,
// of exactly that action.
func DecisionMessage(approvalID, response, actionDigest string) []byte {
	return []byte(DecisionPurpose + "\n" + approvalID + "\n" + response + "\n" + actionDigest)
}

// SignDecision signs a decision with an approver's private key and returns
// the signature as standard base64, as the approval.decide command carries it.
func SignDecision(key ed25519.PrivateKey, approvalID, response, actionDigest string) string {
	return base64.StdEncoding.EncodeToString(ed25519.Sign(key, DecisionMessage(approvalID, response, actionDigest)))
}

// validateApproval checks an approval's settings; field is their pointer.
func validateApproval(field string, r ApprovalRequest) error {
	if r.Role != "" {
		if err := checkName(field+"/role", "role", r.Role); err != nil {
			return err
		}
	}
	if r.EscalateTo != "" {
		if err := checkName(field+"/escalate_to", "role", r.EscalateTo); err != nil {
			return err
		}
	}
	if r.ExpiresIn < 0 {
		return invalid(field+"/expires_in", "must not be negative")
	}
	if err := checkText(field+"/summary", r.Summary, MaxTitle, false); err != nil {
		return err
	}
	if schemas.PayloadSize(r.Basis) > MaxInputBytes {
		return invalid(field+"/basis", "is %d bytes; at most %d are allowed (store larger evidence as artifacts)", schemas.PayloadSize(r.Basis), MaxInputBytes)
	}
	for i, resp := range r.Responses {
		if !slices.Contains(Responses, resp) {
			return invalid(fmt.Sprintf("%s/responses/%d", field, i), "%q is not one of %s", resp, strings.Join(Responses, ", "))
		}
		if slices.Index(r.Responses, resp) != i {
			return invalid(fmt.Sprintf("%s/responses/%d", field, i), "%q is listed twice", resp)
		}
	}
	for _, resp := range slices.Sorted(maps.Keys(r.Branches)) {
		if !slices.Contains(Responses, resp) {
			return invalid(field+"/branches/"+resp, "%q is not a response (%s)", resp, strings.Join(Responses, ", "))
		}
		if b := r.Branches[resp]; !slices.Contains(Branches, b) {
			return invalid(field+"/branches/"+resp, "branch %q is not one of %s", b, strings.Join(Branches, ", "))
		}
	}
	if r.OnExpiry != "" && !slices.Contains(Branches, r.OnExpiry) {
		return invalid(field+"/on_expiry", "branch %q is not one of %s", r.OnExpiry, strings.Join(Branches, ", "))
	}
	escalates := r.OnExpiry == BranchEscalate || slices.Contains(r.Responses, ResponseEscalate) ||
		slices.Contains(slices.Collect(maps.Values(r.Branches)), BranchEscalate)
	if escalates && r.EscalateTo == "" {
		return invalid(field+"/escalate_to", "the request can escalate (a response, a branch or on_expiry), so the role it escalates to is required")
	}
	if r.Quorum < 0 || r.Quorum > schemas.MaxQuorum {
		return invalid(field+"/quorum", "is %d; an approval needs 1 to %d distinct approvers", r.Quorum, schemas.MaxQuorum)
	}
	return nil
}

// approvalRoom returns why task t cannot keep another approval asking
// action on basis, or nil: it has asked schemas.MaxTaskApprovals, or their
// actions and bases would pass schemas.MaxTaskApprovalBytes.
func approvalRoom(t *Task, action, basis json.RawMessage) *Error {
	if len(t.Approvals) >= schemas.MaxTaskApprovals {
		return &Error{Code: CodeConflict, Message: fmt.Sprintf("task %s has asked %d approvals, the most a task may: "+
			"ask approval after approval in a task per request, or a child goal (Delegate)", t.ID, len(t.Approvals))}
	}
	n := schemas.PayloadSize(action) + schemas.PayloadSize(basis)
	for i := range t.Approvals {
		n += schemas.PayloadSize(t.Approvals[i].Action) + schemas.PayloadSize(t.Approvals[i].Basis)
	}
	if n > schemas.MaxTaskApprovalBytes {
		return &Error{Code: CodeConflict, Message: fmt.Sprintf("task %s's approvals would hold %d bytes of actions and bases, more than the %d a task may: "+
			"keep evidence in artifacts and pass their references, or ask in a task per request", t.ID, n, schemas.MaxTaskApprovalBytes)}
	}
	return nil
}

// newApproval builds task t's next approval from r at now; gate says it is
// the task's gate (asked before the first attempt).
func newApproval(t *Task, attempt int, r ApprovalRequest, gate bool, now time.Time) (*ApprovalRequested, error) {
	action := r.Action
	if len(action) == 0 {
		action = json.RawMessage("null")
	}
	digest := r.ActionDigest // the plaintext's, when the action was sealed
	if digest == "" {
		var err error
		if digest, err = ActionDigest(action); err != nil {
			return nil, invalid("/action", "%v", err)
		}
	}
	responses := slices.Clone(r.Responses)
	if len(responses) == 0 {
		responses = []string{ResponseApprove, ResponseReject}
	}
	branches := DefaultBranches(gate)
	maps.Copy(branches, r.Branches)
	for k := range branches {
		if !slices.Contains(responses, k) {
			delete(branches, k)
		}
	}
	onExpiry := r.OnExpiry
	if onExpiry == "" {
		onExpiry = BranchFail
	}
	ev := &ApprovalRequested{Approval: Approval{ID: ApprovalID(t.ID, len(t.Approvals)+1), TaskID: t.ID,
		Attempt: attempt, Action: action, ActionDigest: digest, Summary: r.Summary, Basis: r.Basis, Role: r.Role,
		Responses: responses, Branches: branches, OnExpiry: onExpiry, EscalateTo: r.EscalateTo, AskedRole: r.Role,
		ExpiresIn: r.ExpiresIn, RequestedAt: now, State: ApprovalStatePending, RequestedBy: t.CreatedBy, ExcludeRequester: r.ExcludeRequester}}
	if r.Quorum > 1 {
		ev.Quorum = r.Quorum
	}
	if r.ExpiresIn > 0 {
		at := now.Add(r.ExpiresIn.D())
		ev.ExpiresAt = &at
	}
	return ev, nil
}

// gateRequest returns the approval request of a task's gate: the gate's
// settings, the task's input as the proposed action.
func gateRequest(t *Task) ApprovalRequest {
	a := t.Spec.Approval
	summary := t.Spec.Title
	if summary == "" && t.Spec.Key != "" {
		summary = "start task " + t.Spec.Key + " on queue " + t.Spec.Queue
	} else if summary == "" {
		summary = "start a task on queue " + t.Spec.Queue
	}
	// A long key: the summary is cut at a rune boundary.
	r := ApprovalRequest{Action: t.Spec.Input, Summary: clip(summary, MaxTitle), Basis: a.Basis, Role: a.Role,
		Responses: a.Responses, Branches: a.Branches, OnExpiry: a.OnExpiry, EscalateTo: a.EscalateTo, ExpiresIn: a.ExpiresIn, Quorum: a.Quorum,
		ExcludeRequester: a.ExcludeRequester}
	if schemas.IsSealed(t.Spec.Input) {
		r.ActionDigest = a.ActionDigest // the input's as sent, which the service took before it sealed it
	}
	return r
}

func (x *tx) registerApprover(c *RegisterApprover) (Reply, error) {
	w, dup, err := x.commandWorkspace()
	if err != nil || dup {
		return duplicateWorkspaceOr(w, err)
	}
	if err := checkName("/name", "approver", c.Name); err != nil {
		return Reply{}, err
	}
	if err := checkName("/role", "role", c.Role); err != nil {
		return Reply{}, err
	}
	pub, err := base64.StdEncoding.DecodeString(c.PublicKey)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		return Reply{}, invalid("/public_key", "is not the standard base64 of a %d-byte Ed25519 public key", ed25519.PublicKeySize)
	}
	if c.ExpiresAt != nil && !c.ExpiresAt.After(x.m.Now) {
		return Reply{}, invalid("/expires_at", "%s is not in the future: a key that has expired decides nothing", c.ExpiresAt.UTC().Format(time.RFC3339))
	}
	id := KeyID(pub)
	if a := w.Approver(c.Name); a != nil && a.KeyID == id && a.Role == c.Role && a.RevokedAt == nil && sameTime(a.ExpiresAt, c.ExpiresAt) {
		return workspaceReply(w, true), nil
	}
	ev := &ApproverRegistered{Name: c.Name, Role: c.Role, PublicKey: c.PublicKey, KeyID: id}
	if c.ExpiresAt != nil {
		at := c.ExpiresAt.UTC()
		ev.ExpiresAt = &at
	}
	return x.emitWorkspace(w, ev)
}

// sameTime reports whether two optional times are both unset or the same
// instant.
func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

func (x *tx) revokeApprover(c *RevokeApprover) (Reply, error) {
	w, dup, err := x.commandWorkspace()
	if err != nil || dup {
		return duplicateWorkspaceOr(w, err)
	}
	if err := checkName("/name", "approver", c.Name); err != nil {
		return Reply{}, err
	}
	a := w.Approver(c.Name)
	if a == nil {
		return Reply{}, notFound("/name", "approver %q is not registered in workspace %q", c.Name, w.Name)
	}
	if a.RevokedAt != nil { // revoked already: nothing changes
		return workspaceReply(w, true), nil
	}
	return x.emitWorkspace(w, &ApproverRevoked{Name: c.Name, KeyID: a.KeyID})
}

func (x *tx) requestApproval(c *RequestApproval) (Reply, error) {
	t, dup, err := x.holder(c.TaskID, c.Attempt, c.Token)
	if err != nil || dup {
		return duplicateOr(t, err)
	}
	if len(c.Action) == 0 {
		return Reply{}, invalid("/action", "is required: the concrete action to approve")
	}
	if schemas.PayloadSize(c.Action) > MaxInputBytes {
		return Reply{}, invalid("/action", "is %d bytes; at most %d are allowed", schemas.PayloadSize(c.Action), MaxInputBytes)
	}
	req := c.ApprovalRequest
	if g := t.Spec.Approval; g != nil { // the task's approval settings are the request's defaults
		req.Role = cmp.Or(req.Role, g.Role)
		req.EscalateTo = cmp.Or(req.EscalateTo, g.EscalateTo)
		req.OnExpiry = cmp.Or(req.OnExpiry, g.OnExpiry)
		req.ExpiresIn = cmp.Or(req.ExpiresIn, g.ExpiresIn)
		// A job may ask for more than its task's settings, never fewer:
		// a gate's four eyes hold for the job's own requests too.
		req.Quorum = max(req.Quorum, g.Quorum)
		req.ExcludeRequester = req.ExcludeRequester || g.ExcludeRequester
		if len(req.Responses) == 0 {
			req.Responses = g.Responses
		}
	}
	if err := validateApproval("", req); err != nil {
		return Reply{}, err
	}
	if err := approvalRoom(t, c.Action, req.Basis); err != nil {
		return Reply{}, err
	}
	ev, err := newApproval(t, c.Attempt, req, false, x.m.Now)
	if err != nil {
		return Reply{}, err
	}
	if err := x.emit(t.ID, ev); err != nil {
		return Reply{}, err
	}
	r, err := x.after(t.ID)
	r.ApprovalID = ev.ID
	return r, err
}

// refusal is a decision that is refused and recorded: its event is kept in
// the log (who tried what, and why it was not taken) and the command is
// answered with the error.
type refusal struct{ err *Error }

func (r *refusal) Error() string { return r.err.Error() }

func (x *tx) decideApproval(c *DecideApproval) (Reply, error) {
	taskID, _, ok := ParseApprovalID(c.ApprovalID)
	if !ok {
		return Reply{}, invalid("/approval_id", "%q is not an approval id (<task id>-<n>)", c.ApprovalID)
	}
	t, err := x.task(taskID, "/approval_id")
	if err != nil {
		return Reply{}, err
	}
	a := t.Approval(c.ApprovalID)
	if a == nil {
		return Reply{}, notFound("/approval_id", "approval %s not found in workspace %q", c.ApprovalID, x.m.Workspace)
	}
	if t.HasCommand(x.m.Key()) {
		return duplicateTask(t), nil
	}
	if !slices.Contains(Responses, c.Response) {
		return Reply{}, invalid("/response", "response %q is not one of %s", c.Response, strings.Join(Responses, ", "))
	}
	if err := checkName("/approver", "approver", c.Approver); err != nil {
		return Reply{}, err
	}
	if err := checkText("/comment", c.Comment, MaxReason, false); err != nil {
		return Reply{}, err
	}
	if err := checkText("/action_digest", c.ActionDigest, MaxTitle, true); err != nil {
		return Reply{}, err
	}
	sig, err := base64.StdEncoding.DecodeString(c.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return Reply{}, invalid("/signature", "is not the standard base64 of a %d-byte Ed25519 signature", ed25519.SignatureSize)
	}
	refuse := func(reason, field, format string, args ...any) (Reply, error) {
		msg := fmt.Sprintf(format, args...)
		code := CodeForbidden
		if reason == RefusedAlreadyDecided || reason == RefusedExpired || reason == RefusedAlreadySigned {
			code = CodeConflict
		}
		if err := x.emit(t.ID, &ApprovalRefused{ApprovalID: a.ID, Approver: c.Approver, Response: c.Response,
			Reason: reason, Message: msg}); err != nil {
			return Reply{}, err
		}
		return Reply{}, &refusal{&Error{Code: code, Field: field, Message: reason + ": " + msg}}
	}
	if x.m.Authenticated && x.m.Actor != c.Approver {
		actor := clip(x.m.Actor, MaxTitle)
		return refuse(RefusedNotApprover, "/approver", "%q is authenticated and may decide only as itself, not as approver %q: send the decision with %q's own credential", actor, c.Approver, c.Approver)
	}
	if d := a.Decision; d != nil && d.Signature == c.Signature && d.Approver == c.Approver && d.Response == c.Response {
		return duplicateTask(t), nil // the same signed decision, sent again
	}
	for _, s := range a.SignOffs {
		if s.Signature == c.Signature && s.Approver == c.Approver && s.Response == c.Response {
			return duplicateTask(t), nil // the same signed approval, sent again
		}
	}
	switch {
	case a.State == ApprovalStateDecided:
		return refuse(RefusedAlreadyDecided, "/approval_id", "approval %s was already decided (%s by %s); a decision is taken once", a.ID, a.Decision.Response, a.Decision.Approver)
	case a.State != ApprovalStatePending:
		return refuse(RefusedExpired, "/approval_id", "approval %s is %s and can no longer be decided", a.ID, a.State)
	case a.ExpiresAt != nil && !x.m.Now.Before(*a.ExpiresAt):
		return refuse(RefusedExpired, "/approval_id", "approval %s expired at %s", a.ID, a.ExpiresAt.UTC().Format(time.RFC3339))
	}
	w, err := x.o.Workspace(x.m.Workspace)
	if err != nil {
		return Reply{}, err
	}
	ap := w.Approver(c.Approver)
	switch {
	case ap == nil:
		return refuse(RefusedUnknownApprover, "/approver", "approver %q is not registered in workspace %q (dwr keys add)", c.Approver, x.m.Workspace)
	case ap.RevokedAt != nil:
		return refuse(RefusedRevoked, "/approver", "approver %q was revoked at %s; register a key again to decide", c.Approver, ap.RevokedAt.UTC().Format(time.RFC3339))
	case ap.ExpiresAt != nil && !x.m.Now.Before(*ap.ExpiresAt):
		return refuse(RefusedKeyExpired, "/approver", "approver %q's key %s expired at %s; register a new one to decide", c.Approver, ap.KeyID, ap.ExpiresAt.UTC().Format(time.RFC3339))
	case a.Role != "" && ap.Role != a.Role:
		return refuse(RefusedUnauthorized, "/approver", "approver %q has role %q; approval %s needs role %q", c.Approver, ap.Role, a.ID, a.Role)
	case !slices.Contains(a.Responses, c.Response):
		return refuse(RefusedNotPermitted, "/response", "response %q is not permitted by approval %s (permitted: %s)", c.Response, a.ID, strings.Join(a.Responses, ", "))
	case c.ActionDigest != a.ActionDigest:
		return refuse(RefusedActionMismatch, "/action_digest", "the decision names action %s, but approval %s proposes %s: a decision on another action cannot authorize this one", c.ActionDigest, a.ID, a.ActionDigest)
	}
	pub, _ := base64.StdEncoding.DecodeString(ap.PublicKey)
	if !ed25519.Verify(pub, DecisionMessage(a.ID, c.Response, c.ActionDigest), sig) {
		for _, other := range t.Approvals {
			for _, r := range Responses {
				if other.ID != a.ID && ed25519.Verify(pub, DecisionMessage(other.ID, r, other.ActionDigest), sig) {
					return refuse(RefusedReplayed, "/signature", "the signature was made for approval %s, not %s: a signature decides only the approval it names", other.ID, a.ID)
				}
			}
		}
		return refuse(RefusedBadSignature, "/signature", "the signature does not verify with approver %q's registered key %s for approval %s, response %s and action %s: sign with that key, for this approval", c.Approver, ap.KeyID, a.ID, c.Response, c.ActionDigest)
	}
	branch := a.Branches[c.Response]
	if branch == BranchEscalate && a.EscalateTo == "" {
		branch = BranchReject // validated against; kept safe for old settings
	}
	signed := schemas.SignedResponse{Response: c.Response, Branch: branch,
		Approver: c.Approver, Role: ap.Role, KeyID: ap.KeyID, Comment: c.Comment, Signature: c.Signature}
	if c.Response == ResponseApprove && a.ExcludeRequester && a.RequestedBy != "" && c.Approver == a.RequestedBy {
		return refuse(RefusedSelfApproval, "/approver", "approver %q created task %s, and approval %s may not be approved by the identity that requested it (exclude_requester): another approver must", c.Approver, t.ID, a.ID)
	}
	var dropped []string
	if c.Response == ResponseApprove && a.Quorum > 1 {
		// Four eyes: each approver approves once, and the approval waits
		// for the quorum; any other response decides at once. A sign-off
		// counts while its approver stands with the key it signed with.
		var standing []string
		standing, dropped = standingSignOffs(w, a)
		if slices.Contains(standing, c.Approver) {
			return refuse(RefusedAlreadySigned, "/approver", "approver %q already approved approval %s, which needs %d distinct approvers (%d so far): another approver must", c.Approver, a.ID, a.Quorum, len(standing))
		}
		if len(standing)+1 < a.Quorum {
			if err := x.emit(t.ID, &ApprovalSignedOff{ApprovalID: a.ID, SignedResponse: signed, Dropped: dropped}); err != nil {
				return Reply{}, err
			}
			r, err := x.after(t.ID)
			r.ApprovalID = a.ID
			return r, err
		}
	}
	if err := x.emit(t.ID, &ApprovalDecided{ApprovalID: a.ID, SignedResponse: signed, Dropped: dropped}); err != nil {
		return Reply{}, err
	}
	if err := x.takeBranch(t.ID, a.ID, branch, fmt.Sprintf("approval %s: %s by %s", a.ID, c.Response, c.Approver), c.Comment); err != nil {
		return Reply{}, err
	}
	r, err := x.after(t.ID)
	r.ApprovalID = a.ID
	return r, err
}

// standingSignOffs names the approvers of approval a's sign-offs that still
// count in workspace w — their approver is registered, not revoked, with
// the key it signed with (an expired key's sign-off stands: it was valid
// when given) — and those of the others.
func standingSignOffs(w *Workspace, a *Approval) (standing, dropped []string) {
	for _, s := range a.SignOffs {
		if ap := w.Approver(s.Approver); ap != nil && ap.RevokedAt == nil && ap.KeyID == s.KeyID {
			standing = append(standing, s.Approver)
		} else {
			dropped = append(dropped, s.Approver)
		}
	}
	return standing, dropped
}

// SettleSignOffs returns approval a as it counts in workspace w: a pending
// approval's sign-offs whose approver no longer stands (revoked, or
// registered again with another key) moved to DroppedSignOffs, as the
// approval's next approval will record. It returns a itself when nothing
// moves, else a copy; a is never changed.
func SettleSignOffs(w *Workspace, a *Approval) *Approval {
	if w == nil || a.State != ApprovalStatePending || len(a.SignOffs) == 0 {
		return a
	}
	_, dropped := standingSignOffs(w, a)
	if len(dropped) == 0 {
		return a
	}
	c := *a
	dropSignOffs(&c, dropped)
	return &c
}

// SettleTaskSignOffs returns task t with each approval as SettleSignOffs
// returns it: t itself when nothing moves, else a copy with its own
// approvals; t is never changed.
func SettleTaskSignOffs(w *Workspace, t *Task) *Task {
	var c *Task
	for i := range t.Approvals {
		a := SettleSignOffs(w, &t.Approvals[i])
		if a == &t.Approvals[i] {
			continue
		}
		if c == nil {
			cp := *t
			cp.Approvals = slices.Clone(t.Approvals)
			c = &cp
		}
		c.Approvals[i] = *a
	}
	if c == nil {
		return t
	}
	return c
}

// expireApproval takes the expiry branch of an approval whose time is up.
func (x *tx) expireApproval(t *Task, c *FireTimer) (Reply, error) {
	id := ApprovalID(t.ID, c.Attempt)
	a := t.Approval(id)
	if a == nil || a.State != ApprovalStatePending || a.ExpiresAt == nil {
		return duplicateTask(t), nil
	}
	if x.m.Now.Before(*a.ExpiresAt) {
		return Reply{}, conflict("approval %s does not expire until %s", id, a.ExpiresAt)
	}
	branch := a.OnExpiry
	if branch == BranchEscalate && a.EscalateTo == "" {
		branch = BranchFail
	}
	if err := x.emit(t.ID, &ApprovalExpired{ApprovalID: id, Branch: branch}); err != nil {
		return Reply{}, err
	}
	if err := x.takeBranch(t.ID, id, branch, fmt.Sprintf("approval %s expired at %s", id, a.ExpiresAt.UTC().Format(time.RFC3339)), ""); err != nil {
		return Reply{}, err
	}
	return x.after(t.ID)
}

// takeBranch does what branch says once approval id of task taskID is
// decided or expired.
func (x *tx) takeBranch(taskID, id, branch, why, comment string) error {
	t, err := x.o.Task(taskID)
	if err != nil {
		return err
	}
	a := t.Approval(id)
	if comment != "" {
		why += ": " + comment
	}
	if a.Kind == schemas.ApprovalKindBudget {
		return x.budgetBranch(t, a, branch, why)
	}
	switch branch {
	case BranchResume:
		if a.Attempt == 0 { // the gate is passed: on to the start time, or ready
			ev, err := x.gate(t, "approved")
			if err != nil {
				return err
			}
			return x.emit(taskID, ev)
		}
		return x.emit(taskID, &TaskReady{Reason: "approval"})
	case BranchReject:
		return x.emit(taskID, &TaskRejected{Reason: why})
	case BranchEscalate:
		req := ApprovalRequest{Action: a.Action, ActionDigest: a.ActionDigest, Summary: a.Summary, Basis: a.Basis, Role: a.EscalateTo,
			Responses: slices.DeleteFunc(slices.Clone(a.Responses), func(r string) bool { return r == ResponseEscalate }),
			Branches:  a.Branches, OnExpiry: a.OnExpiry, ExpiresIn: a.ExpiresIn, Quorum: a.Quorum, ExcludeRequester: a.ExcludeRequester}
		if req.OnExpiry == BranchEscalate {
			req.OnExpiry = BranchFail
		}
		if err := approvalRoom(t, req.Action, req.Basis); err != nil {
			return x.emit(taskID, &TaskFailed{Reason: ReasonApproval, Error: &ErrorInfo{Code: ReasonApproval,
				Message: why + "; not escalated: " + err.Message}})
		}
		ev, err := newApproval(t, a.Attempt, req, a.Attempt == 0, x.m.Now)
		if err != nil {
			return err
		}
		ev.EscalatedFrom, ev.AskedRole = a.ID, a.AskedRole // still the first request's
		return x.emit(taskID, ev)
	default:
		return x.emit(taskID, &TaskFailed{Reason: ReasonApproval, Error: &ErrorInfo{Code: ReasonApproval, Message: why}})
	}
}

// budgetBranch takes the branch of a budget approval: approved, the goal's
// budget becomes the one the approval proposed (unless it already allows as
// much) and the task is ready again; otherwise the task fails as its
// budget said.
func (x *tx) budgetBranch(t *Task, a *Approval, branch, why string) error {
	if err := x.budgetDecided(t, a, branch, why); err != nil {
		return err
	}
	// The tasks of the goal that waited on this approval follow it.
	return x.budgetWaiters(t.GoalID, func(id string) bool { return id == a.ID }, func() Event {
		if branch == BranchResume {
			return &TaskReady{Reason: "budget extended"}
		}
		return &TaskFailed{Reason: ReasonBudget, Error: &ErrorInfo{Code: ReasonBudget,
			Message: "the goal's budget was not extended (" + why + ")"}}
	})
}

// budgetWaiters emits to each task of goal goalID that waits (wait kind
// budget) on an approval match accepts the event ev makes.
func (x *tx) budgetWaiters(goalID string, match func(approvalID string) bool, ev func() Event) error {
	g, err := x.o.Goal(goalID)
	if err != nil || g == nil {
		return err
	}
	for _, p := range g.Plan {
		o, err := x.o.Task(p.TaskID)
		if err != nil {
			return err
		}
		if o != nil && o.State == StateWaiting && o.Wait != nil && o.Wait.Kind == WaitBudget && match(o.Wait.ApprovalID) {
			if err := x.emit(o.ID, ev()); err != nil {
				return err
			}
		}
	}
	return nil
}

// budgetDecided takes the branch of budget approval a for its own task t.
func (x *tx) budgetDecided(t *Task, a *Approval, branch, why string) error {
	if branch != BranchResume {
		return x.emit(t.ID, &TaskFailed{Reason: ReasonBudget, Error: &ErrorInfo{Code: ReasonBudget,
			Message: "the goal's budget was not extended (" + why + ")"}})
	}
	var ext schemas.BudgetExtension
	if err := json.Unmarshal(a.Action, &ext); err != nil {
		return fmt.Errorf("domain: budget approval %s: %w", a.ID, err)
	}
	g, err := x.o.Goal(ext.ExtendBudget.GoalID)
	if err != nil || g == nil {
		return err
	}
	to, now := ext.ExtendBudget.To, g.Envelope.Budget
	if to.Attempts > now.Attempts || to.Tokens > now.Tokens || to.Cost > now.Cost {
		to.Attempts, to.Tokens, to.Cost = max(to.Attempts, now.Attempts), max(to.Tokens, now.Tokens), max(to.Cost, now.Cost)
		to.Deadline = now.Deadline
		if err := x.emit(g.ID, &GoalBudgetExtended{Budget: to, ApprovalID: a.ID}); err != nil {
			return err
		}
	}
	return x.emit(t.ID, &TaskReady{Reason: "budget extended"})
}

// clip cuts s to at most n bytes, at a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
