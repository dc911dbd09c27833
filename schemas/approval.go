package schemas

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Approval responses: what a person may answer to an approval request
// (ApprovalDecision.Response, and the keys of Approval.Branches).
const (
	ResponseApprove  = "approve"
	ResponseReject   = "reject"
	ResponseRevise   = "revise"
	ResponseEscalate = "escalate"
)

// Responses lists every approval response, in the order common.json's
// Response enum gives them.
var Responses = []string{ResponseApprove, ResponseReject, ResponseRevise, ResponseEscalate}

// Branches: what follows a response or an expiry (ApprovalDecision.Branch,
// the values of Approval.Branches, and Approval.OnExpiry).
const (
	// BranchResume lets the task go on. A gate lets the first attempt start; a
	// request made by an attempt starts a new attempt, handed the decision.
	BranchResume = "resume"
	// BranchReject ends the task rejected.
	BranchReject = "reject"
	// BranchFail ends the task failed.
	BranchFail = "fail"
	// BranchEscalate asks again, of the escalation role.
	BranchEscalate = "escalate"
)

// Branches lists every branch, in the order common.json's Branch enum gives
// them.
var Branches = []string{BranchResume, BranchReject, BranchFail, BranchEscalate}

// Approval is a person's decision point inside a task: the proposed action
// and its digest, the basis, who may decide, how long the request stands,
// and what each response leads to; then the decision, or the refusals.
type Approval struct {
	ID      string `json:"id"` // <task id>-<n>
	TaskID  string `json:"task_id"`
	Attempt int    `json:"attempt,omitempty"` // the attempt that asked; 0 for a gate (or a budget extension asked before an attempt)
	// Kind is ApprovalKindBudget for a request to extend the goal's
	// budget (Envelope.OnExhausted); "" for a task's own approval.
	Kind         string            `json:"kind,omitempty"`
	Action       json.RawMessage   `json:"action"`
	ActionDigest string            `json:"action_digest"`
	Summary      string            `json:"summary,omitempty"`
	Basis        json.RawMessage   `json:"basis,omitempty"`
	Role         string            `json:"role,omitempty"` // "" = any registered approver
	Responses    []string          `json:"responses"`
	Branches     map[string]string `json:"branches"`
	OnExpiry     string            `json:"on_expiry,omitempty"`
	EscalateTo   string            `json:"escalate_to,omitempty"`
	// EscalatedFrom is, for an approval an escalation made, the approval
	// it escalated. AskedRole is the role the request was asked of: Role,
	// or for an escalation's approval the AskedRole of the approval it
	// escalated (the first request's) — a decision stands for a request of
	// AskedRole on ActionDigest, never for another role's.
	EscalatedFrom string     `json:"escalated_from,omitempty"`
	AskedRole     string     `json:"asked_role,omitempty"`
	ExpiresIn     Duration   `json:"expires_in,omitempty"`
	RequestedAt   time.Time  `json:"requested_at"`
	ExpiresAt     *time.Time `json:"expires_at,omitempty"`
	State         string     `json:"state"` // pending | decided | expired | withdrawn
	// Quorum is how many distinct approvers must approve (omitted: one);
	// SignOffs are the approvals given while fewer had, in order. The
	// approval that makes the quorum is the Decision.
	Quorum   int                `json:"quorum,omitempty"`
	SignOffs []ApprovalDecision `json:"sign_offs,omitempty"`
	// DroppedSignOffs are sign-offs that no longer count toward the
	// quorum: their approver was revoked, or registered again with another
	// key, after signing (the latest MaxQuorum-1; the log keeps every
	// one). A query moves a pending approval's sign-offs here as soon as
	// their approver no longer stands; the log's next approval of it
	// records the move (the events' dropped).
	DroppedSignOffs []ApprovalDecision `json:"dropped_sign_offs,omitempty"`
	// RequestedBy is the identity that created the task (Task.CreatedBy),
	// whom ExcludeRequester keeps from approving.
	RequestedBy      string            `json:"requested_by,omitempty"`
	ExcludeRequester bool              `json:"exclude_requester,omitempty"`
	Decision         *ApprovalDecision `json:"decision,omitempty"`
	Refusals         []Refusal         `json:"refusals,omitempty"` // the latest ones
}

