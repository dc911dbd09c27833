package executors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"

	"github.com/dwr-run/dwr/schemas"
)

// What a task does when the goal it delegated to fails or is cancelled
// (Delegation.OnFailure).
const (
	DelegationFail   = schemas.DelegationFail   // fail the task (the default)
	DelegationReview = schemas.DelegationReview // put it up for a person's review
	DelegationResume = schemas.DelegationResume // run a new attempt, handed the failure
)

// ErrDelegationFailed is what Delegate returns, wrapped, for a delegation
// whose child goal failed or was cancelled (the task resumed, by a review's
// retry or on_failure resume): the *Delegated returned with it says how.
var ErrDelegationFailed = errors.New("executors: the delegated goal was not achieved")

// Delegation is work a job hands on to a child goal: the goal and its plan
// (Title and Tasks), or the goal a ritual renders (Ritual).
type Delegation struct {
	// Key names the delegation within its task: the attempt resumed after
	// the child goal ended asks for its outcome by the same key. A task
	// delegates under a key once; a later delegation needs another key.
	Key string

	Title           string
	Description     string
	SuccessCriteria []string
	// Envelope bounds the child goal's budget and queues; its queues stay
	// within those of the delegating task's goal (none given: the same).
	Envelope schemas.Envelope
	Tasks    []schemas.TaskSpec
	// Labels are the child goal's (with a Ritual, over those of its goal
	// template): what goal.list finds it by, its parent's customer say.
	Labels schemas.Labels

	// Ritual, instead of Title and Tasks, runs a ritual as the child goal.
	Ritual *RitualRun

	// OnFailure is what the task does when the child goal fails or is
	// cancelled: DelegationFail (the default), DelegationReview or
	// DelegationResume.
	OnFailure string
}

// RitualRun names a ritual version (0: the latest) and its params.
type RitualRun struct {
	Name    string
	Version uint64
	Params  any // encoded to JSON
}

// Delegated is the outcome of a delegation whose child goal ended.
type Delegated struct {
	Key    string `json:"key"`
	GoalID string `json:"goal_id"`
	// State is the child goal's end: achieved, failed or cancelled.
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	// Results are the accepted outcomes of the child goal's tasks, by
	// their plan key: every task's when the goal was achieved, those
	// accepted before it failed otherwise.
	Results map[string]Dependency `json:"results"`
}

// Achieved reports whether the child goal was achieved.
func (d *Delegated) Achieved() bool { return d != nil && d.State == schemas.GoalStateAchieved }

// delegationKey is what a delegation's key may be: the wire contract's Key.
var delegationKey = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// Delegate hands work on to a child goal that the service tracks for the
// job's task. Call it where the job needs the work done; it runs on every
// attempt:
//
//   - When the task's child goal under d.Key has ended (Job.Delegations),
//     it returns its outcome: achieved, the results of its tasks and nil;
//     failed or cancelled, the outcome and an error wrapping
//     ErrDelegationFailed.
//   - Otherwise it records the delegation (task.delegate): the child goal
//     and its plan are created, linked to the task, and it returns a
//     *WaitError. Return it from the handler: return executors.Result{},
//     err. The attempt is parked and the task waits durably, holding no
//     worker, until the child goal ends; achieved, a new attempt runs,
//     whose Delegate(d) returns the children's accepted results. Failed or
//     cancelled, the task fails, waits for a review, or resumes, as
//     d.OnFailure says. Cancelling the task cancels the child goal.
//
// Save what the next attempt needs with SaveCheckpoint before delegating.
// It returns Permanent(*CommandError) when the service refuses the
// delegation as invalid (a plan it does not take, a queue the goal does not
// permit), an error wrapping ErrCancelled or ErrLeaseLost when the attempt
// no longer holds the task, and ctx's error when ctx ends first. A job
// built by NewJob sends nothing: it returns the *WaitError with an empty
// GoalID.
func (j *Job) Delegate(ctx context.Context, d Delegation) (*Delegated, error) {
	if !delegationKey.MatchString(d.Key) {
		return nil, fmt.Errorf("executors: delegation of task %s: key %q is not valid: letters, digits, '_', '.' and '-', at most 128", j.TaskID, d.Key)
	}
	for i := range j.Delegations {
		if out := &j.Delegations[i]; out.Key == d.Key {
			if out.Achieved() {
				return out, nil
			}
			return out, fmt.Errorf("%w: delegation %q: goal %s %s: %s", ErrDelegationFailed, d.Key, out.GoalID, out.State, out.Reason)
		}
	}
	body, err := delegateBodyOf(j, d)
	if err != nil {
		return nil, fmt.Errorf("executors: delegation of task %s: %w", j.TaskID, err)
	}
	w := &WaitError{Delegation: &d}
	if j.delegate == nil {
		return nil, w
	}
	if w.GoalID, err = j.delegate(ctx, body); err != nil {
		return nil, err
	}
	return nil, w
}

