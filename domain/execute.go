package domain

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"

	"github.com/dwr-run/dwr/schemas"
)

// Reply is what a command answers once its events are committed: the
// result of its wire reply.
type Reply = schemas.CommandResult

// Outcome is a decided command: the changes to append (reactions included, in
// order) and the reply. A command already applied to its aggregate decides to
// no changes and a reply marked Duplicate.
type Outcome struct {
	Changes []Change
	Reply   Reply
	// Refusal, when set, is the command's answer: the command was refused,
	// and Changes record the refusal (a decision on an approval that was not
	// taken is kept on record). Nothing else changed.
	Refusal *Error
}

// Execute decides cmd against w at m.Now and returns every change it causes,
// including the reactions that belong in the same commit: a plan commit
// creates its tasks, an accepted task makes its dependents ready, a task that
// ended without acceptance fails its pending dependents, and a goal whose
// plan has ended is achieved or failed. w is not modified. A refusal is an
// *Error with a code and, where it applies, the field.
func Execute(w World, cmd Command, m Meta) (*Outcome, error) {
	out, _, err := execute(w, cmd, m)
	return out, err
}

// execute is Execute; it returns the overlay on w that holds the outcome's
// changes too.
func execute(w World, cmd Command, m Meta) (*Outcome, *Overlay, error) {
	if m.Now.IsZero() {
		return nil, nil, fmt.Errorf("domain: command decided without a time")
	}
	x := &tx{o: NewOverlay(w), m: m}
	reply, err := x.decide(cmd)
	var rf *refusal
	if errors.As(err, &rf) {
		return &Outcome{Changes: x.o.Changes(), Refusal: rf.err}, x.o, nil
	}
	if err != nil {
		return nil, nil, err
	}
	if err := x.react(); err != nil {
		return nil, nil, err
	}
	if err := x.handoff(cmd, &reply); err != nil {
		return nil, nil, err
	}
	return &Outcome{Changes: x.o.Changes(), Reply: reply}, x.o, nil
}

type tx struct {
	o *Overlay
	m Meta
}

func (x *tx) decide(cmd Command) (Reply, error) {
	if _, ok := cmd.(*CreateWorkspace); !ok {
		if err := x.requireWorkspace(); err != nil {
			return Reply{}, err
		}
	}
	if err := x.mayWork(cmd); err != nil {
		return Reply{}, err
	}
	switch c := cmd.(type) {
	case *CreateWorkspace:
		return x.createWorkspace(c)
	case *CreateGoal:
		return x.createGoal(c)
	case *CancelGoal:
		return x.cancelGoal(c)
	case *SubmitPlan:
		return x.submitPlan(c)
	case *CreateTask:
		return x.createTask(c)
	case *CancelTask:
		return x.cancelTask(c)
	case *RetryTask:
		return x.retryTask(c)
	case *ClaimTask:
		return x.claimTask(c)
	case *SaveCheckpoint:
		return x.saveCheckpoint(c)
	case *ReportSuccess:
		return x.reportSuccess(c)
	case *ReportFailure:
		return x.reportFailure(c)
	case *Heartbeat:
		return x.heartbeat(c)
	case *RecordVerification:
		return x.recordVerification(c)
	case *ReviewTask:
		return x.reviewTask(c)
	case *DecideApproval:
		return x.decideApproval(c)
	case *RegisterApprover:
		return x.registerApprover(c)
	case *RevokeApprover:
		return x.revokeApprover(c)
	case *AddMember:
		return x.addMember(c)
	case *RemoveMember:
		return x.removeMember(c)
	case *ConfigureQueue:
		return x.configureQueue(c)
	case *DeleteQueue:
		return x.deleteQueue(c)
	case *LabelGoal:
		return x.labelGoal(c)
	case *PrioritizeGoal:
		return x.prioritizeGoal(c)
	case *LabelTask:
		return x.labelTask(c)
	case *PauseQueue:
		return x.pauseQueue(c.Queue, true)
	case *ResumeQueue:
		return x.pauseQueue(c.Queue, false)
	case *RequestApproval:
		return x.requestApproval(c)
	case *WaitTask:
		return x.waitTask(c)
	case *SendSignal:
		return x.sendSignal(c)
	case *DelegateTask:
		return x.delegateTask(c)
	case *ShredGoal:
		return x.shredGoal(c)
	case *ShredWorkspace:
		return x.shredWorkspace(c)
	case *ConfigureWorkspace:
		return x.configureWorkspace(c)
	case *FireTimer:
		return x.fireTimer(c)
	case *QuarantineTask:
		return x.quarantineTask(c)
	case *DefineRitual:
		return x.defineRitual(c)
	case *RunRitual:
		return x.runRitual(c)
	case *CreateSchedule:
		return x.createSchedule(c)
	case *PauseSchedule:
		return x.pauseSchedule(c)
	case *ResumeSchedule:
		return x.resumeSchedule(c)
	case *DeleteSchedule:
		return x.deleteSchedule(c)
	}
	return Reply{}, invalid("", "unknown command %T", cmd)
}

