package domain

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/dwr-run/dwr/schemas"
)

func (x *tx) createWorkspace(c *CreateWorkspace) (Reply, error) {
	name := c.Name
	if name == "" {
		name = x.m.Workspace
	}
	if err := checkName("/name", "workspace", name); err != nil {
		return Reply{}, err
	}
	if name != x.m.Workspace {
		return Reply{}, invalid("/name", "name %q differs from the workspace %q in the subject", name, x.m.Workspace)
	}
	if err := checkText("/description", c.Description, MaxText, false); err != nil {
		return Reply{}, err
	}
	w, err := x.o.Workspace(name)
	if err != nil {
		return Reply{}, err
	}
	if w != nil {
		if w.HasCommand(x.m.Key()) {
			return Reply{ID: name, Version: w.Version, Duplicate: true}, nil
		}
		return Reply{}, conflict("workspace %q already exists", name)
	}
	if err := x.checkNameApart(name); err != nil {
		return Reply{}, err
	}
	if err := x.emit(name, &WorkspaceCreated{Name: name, Description: c.Description}); err != nil {
		return Reply{}, err
	}
	return Reply{ID: name, Version: 1}, nil
}

func (x *tx) createGoal(c *CreateGoal) (Reply, error) { return x.createGoalFrom(c, goalOrigin{}) }

// goalOrigin is where a goal comes from, when not from goal.create itself:
// the ritual version it was rendered from (ritual.run), the schedule and
// slot it was started for, or the task that delegated it (task.delegate),
// whose goal's envelope, within, bounds the permissions of this one.
type goalOrigin struct {
	ritual   *RitualRef
	schedule *ScheduleRef
	parent   *ParentRef
	within   *Envelope
	// priority is the delegating task's, which its child goal takes
	// when it gives none (0: none).
	priority int
}

// createGoalFrom creates the goal c asks for, from origin.
func (x *tx) createGoalFrom(c *CreateGoal, origin goalOrigin) (Reply, error) {
	if !ValidID(c.GoalID) {
		return Reply{}, invalid("/goal_id", "goal id %q is not a ULID", c.GoalID)
	}
	if err := checkText("/title", c.Title, MaxTitle, true); err != nil {
		return Reply{}, err
	}
	if err := checkText("/description", c.Description, MaxText, false); err != nil {
		return Reply{}, err
	}
	if len(c.SuccessCriteria) > MaxCriteria {
		return Reply{}, invalid("/success_criteria", "has %d entries; at most %d are allowed", len(c.SuccessCriteria), MaxCriteria)
	}
	for i, s := range c.SuccessCriteria {
		if err := checkText(fmt.Sprintf("/success_criteria/%d", i), s, MaxText, true); err != nil {
			return Reply{}, err
		}
	}
	if err := CheckLabels("/labels", c.Labels); err != nil {
		return Reply{}, err
	}
	if err := checkPriority("/priority", c.Priority, true); err != nil {
		return Reply{}, err
	}
	if err := CheckGoalKey(c.Key, c.IfOpen); err != nil {
		return Reply{}, err
	}
	if c.IfOpen != "" && c.Key == "" {
		return Reply{}, invalid("/if_open", "goes with a key: what to do while an open goal holds it")
	}
	b := c.Envelope.Budget
	switch {
	case b.Cost < 0:
		return Reply{}, invalid("/envelope/budget/cost", "must not be negative")
	case b.Tokens < 0:
		return Reply{}, invalid("/envelope/budget/tokens", "must not be negative")
	case b.Attempts < 0:
		return Reply{}, invalid("/envelope/budget/attempts", "must not be negative")
	case c.Envelope.OnExhausted != "" && c.Envelope.OnExhausted != schemas.OnExhaustedFail && c.Envelope.OnExhausted != schemas.OnExhaustedApproval:
		return Reply{}, invalid("/envelope/on_exhausted", "%q is neither fail nor approval", c.Envelope.OnExhausted)
	case c.Envelope.ExtensionRole != "" && c.Envelope.OnExhausted != schemas.OnExhaustedApproval:
		return Reply{}, invalid("/envelope/extension_role", "applies only with on_exhausted approval")
	}
	if p := c.Envelope.Privacy; p != nil && p.Key != schemas.PrivacyKeyWorkspace && p.Key != schemas.PrivacyKeyGoal {
		return Reply{}, invalid("/envelope/privacy/key", "%q is neither workspace nor goal", p.Key)
	}
	if c.Envelope.ExtensionRole != "" {
		if err := checkName("/envelope/extension_role", "role", c.Envelope.ExtensionRole); err != nil {
			return Reply{}, err
		}
	}
	for i, q := range c.Envelope.Permissions.Queues {
		if !ValidName(q) {
			return Reply{}, invalid(fmt.Sprintf("/envelope/permissions/queues/%d", i), "queue %q is not a valid name", q)
		}
	}
	if err := narrowPermissions(&c.Envelope, origin.within); err != nil {
		return Reply{}, err
	}
	if origin.parent == nil {
		if err := DefaultPrivacy(x.o, x.m.Workspace, &c.Envelope); err != nil {
			return Reply{}, err
		}
	}
	g, err := x.o.Goal(c.GoalID)
	if err != nil {
		return Reply{}, err
	}
	if g != nil {
		if g.HasCommand(x.m.Key()) {
			r := duplicateGoal(g)
			if c.Tasks != nil {
				r.Tasks = g.Plan
			}
			return r, nil
		}
		return Reply{}, conflict("goal %s already exists", c.GoalID)
	}
	if c.Key != "" {
		open, err := x.openGoalOfKey(c.Key)
		switch {
		case err != nil:
			return Reply{}, err
		case open != nil && c.IfOpen != schemas.GoalIfOpenUse:
			return Reply{}, &Error{Code: CodeConflict, Field: "/key", Message: fmt.Sprintf(
				"goal %s holds key %q and is open: a key names one open goal (if_open use answers that goal instead)", open.ID, c.Key)}
		case open != nil:
			r := duplicateGoal(open)
			if c.Tasks != nil {
				r.Tasks = open.Plan
			}
			return r, nil
		}
	}
	if err := x.emit(c.GoalID, &GoalCreated{Workspace: x.m.Workspace, Title: c.Title, Description: c.Description,
		SuccessCriteria: c.SuccessCriteria, Envelope: c.Envelope, Labels: c.Labels, Priority: cmp.Or(c.Priority, origin.priority), Key: c.Key, Ritual: origin.ritual, Schedule: origin.schedule,
		Parent: origin.parent}); err != nil {
		return Reply{}, err
	}
	if c.Tasks != nil {
		// The first plan, in the same record: a refusal of the plan refuses
		// the goal too (the transaction is dropped whole).
		g, err := x.o.Goal(c.GoalID)
		if err != nil {
			return Reply{}, err
		}
		return x.commitPlan(g, c.Tasks)
	}
	return Reply{ID: c.GoalID, State: GoalStateOpen, Version: 1}, nil
}

