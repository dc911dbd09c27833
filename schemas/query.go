package schemas

import "time"

// Query is the body of every query (dwr.q.<workspace>.<query>, query.json);
// each query reads the fields it needs.
type Query struct {
	ID        string `json:"id,omitempty"`
	Aggregate string `json:"aggregate,omitempty"` // for events: workspace | goal | task | ritual | schedule
	State     string `json:"state,omitempty"`
	GoalID    string `json:"goal_id,omitempty"`
	Role      string `json:"role,omitempty"` // for approval.list
	// Version, for ritual.get, is the version to read: 0 for the latest.
	Version uint64 `json:"version,omitempty"`
	// After, for a list query, continues the listing: the Next of the reply
	// before.
	After string `json:"after,omitempty"`
	// NewestFirst, for goal.list, and task.list with a state or a goal
	// id, lists the newest first; its cursors continue toward older ones.
	NewestFirst bool `json:"newest_first,omitempty"`
	// Limit, for a list query, bounds the items of a reply: 0 means the
	// service's default (100), at most 10,000.
	Limit int `json:"limit,omitempty"`
	// Filter, for feed, is the subject filter after
	// <prefix>.ev.<workspace>. of the events to list: "task.>", "task.<id>.>",
	// "goal.*.failed"; absent, ">" (every event).
	Filter string `json:"filter,omitempty"`
	// FromSeq, for feed without after, lists the events of the log records
	// from this log sequence on (a reply's seq names one).
	FromSeq uint64 `json:"from_seq,omitempty"`
	// Since, for feed without after or from_seq, lists the events stored at
	// or after this time; absent both, from the oldest the feed holds.
	Since *time.Time `json:"since,omitempty"`
	// Queue, for queue.key, is the queue whose key to read; for task.list,
	// the queue whose tasks to list.
	Queue string `json:"queue,omitempty"`
	// Key, for goal.get without an ID, is the key of the goal to read: the
	// goal made last with it (CreateGoal.Key).
	Key string `json:"key,omitempty"`
	// Schedule, for goal.list, is the schedule whose goals (those its slots
	// started) to list.
	Schedule string `json:"schedule,omitempty"`
	// Labels, for goal.list and task.list, selects the goals (tasks) that
	// hold every one of these labels, each with its value.
	Labels Labels `json:"labels,omitempty"`
	// Epoch, for queue.key, is the day whose key to read (the scope of a
	// work item's sealed values names it: seal.QueueScope).
	Epoch int64 `json:"epoch,omitempty"`
}

// QueueKey is the result of queue.key: the key an executor of Queue opens
// the work items sealed on day Epoch with (their scope is q.<epoch>). Key
// is 32 bytes, base64url without padding.
type QueueKey struct {
	Queue string `json:"queue"`
	Epoch int64  `json:"epoch"`
	Key   string `json:"key"`
}
