package schemas

import (
	"encoding/json"
	"time"
)

// Approval is a person's decision point inside a task: the proposed action
// and its digest, the basis, who may decide, how long the request stands,
// and what each response leads to; then the decision, or the refusals.
type Approval struct {
	ID           string            `json:"id"` // <task id>-<n>
	TaskID       string            `json:"task_id"`
	Attempt      int               `json:"attempt,omitempty"` // the attempt that asked; 0 for a gate
	Action       json.RawMessage   `json:"action"`
	ActionDigest string            `json:"action_digest"`
	Summary      string            `json:"summary,omitempty"`
	Basis        json.RawMessage   `json:"basis,omitempty"`
	Role         string            `json:"role,omitempty"` // "" = any registered approver
	Responses    []string          `json:"responses"`
	Branches     map[string]string `json:"branches"`
	OnExpiry     string            `json:"on_expiry,omitempty"`
	EscalateTo   string            `json:"escalate_to,omitempty"`
	ExpiresIn    Duration          `json:"expires_in,omitempty"`
	RequestedAt  time.Time         `json:"requested_at"`
	ExpiresAt    *time.Time        `json:"expires_at,omitempty"`
	State        string            `json:"state"` // pending | decided | expired | withdrawn
	Decision     *ApprovalDecision `json:"decision,omitempty"`
	Refusals     []Refusal         `json:"refusals,omitempty"` // the latest ones
}

// ApprovalDecision is a decision that was taken: who, with what authority
// and key, what, and the signature that proves it.
type ApprovalDecision struct {
	Response  string    `json:"response"`
	Branch    string    `json:"branch"`
	Approver  string    `json:"approver"`
	Role      string    `json:"role,omitempty"`
	KeyID     string    `json:"key_id"`
	Comment   string    `json:"comment,omitempty"`
	Signature string    `json:"signature"`
	DecidedAt time.Time `json:"decided_at"`
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
}