func (x *tx) rec() Recorded {
	return Recorded{CommandID: x.m.CommandID, Actor: x.m.Actor, Time: x.m.Now}
}

// emit applies e to its aggregate in the overlay, at the next version.
func (x *tx) emit(id string, e Event) error {
	return x.o.Apply(Change{AggregateType: e.AggregateType(), AggregateID: id, Workspace: x.m.Workspace, Event: e}, x.rec())
}

// emitAll emits es to aggregate id, in order.
func (x *tx) emitAll(id string, es ...Event) error {
	for _, e := range es {
		if err := x.emit(id, e); err != nil {
			return err
		}
	}
	return nil
}

func (x *tx) requireWorkspace() error {
	w, err := x.o.Workspace(x.m.Workspace)
	if err != nil {
		return err
	}
	if w == nil {
		return notFound("", "workspace %q does not exist: create it first (dwr workspace create %s)", x.m.Workspace, x.m.Workspace)
	}
	return nil
}

// goal returns the goal id of this workspace, or not_found naming field.
func (x *tx) goal(id, field string) (*Goal, error) {
	g, err := x.o.Goal(id)
	if err != nil {
		return nil, err
	}
	if g == nil || g.Workspace != x.m.Workspace {
		return nil, notFound(field, "goal %q not found in workspace %q", id, x.m.Workspace)
	}
	return g, nil
}

// commandTask returns task id of this workspace (or not_found naming
// /task_id) and whether this command was applied to it already.
func (x *tx) commandTask(id string) (t *Task, dup bool, err error) {
	t, err = x.task(id, "/task_id")
	if err != nil {
		return nil, false, err
	}
	return t, t.HasCommand(x.m.Key()), nil
}

// commandGoal returns goal id of this workspace and whether this command
// was applied to it already, as commandTask does a task.
func (x *tx) commandGoal(id string) (g *Goal, dup bool, err error) {
	g, err = x.goal(id, "/goal_id")
	if err != nil {
		return nil, false, err
	}
	return g, g.HasCommand(x.m.Key()), nil
}

// duplicateGoalOr returns err, or when there is none the duplicate reply
// for g.
func duplicateGoalOr(g *Goal, err error) (Reply, error) {
	if err != nil {
		return Reply{}, err
	}
	return duplicateGoal(g), nil
}

// commandWorkspace returns this workspace and whether this command was
// applied to it already. Every command but workspace.create runs in a
// workspace that exists (requireWorkspace).
func (x *tx) commandWorkspace() (w *Workspace, dup bool, err error) {
	w, err = x.o.Workspace(x.m.Workspace)
	if err != nil {
		return nil, false, err
	}
	return w, w.HasCommand(x.m.Key()), nil
}

// task returns the task id of this workspace, or not_found naming field.
func (x *tx) task(id, field string) (*Task, error) {
	t, err := x.o.Task(id)
	if err != nil {
		return nil, err
	}
	if t == nil || t.Workspace != x.m.Workspace {
		return nil, notFound(field, "task %q not found in workspace %q", id, x.m.Workspace)
	}
	return t, nil
}

func taskReply(t *Task) Reply {
	r := Reply{ID: t.ID, State: t.State, Version: t.Version}
	if a := t.Current(); a != nil {
		r.Attempt = a.N
	}
	return r
}

