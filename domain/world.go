package domain

import (
	"fmt"
	"maps"
)

// World is the committed state a command is decided against. A missing
// aggregate is (nil, nil); an error means the state could not be read.
type World interface {
	Workspace(name string) (*Workspace, error)
	Goal(id string) (*Goal, error)
	Task(id string) (*Task, error)
	// Dependents returns the ids of the tasks that depend on task id; the
	// caller must not change the slice.
	Dependents(id string) ([]string, error)
	// Ritual returns the ritual whose aggregate id is id (RitualID).
	Ritual(id string) (*Ritual, error)
	// RitualVersion returns the version numbered version of ritual id, or
	// nil when it has none.
	RitualVersion(id string, version uint64) (*RitualVersion, error)
	// Schedule returns the schedule whose aggregate id is id (ScheduleID).
	Schedule(id string) (*Schedule, error)
	// GoalByKey returns the id of the goal of workspace ws that took key
	// (CreateGoal.Key) last — made with it, or reopened — or "" when none
	// did.
	GoalByKey(ws, key string) (string, error)
}

// Change is one event of one aggregate, with the version it gives the
// aggregate (1 for its first event).
type Change struct {
	AggregateType string
	AggregateID   string
	Workspace     string
	Version       uint64
	Event         Event
}

// Overlay is a World with changes applied on top of a base World, which it
// never modifies. The writer decides a batch of commands on an overlay and
// keeps or drops it as a whole.
type Overlay struct {
	base       World
	workspaces map[string]*Workspace
	goals      map[string]*Goal
	tasks      map[string]*Task
	rituals    map[string]*Ritual
	schedules  map[string]*Schedule
	dependents map[string][]string
	// keys holds the goals made (or reopened) here with a key, by
	// "<ws>/<key>".
	keys map[string]string
	// versions holds the ritual versions defined here, by ritualVersionKey.
	versions map[string]*RitualVersion
	changes  []Change
	// used are the queues the overlay's commands gave tasks (or
	// configured), true for those they opened; deleted those they deleted
	// (QueueUse).
	used    map[queueKey]bool
	deleted map[queueKey]struct{}
}

// NewOverlay returns an empty overlay on base.
func NewOverlay(base World) *Overlay {
	return &Overlay{base: base, workspaces: map[string]*Workspace{}, goals: map[string]*Goal{},
		tasks: map[string]*Task{}, rituals: map[string]*Ritual{}, schedules: map[string]*Schedule{}, dependents: map[string][]string{},
		keys: map[string]string{}, versions: map[string]*RitualVersion{}}
}

// Workspace returns the workspace as changed by the overlay. An aggregate
// the base does not have is remembered as absent (a nil entry), so a batch
// asks the base once: the base does not change under an overlay.
func (o *Overlay) Workspace(name string) (*Workspace, error) {
	return lookup(o.workspaces, name, o.base.Workspace)
}

// Goal returns the goal as changed by the overlay.
func (o *Overlay) Goal(id string) (*Goal, error) { return lookup(o.goals, id, o.base.Goal) }

// Task returns the task as changed by the overlay.
func (o *Overlay) Task(id string) (*Task, error) { return lookup(o.tasks, id, o.base.Task) }

// Ritual returns the ritual as changed by the overlay.
func (o *Overlay) Ritual(id string) (*Ritual, error) { return lookup(o.rituals, id, o.base.Ritual) }

// Schedule returns the schedule as changed by the overlay.
func (o *Overlay) Schedule(id string) (*Schedule, error) {
	return lookup(o.schedules, id, o.base.Schedule)
}

// RitualVersion returns a version of ritual id defined in the overlay, or
// else the base's.
func (o *Overlay) RitualVersion(id string, version uint64) (*RitualVersion, error) {
	if v, ok := o.versions[ritualVersionKey(id, version)]; ok {
		return v, nil
	}
	return o.base.RitualVersion(id, version)
}

// lookup returns the state of id from the overlay's states, or else from
// the base's get, remembering an absent one.
func lookup[S any](states map[string]*S, id string, get func(string) (*S, error)) (*S, error) {
	if s, ok := states[id]; ok {
		return s, nil
	}
	s, err := get(id)
	if err == nil && s == nil {
		states[id] = nil
	}
	return s, err
}

// Dependents returns the base's dependents of id and those added here.
func (o *Overlay) Dependents(id string) ([]string, error) {
	d, err := o.base.Dependents(id)
	if err != nil {
		return nil, err
	}
	if add := o.dependents[id]; len(add) > 0 {
		d = append(append([]string(nil), d...), add...)
	}
	return d, nil
}

