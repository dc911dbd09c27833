package domain

import (
	"fmt"
	"slices"
	"time"

	"github.com/dwr-run/dwr/schemas"
)

// Workspace is the state of a workspace aggregate: wire data, defined in
// schemas with its methods (Clone, HasCommand, Member, Approver, Queue).
type Workspace = schemas.Workspace

// The states of goals and tasks are wire data, defined once in schemas.
type (
	// Goal is the state of a goal aggregate, its plan included.
	Goal = schemas.Goal
	// Task is the state of a task aggregate with its attempts.
	Task = schemas.Task
	// Attempt is one execution of a task (a WorkExecution).
	Attempt = schemas.Attempt
	// Wait is what a waiting task waits on (the task.waiting event is
	// TaskWaiting).
	Wait = schemas.Wait
	// Verification is a verifier's recorded outcome, as a task keeps it
	// (the event is VerificationRecorded).
	Verification = schemas.Verification
	// Signal is the last signal a task received, as the task keeps it (the
	// event is SignalReceived).
	Signal = schemas.Signal
	// Versioned is what a goal or a task keeps of the events applied to it.
	Versioned = schemas.Versioned
)

// Attempt states.
const (
	AttemptStateRunning   = schemas.AttemptStateRunning
	AttemptStateSucceeded = schemas.AttemptStateSucceeded
	AttemptStateFailed    = schemas.AttemptStateFailed
	AttemptStateAbandoned = schemas.AttemptStateAbandoned
	AttemptStateParked    = schemas.AttemptStateParked
	AttemptStateCancelled = schemas.AttemptStateCancelled
)

// retryOf returns the task's retry policy with defaults filled in.
func retryOf(t *Task) RetryPolicy {
	if t.Spec.Retry == nil {
		return RetryWithDefaults(RetryPolicy{})
	}
	return RetryWithDefaults(*t.Spec.Retry)
}

// OperationKey returns the key a task's side effects are made under: stable
// across every attempt of the task.
func OperationKey(taskID string) string { return "op-" + taskID }

// Recorded is what the log adds to an event: the command it came from, who
// sent it, and the time it was decided.
type Recorded struct {
	CommandID string
	Actor     string
	Time      time.Time
}

// Key returns the idempotency key of the command the event came from.
func (r Recorded) Key() string { return CommandKey(r.Actor, r.CommandID) }

// An aggregate remembers the ids of the commands applied to it, to answer
// a command sent again as a duplicate — the recent ones only: at most
// maxCommands, and when there would be more, the last keepCommands. A
// long-running task checkpointing every few seconds would otherwise carry
// every id it ever applied, read and rewritten with each event (at 8,000
// checkpoints each cost 2.3× the first). The service answers an older
// command sent again from its stored outcome before it is decided
// (handlers' writer: the views keep every command's outcome), so a
// duplicate is never decided twice.
const (
	maxCommands  = 256
	keepCommands = 128
)

func addCommand(cmds []string, key string) []string {
	if key == "" || slices.Contains(cmds, key) {
		return cmds
	}
	if len(cmds) >= maxCommands {
		// A new array: the old one may be shared with an earlier state.
		cmds = append(make([]string, 0, maxCommands), cmds[len(cmds)-keepCommands+1:]...)
	}
	return append(cmds, key)
}

// created returns what a goal or a task keeps of the event r recorded,
// which created it.
func created(r Recorded) Versioned {
	return Versioned{CreatedAt: r.Time, UpdatedAt: r.Time, Version: 1, Commands: addCommand(nil, r.Key())}
}

// applied adds the event r recorded to what a goal or a task keeps of its
// events.
func applied(v *Versioned, r Recorded) {
	v.Version++
	v.UpdatedAt = r.Time
	v.Commands = addCommand(v.Commands, r.Key())
}

