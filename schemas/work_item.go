package schemas

import "encoding/json"

// Work item kinds (WorkItem.Kind).
const (
	WorkKindExecute = "execute" // run an attempt of a ready task
	WorkKindVerify  = "verify"  // judge the result of a verifying task's attempt
)

// WorkItem is what an executor receives on <prefix>.work.<workspace>.<queue>
// (work_item.json).
type WorkItem struct {
	Kind          string          `json:"kind"` // WorkKindExecute or WorkKindVerify
	TaskID        string          `json:"task_id"`
	Workspace     string          `json:"workspace"`
	Queue         string          `json:"queue"`
	GoalID        string          `json:"goal_id,omitempty"`
	Key           string          `json:"key,omitempty"`
	Title         string          `json:"title,omitempty"`
	Attempt       int             `json:"attempt"` // the number a claim of this item starts
	OperationKey  string          `json:"operation_key"`
	Input         json.RawMessage `json:"input,omitempty"`
	Checkpoint    json.RawMessage `json:"checkpoint,omitempty"`
	PriorAttempts []Attempt       `json:"prior_attempts,omitempty"`
	Verifications []Verification  `json:"verifications,omitempty"`
	Signal        *Signal         `json:"signal,omitempty"`
	Timeout       Duration        `json:"timeout,omitempty"`
	// For a verify item: the result to judge, as the attempt reported it.
	Result       json.RawMessage `json:"result,omitempty"`
	Artifacts    []ArtifactRef   `json:"artifacts,omitempty"`
	ResultDigest string          `json:"result_digest,omitempty"`
}