// GoalByKey returns the goal made last with key in ws here, else the
// base's.
func (o *Overlay) GoalByKey(ws, key string) (string, error) {
	if id, ok := o.keys[ws+"/"+key]; ok {
		return id, nil
	}
	return o.base.GoalByKey(ws, key)
}

// Changes returns the changes applied so far, in order.
func (o *Overlay) Changes() []Change { return o.changes }

// Apply applies c on top of the overlay, checking that its version follows
// the aggregate's; a Version of 0 takes the next one (the change is recorded
// with it).
//
// It first brings c's event, in place, to its wire form (as the log gives it
// back: raw JSON compacted, empty lists that are omitted as nil), which does
// not change its encoding: the overlay's states are then exactly those that
// replaying the log gives.
func (o *Overlay) Apply(c Change, r Recorded) error {
	wireForm(c.Event)
	v, err := Apply(overlayStates{o}, c.AggregateType, c.AggregateID, c.Workspace, c.Version, c.Event, r)
	if err != nil {
		return err
	}
	c.Version = v
	switch ev := c.Event.(type) {
	case *TaskCreated:
		for _, dep := range ev.DependsOn {
			o.dependents[dep] = append(o.dependents[dep], c.AggregateID)
		}
	case *RitualDefined:
		o.versions[ritualVersionKey(c.AggregateID, ev.Version)] = NewRitualVersion(c.Workspace, ev, r)
	case *GoalCreated:
		if ev.Key != "" {
			o.keys[c.Workspace+"/"+ev.Key] = c.AggregateID
		}
	case *GoalReopened:
		// It holds its key again (no other open goal does: retryTask).
		if g := o.goals[c.AggregateID]; g != nil && g.Key != "" {
			o.keys[c.Workspace+"/"+g.Key] = c.AggregateID
		}
	}
	o.changes = append(o.changes, c)
	return nil
}

// Execute decides cmd against the overlay as Execute does and, unless the
// decision fails (an error), keeps its changes, refusals recorded included,
// on top of the overlay: the states the decision computed are kept, not
// computed again. On an error the overlay is unchanged.
func (o *Overlay) Execute(cmd Command, m Meta) (*Outcome, error) {
	out, inner, err := execute(o, cmd, m)
	if err != nil {
		return nil, err
	}
	maps.Copy(o.workspaces, inner.workspaces)
	maps.Copy(o.goals, inner.goals)
	maps.Copy(o.tasks, inner.tasks)
	maps.Copy(o.rituals, inner.rituals)
	maps.Copy(o.schedules, inner.schedules)
	maps.Copy(o.versions, inner.versions)
	maps.Copy(o.keys, inner.keys)
	for dep, ids := range inner.dependents {
		o.dependents[dep] = append(o.dependents[dep], ids...)
	}
	o.changes = append(o.changes, inner.changes...)
	o.mergeQueues(inner)
	return out, nil
}

// Touched is the state, as the overlay leaves it, of every aggregate its
// changes touched, by kind and id.
type Touched struct {
	Workspaces map[string]*Workspace
	Goals      map[string]*Goal
	Tasks      map[string]*Task
	Rituals    map[string]*Ritual
	Schedules  map[string]*Schedule
}

// Touched returns the states of the aggregates the overlay's changes
// touched. They are shared with the overlay: neither may change them.
func (o *Overlay) Touched() Touched {
	return Touched{Workspaces: stated(o.workspaces), Goals: stated(o.goals), Tasks: stated(o.tasks),
		Rituals: stated(o.rituals), Schedules: stated(o.schedules)}
}

// stated returns the entries of m that hold a state (the others remember
// an aggregate the base does not have).
func stated[S any](m map[string]*S) map[string]*S {
	out := make(map[string]*S, len(m))
	for id, s := range m {
		if s != nil {
			out[id] = s
		}
	}
	return out
}

// overlayStates keeps what Apply computes in the overlay.
type overlayStates struct{ *Overlay }

func (o overlayStates) SetWorkspace(name string, w *Workspace) { o.workspaces[name] = w }
func (o overlayStates) SetGoal(id string, g *Goal)             { o.goals[id] = g }
func (o overlayStates) SetTask(id string, t *Task)             { o.tasks[id] = t }
func (o overlayStates) SetRitual(id string, r *Ritual)         { o.rituals[id] = r }
func (o overlayStates) SetSchedule(id string, x *Schedule)     { o.schedules[id] = x }