func (x *tx) cancelGoal(c *CancelGoal) (Reply, error) {
	g, dup, err := x.commandGoal(c.GoalID)
	if err != nil || dup {
		return duplicateGoalOr(g, err)
	}
	if err := checkText("/reason", c.Reason, MaxReason, false); err != nil {
		return Reply{}, err
	}
	if g.State != GoalStateOpen {
		return Reply{}, conflict("goal %s is already %s", g.ID, g.State)
	}
	if err := x.emit(g.ID, &GoalCancelled{Reason: c.Reason}); err != nil {
		return Reply{}, err
	}
	if err := x.endPlan(g, func() Event { return &TaskCancelled{Reason: ReasonGoalCancelled} }); err != nil {
		return Reply{}, err
	}
	g, _ = x.o.Goal(g.ID)
	return goalReply(g), nil
}

// specKey is the part of a spec that decides whether a revision keeps a task.
func specKey(s TaskSpec) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func (x *tx) submitPlan(c *SubmitPlan) (Reply, error) {
	g, err := x.goal(c.GoalID, "/goal_id")
	if err != nil {
		return Reply{}, err
	}
	if g.HasCommand(x.m.Key()) {
		r := duplicateGoal(g)
		r.Tasks = g.Plan
		return r, nil
	}
	if g.State != GoalStateOpen && g.State != GoalStateFailed {
		return Reply{}, conflict("goal %s is %s; a plan can only be submitted to an open goal, or to a failed one to revise it", g.ID, g.State)
	}
	return x.commitPlan(g, c.Tasks)
}

