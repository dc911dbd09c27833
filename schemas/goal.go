package schemas

import (
	"maps"
	"slices"
	"time"
)

// Goal is the state of a goal, its plan included, as goal.get carries it.
type Goal struct {
	ID              string   `json:"id"`
	Workspace       string   `json:"workspace"`
	Title           string   `json:"title"`
	Description     string   `json:"description,omitempty"`
	SuccessCriteria []string `json:"success_criteria,omitempty"`
	Envelope        Envelope `json:"envelope"`
	// Labels are the goal's names and values (goal.create, goal.label)
	// that goal.list selects by.
	Labels Labels `json:"labels,omitempty"`
	// Key is the caller's own name for the goal, which at most one open
	// goal of its workspace holds (goal.create).
	Key string `json:"key,omitempty"`
	// Priority is the priority of the goal's tasks that give none
	// (goal.create, goal.prioritize); 0: DefaultPriority.
	Priority    int        `json:"priority,omitempty"`
	State       string     `json:"state"`
	Reason      string     `json:"reason,omitempty"`
	PlanVersion int        `json:"plan_version"`
	Plan        []PlanTask `json:"plan,omitempty"`
	// RetiredSpend is what the tasks of earlier plan versions that the
	// current one no longer holds had spent when a revision dropped them
	// (they ended then): it still counts against the goal's budget.
	RetiredSpend *Spend `json:"retired_spend,omitempty"`
	// RetiredTasks are the tasks dropped by revisions recorded before
	// their spend was tallied (RetiredSpend), oldest first: what they
	// spent counts too.
	RetiredTasks []string `json:"retired_tasks,omitempty"`
	// Ritual names the ritual version the goal was created from
	// (ritual.run), if any.
	Ritual *RitualRef `json:"ritual,omitempty"`
	// Schedule names the schedule and the slot the goal was started for,
	// if any.
	Schedule *ScheduleRef `json:"schedule,omitempty"`
	// Parent names the task whose attempt delegated the goal
	// (task.delegate), if any.
	Parent *ParentRef `json:"parent,omitempty"`
	// Shredded is set once goal.shred destroyed the goal's data key: its
	// payloads read as "[shredded]".
	Shredded bool `json:"shredded,omitempty"`
	Versioned
}

// ParentRef names the task whose attempt delegated a goal (task.delegate):
// the goal is that task's child, and its end resumes the task.
type ParentRef struct {
	TaskID string `json:"task_id"`
	GoalID string `json:"goal_id,omitempty"` // the parent task's goal; empty for a standalone task
	Key    string `json:"key"`               // the delegation's key within the parent task
	// Depth is how many delegations lead to the goal: 1 for a goal a task
	// of an undelegated goal (or a standalone task) delegated.
	Depth int `json:"depth"`
}

// Spend is what a goal's work has used, over every version of its plan and
// every attempt, failed ones included: the attempts started, the tokens and
// cost of their model steps, and their time from start to end (a running
// attempt's up to now).
type Spend struct {
	Attempts int     `json:"attempts"`
	Tokens   int64   `json:"tokens"`
	Cost     float64 `json:"cost"`
	WallMS   int64   `json:"wall_ms"`
}

// Add adds o to s.
func (s *Spend) Add(o Spend) {
	s.Attempts, s.Tokens, s.Cost, s.WallMS = s.Attempts+o.Attempts, s.Tokens+o.Tokens, s.Cost+o.Cost, s.WallMS+o.WallMS
}

// Versioned is what the state of a goal or a task keeps of the events
// applied to it: when the first and the last were decided, how many there
// were, and the idempotency keys of the commands they came from.
type Versioned struct {
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	Version   uint64    `json:"version"`
	Commands  []string  `json:"commands,omitempty"`
}

// HasCommand reports whether the command with idempotency key key was
// already applied.
func (v *Versioned) HasCommand(key string) bool { return key != "" && slices.Contains(v.Commands, key) }

// PlanTask is one node of a committed plan: the task a key of the plan
// names.
type PlanTask struct {
	Key       string   `json:"key"`
	TaskID    string   `json:"task_id"`
	DependsOn []string `json:"depends_on,omitempty"` // keys
}

// Envelope is a goal's budget and permissions.
type Envelope struct {
	Budget      Budget      `json:"budget"`
	Permissions Permissions `json:"permissions"`
	// OnExhausted is what a task does when the budget allows it no further
	// attempt: OnExhaustedFail (the default) fails it; OnExhaustedApproval
	// parks it on an approval to extend the budget (ExtensionRole decides;
	// "" any registered approver).
	OnExhausted   string `json:"on_exhausted,omitempty"`
	ExtensionRole string `json:"extension_role,omitempty"`
	// Privacy says which data key seals the payloads of the goal's work:
	// nil or key workspace, the workspace's; key goal, the goal's own, so
	// that goal.shred can shred the goal's data without the rest (the
	// goals it delegates to use it too).
	Privacy *Privacy `json:"privacy,omitempty"`
}

// Privacy is a goal's choice of data key (Envelope.Privacy).
type Privacy struct {
	Key string `json:"key"` // PrivacyKeyWorkspace or PrivacyKeyGoal
}

// The data keys a goal's payloads may be sealed with (Privacy.Key).
const (
	PrivacyKeyWorkspace = "workspace"
	PrivacyKeyGoal      = "goal"
)

// OwnKey reports whether the envelope asks for the goal's own data key.
func (e *Envelope) OwnKey() bool { return e.Privacy != nil && e.Privacy.Key == PrivacyKeyGoal }

// What a task does when its goal's budget is used up (Envelope.OnExhausted).
const (
	OnExhaustedFail     = "fail"
	OnExhaustedApproval = "approval"
)

// Budget bounds what a goal's work may spend; a zero field is no bound.
type Budget struct {
	Cost     float64    `json:"cost,omitempty"`
	Tokens   int64      `json:"tokens,omitempty"`
	Attempts int        `json:"attempts,omitempty"`
	Deadline *time.Time `json:"deadline,omitempty"`
}

// Permissions say which queues a goal's tasks may use; empty means any.
type Permissions struct {
	Queues []string `json:"queues,omitempty"`
}

// Clone returns a deep copy of g.
func (g *Goal) Clone() *Goal {
	c := *g
	c.SuccessCriteria = slices.Clone(g.SuccessCriteria)
	c.Plan = slices.Clone(g.Plan)
	c.RetiredTasks = slices.Clone(g.RetiredTasks)
	c.RetiredSpend = cloneValue(g.RetiredSpend)
	c.Commands = slices.Clone(g.Commands)
	c.Ritual = cloneValue(g.Ritual)
	c.Labels = maps.Clone(g.Labels)
	return &c
}
