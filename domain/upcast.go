package domain

import (
	"encoding/json"
	"fmt"

	"github.com/dwr-run/dwr/schemas"
)

// Upcast brings an older payload of an event type one schema version up.
type Upcast func(data json.RawMessage) (json.RawMessage, error)

// schemaVersions are the current schema versions of the event types that
// have changed shape; every other type is at version 1.
var schemaVersions = map[string]int{
	"task.created":          2, // v2: wait_kind says what a task created waiting waits for
	"task.approval_decided": 2, // v2: a signed decision of a named approval, with the branch it takes
}

// upcasts holds, per event type, the upcast from version i+1 to i+2 at index i.
var upcasts = map[string][]Upcast{
	"task.created":          {taskCreatedV1toV2},
	"task.approval_decided": {approvalDecidedV1toV2},
}

// SchemaVersion returns the current schema version of eventType: the version
// the writer records and the code reads.
func SchemaVersion(eventType string) int {
	if v, ok := schemaVersions[eventType]; ok {
		return v
	}
	return 1
}

// Upcasts returns the upcasts of every event type that has them: for type t,
// Upcasts()[t][i] turns version i+1 into version i+2. Stored events are never
// rewritten; readers upcast them as they read.
func Upcasts() map[string][]Upcast {
	out := make(map[string][]Upcast, len(upcasts))
	for k, v := range upcasts {
		out[k] = append([]Upcast(nil), v...)
	}
	return out
}

// taskCreatedV1toV2 adds wait_kind to a task created waiting: version 1 said
// only wait_until, which was set for a timer wait and absent for an approval.
func taskCreatedV1toV2(data json.RawMessage) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("domain: upcast task.created v1: %w", err)
	}
	var state string
	_ = json.Unmarshal(m["state"], &state)
	if _, has := m["wait_kind"]; state == StateWaiting && !has {
		kind := WaitApproval
		if until, ok := m["wait_until"]; ok && string(until) != "null" {
			kind = WaitTimer
		}
		m["wait_kind"], _ = json.Marshal(kind)
	}
	return json.Marshal(m)
}

// approvalDecidedV1toV2 reads an unsigned gate decision of version 1
// ({response, reason}) as version 2: no approval id (the gate had no approval
// record then), the reason as the comment, and the branch the response took.
func approvalDecidedV1toV2(data json.RawMessage) (json.RawMessage, error) {
	var v1 struct {
		Response string `json:"response"`
		Reason   string `json:"reason,omitempty"`
	}
	if err := json.Unmarshal(data, &v1); err != nil {
		return nil, fmt.Errorf("domain: upcast task.approval_decided v1: %w", err)
	}
	branch := BranchReject
	if v1.Response == ResponseApprove {
		branch = BranchResume
	}
	return json.Marshal(ApprovalDecided{SignedResponse: schemas.SignedResponse{Response: v1.Response, Branch: branch, Comment: v1.Reason}})
}
