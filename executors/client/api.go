package client

import (
	"context"
	"encoding/json"
	"iter"
	"time"

	fastjson "github.com/go-json-experiment/json/v1"

	"github.com/dwr-run/dwr/schemas"
)

// Result is an accepted command's result: the aggregate it changed, its
// state and version after the command, and the log sequence the reply
// reflects.
type Result struct {
	schemas.CommandResult
	// Seq is the log sequence of the command's commit (or, for a retry
	// answered with its first outcome, a sequence at least as recent).
	Seq uint64
}

func (c *Client) do(ctx context.Context, name string, body any, opts []CallOption) (*Result, error) {
	r, err := c.Command(ctx, name, body, opts...)
	if err != nil {
		return nil, err
	}
	out := &Result{Seq: r.Seq}
	if err := fastjson.Unmarshal(r.Result, &out.CommandResult); err != nil {
		return nil, &RequestError{Subject: name, Err: err}
	}
	return out, nil
}

// CreateGoal creates a goal (goal.create). With g.Tasks it commits the
// goal's first plan with it, in one record (Result.Tasks maps each key to
// its task id); without, the plan follows with SubmitPlan.
func (c *Client) CreateGoal(ctx context.Context, g schemas.CreateGoal, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "goal.create", g, opts)
}

// CancelGoal cancels a goal and every unfinished task of its plan
// (goal.cancel).
func (c *Client) CancelGoal(ctx context.Context, goalID, reason string, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "goal.cancel", schemas.CancelGoal{GoalID: goalID, Reason: reason}, opts)
}

// LabelGoal sets the labels of set on a goal (a label already there
// takes the new value) and removes the labels named in remove (goal.label),
// whatever the goal's state. A change that leaves its labels as they are
// records nothing (Result.Duplicate).
func (c *Client) LabelGoal(ctx context.Context, goalID string, set schemas.Labels, remove []string, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "goal.label", schemas.LabelGoal{GoalID: goalID, Set: set, Remove: remove}, opts)
}

// PrioritizeGoal sets a goal's priority, 1 (first) to 5 (last)
// (goal.prioritize): its tasks that give none of their own take their turn
// by it in a queue whose order is priority, those waiting at once. The
// same priority again records nothing (Result.Duplicate).
func (c *Client) PrioritizeGoal(ctx context.Context, goalID string, priority int, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "goal.prioritize", schemas.PrioritizeGoal{GoalID: goalID, Priority: priority}, opts)
}

// ShredGoal destroys the data key of a goal created with envelope privacy
// key goal (goal.shred, an admin's): its payloads, and those of the goals
// it delegated to, read "[shredded]" from then on; an open goal is
// cancelled.
func (c *Client) ShredGoal(ctx context.Context, goalID, reason string, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "goal.shred", schemas.ShredGoal{GoalID: goalID, Reason: reason}, opts)
}

// ConfigureWorkspace sets the client's workspace's retention
// (workspace.configure, an admin's): the payloads of goals ended longer
// than retainEnded ago are shredded by the service (0: kept for ever).
func (c *Client) ConfigureWorkspace(ctx context.Context, retainEnded time.Duration, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "workspace.configure", schemas.ConfigureWorkspace{RetainEnded: schemas.Duration(retainEnded)}, opts)
}

// ShredWorkspace destroys every data key of the client's workspace
// (workspace.shred, an admin's): all its payloads read "[shredded]", and it
// takes no new ones.
func (c *Client) ShredWorkspace(ctx context.Context, reason string, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "workspace.shred", schemas.ShredWorkspace{Reason: reason}, opts)
}

// SubmitPlan commits the next version of a goal's plan (plan.submit): the
// first plan, or a revision that keeps the tasks it names by key and
// cancels the unfinished ones it leaves out. Result.Tasks maps each key to
// its task id.
func (c *Client) SubmitPlan(ctx context.Context, goalID string, tasks []schemas.TaskSpec, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "plan.submit", schemas.SubmitPlan{GoalID: goalID, Tasks: tasks}, opts)
}

// CreateTask creates a standalone task, outside any plan (task.create).
func (c *Client) CreateTask(ctx context.Context, spec schemas.TaskSpec, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "task.create", schemas.CreateTask{Spec: spec}, opts)
}

