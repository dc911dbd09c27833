package schemas

import "encoding/json"

// MaxItemTaskBytes bounds an execute item that carries its task
// (WorkItem.Task): when the item with the task would be larger (its input,
// checkpoint, attempts and verifications are each bounded, their sum is
// not), the task is left out, and the executor claims first and runs from
// the claim's reply. It keeps every execute item well below the work
// stream's 1 MiB message bound.
const MaxItemTaskBytes = 512 << 10

// Work item kinds (WorkItem.Kind).
const (
	WorkKindExecute = "execute" // run an attempt of a ready task
	WorkKindVerify  = "verify"  // judge the result of a verifying task's attempt
)

// WorkItem is what an executor receives on <prefix>.work.<workspace>.<queue>
// (work_item.json).
//
// An execute item says which attempt to run, and where, and carries Task:
// the task as it stood when the item was dispatched (without its Commands),
// unless the item with it would be larger than MaxItemTaskBytes: then the
// task's oldest history is left out (FitTask, Task.Omitted), and when the
// item would still be too large, the task is. The task crosses the
// wire once: an executor that runs the job from the item's task claims
// lazily (at the job's first command of the attempt, at its first
// heartbeat moment, or in its report: ReportClaim), and the reply to that
// claim carries no task. A claim's reply carries the task (as it stands
// after the claim) only when the claim superseded an attempt — a
// redelivered item whose attempt lost its lease: the job runs from the
// claim's task, which holds that attempt's checkpoint — or when the item
// carried none; the task.claim of an older executor that claims first is
// answered the same way, so it reads the task from its item then.
//
// A verify item is not claimed, so it carries what the verifier judges: the
// fields marked "verify" below. When it would be larger than
// MaxItemTaskBytes it leaves out PriorAttempts, and then Verifications (each
// is bounded, their sum is not); the input and the result it judges stay.
type WorkItem struct {
	Kind         string `json:"kind"` // WorkKindExecute or WorkKindVerify
	TaskID       string `json:"task_id"`
	Workspace    string `json:"workspace"`
	Queue        string `json:"queue"`
	Attempt      int    `json:"attempt"` // execute: the number a claim of this item starts; verify: the attempt judged
	OperationKey string `json:"operation_key"`

	Task *Task `json:"task,omitempty"` // execute: the task when the item was dispatched (nil: too large; claim it first)
	// Dependencies are, for an execute item that carries its task, the
	// accepted result of each task it depends on (nil when the item with
	// them would be larger than MaxItemTaskBytes: read them with task.get).
	Dependencies []Dependency `json:"dependencies,omitempty"`

	GoalID        string          `json:"goal_id,omitempty"`        // verify
	Key           string          `json:"key,omitempty"`            // verify
	Title         string          `json:"title,omitempty"`          // verify
	Input         json.RawMessage `json:"input,omitempty"`          // verify: the task's input
	PriorAttempts []Attempt       `json:"prior_attempts,omitempty"` // verify: the attempts before the one judged
	Verifications []Verification  `json:"verifications,omitempty"`  // verify: the outcomes recorded so far
	Result        json.RawMessage `json:"result,omitempty"`         // verify: the result to judge, as the attempt reported it
	Artifacts     []ArtifactRef   `json:"artifacts,omitempty"`      // verify: the attempt's artifacts
	ResultDigest  string          `json:"result_digest,omitempty"`  // verify: sha256:<hex> of the result, to send back in task.verify

	// Seq is the log sequence of the record that dispatched the item (the
	// task's state as the item has it). Items leave before the views apply
	// that record: read the task with a Dwr-Min-Seq of Seq (client.MinSeq)
	// to see at least what the item saw — its result, for a verifier.
	Seq uint64 `json:"seq,omitempty"`
}

// Dependency is the accepted outcome of a task another depends on: what
// flows from it to its dependents (the work item's Dependencies).
type Dependency struct {
	Key       string          `json:"key,omitempty"` // its key in the goal's plan; empty for a standalone task
	TaskID    string          `json:"task_id"`
	Result    json.RawMessage `json:"result,omitempty"`
	Artifacts []ArtifactRef   `json:"artifacts,omitempty"`
}

// DependencyOf returns the accepted outcome of task t: the result and
// artifacts of its accepted attempt (the last that succeeded). ok is false
// when t has not been accepted.
func DependencyOf(t *Task) (d Dependency, ok bool) {
	if t == nil || t.State != StateAccepted {
		return Dependency{}, false
	}
	d = Dependency{Key: t.Key, TaskID: t.ID}
	for i := len(t.Attempts) - 1; i >= 0; i-- {
		if a := t.Attempts[i]; a.State == AttemptStateSucceeded {
			d.Result, d.Artifacts = a.Result, a.Artifacts
			break
		}
	}
	return d, true
}