// ApplyWorkspace applies e to w (nil before the first event) and returns the
// new state.
func ApplyWorkspace(w *Workspace, id string, e Event, r Recorded) (*Workspace, error) {
	switch ev := e.(type) {
	case *WorkspaceCreated:
		if w != nil {
			return nil, fmt.Errorf("domain: workspace %s created twice", id)
		}
		return &Workspace{Name: ev.Name, Description: ev.Description, CreatedAt: r.Time, Version: 1,
			Commands: addCommand(nil, r.Key())}, nil
	}
	if w == nil {
		return nil, fmt.Errorf("domain: %s before workspace %s was created", e.EventType(), id)
	}
	w = w.Clone()
	switch ev := e.(type) {
	case *ApproverRegistered:
		a := Approver{Name: ev.Name, Role: ev.Role, PublicKey: ev.PublicKey, KeyID: ev.KeyID, RegisteredAt: r.Time}
		if ev.ExpiresAt != nil {
			at := *ev.ExpiresAt
			a.ExpiresAt = &at
		}
		if i := slices.IndexFunc(w.Approvers, func(x Approver) bool { return x.Name == ev.Name }); i >= 0 {
			w.Approvers[i] = a
		} else {
			w.Approvers = append(w.Approvers, a)
		}
	case *ApproverRevoked:
		a := w.Approver(ev.Name)
		if a == nil {
			return nil, fmt.Errorf("domain: workspace %s: approver %q revoked but never registered", id, ev.Name)
		}
		at := r.Time
		a.RevokedAt = &at
	case *MemberAdded:
		m := Member{Name: ev.Name, Role: ev.Role, PublicKey: ev.PublicKey, Queues: slices.Clone(ev.Queues), AddedAt: r.Time}
		if i := slices.IndexFunc(w.Members, func(x Member) bool { return x.Name == ev.Name }); i >= 0 {
			w.Members[i] = m
		} else {
			w.Members = append(w.Members, m)
		}
	case *MemberRemoved:
		if w.Member(ev.Name) == nil {
			return nil, fmt.Errorf("domain: workspace %s: member %q removed but never added", id, ev.Name)
		}
		w.Members = slices.DeleteFunc(w.Members, func(x Member) bool { return x.Name == ev.Name })
		if len(w.Members) == 0 {
			w.Members = nil
		}
	case *WorkspaceShredded:
		w.Shredded = true
	case *WorkspaceConfigured:
		w.RetainEnded = ev.RetainEnded
	case *QueueConfigured:
		q := QueueConfig{Name: ev.Queue, LeaseMS: ev.LeaseMS, MaxDeliver: ev.MaxDeliver, MaxRunning: ev.MaxRunning,
			RateLimit: ev.RateLimit, RatePeriodMS: ev.RatePeriodMS, Order: ev.Order}
		if i := slices.IndexFunc(w.Queues, func(x QueueConfig) bool { return x.Name == ev.Queue }); i >= 0 {
			q.Paused = w.Queues[i].Paused // a pause outlasts new settings
			w.Queues[i] = q
		} else {
			w.Queues = append(w.Queues, q)
		}
	case *QueuePaused:
		if i := slices.IndexFunc(w.Queues, func(x QueueConfig) bool { return x.Name == ev.Queue }); i >= 0 {
			w.Queues[i].Paused = true
		} else {
			w.Queues = append(w.Queues, QueueConfig{Name: ev.Queue, LeaseMS: DefaultLeaseMS, MaxDeliver: DefaultMaxDeliver,
				Paused: true, DefaultSettings: true})
		}
	case *QueueResumed:
		i := slices.IndexFunc(w.Queues, func(x QueueConfig) bool { return x.Name == ev.Queue })
		if i < 0 {
			return nil, fmt.Errorf("domain: workspace %s: queue %q resumed but never paused", id, ev.Queue)
		}
		w.Queues[i].Paused = false
	case *QueueDeleted:
		w.Queues = slices.DeleteFunc(w.Queues, func(x QueueConfig) bool { return x.Name == ev.Queue })
		if len(w.Queues) == 0 {
			w.Queues = nil
		}
	default:
		return nil, fmt.Errorf("domain: workspace cannot apply %s", e.EventType())
	}
	w.Version++
	w.Commands = addCommand(w.Commands, r.Key())
	return w, nil
}

