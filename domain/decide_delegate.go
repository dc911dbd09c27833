package domain

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/dwr-run/dwr/schemas"
)

// Bounds of delegation: how deep child goals nest, and how many a task may
// delegate over its life (each is kept in its state).
const (
	MaxDelegationDepth = 8
	MaxDelegations     = 32
)

// What a task does when the goal it delegated to fails or is cancelled
// (DelegateTask.OnFailure).
const (
	DelegationFail   = schemas.DelegationFail
	DelegationReview = schemas.DelegationReview
	DelegationResume = schemas.DelegationResume
)

// delegateTask creates the child goal a running attempt hands work on to,
// linked both ways (goal.created names the task, task.delegated the goal),
// and parks the attempt until the goal ends.
func (x *tx) delegateTask(c *DelegateTask) (Reply, error) {
	t, dup, err := x.holder(c.TaskID, c.Attempt, c.Token)
	if err != nil {
		return Reply{}, err
	}
	if dup {
		r := duplicateTask(t)
		if d := t.Delegation(c.Key); d != nil {
			r.GoalID = d.GoalID
		}
		return r, nil
	}
	onFailure := c.OnFailure
	if onFailure == "" {
		onFailure = DelegationFail
	}
	switch {
	case !ValidKey(c.Key):
		return Reply{}, invalid("/key", "delegation key %q is not valid", c.Key)
	case !slices.Contains([]string{DelegationFail, DelegationReview, DelegationResume}, onFailure):
		return Reply{}, invalid("/on_failure", "%q is not one of fail, review, resume", c.OnFailure)
	case (c.Goal == nil) == (c.Ritual == nil):
		return Reply{}, invalid("", "give the child goal with its plan (goal) or a ritual to run (ritual), one of the two")
	case c.Goal != nil && len(c.Goal.Tasks) == 0:
		return Reply{}, invalid("/goal/tasks", "a delegated goal needs its plan: at least one task")
	case c.Goal != nil && c.Goal.IfOpen == schemas.GoalIfOpenUse:
		return Reply{}, invalid("/goal/if_open", "a delegation makes a child goal of its own: it does not take another open goal that holds the key")
	case c.Ritual != nil && c.Ritual.IfOpen == schemas.GoalIfOpenUse:
		return Reply{}, invalid("/ritual/if_open", "a delegation makes a child goal of its own: it does not take another open goal that holds the key")
	}
	if d := t.Delegation(c.Key); d != nil {
		return Reply{}, &Error{Code: CodeConflict, Field: "/key", Message: fmt.Sprintf(
			"task %s delegated %q already (goal %s, %s): an attempt reads that delegation's outcome; delegate under another key",
			t.ID, c.Key, d.GoalID, d.State)}
	}
	if len(t.Delegations) >= MaxDelegations {
		return Reply{}, conflict("task %s has delegated %d times, the most a task may", t.ID, MaxDelegations)
	}
	origin := goalOrigin{parent: &ParentRef{TaskID: t.ID, GoalID: t.GoalID, Key: c.Key, Depth: 1}, priority: t.Spec.Priority}
	if t.GoalID != "" {
		g, err := x.o.Goal(t.GoalID)
		if err != nil {
			return Reply{}, err
		}
		if g != nil {
			origin.within = &g.Envelope
			origin.priority = cmp.Or(origin.priority, g.Priority)
			if g.Parent != nil {
				origin.parent.Depth = g.Parent.Depth + 1
			}
		}
	}
	if origin.parent.Depth > MaxDelegationDepth {
		return Reply{}, conflict("task %s is %d delegations deep already: a delegated goal may be at most %d deep",
			t.ID, origin.parent.Depth-1, MaxDelegationDepth)
	}
	var child Reply
	if c.Goal != nil {
		cg := *c.Goal
		child, err = x.createGoalFrom(&cg, origin)
		err = under("/goal", err)
	} else {
		child, err = x.runRitualFrom(c.Ritual, origin)
		err = under("/ritual", err)
	}
	if err != nil {
		return Reply{}, err
	}
	if child.Duplicate {
		// The goal id is taken (createGoalFrom found this command on it,
		// which only a goal made by this very command could have).
		return Reply{}, &Error{Code: CodeConflict, Field: "/goal/goal_id", Message: fmt.Sprintf("goal %s exists already", child.ID)}
	}
	r, err := x.emitReply(t.ID, &TaskDelegated{Key: c.Key, GoalID: child.ID, Attempt: c.Attempt, OnFailure: onFailure})
	r.GoalID = child.ID
	return r, err
}