func goalReply(g *Goal) Reply {
	return Reply{ID: g.ID, State: g.State, Version: g.Version, PlanVersion: g.PlanVersion}
}

func duplicateTask(t *Task) Reply { r := taskReply(t); r.Duplicate = true; return r }

func duplicateGoal(g *Goal) Reply { r := goalReply(g); r.Duplicate = true; return r }

func workspaceReply(w *Workspace, dup bool) Reply {
	return Reply{ID: w.Name, Version: w.Version, Duplicate: dup}
}

// duplicateWorkspaceOr returns err, or when there is none the duplicate reply
// for w.
func duplicateWorkspaceOr(w *Workspace, err error) (Reply, error) {
	if err != nil {
		return Reply{}, err
	}
	return workspaceReply(w, true), nil
}

// duplicateOr returns err, or when there is none the duplicate reply for t.
func duplicateOr(t *Task, err error) (Reply, error) {
	if err != nil {
		return Reply{}, err
	}
	return duplicateTask(t), nil
}

// after returns the reply for task id as the overlay now has it.
func (x *tx) after(id string) (Reply, error) {
	t, err := x.o.Task(id)
	if err != nil {
		return Reply{}, err
	}
	return taskReply(t), nil
}

// emitReply emits es to task id and returns the task's reply as it then
// is.
func (x *tx) emitReply(id string, es ...Event) (Reply, error) {
	if err := x.emitAll(id, es...); err != nil {
		return Reply{}, err
	}
	return x.after(id)
}

// emitWorkspace emits e to workspace w and returns the workspace's reply as
// it then is.
func (x *tx) emitWorkspace(w *Workspace, e Event) (Reply, error) {
	if err := x.emit(w.Name, e); err != nil {
		return Reply{}, err
	}
	w, _ = x.o.Workspace(w.Name)
	return workspaceReply(w, false), nil
}

// endPlan ends every task of g's plan that has not ended, dependents first,
// with the event end returns.
func (x *tx) endPlan(g *Goal, end func() Event) error {
	for _, pt := range slices.Backward(g.Plan) {
		t, err := x.o.Task(pt.TaskID)
		if err != nil {
			return err
		}
		if t != nil && !Terminal(t.State) {
			if err := x.emit(t.ID, end()); err != nil {
				return err
			}
		}
	}
	return nil
}

// gate returns the event that moves a task whose dependencies are met: to
// waiting on its approval gate or its start time, or to ready.
func (x *tx) gate(t *Task, reason string) (Event, error) {
	if t.Spec.Approval != nil && !t.Approved {
		return newApproval(t, 0, gateRequest(t), true, x.m.Now)
	}
	if t.Spec.StartAt != nil && t.Spec.StartAt.After(x.m.Now) {
		at := *t.Spec.StartAt
		return &TaskWaiting{Kind: WaitTimer, Until: &at}, nil
	}
	return &TaskReady{Reason: reason}, nil
}

// create emits a new task's creation, in the state its gate says when its
// dependencies are met: ready, waiting on its start time, or waiting on its
// approval, which is requested in the same commit.
func (x *tx) create(id string, created *TaskCreated, depsOpen bool) error {
	created.State = StatePending
	if !depsOpen {
		probe := &Task{ID: id, Spec: created.Spec, CreatedBy: x.m.Actor} // as ApplyTask makes it
		ev, err := x.gate(probe, "")
		if err != nil {
			return err
		}
		switch ev := ev.(type) {
		case *TaskReady:
			created.State = StateReady
		case *TaskWaiting:
			created.State, created.WaitKind, created.WaitUntil = StateWaiting, ev.Kind, ev.Until
		case *ApprovalRequested:
			created.State, created.WaitKind = StateWaiting, WaitApproval
			if err := x.emit(id, created); err != nil {
				return err
			}
			return x.emit(id, ev)
		}
	}
	return x.emit(id, created)
}

// spent counts the attempts that used up the retry budget: failed, abandoned,
// and succeeded but failed verification, since the task was last retried.
func spent(t *Task) int {
	n := 0
	if t.Earlier != nil {
		n = t.Earlier.Spent
	}
	for i := range t.Attempts {
		if a := &t.Attempts[i]; a.N > t.RetriedAfter && usedBudget(t, a) {
			n++
		}
	}
	return n
}