// CreateTaskWith creates a standalone task from the whole of task.create's
// body: its spec, its labels, its id.
func (c *Client) CreateTaskWith(ctx context.Context, t schemas.CreateTask, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "task.create", t, opts)
}

// LabelTask sets the labels of set on a task and removes those named in
// remove (task.label), whatever its state, as LabelGoal does a goal's.
func (c *Client) LabelTask(ctx context.Context, taskID string, set schemas.Labels, remove []string, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "task.label", schemas.LabelTask{TaskID: taskID, Set: set, Remove: remove}, opts)
}

// CancelTask cancels a task that has not ended (task.cancel).
func (c *Client) CancelTask(ctx context.Context, taskID, reason string, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "task.cancel", schemas.CancelTask{TaskID: taskID, Reason: reason}, opts)
}

// RetryTask gives a failed or rejected task a new attempt, with its retry
// policy afresh (task.retry): the tasks that failed because it did not
// succeed wait for it again, and its goal, if it had failed, is open again.
func (c *Client) RetryTask(ctx context.Context, taskID, reason string, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "task.retry", schemas.RetryTask{TaskID: taskID, Reason: reason}, opts)
}

// Signal sends a named signal with a payload (encoded to JSON) to a task
// (task.signal): a task waiting on that signal resumes with it.
func (c *Client) Signal(ctx context.Context, taskID, name string, payload any, opts ...CallOption) (*Result, error) {
	b := schemas.SendSignal{TaskID: taskID, Name: name}
	if payload != nil {
		raw, err := json.Marshal(payload)
		if err != nil {
			return nil, err
		}
		b.Payload = raw
	}
	return c.do(ctx, "task.signal", b, opts)
}

// Review decides a task that awaits review (task.review).
func (c *Client) Review(ctx context.Context, r schemas.ReviewTask, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "task.review", r, opts)
}

// DecideApproval records an approver's signed decision (approval.decide).
func (c *Client) DecideApproval(ctx context.Context, d schemas.DecideApproval, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "approval.decide", d, opts)
}

// RegisterApprover registers an approver's signing key in the workspace
// (approver.register).
func (c *Client) RegisterApprover(ctx context.Context, r schemas.RegisterApprover, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "approver.register", r, opts)
}

// get sends query name for id and decodes its result into a new T.
func get[T any](ctx context.Context, c *Client, name, id string, opts []CallOption) (*T, error) {
	var v T
	if _, err := c.Query(ctx, name, schemas.Query{ID: id}, &v, opts...); err != nil {
		return nil, err
	}
	return &v, nil
}

// List pages through list query name (the last tokens of
// dwr.q.<workspace>.<name>) with q, yielding each item decoded into a new T:
// every page, following each reply's next, or as Limit, After and OnePage
// say. It is the list queries' loop, for a list the Client has no method
// for (T json.RawMessage keeps each item as the service encoded it). The
// iteration ends at the first error, which it yields.
func List[T any](ctx context.Context, c *Client, name string, q schemas.Query, opts ...CallOption) iter.Seq2[*T, error] {
	k := callOf(opts)
	if k.limit > 0 {
		q.Limit = k.limit
	}
	if k.after != "" {
		q.After = k.after
	}
	if k.newestFirst {
		q.NewestFirst = true
	}
	return func(yield func(*T, error) bool) {
		for {
			var page []*T
			r, err := c.Query(ctx, name, q, &page, opts...)
			if err != nil {
				yield(nil, err)
				return
			}
			if k.next != nil {
				*k.next = r.Next
			}
			for _, v := range page {
				if !yield(v, nil) {
					return
				}
			}
			if r.Next == "" || r.Next == q.After || k.next != nil { // a page may be empty, with a next
				return
			}
			q.After = r.Next
		}
	}
}

// Goal returns a goal with its current plan and its tasks' states
// (goal.get).
func (c *Client) Goal(ctx context.Context, id string, opts ...CallOption) (*schemas.GoalView, error) {
	return get[schemas.GoalView](ctx, c, "goal.get", id, opts)
}