// under returns err with the field it names moved under prefix: a
// refusal of the child goal's body, as a field of task.delegate. A field
// that points into a ritual's templates (/ritual/...) stays as it is.
func under(prefix string, err error) error {
	var de *Error
	if !errors.As(err, &de) {
		return err
	}
	out := *de
	if !strings.HasPrefix(out.Field, "/ritual/") {
		out.Field = prefix + out.Field
	}
	return &out
}

// narrowPermissions keeps the queues of env within those of the envelope
// within (nil: no bound): a goal that names none takes within's, and one
// that names a queue within does not permit is refused.
func narrowPermissions(env, within *Envelope) error {
	if within == nil || len(within.Permissions.Queues) == 0 {
		return nil
	}
	if len(env.Permissions.Queues) == 0 {
		env.Permissions.Queues = slices.Clone(within.Permissions.Queues)
		return nil
	}
	for i, q := range env.Permissions.Queues {
		if !slices.Contains(within.Permissions.Queues, q) {
			return &Error{Code: CodeForbidden, Field: fmt.Sprintf("/envelope/permissions/queues/%d", i), Message: fmt.Sprintf(
				"queue %q is not permitted by the delegating task's goal (permitted: %v)", q, within.Permissions.Queues)}
		}
	}
	return nil
}

// onGoalEnded records the end of goal id on the task that delegated it,
// if any, and moves that task as the delegation says: ready when the goal
// was achieved; else failed, up for review or ready, by its OnFailure. A
// task that no longer waits on the goal (it ended) only records it.
func (x *tx) onGoalEnded(id string) error {
	g, err := x.o.Goal(id)
	if err != nil || g == nil || g.Parent == nil {
		return err
	}
	t, err := x.o.Task(g.Parent.TaskID)
	if err != nil || t == nil {
		return err
	}
	d := t.Delegation(g.Parent.Key)
	if d == nil || d.GoalID != g.ID || d.State != GoalStateOpen {
		return nil // ended before, and reopened by a revision since
	}
	ended := &TaskDelegationEnded{Key: d.Key, GoalID: g.ID, State: g.State, Reason: g.Reason, Tasks: slices.Clone(g.Plan)}
	if t.State != StateWaiting || t.Wait == nil || t.Wait.Kind != WaitDelegation || t.Wait.GoalID != g.ID {
		return x.emit(t.ID, ended)
	}
	if g.State == GoalStateAchieved {
		return x.emitAll(t.ID, ended, &TaskReady{Reason: "delegation_achieved"})
	}
	why := fmt.Sprintf("delegation %q: goal %s %s", d.Key, g.ID, g.State)
	if g.Reason != "" {
		why += ": " + g.Reason
	}
	why = clip(why, MaxReason)
	switch d.OnFailure {
	case DelegationReview:
		return x.emitAll(t.ID, ended, &TaskReviewRequested{Reason: why})
	case DelegationResume:
		return x.emitAll(t.ID, ended, &TaskReady{Reason: ReasonDelegation})
	}
	return x.emitAll(t.ID, ended, &TaskFailed{Reason: ReasonDelegation, Error: &ErrorInfo{Code: ReasonDelegation, Message: why}})
}

// cancelDelegations cancels the open child goals of task id, which ended:
// each with its unfinished tasks, whose own child goals follow in turn.
func (x *tx) cancelDelegations(id string) error {
	t, err := x.o.Task(id)
	if err != nil || t == nil {
		return err
	}
	for _, d := range t.Delegations {
		if d.State != GoalStateOpen {
			continue
		}
		g, err := x.o.Goal(d.GoalID)
		if err != nil {
			return err
		}
		if g == nil || g.State != GoalStateOpen {
			continue
		}
		reason := fmt.Sprintf("%s: task %s, which delegated it, ended %s", ReasonParentEnded, t.ID, t.State)
		if err := x.emit(g.ID, &GoalCancelled{Reason: reason}); err != nil {
			return err
		}
		if err := x.endPlan(g, func() Event { return &TaskCancelled{Reason: ReasonGoalCancelled} }); err != nil {
			return err
		}
	}
	return nil
}