// usedBudget reports whether attempt a of t used up its retry budget: it
// failed, was abandoned, or succeeded and failed verification.
func usedBudget(t *Task, a *Attempt) bool {
	switch a.State {
	case AttemptStateFailed, AttemptStateAbandoned:
		return true
	case AttemptStateSucceeded:
		return slices.ContainsFunc(t.Verifications, func(v Verification) bool { return v.Attempt == a.N && v.Outcome == OutcomeFail })
	}
	return false
}

// ResultDigest returns the digest a verification names the result it judged
// by: "sha256:" and the hex SHA-256 of the result's JSON as the attempt
// reported it.
func ResultDigest(result []byte) string {
	h := sha256.Sum256(result)
	return "sha256:" + hex.EncodeToString(h[:])
}

// VerificationID returns the replay-safe identity of a verification: the
// task, the attempt, the digest of the result, and the verifier's name and
// version.
func VerificationID(taskID string, attempt int, resultDigest, verifier, version string) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d\x00%s\x00%s\x00%s", taskID, attempt, resultDigest, verifier, version)))
	return hex.EncodeToString(h[:16])
}

// react decides the reactions to the changes made so far, including to the
// reactions themselves, until none are left.
func (x *tx) react() error {
	for i := 0; i < len(x.o.Changes()); i++ {
		c := x.o.Changes()[i]
		if c.AggregateType == AggGoal {
			switch c.Event.(type) {
			case *GoalAchieved, *GoalFailed, *GoalCancelled:
				if err := x.onGoalEnded(c.AggregateID); err != nil {
					return err
				}
				if err := x.onScheduledGoalEnded(c.AggregateID); err != nil {
					return err
				}
			}
			continue
		}
		if c.AggregateType != AggTask {
			continue
		}
		switch c.Event.(type) {
		case *TaskAccepted:
			if err := x.onAccepted(c.AggregateID); err != nil {
				return err
			}
		case *TaskRejected, *TaskFailed, *TaskCancelled:
			if err := x.onEnded(c.AggregateID); err != nil {
				return err
			}
		}
	}
	return nil
}

// forPendingDependents calls f with each task that depends on task id and is
// pending when its turn comes.
func (x *tx) forPendingDependents(id string, f func(d string, t *Task) error) error {
	return x.forDependentsIn(id, StatePending, f)
}

// errEnough ends a walk of forDependentsIn early, without an error.
var errEnough = errors.New("domain: enough")

// forDependentsIn calls f with each task that depends on task id and is in
// state when its turn comes, until f returns errEnough (the walk ends
// without an error) or another error (returned).
func (x *tx) forDependentsIn(id, state string, f func(d string, t *Task) error) error {
	deps, err := x.o.Dependents(id)
	if err != nil {
		return err
	}
	for _, d := range deps {
		t, err := x.o.Task(d)
		if err != nil {
			return err
		}
		if t == nil || t.State != state {
			continue
		}
		if err := f(d, t); errors.Is(err, errEnough) {
			return nil
		} else if err != nil {
			return err
		}
	}
	return nil
}

func (x *tx) onAccepted(id string) error {
	err := x.forPendingDependents(id, func(d string, t *Task) error {
		for _, dep := range t.DependsOn {
			dt, err := x.o.Task(dep)
			if err != nil {
				return err
			}
			if dt == nil || dt.State != StateAccepted {
				return nil
			}
		}
		ev, err := x.gate(t, "dependencies_accepted")
		if err != nil {
			return err
		}
		return x.emit(d, ev)
	})
	if err != nil {
		return err
	}
	return x.checkGoalOf(id)
}

func (x *tx) onEnded(id string) error {
	err := x.forPendingDependents(id, func(d string, _ *Task) error {
		return x.emit(d, &TaskFailed{Reason: ReasonDependencyFailed,
			Error: &ErrorInfo{Code: ReasonDependencyFailed, Message: "dependency " + id + " did not succeed"}})
	})
	if err == nil {
		err = x.releaseBudgetWaiters(id)
	}
	if err == nil {
		err = x.cancelDelegations(id)
	}
	if err != nil {
		return err
	}
	return x.checkGoalOf(id)
}