// ApplyGoal applies e to g (nil before the first event) and returns the new
// state; g itself is not modified.
func ApplyGoal(g *Goal, id, workspace string, e Event, r Recorded) (*Goal, error) {
	if ev, ok := e.(*GoalCreated); ok {
		if g != nil {
			return nil, fmt.Errorf("domain: goal %s created twice", id)
		}
		return &Goal{ID: id, Workspace: workspace, Title: ev.Title, Description: ev.Description,
			SuccessCriteria: ev.SuccessCriteria, Envelope: ev.Envelope, Labels: ev.Labels, Priority: ev.Priority, Key: ev.Key, Ritual: ev.Ritual, Schedule: ev.Schedule, Parent: ev.Parent,
			State: GoalStateOpen, Versioned: created(r)}, nil
	}
	if g == nil {
		return nil, fmt.Errorf("domain: %s before goal %s was created", e.EventType(), id)
	}
	g = g.Clone()
	switch ev := e.(type) {
	case *PlanCommitted:
		if r := ev.RetiredSpend; r != nil {
			sp := *r
			if g.RetiredSpend != nil {
				sp.Add(*g.RetiredSpend)
			}
			g.RetiredSpend = &sp
		} else {
			for _, pt := range g.Plan {
				if !slices.ContainsFunc(ev.Tasks, func(n PlanTask) bool { return n.TaskID == pt.TaskID }) {
					g.RetiredTasks = append(g.RetiredTasks, pt.TaskID)
				}
			}
		}
		g.PlanVersion = ev.Version
		g.Plan = ev.Tasks
		if g.State == GoalStateFailed { // a revision reopens a failed goal
			g.State, g.Reason = GoalStateOpen, ""
		}
	case *GoalBudgetExtended:
		g.Envelope.Budget = ev.Budget
	case *GoalShredded:
		g.Shredded = true
	case *GoalAchieved:
		g.State = GoalStateAchieved
	case *GoalFailed:
		g.State, g.Reason = GoalStateFailed, ev.Reason
	case *GoalReopened:
		g.State, g.Reason = GoalStateOpen, ""
	case *GoalCancelled:
		g.State, g.Reason = GoalStateCancelled, ev.Reason
	case *GoalLabeled:
		g.Labels = ev.Labels
	case *GoalPrioritized:
		g.Priority = ev.Priority
	default:
		return nil, fmt.Errorf("domain: goal cannot apply %s", e.EventType())
	}
	applied(&g.Versioned, r)
	return g, nil
}