// ApprovalDecision is a decision that was taken: its signed response, and
// when it was decided.
type ApprovalDecision struct {
	SignedResponse
	DecidedAt time.Time `json:"decided_at"`
}

// SignedResponse is what an approver decided: who, with what authority and
// key, what, the branch it took, and the signature that proves it. The
// task.approval_decided event carries it, and the approval keeps it.
type SignedResponse struct {
	Response  string `json:"response"`
	Branch    string `json:"branch"`
	Approver  string `json:"approver"`
	Role      string `json:"role,omitempty"`
	KeyID     string `json:"key_id"`
	Comment   string `json:"comment,omitempty"`
	Signature string `json:"signature"`
}

// Refusal is a decision that was refused, as an approval's state keeps it.
type Refusal struct {
	Approver string    `json:"approver,omitempty"`
	Response string    `json:"response,omitempty"`
	Reason   string    `json:"reason"`
	Message  string    `json:"message"`
	At       time.Time `json:"at"`
}

// ApprovalRequest is what an attempt asks to be approved (the body of
// task.request_approval after its attempt's fields), or a gate's settings
// applied to a task's input.
type ApprovalRequest struct {
	Action     json.RawMessage   `json:"action"`
	Summary    string            `json:"summary,omitempty"`
	Basis      json.RawMessage   `json:"basis,omitempty"`
	Role       string            `json:"role,omitempty"`
	Responses  []string          `json:"responses,omitempty"`
	Branches   map[string]string `json:"branches,omitempty"`
	OnExpiry   string            `json:"on_expiry,omitempty"`
	EscalateTo string            `json:"escalate_to,omitempty"`
	ExpiresIn  Duration          `json:"expires_in,omitempty"`
	Quorum     int               `json:"quorum,omitempty"` // distinct approvers who must approve; 0 is 1
	// ExcludeRequester keeps the identity that created the task from
	// approving (ApprovalSpec.ExcludeRequester).
	ExcludeRequester bool `json:"exclude_requester,omitempty"`

	// ActionDigest is the digest of the action as sent, set by the
	// service before it seals the action (ActionDigest of the plaintext):
	// the one approvers sign. It is never read from, or written to, the
	// wire.
	ActionDigest string `json:"-"`
}

// MaxQuorum is the most distinct approvers an approval may need.
const MaxQuorum = 10

// ApprovalKindBudget marks an approval that extends its goal's budget: its
// action is a BudgetExtension.
const ApprovalKindBudget = "budget"

// BudgetExtension is the action of a budget approval: the goal's budget
// now, and the one approving makes it.
type BudgetExtension struct {
	ExtendBudget struct {
		GoalID string `json:"goal_id"`
		Why    string `json:"why"`
		Budget Budget `json:"budget"`
		To     Budget `json:"to"`
	} `json:"extend_budget"`
}

// ActionDigestPrefix opens every action digest: it names the hash.
const ActionDigestPrefix = "sha256:"

// ActionDigest returns the digest of a proposed action, which the service
// records with its approval and an approver signs: "sha256:" and the hex
// SHA-256 of the action's canonical JSON (CanonicalJSON). Two encodings of
// the same action have the same digest; any change to the action changes
// it. It returns an error when action is not one JSON value.
func ActionDigest(action json.RawMessage) (string, error) {
	canon, err := CanonicalJSON(action)
	if err != nil {
		return "", err
	}
	h := sha256.Sum256(canon)
	return ActionDigestPrefix + hex.EncodeToString(h[:]), nil
}

// CanonicalJSON re-encodes a JSON document with its object keys sorted, no
// insignificant space, numbers as written (their digits kept) and no HTML
// escaping: the form an action digest is taken of, byte for byte, by the
// service and by every client. It returns an error when doc is not exactly
// one JSON value.
func CanonicalJSON(doc json.RawMessage) (json.RawMessage, error) {
	if out, ok := canonicalFast(doc); ok {
		return out, nil
	}
	return canonicalByDecoding(doc)
}

// canonicalByDecoding is CanonicalJSON by encoding/json: the document
// decoded (numbers as json.Number) and encoded again, maps with sorted keys.
// It defines the form canonicalFast writes faster, and reads what that
// declines.
func canonicalByDecoding(doc json.RawMessage) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("schemas: the action is not JSON: %w", err)
	}
	if dec.More() {
		return nil, errors.New("schemas: the action holds more than one JSON value")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // maps encode with sorted keys
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
