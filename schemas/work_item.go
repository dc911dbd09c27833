package schemas

import "encoding/json"

// Work item kinds (WorkItem.Kind).
const (
	WorkKindExecute = "execute" // run an attempt of a ready task
	WorkKindVerify  = "verify"  // judge the result of a verifying task's attempt
)

// WorkItem is what an executor receives on <prefix>.work.<workspace>.<queue>
// (work_item.json).
//
// An execute item says only which attempt to claim, and where: the task
// crosses the wire once, in the claim's reply (CommandResult.Task, the task
// as it stands after the claim), which an executor runs the attempt from. A
// verify item is not claimed, so it carries what the verifier judges: the
// fields marked "verify" below.
type WorkItem struct {
	Kind         string `json:"kind"` // WorkKindExecute or WorkKindVerify
	TaskID       string `json:"task_id"`
	Workspace    string `json:"workspace"`
	Queue        string `json:"queue"`
	Attempt      int    `json:"attempt"` // execute: the number a claim of this item starts; verify: the attempt judged
	OperationKey string `json:"operation_key"`

	GoalID        string          `json:"goal_id,omitempty"`        // verify
	Key           string          `json:"key,omitempty"`            // verify
	Title         string          `json:"title,omitempty"`          // verify
	Input         json.RawMessage `json:"input,omitempty"`          // verify: the task's input
	PriorAttempts []Attempt       `json:"prior_attempts,omitempty"` // verify: the attempts before the one judged
	Verifications []Verification  `json:"verifications,omitempty"`  // verify: the outcomes recorded so far
	Result        json.RawMessage `json:"result,omitempty"`         // verify: the result to judge, as the attempt reported it
	Artifacts     []ArtifactRef   `json:"artifacts,omitempty"`      // verify: the attempt's artifacts
	ResultDigest  string          `json:"result_digest,omitempty"`  // verify: sha256:<hex> of the result, to send back in task.verify
}
