package schemas

import "encoding/json"

// Reply is every answer of a command or query endpoint: reply.json when OK,
// error.json when not.
type Reply struct {
	OK bool `json:"ok"`
	// Result is the command's CommandResult, or the query's result.
	Result json.RawMessage `json:"result,omitempty"`
	// Seq is the log sequence of the commit (a query's: of the views it was
	// served from); HeaderMinSeq takes it.
	Seq uint64 `json:"seq,omitempty"`
	// Next, in the reply of a list query, says that more items follow: the
	// same query with Query.After set to it continues the listing. Absent
	// on the last page.
	Next string `json:"next,omitempty"`
	// Error is why the request was refused, when OK is false.
	Error *Error `json:"error,omitempty"`
}

// CommandResult is the result of a command's reply once its events are
// committed (common.json#/$defs/Reply); each command sets the fields that
// concern it.
type CommandResult struct {
	ID          string     `json:"id"`
	State       string     `json:"state,omitempty"`
	Version     uint64     `json:"version"`
	Attempt     int        `json:"attempt,omitempty"`
	PlanVersion int        `json:"plan_version,omitempty"`
	Tasks       []PlanTask `json:"tasks,omitempty"`
	// Task is, for task.claim, the task as it stands after the claim: what
	// the executor runs the attempt from. It is left out when the claim
	// said its claimer holds the task (ClaimTask.OmitTask) and superseded
	// no attempt.
	Task *Task `json:"task,omitempty"`
	// TokenHash is, for task.claim that started an attempt, the hash of
	// the attempt's token (Attempt.TokenHash): the service hands the token
	// to the claimer whose claim this hash is of.
	TokenHash  string `json:"token_hash,omitempty"`
	ApprovalID string `json:"approval_id,omitempty"` // for task.request_approval and approval.decide
	GoalID     string `json:"goal_id,omitempty"`     // for task.delegate: the child goal
	// For queue.configure: the queue's settings in effect.
	Queue      string `json:"queue,omitempty"`
	LeaseMS    int64  `json:"lease_ms,omitempty"`
	MaxDeliver int    `json:"max_deliver,omitempty"`
	// Duplicate is true when nothing was appended: the command id was
	// already applied, or the command asked for what already is.
	Duplicate bool `json:"duplicate,omitempty"`
	// Token is, for task.claim, the attempt's token, which its later
	// commands carry. Sent to the claimer only, never stored: keep it
	// secret.
	Token string `json:"token,omitempty"`
}