// ApplyTask applies e to t (nil before the first event) and returns the new
// state; t itself is not modified.
func ApplyTask(t *Task, id, workspace string, e Event, r Recorded) (*Task, error) {
	if ev, ok := e.(*TaskCreated); ok {
		if t != nil {
			return nil, fmt.Errorf("domain: task %s created twice", id)
		}
		nt := &Task{ID: id, Workspace: workspace, GoalID: ev.GoalID, PlanVersion: ev.PlanVersion,
			Key: ev.Spec.Key, CreatedBy: r.Actor, Spec: ev.Spec, DependsOn: ev.DependsOn, State: ev.State, Labels: ev.Labels, Versioned: created(r)}
		if ev.State == StateWaiting {
			nt.Wait = &Wait{Kind: ev.WaitKind, Until: ev.WaitUntil}
		}
		return nt, nil
	}
	if t == nil {
		return nil, fmt.Errorf("domain: %s before task %s was created", e.EventType(), id)
	}
	t = t.Clone()
	endAttempt := func(n int, state string) (*Attempt, error) {
		a := t.Current()
		if a == nil || a.N != n {
			return nil, fmt.Errorf("domain: task %s: %s for attempt %d, current is not it", id, e.EventType(), n)
		}
		at := r.Time
		a.State, a.EndedAt = state, &at
		return a, nil
	}
	switch ev := e.(type) {
	case *TaskLabeled:
		t.Labels = ev.Labels
	case *TaskReady:
		t.State, t.Wait, t.BackoffUntil = StateReady, nil, nil
	case *TaskWaiting:
		w := Wait(*ev)
		t.State, t.Wait = StateWaiting, &w
		if a := t.Running(); a != nil {
			at := r.Time
			a.State, a.EndedAt = AttemptStateParked, &at
		}
	case *AttemptStarted:
		t.State = StateRunning
		t.Attempts = append(t.Attempts, Attempt{N: ev.Attempt, Executor: ev.Executor,
			ExecutorVersion: ev.ExecutorVersion, OperationKey: ev.OperationKey, State: AttemptStateRunning,
			StartedAt: r.Time, Deadline: ev.Deadline, TokenHash: ev.TokenHash, ClaimedBy: r.Actor, Handed: ev.Handed})
		if len(t.Attempts) > schemas.MaxListedAttempts {
			tallyEarliest(t, len(t.Attempts)-schemas.MaxListedAttempts)
		}
	case *AttemptAbandoned:
		a, err := endAttempt(ev.Attempt, AttemptStateAbandoned)
		if err != nil {
			return nil, err
		}
		a.Reason = ev.Reason
		t.State = StateReady
	case *CheckpointSaved:
		t.Checkpoint = ev.Checkpoint
	case *AttemptSucceeded:
		a, err := endAttempt(ev.Attempt, AttemptStateSucceeded)
		if err != nil {
			return nil, err
		}
		a.Result, a.Artifacts, a.ModelSteps = ev.Result, ev.Artifacts, ev.ModelSteps
		if t.Spec.Verification != nil {
			t.State = StateVerifying
		}
	case *AttemptFailed:
		a, err := endAttempt(ev.Attempt, AttemptStateFailed)
		if err != nil {
			return nil, err
		}
		errInfo := ev.Error
		a.Error, a.Retryable, a.ModelSteps = &errInfo, ev.Retryable, ev.ModelSteps
	case *BackoffScheduled:
		until := ev.Until
		t.State, t.BackoffUntil = StateBackoff, &until
	case *VerificationRecorded:
		t.Verifications = append(t.Verifications, Verification(*ev))
		if t.Spec.Verification != nil && onVerdict(t.Spec.Verification, ev.Outcome) == VerdictReview {
			t.State = StateNeedsReview
		}
	case *ReviewDecided:
		// The decision's consequence follows as its own event.
	case *ApprovalRequested:
		a := ev.Approval
		a.TaskID = id
		if a.EscalatedFrom == "" {
			// Its own role; also for an approval recorded before asked_role
			// was (one an escalation made then counts for its own role only).
			a.AskedRole = a.Role
		}
		t.Approvals = append(t.Approvals, a)
		t.State, t.Wait = StateWaiting, &Wait{Kind: WaitApproval, ApprovalID: a.ID}
		if ra := t.Running(); ra != nil {
			at := r.Time
			ra.State, ra.EndedAt = AttemptStateParked, &at
		}
	case *ApprovalDecided:
		if ev.ApprovalID == "" { // an unsigned gate decision of schema version 1
			t.Approved = ev.Branch == BranchResume
			break
		}
		a := t.Approval(ev.ApprovalID)
		if a == nil {
			return nil, fmt.Errorf("domain: task %s: decision on unknown approval %s", id, ev.ApprovalID)
		}
		a.State = ApprovalStateDecided
		a.Decision = &ApprovalDecision{SignedResponse: ev.SignedResponse, DecidedAt: r.Time}
		dropSignOffs(a, ev.Dropped)
		if a.Attempt == 0 && ev.Branch == BranchResume {
			t.Approved = true
		}
	case *ApprovalSignedOff:
		a := t.Approval(ev.ApprovalID)
		if a == nil {
			return nil, fmt.Errorf("domain: task %s: sign-off on unknown approval %s", id, ev.ApprovalID)
		}
		dropSignOffs(a, ev.Dropped)
		a.SignOffs = append(a.SignOffs, ApprovalDecision{SignedResponse: ev.SignedResponse, DecidedAt: r.Time})
	case *ApprovalRefused:
		if a := t.Approval(ev.ApprovalID); a != nil {
			a.Refusals = append(a.Refusals, Refusal{Approver: ev.Approver, Response: ev.Response, Reason: ev.Reason,
				Message: ev.Message, At: r.Time})
			if n := len(a.Refusals); n > MaxRefusalsKept {
				a.Refusals = slices.Clone(a.Refusals[n-MaxRefusalsKept:])
			}
		}
	case *ApprovalExpired:
		if a := t.Approval(ev.ApprovalID); a != nil {
			a.State = ApprovalStateExpired
			if a.Attempt == 0 && ev.Branch == BranchResume {
				t.Approved = true
			}
		}
	case *SignalReceived:
		s := Signal(*ev)
		t.Signal = &s // resumption follows as task.ready
		if i := slices.IndexFunc(t.PendingSignals, func(p Signal) bool { return p.Name == ev.Name }); i >= 0 {
			t.PendingSignals = slices.Delete(t.PendingSignals, i, i+1)
		}
	case *SignalBuffered:
		t.PendingSignals = append(t.PendingSignals, Signal(*ev))
	case *TaskDelegated:
		t.Delegations = append(t.Delegations, Delegation{Key: ev.Key, GoalID: ev.GoalID, Attempt: ev.Attempt,
			OnFailure: ev.OnFailure, State: GoalStateOpen})
		t.State, t.Wait = StateWaiting, &Wait{Kind: WaitDelegation, GoalID: ev.GoalID}
		if a := t.Running(); a != nil {
			at := r.Time
			a.State, a.EndedAt = AttemptStateParked, &at
		}
	case *TaskDelegationEnded:
		d := t.Delegation(ev.Key)
		if d == nil || d.GoalID != ev.GoalID {
			return nil, fmt.Errorf("domain: task %s: delegation %q to goal %s ended but was never made", id, ev.Key, ev.GoalID)
		}
		d.State, d.Reason, d.Tasks = ev.State, ev.Reason, slices.Clone(ev.Tasks)
	case *TaskReviewRequested:
		t.State, t.Wait = StateNeedsReview, nil
	case *TaskAccepted:
		t.State = StateAccepted
	case *TaskRejected:
		t.State, t.Reason = StateRejected, ev.Reason
	case *TaskFailed:
		t.State, t.Reason, t.Error = StateFailed, ev.Reason, ev.Error
		if a := t.Running(); a != nil { // failed from outside the attempt (deadline, quarantine)
			at := r.Time
			a.State, a.EndedAt, a.Reason = AttemptStateCancelled, &at, ev.Reason
		}
	case *TaskRetried:
		t.State, t.Reason, t.Error = ev.State, "", nil
		if ev.Retried == "" {
			t.RetriedAfter = t.AttemptCount()
			if t.Earlier != nil {
				t.Earlier.Spent = 0
			}
		}
	case *TaskCancelled:
		t.State, t.Reason = StateCancelled, ev.Reason
		if a := t.Running(); a != nil {
			at := r.Time
			a.State, a.EndedAt = AttemptStateCancelled, &at
		}
	default:
		return nil, fmt.Errorf("domain: task cannot apply %s", e.EventType())
	}
	if Terminal(t.State) {
		t.Wait, t.BackoffUntil = nil, nil
		for i := range t.Approvals {
			if t.Approvals[i].State == ApprovalStatePending {
				t.Approvals[i].State = ApprovalStateWithdrawn
			}
		}
	}
	applied(&t.Versioned, r)
	return t, nil
}

