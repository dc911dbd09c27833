package schemas

// Role is what a member of a workspace may do there
// (common.json#/$defs/Role): admin, client, executor, approver or viewer.
type Role string

// QueueConfig is a queue's settings, which its work items' consumer follows:
// how long an executor holds a work item before it is delivered again, and
// how many times it is delivered before it is quarantined (queue.list).
type QueueConfig struct {
	Name       string `json:"name"`
	LeaseMS    int64  `json:"lease_ms"`
	MaxDeliver int    `json:"max_deliver"`
}
