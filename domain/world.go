package domain

import "fmt"

// World is the committed state a command is decided against. A missing
// aggregate is (nil, nil); an error means the state could not be read.
type World interface {
	Workspace(name string) (*Workspace, error)
	Goal(id string) (*Goal, error)
	Task(id string) (*Task, error)
	// Dependents returns the ids of the tasks that depend on task id.
	Dependents(id string) ([]string, error)
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
	dependents map[string][]string
	changes    []Change
}

// NewOverlay returns an empty overlay on base.
func NewOverlay(base World) *Overlay {
	return &Overlay{base: base, workspaces: map[string]*Workspace{}, goals: map[string]*Goal{},
		tasks: map[string]*Task{}, dependents: map[string][]string{}}
}

// Workspace returns the workspace as changed by the overlay. An aggregate
// the base does not have is remembered as absent (a nil entry), so a batch
// asks the base once: the base does not change under an overlay.
func (o *Overlay) Workspace(name string) (*Workspace, error) {
	if w, ok := o.workspaces[name]; ok {
		return w, nil
	}
	w, err := o.base.Workspace(name)
	if err == nil && w == nil {
		o.workspaces[name] = nil
	}
	return w, err
}

// Goal returns the goal as changed by the overlay.
func (o *Overlay) Goal(id string) (*Goal, error) {
	if g, ok := o.goals[id]; ok {
		return g, nil
	}
	g, err := o.base.Goal(id)
	if err == nil && g == nil {
		o.goals[id] = nil
	}
	return g, err
}

// Task returns the task as changed by the overlay.
func (o *Overlay) Task(id string) (*Task, error) {
	if t, ok := o.tasks[id]; ok {
		return t, nil
	}
	t, err := o.base.Task(id)
	if err == nil && t == nil {
		o.tasks[id] = nil
	}
	return t, err
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

// Changes returns the changes applied so far, in order.
func (o *Overlay) Changes() []Change { return o.changes }

// Apply applies c on top of the overlay, checking that its version follows
// the aggregate's.
func (o *Overlay) Apply(c Change, r Recorded) error {
	switch c.AggregateType {
	case AggWorkspace:
		cur, err := o.Workspace(c.AggregateID)
		if err != nil {
			return err
		}
		if err := checkVersion(c, cur != nil, func() uint64 { return cur.Version }); err != nil {
			return err
		}
		nw, err := ApplyWorkspace(cur, c.AggregateID, c.Event, r)
		if err != nil {
			return err
		}
		o.workspaces[c.AggregateID] = nw
	case AggGoal:
		cur, err := o.Goal(c.AggregateID)
		if err != nil {
			return err
		}
		if err := checkVersion(c, cur != nil, func() uint64 { return cur.Version }); err != nil {
			return err
		}
		ng, err := ApplyGoal(cur, c.AggregateID, c.Workspace, c.Event, r)
		if err != nil {
			return err
		}
		o.goals[c.AggregateID] = ng
	case AggTask:
		cur, err := o.Task(c.AggregateID)
		if err != nil {
			return err
		}
		if err := checkVersion(c, cur != nil, func() uint64 { return cur.Version }); err != nil {
			return err
		}
		nt, err := ApplyTask(cur, c.AggregateID, c.Workspace, c.Event, r)
		if err != nil {
			return err
		}
		o.tasks[c.AggregateID] = nt
		if cr, ok := c.Event.(*TaskCreated); ok {
			for _, dep := range cr.DependsOn {
				o.dependents[dep] = append(o.dependents[dep], c.AggregateID)
			}
		}
	default:
		return fmt.Errorf("domain: unknown aggregate type %q", c.AggregateType)
	}
	o.changes = append(o.changes, c)
	return nil
}

func checkVersion(c Change, exists bool, cur func() uint64) error {
	want := uint64(1)
	if exists {
		want = cur() + 1
	}
	if c.Version != want {
		return fmt.Errorf("domain: %s %s: event version %d, want %d", c.AggregateType, c.AggregateID, c.Version, want)
	}
	return nil
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