// tallyEarliest takes t's n earliest listed attempts out of its list and
// into its tally of earlier attempts (Task.Earlier). Only the latest
// attempt runs, so each taken has ended, and its verdict, if it had one,
// is recorded.
func tallyEarliest(t *Task, n int) {
	e := schemas.EarlierAttempts{}
	if t.Earlier != nil {
		e = *t.Earlier
	}
	for i := range t.Attempts[:n] {
		a := &t.Attempts[i]
		e.Count++
		if a.N > t.RetriedAfter && usedBudget(t, a) {
			e.Spent++
		}
		sp := attemptSpend(a, a.StartedAt) // one still running counts no time yet
		e.Tokens, e.Cost, e.WallMS = e.Tokens+sp.Tokens, e.Cost+sp.Cost, e.WallMS+sp.WallMS
	}
	t.Earlier = &e
	// A new array: the old one may be shared with an earlier state.
	t.Attempts = slices.Clone(t.Attempts[n:])
}

// dropSignOffs moves the sign-offs of the approvers named in dropped from
// a's SignOffs to its DroppedSignOffs (the latest MaxQuorum-1 of them),
// in new slices.
func dropSignOffs(a *Approval, dropped []string) {
	if len(dropped) == 0 {
		return
	}
	var kept, gone []ApprovalDecision
	for _, s := range a.SignOffs {
		if slices.Contains(dropped, s.Approver) {
			gone = append(gone, s)
		} else {
			kept = append(kept, s)
		}
	}
	a.SignOffs = kept
	a.DroppedSignOffs = append(slices.Clone(a.DroppedSignOffs), gone...)
	if n := len(a.DroppedSignOffs); n > schemas.MaxQuorum-1 {
		a.DroppedSignOffs = a.DroppedSignOffs[n-(schemas.MaxQuorum-1):]
	}
}
