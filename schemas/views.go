package schemas

// Goal states.
const (
	GoalStateOpen      = "open"
	GoalStateAchieved  = "achieved"
	GoalStateFailed    = "failed"
	GoalStateCancelled = "cancelled"
)

// GoalView is a goal as goal.get and goal.list answer it: the goal with its
// plan graph (each node with its task's state) and the number of its tasks
// in each state.
type GoalView struct {
	*Goal
	Nodes  []PlanNode     `json:"nodes,omitempty"`
	Counts map[string]int `json:"counts"`
	// Spent is what the goal's work has used, to set beside its budget.
	Spent Spend `json:"spent"`
}

// PlanNode is one task of a goal's current plan, with its task's state
// and the child goals its attempts delegated work to (without their
// tasks: goal.get of each child has them).
type PlanNode struct {
	PlanTask
	State       string       `json:"state"`
	Delegations []Delegation `json:"delegations,omitempty"`
}

// ApprovalView is an approval as approval.get and approval.list (the inbox)
// answer it: the approval with the task it belongs to.
type ApprovalView struct {
	Approval
	Workspace string `json:"workspace"`
	TaskKey   string `json:"task_key,omitempty"`
	TaskTitle string `json:"task_title,omitempty"`
	Queue     string `json:"queue"`
	GoalID    string `json:"goal_id,omitempty"`
	TaskState string `json:"task_state"`
}