// delegateFunc records a delegation for a job and returns the child goal's
// id.
type delegateFunc func(ctx context.Context, body schemas.DelegateTask) (string, error)

// delegateBodyOf returns the task.delegate that records d for j.
func delegateBodyOf(j *Job, d Delegation) (schemas.DelegateTask, error) {
	b := schemas.DelegateTask{TaskID: j.TaskID, Attempt: j.Attempt, Token: j.Token, Key: d.Key, OnFailure: d.OnFailure}
	if d.Ritual == nil {
		b.Goal = &schemas.CreateGoal{Title: d.Title, Description: d.Description, SuccessCriteria: d.SuccessCriteria,
			Envelope: d.Envelope, Labels: d.Labels, Tasks: d.Tasks}
		return b, nil
	}
	if d.Title != "" || d.Tasks != nil {
		return b, errors.New("give the child goal (Title, Tasks) or a Ritual, not both")
	}
	params, err := encodeJSON(d.Ritual.Params)
	if err != nil {
		return b, fmt.Errorf("the ritual's params do not encode to JSON: %w", err)
	}
	b.Ritual = &schemas.RunRitual{Name: d.Ritual.Name, Version: d.Ritual.Version, Params: params, Labels: d.Labels}
	return b, nil
}

// delegateCommandID is the command id of the delegation an attempt makes
// under key: the same for a retry of the same delegation. At most 160
// bytes (a task id is a 26-character ULID, a key at most 128).
func delegateCommandID(taskID string, attempt int, key string) string {
	return fmt.Sprintf("delegate.%s.%d.%s", taskID, attempt, key)
}

// delegationsOf returns the task's delegations that ended, their results
// read by read (each child task as the views show it once it has ended).
func delegationsOf(ctx context.Context, t *schemas.Task, read func(context.Context, string) (*schemas.Task, error)) ([]Delegated, error) {
	var out []Delegated
	for _, d := range t.Delegations {
		if d.State == schemas.GoalStateOpen {
			continue
		}
		dd := Delegated{Key: d.Key, GoalID: d.GoalID, State: d.State, Reason: d.Reason, Results: map[string]Dependency{}}
		for _, pt := range d.Tasks {
			ct, err := read(ctx, pt.TaskID)
			if err != nil {
				return nil, fmt.Errorf("delegation %q: task %s of goal %s: %w", d.Key, pt.TaskID, d.GoalID, err)
			}
			if dep, ok := schemas.DependencyOf(ct); ok {
				dd.Results[pt.Key] = dep
			}
		}
		out = append(out, dd)
	}
	return out, nil
}

// delegatedResult decodes a task.delegate reply's child goal id.
func delegatedResult(raw json.RawMessage) string {
	var cr schemas.CommandResult
	if json.Unmarshal(raw, &cr) != nil {
		return ""
	}
	return cr.GoalID
}