// commitPlan commits tasks as the next version of goal g's plan: it keeps
// the tasks of the previous version that the new one leaves as they were,
// cancels the others, and creates the new ones.
func (x *tx) commitPlan(g *Goal, tasks []TaskSpec) (Reply, error) {
	order, err := planOrder(tasks)
	if err != nil {
		return Reply{}, err
	}
	for i, s := range tasks {
		if err := ValidateSpec(fmt.Sprintf("/tasks/%d", i), s, &g.Envelope); err != nil {
			return Reply{}, err
		}
		if err := x.openQueues(g.Workspace, fmt.Sprintf("/tasks/%d", i), s); err != nil {
			return Reply{}, err
		}
	}
	version := g.PlanVersion + 1
	prev := map[string]PlanTask{}
	for _, pt := range g.Plan {
		prev[pt.Key] = pt
	}
	ids := map[string]string{} // key -> task id in the new plan
	kept := map[string]bool{}
	ev := &PlanCommitted{Version: version}
	var creates []int
	for _, i := range order {
		s := tasks[i]
		old, had := prev[s.Key]
		if had {
			t, err := x.o.Task(old.TaskID)
			if err != nil {
				return Reply{}, err
			}
			depsKept := true
			for _, d := range s.DependsOn {
				depsKept = depsKept && kept[d]
			}
			same := t != nil && specKey(t.Spec) == specKey(s)
			switch {
			case t != nil && t.State == StateAccepted && same:
				kept[s.Key], ids[s.Key] = true, old.TaskID
				ev.Kept = append(ev.Kept, s.Key)
				continue
			case t != nil && t.State == StateAccepted:
				return Reply{}, conflict("task %q (%s) is accepted and its spec cannot change: accepted work is never redone; give the new task another key (field /tasks/%d)", s.Key, t.ID, i)
			case t != nil && same && depsKept && !Terminal(t.State):
				kept[s.Key], ids[s.Key] = true, old.TaskID
				ev.Kept = append(ev.Kept, s.Key)
				continue
			}
			ev.Replaced = append(ev.Replaced, s.Key)
		} else {
			ev.Added = append(ev.Added, s.Key)
		}
		ids[s.Key] = DeriveSeqID(x.m.Now, i, fmt.Sprintf("%s/%d/%s/%s", g.ID, version, s.Key, x.m.CommandID))
		creates = append(creates, i)
	}
	for _, s := range tasks {
		ev.Tasks = append(ev.Tasks, PlanTask{Key: s.Key, TaskID: ids[s.Key], DependsOn: s.DependsOn})
	}
	var ending []string
	for _, pt := range slices.Backward(g.Plan) {
		if kept[pt.Key] {
			continue
		}
		if _, still := ids[pt.Key]; !still {
			ev.Removed = append(ev.Removed, pt.Key)
		}
		ending = append(ending, pt.Key)
	}
	slices.Sort(ev.Removed)
	if len(ending) > 0 {
		// What they spent is final: they end in this record.
		ev.RetiredSpend = &Spend{}
		for _, key := range ending {
			if err := addTaskSpend(ev.RetiredSpend, prev[key].TaskID, x.m.Now, x.o.Task, x.o.Goal, 0); err != nil {
				return Reply{}, err
			}
		}
	}
	if err := x.emit(g.ID, ev); err != nil {
		return Reply{}, err
	}
	for _, key := range ending {
		pt := prev[key]
		t, err := x.o.Task(pt.TaskID)
		if err != nil {
			return Reply{}, err
		}
		if t == nil || Terminal(t.State) {
			continue
		}
		reason := ReasonReplaced
		if slices.Contains(ev.Removed, key) {
			reason = ReasonRemoved
		}
		if err := x.emit(t.ID, &TaskCancelled{Reason: reason}); err != nil {
			return Reply{}, err
		}
	}
	for _, i := range creates {
		s := tasks[i]
		var deps []string
		if len(s.DependsOn) > 0 {
			deps = make([]string, len(s.DependsOn))
		}
		open := false
		for j, d := range s.DependsOn {
			deps[j] = ids[d]
			dt, err := x.o.Task(ids[d])
			if err != nil {
				return Reply{}, err
			}
			if dt == nil || dt.State != StateAccepted {
				open = true
			}
		}
		if err := x.create(ids[s.Key], &TaskCreated{GoalID: g.ID, PlanVersion: version, Spec: s, DependsOn: deps}, open); err != nil {
			return Reply{}, err
		}
	}
	if err := x.checkGoal(g.ID); err != nil { // a revision may leave only ended tasks
		return Reply{}, err
	}
	g, _ = x.o.Goal(g.ID)
	r := goalReply(g)
	r.Tasks = ev.Tasks
	return r, nil
}