// States is what Apply reads an aggregate's state from and keeps its new
// state in: an Overlay, or the views' batch for one log record. A missing
// aggregate is (nil, nil).
type States interface {
	Workspace(name string) (*Workspace, error)
	Goal(id string) (*Goal, error)
	Task(id string) (*Task, error)
	Ritual(id string) (*Ritual, error)
	Schedule(id string) (*Schedule, error)
	SetWorkspace(name string, w *Workspace)
	SetGoal(id string, g *Goal)
	SetTask(id string, t *Task)
	SetRitual(id string, r *Ritual)
	SetSchedule(id string, x *Schedule)
}

// Apply applies e, an event of the aggregate of kind agg (AggWorkspace,
// AggGoal, AggTask, AggRitual, AggSchedule) and id in workspace ws, to that aggregate's state in s:
// it reads the state, applies e (ApplyWorkspace, ApplyGoal, ApplyTask, ApplyRitual or ApplySchedule) and
// keeps the new state in s. version is the version e gives the aggregate,
// which must follow the aggregate's (1 for a new one), or 0 for whatever
// follows. It returns that version; or the error reading the state, an error
// for a version that does not follow or an unknown kind, or the apply
// function's error — s is then unchanged.
func Apply(s States, agg, id, ws string, version uint64, e Event, r Recorded) (uint64, error) {
	switch agg {
	case AggWorkspace:
		return applyTo(agg, id, version, s.Workspace, s.SetWorkspace, func(w *Workspace) uint64 { return w.Version },
			func(w *Workspace) (*Workspace, error) { return ApplyWorkspace(w, id, e, r) })
	case AggGoal:
		return applyTo(agg, id, version, s.Goal, s.SetGoal, func(g *Goal) uint64 { return g.Version },
			func(g *Goal) (*Goal, error) { return ApplyGoal(g, id, ws, e, r) })
	case AggTask:
		return applyTo(agg, id, version, s.Task, s.SetTask, func(t *Task) uint64 { return t.Version },
			func(t *Task) (*Task, error) { return ApplyTask(t, id, ws, e, r) })
	case AggRitual:
		return applyTo(agg, id, version, s.Ritual, s.SetRitual, func(x *Ritual) uint64 { return x.Version },
			func(x *Ritual) (*Ritual, error) { return ApplyRitual(x, id, ws, e, r) })
	case AggSchedule:
		return applyTo(agg, id, version, s.Schedule, s.SetSchedule, func(x *Schedule) uint64 { return x.Version },
			func(x *Schedule) (*Schedule, error) { return ApplySchedule(x, id, ws, e, r) })
	}
	return 0, fmt.Errorf("domain: unknown aggregate type %q", agg)
}

// applyTo is Apply for one kind of aggregate: get and set its state,
// versionOf reads its version, apply applies the event.
func applyTo[S any](agg, id string, version uint64, get func(string) (*S, error), set func(string, *S),
	versionOf func(*S) uint64, apply func(*S) (*S, error)) (uint64, error) {
	cur, err := get(id)
	if err != nil {
		return 0, err
	}
	next := uint64(1)
	if cur != nil {
		next = versionOf(cur) + 1
	}
	if version != 0 && version != next {
		return 0, fmt.Errorf("domain: %s %s: event version %d, want %d", agg, id, version, next)
	}
	n, err := apply(cur)
	if err != nil {
		return 0, err
	}
	set(id, n)
	return next, nil
}

// Empty is a World with nothing in it.
type Empty struct{}

// Workspace returns nil.
func (Empty) Workspace(string) (*Workspace, error) { return nil, nil }

// Goal returns nil.
func (Empty) Goal(string) (*Goal, error) { return nil, nil }

// Task returns nil.
func (Empty) Task(string) (*Task, error) { return nil, nil }

// Dependents returns nil.
func (Empty) Dependents(string) ([]string, error) { return nil, nil }

// GoalByKey returns "".
func (Empty) GoalByKey(string, string) (string, error) { return "", nil }

// Ritual returns nil.
func (Empty) Ritual(string) (*Ritual, error) { return nil, nil }

// RitualVersion returns nil.
func (Empty) RitualVersion(string, uint64) (*RitualVersion, error) { return nil, nil }

// Schedule returns nil.
func (Empty) Schedule(string) (*Schedule, error) { return nil, nil }
