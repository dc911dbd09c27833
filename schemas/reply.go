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
	// For queue.configure, queue.pause and queue.resume: the queue's
	// settings in effect.
	Queue      string `json:"queue,omitempty"`
	LeaseMS    int64  `json:"lease_ms,omitempty"`
	MaxDeliver int    `json:"max_deliver,omitempty"`
	MaxRunning int    `json:"max_running,omitempty"`
	// RateLimit items a RatePeriodMS at most, for queue.configure,
	// queue.pause and queue.resume.
	RateLimit    int    `json:"rate_limit,omitempty"`
	RatePeriodMS int64  `json:"rate_period_ms,omitempty"`
	Order        string `json:"order,omitempty"`  // for queue.configure, queue.pause and queue.resume: "priority", or "" (fifo)
	Paused       bool   `json:"paused,omitempty"` // for queue.configure, queue.pause and queue.resume
	// Duplicate is true when nothing was appended: the command id was
	// already applied, or the command asked for what already is.
	Duplicate bool `json:"duplicate,omitempty"`
	// Token is, for task.claim, the attempt's token, which its later
	// commands carry. Sent to the claimer only, never stored: keep it
	// secret.
	Token string `json:"token,omitempty"`
	// Next is, for a report that asked for it (ReportSuccess.Next,
	// ReportFailure.Next), the attempt the report's commit started for its
	// sender: the handoff.
	Next *Handoff `json:"next,omitempty"`
}

// Handoff is an attempt the service started for a reporting worker in its
// report's commit, when the report asked for it (its Next): when the report
// leaves a task that depends on the reported one ready, on the same queue,
// the service starts that task's next attempt for the sender in the
// report's own commit — exactly as task.claim would, with its token and
// lease — and no work item is published for it, so no other worker sees
// it. The worker runs it as if it had claimed it: it heartbeats within its
// queue's lease, and when it goes silent past the lease the service
// abandons the attempt (lease_lost) and the task is ready again, on the
// queue, for any executor. The stored reply names the attempt (TaskID,
// Attempt, TokenHash); the reply sent to the worker adds its token and its
// work item.
type Handoff struct {
	TaskID    string `json:"task_id"`
	Attempt   int    `json:"attempt"`
	TokenHash string `json:"token_hash"`
	// Token is the handed attempt's token. Sent to the reporter only,
	// never stored: keep it secret.
	Token string `json:"token,omitempty"`
	// Item is the work item of the handed attempt, as a claim's would be
	// (its task as the commit left it, and its dependencies' outcomes).
	// Absent when the task moved on before the reply was made (then run
	// nothing: the attempt was taken from the sender).
	Item *WorkItem `json:"item,omitempty"`
}