// GoalByKey reads the goal made last with key (goal.create's key), open or
// ended, as Goal does; none is ErrNotFound.
func (c *Client) GoalByKey(ctx context.Context, key string, opts ...CallOption) (*schemas.GoalView, error) {
	var v schemas.GoalView
	if _, err := c.Query(ctx, "goal.get", schemas.Query{Key: key}, &v, opts...); err != nil {
		return nil, err
	}
	return &v, nil
}

// Goals lists the workspace's goals, oldest first (goal.list).
func (c *Client) Goals(ctx context.Context, opts ...CallOption) iter.Seq2[*schemas.GoalView, error] {
	return c.GoalsIn(ctx, "", opts...)
}

// GoalsIn lists the workspace's goals in state (schemas.GoalStateOpen,
// ...Achieved, ...Failed, ...Cancelled; "" for every state), oldest first
// (goal.list). A page reads a bounded number of goals of other states, so
// with OnePage it may hold fewer than its limit, even none, and a next.
func (c *Client) GoalsIn(ctx context.Context, state string, opts ...CallOption) iter.Seq2[*schemas.GoalView, error] {
	return c.GoalsWhere(ctx, GoalFilter{State: state}, opts...)
}

// GoalFilter selects the goals goal.list lists; an empty field selects
// every goal.
type GoalFilter struct {
	State    string // schemas.GoalStateOpen, ...
	Schedule string // the schedule whose slots started them
	// Labels selects the goals that hold every one of them, each with its
	// value.
	Labels schemas.Labels
}

// GoalsWhere lists the workspace's goals that f selects, oldest first
// (goal.list). A page reads a bounded number of goals f leaves out, so with
// OnePage it may hold fewer than its limit, even none, and a next.
func (c *Client) GoalsWhere(ctx context.Context, f GoalFilter, opts ...CallOption) iter.Seq2[*schemas.GoalView, error] {
	return List[schemas.GoalView](ctx, c, "goal.list", schemas.Query{State: f.State, Schedule: f.Schedule, Labels: f.Labels}, opts...)
}

// Task returns a task (task.get).
func (c *Client) Task(ctx context.Context, id string, opts ...CallOption) (*schemas.Task, error) {
	return get[schemas.Task](ctx, c, "task.get", id, opts)
}

// TaskFilter selects the tasks Tasks lists: by state, by goal, by queue
// (combined as they are given), or all.
type TaskFilter struct {
	State  string
	GoalID string
	Queue  string
	// Labels selects the tasks that hold every one of them, each with its
	// value (listed by id, through an index of the views).
	Labels schemas.Labels
}

// Tasks lists the workspace's tasks that f selects (task.list), page by
// page.
func (c *Client) Tasks(ctx context.Context, f TaskFilter, opts ...CallOption) iter.Seq2[*schemas.Task, error] {
	return List[schemas.Task](ctx, c, "task.list", schemas.Query{State: f.State, GoalID: f.GoalID, Queue: f.Queue, Labels: f.Labels}, opts...)
}

// Approval returns an approval with its task's context (approval.get).
func (c *Client) Approval(ctx context.Context, id string, opts ...CallOption) (*schemas.ApprovalView, error) {
	return get[schemas.ApprovalView](ctx, c, "approval.get", id, opts)
}

// ApprovalFilter selects the approvals Approvals lists: by state (pending
// by default, or "all") and role.
type ApprovalFilter struct {
	State string
	Role  string
}

// Approvals lists the workspace's approvals that f selects (approval.list),
// page by page: an approver's inbox.
func (c *Client) Approvals(ctx context.Context, f ApprovalFilter, opts ...CallOption) iter.Seq2[*schemas.ApprovalView, error] {
	return List[schemas.ApprovalView](ctx, c, "approval.list", schemas.Query{State: f.State, Role: f.Role}, opts...)
}

// goalEnded reports whether a goal in state has ended.
func goalEnded(state string) bool {
	switch state {
	case schemas.GoalStateAchieved, schemas.GoalStateFailed, schemas.GoalStateCancelled:
		return true
	}
	return false
}

// goalStateOf returns the state a goal event moves its goal to ("" when
// the event does not end it).
func goalStateOf(eventType string) string {
	switch eventType {
	case "goal.achieved":
		return schemas.GoalStateAchieved
	case "goal.failed":
		return schemas.GoalStateFailed
	case "goal.cancelled":
		return schemas.GoalStateCancelled
	}
	return ""
}