// releaseBudgetWaiters makes ready again the tasks that waited on the budget
// approval of task id, which ended before anyone decided it: each asks
// anew at its next claim if the budget still stops it.
func (x *tx) releaseBudgetWaiters(id string) error {
	t, err := x.o.Task(id)
	if err != nil || t == nil || t.GoalID == "" {
		return err
	}
	return x.budgetWaiters(t.GoalID, func(approvalID string) bool {
		owner, _, ok := ParseApprovalID(approvalID)
		return ok && owner == id
	}, func() Event { return &TaskReady{Reason: "budget approval withdrawn"} })
}

// checkGoalOf ends the goal of task id when every task of its current plan
// has ended: achieved when all were accepted, failed otherwise.
func (x *tx) checkGoalOf(id string) error {
	t, err := x.o.Task(id)
	if err != nil || t == nil || t.GoalID == "" {
		return err
	}
	return x.checkGoal(t.GoalID)
}

// checkGoal ends goal id if it is open and every task of its current plan has
// ended.
func (x *tx) checkGoal(id string) error {
	g, err := x.o.Goal(id)
	if err != nil || g == nil || g.State != GoalStateOpen || len(g.Plan) == 0 {
		return err
	}
	allAccepted := true
	var notAccepted string
	for _, pt := range g.Plan {
		pt, err := x.o.Task(pt.TaskID)
		if err != nil {
			return err
		}
		if pt == nil || !Terminal(pt.State) {
			return nil
		}
		if pt.State != StateAccepted && allAccepted {
			allAccepted = false
			notAccepted = fmt.Sprintf("task %s (%s) ended %s", pt.Key, pt.ID, pt.State)
		}
	}
	if allAccepted {
		return x.emit(g.ID, &GoalAchieved{})
	}
	return x.emit(g.ID, &GoalFailed{Reason: notAccepted})
}

// mayWork refuses an executor's command for a task, or a queue, that is not
// on one of its queues (Meta.Executor), judged on the state the command is
// decided on: a check made before the command reached the writer could see
// views that did not yet hold the task. A task not found is left to the
// command, which says so.
func (x *tx) mayWork(cmd Command) error {
	if !x.m.Executor {
		return nil
	}
	taskID, queue, ok := ExecutorTarget(cmd)
	if !ok {
		return &Error{Code: CodeForbidden, Message: fmt.Sprintf("an executor may not send %s", cmd.CommandName())}
	}
	if taskID != "" {
		t, err := x.o.Task(taskID)
		if err != nil || t == nil || t.Workspace != x.m.Workspace {
			return err
		}
		queue = WorkQueue(t, cmd)
	}
	if !slices.Contains(x.m.Queues, queue) {
		return &Error{Code: CodeForbidden, Message: fmt.Sprintf("%s may not work queue %q: its queues are %v", x.m.Actor, queue, x.m.Queues)}
	}
	return nil
}

// ExecutorTarget returns what an executor's command cmd is for: its task,
// or (queue.configure) a queue; false for a command executors do not send.
func ExecutorTarget(cmd Command) (taskID, queue string, ok bool) {
	switch c := cmd.(type) {
	case *ClaimTask:
		return c.TaskID, "", true
	case *SaveCheckpoint:
		return c.TaskID, "", true
	case *Heartbeat:
		return c.TaskID, "", true
	case *ReportSuccess:
		return c.TaskID, "", true
	case *ReportFailure:
		return c.TaskID, "", true
	case *WaitTask:
		return c.TaskID, "", true
	case *DelegateTask:
		return c.TaskID, "", true
	case *RequestApproval:
		return c.TaskID, "", true
	case *RecordVerification:
		return c.TaskID, "", true
	case *ConfigureQueue:
		return "", c.Queue, true
	}
	return "", "", false
}

// WorkQueue returns the queue whose executors may send cmd for task t: its
// verification queue for a verdict, else its queue.
func WorkQueue(t *Task, cmd Command) string {
	if _, ok := cmd.(*RecordVerification); ok && t.Spec.Verification != nil {
		return t.Spec.Verification.Queue
	}
	return t.Spec.Queue
}