// shredGoal records that the goal's own data key was destroyed, and
// cancels the goal when it is open: its payloads are gone.
func (x *tx) shredGoal(c *ShredGoal) (Reply, error) {
	g, err := x.goal(c.GoalID, "/goal_id")
	if err != nil {
		return Reply{}, err
	}
	if g.HasCommand(x.m.Key()) || g.Shredded {
		return duplicateGoal(g), nil
	}
	if err := checkText("/reason", c.Reason, MaxReason, false); err != nil {
		return Reply{}, err
	}
	if !g.Envelope.OwnKey() {
		return Reply{}, &Error{Code: CodeConflict, Field: "/goal_id", Message: fmt.Sprintf(
			"goal %s keeps its payloads under its workspace's data key: only a goal created with envelope privacy key goal "+
				"can be shredded alone (shred the workspace to shred this one)", g.ID)}
	}
	if err := x.emit(g.ID, &GoalShredded{Reason: c.Reason}); err != nil {
		return Reply{}, err
	}
	if g.State == GoalStateOpen {
		if err := x.emit(g.ID, &GoalCancelled{Reason: "shredded"}); err != nil {
			return Reply{}, err
		}
		if err := x.endPlan(g, func() Event { return &TaskCancelled{Reason: ReasonGoalCancelled} }); err != nil {
			return Reply{}, err
		}
	}
	g, _ = x.o.Goal(g.ID)
	return goalReply(g), nil
}

// shredWorkspace records that every data key of the workspace was
// destroyed.
func (x *tx) shredWorkspace(c *ShredWorkspace) (Reply, error) {
	w, dup, err := x.commandWorkspace()
	if err != nil || dup || w.Shredded {
		return duplicateWorkspaceOr(w, err)
	}
	if err := checkText("/reason", c.Reason, MaxReason, false); err != nil {
		return Reply{}, err
	}
	return x.emitWorkspace(w, &WorkspaceShredded{Reason: c.Reason})
}

// configureWorkspace sets the workspace's retention.
func (x *tx) configureWorkspace(c *ConfigureWorkspace) (Reply, error) {
	w, dup, err := x.commandWorkspace()
	if err != nil || dup {
		return duplicateWorkspaceOr(w, err)
	}
	if c.RetainEnded < 0 {
		return Reply{}, invalid("/retain_ended", "must not be negative")
	}
	if w.RetainEnded == c.RetainEnded {
		return workspaceReply(w, true), nil
	}
	return x.emitWorkspace(w, &WorkspaceConfigured{RetainEnded: c.RetainEnded})
}

// DefaultPrivacy gives env, the envelope of a new goal of workspace ws that
// no task delegated, the data key its workspace implies when it names
// none: in a workspace that retains ended goals' payloads for a time
// (RetainEnded), the goal's own, which the retention shreds. (A delegated
// goal shares its parent's.) The service seals a goal.create's payloads
// with the key this leaves.
func DefaultPrivacy(w World, ws string, env *Envelope) error {
	if env.Privacy != nil {
		return nil
	}
	wk, err := w.Workspace(ws)
	if err != nil || wk == nil || wk.RetainEnded <= 0 {
		return err
	}
	env.Privacy = &schemas.Privacy{Key: schemas.PrivacyKeyGoal}
	return nil
}

// CheckGoalKey refuses a goal key that is not one (CreateGoal.Key: "" is
// none) and an if_open that is neither refuse nor use ("" is refuse),
// naming /key or /if_open.
func CheckGoalKey(key, ifOpen string) error {
	switch {
	case key != "" && !ValidKey(key):
		return invalid("/key", "goal key %q is not valid: use 1-128 letters, digits, '_', '.' or '-', starting with a letter or digit", key)
	case ifOpen != "" && ifOpen != schemas.GoalIfOpenRefuse && ifOpen != schemas.GoalIfOpenUse:
		return invalid("/if_open", "%q is neither refuse nor use", ifOpen)
	}
	return nil
}

// openGoalOfKey returns the open goal of the command's workspace that holds
// key, or nil when none does: the goal made last with it, if it has not
// ended.
func (x *tx) openGoalOfKey(key string) (*Goal, error) {
	id, err := x.o.GoalByKey(x.m.Workspace, key)
	if err != nil || id == "" {
		return nil, err
	}
	g, err := x.o.Goal(id)
	if err != nil || g == nil || g.State != GoalStateOpen {
		return nil, err
	}
	return g, nil
}
