package domain

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/dwr-run/dwr/schemas"
)

func (x *tx) defineRitual(c *DefineRitual) (Reply, error) {
	if err := checkName("/name", "ritual", c.Name); err != nil {
		return Reply{}, err
	}
	if err := checkText("/description", c.Description, MaxText, false); err != nil {
		return Reply{}, err
	}
	if len(c.Parameters) > MaxInputBytes {
		return Reply{}, invalid("/parameters", "is %d bytes; at most %d are allowed", len(c.Parameters), MaxInputBytes)
	}
	ps, err := schemas.CompileParams(c.Parameters)
	if err != nil {
		return Reply{}, invalid("/parameters"+firstPointer(err), "%s", wireMessage(err))
	}
	if err := checkTemplates(ps, c.RitualTemplate); err != nil {
		return Reply{}, err
	}
	digest, err := RitualDigest(c.RitualTemplate)
	if err != nil {
		return Reply{}, invalid("", "the ritual does not encode: %v", err)
	}
	id := RitualID(x.m.Workspace, c.Name)
	r, err := x.o.Ritual(id)
	if err != nil {
		return Reply{}, err
	}
	var version uint64 = 1
	if r != nil {
		if r.HasCommand(x.m.Key()) || r.Digest == digest {
			return Reply{ID: c.Name, Version: r.Version, Duplicate: true}, nil
		}
		version = r.Version + 1
	}
	if err := x.emit(id, &RitualDefined{Name: c.Name, Version: version, Digest: digest, RitualTemplate: c.RitualTemplate}); err != nil {
		return Reply{}, err
	}
	return Reply{ID: c.Name, Version: version}, nil
}

// firstPointer returns the pointer of the first field err, a
// *schemas.Error, names ("" for none).
func firstPointer(err error) string {
	var we *schemas.Error
	if errors.As(err, &we) && len(we.Fields) > 0 {
		return we.Fields[0].Pointer
	}
	return ""
}

// wireMessage returns the message of err, a *schemas.Error, or its text.
func wireMessage(err error) string {
	var we *schemas.Error
	if errors.As(err, &we) {
		return we.Message
	}
	return err.Error()
}

func (x *tx) runRitual(c *RunRitual) (Reply, error) {
	if err := checkName("/name", "ritual", c.Name); err != nil {
		return Reply{}, err
	}
	if c.GoalID != "" {
		// A retry of a run that created its goal: its first outcome, even
		// if the ritual has a newer version since.
		if g, err := x.o.Goal(c.GoalID); err != nil || (g != nil && g.HasCommand(x.m.Key())) {
			return duplicateRun(g, err)
		}
	}
	return x.runRitualFrom(c, goalOrigin{})
}

// runRitualFrom creates the goal and plan that a version of the ritual c
// names renders with c's params, from origin (whose ritual it sets).
func (x *tx) runRitualFrom(c *RunRitual, origin goalOrigin) (Reply, error) {
	rendered := c.Rendered
	if rendered == nil || rendered.Goal == nil || rendered.Goal.GoalID != c.GoalID {
		var err error
		if rendered, err = x.renderRitual(c); err != nil {
			return Reply{}, err
		}
	}
	what := fmt.Sprintf("ritual %s version %d", rendered.Ritual.Name, rendered.Ritual.Version)
	ref := rendered.Ritual
	origin.ritual = &ref
	cg := *rendered.Goal
	if err := CheckLabels("/labels", c.Labels); err != nil {
		return Reply{}, err
	}
	if len(c.Labels) > 0 {
		// The run's labels over the template's.
		cg.Labels = maps.Clone(cg.Labels)
		if cg.Labels == nil {
			cg.Labels = Labels{}
		}
		maps.Copy(cg.Labels, c.Labels)
	}
	if err := CheckGoalKey(c.Key, c.IfOpen); err != nil {
		return Reply{}, err // the run's, named as such: not the template's (fromRitual)
	}
	cg.Key, cg.IfOpen = cmp.Or(c.Key, cg.Key), c.IfOpen
	if cg.IfOpen != "" && cg.Key == "" {
		return Reply{}, invalid("/if_open", "goes with a key, the run's or its ritual's goal template's: what to do while an open goal holds it")
	}
	r, err := x.createGoalFrom(&cg, origin)
	if err != nil {
		return Reply{}, fromRitual(what, err)
	}
	return r, nil
}

// RenderRitual renders the ritual version run c names (in workspace ws of
// w) with c's params: the goal.create it makes, as ritual.run would. The
// service renders it before it seals the goal's payloads
// (RunRitual.Rendered); an error is the refusal ritual.run would answer.
func RenderRitual(w World, ws string, c *RunRitual) (*schemas.RenderedRitual, error) {
	x := &tx{o: NewOverlay(w), m: Meta{Workspace: ws}}
	return x.renderRitual(c)
}

func (x *tx) renderRitual(c *RunRitual) (*schemas.RenderedRitual, error) {
	rv, err := x.ritualVersion(c.Name, c.Version)
	if err != nil {
		return nil, err
	}
	what := fmt.Sprintf("ritual %s version %d", rv.Name, rv.Version)
	ps, err := schemas.CompileParams(rv.Parameters)
	if err != nil {
		return nil, invalid("/name", "%s: %s", what, wireMessage(err))
	}
	params, err := ps.Validate(c.Params)
	if err != nil {
		return nil, paramsRefused(what, err)
	}
	body, err := renderGoal(rv.RitualTemplate, params, c.GoalID)
	if err != nil {
		return nil, err
	}
	if err := schemas.ValidateCommand("goal.create", body); err != nil {
		return nil, fromRitual(what, err)
	}
	var cg CreateGoal
	if err := json.Unmarshal(body, &cg); err != nil {
		return nil, fromRitual(what, invalid("", "does not decode as goal.create: %v", err))
	}
	return &schemas.RenderedRitual{Goal: &cg, Ritual: RitualRef{Name: rv.Name, Version: rv.Version}}, nil
}

// asDomainError returns err, a *schemas.Error (the refusal of a body its
// schema does not take), as an *Error naming its first field; any other err
// as it is.
func asDomainError(err error) error {
	var we *schemas.Error
	if !errors.As(err, &we) {
		return err
	}
	field := ""
	if len(we.Fields) > 0 {
		field = we.Fields[0].Pointer
	}
	return &Error{Code: Code(we.Code), Field: field, Message: we.Message}
}

// duplicateRun answers a retried run with its goal as it stands.
func duplicateRun(g *Goal, err error) (Reply, error) {
	if err != nil {
		return Reply{}, err
	}
	r := duplicateGoal(g)
	r.Tasks = g.Plan
	return r, nil
}

// ritualVersion returns version (the latest for 0) of the ritual name of
// this workspace, or not_found naming /name or /version.
func (x *tx) ritualVersion(name string, version uint64) (*RitualVersion, error) {
	id := RitualID(x.m.Workspace, name)
	r, err := x.o.Ritual(id)
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, notFound("/name", "ritual %q not found in workspace %q: define it first (dwr ritual define -f FILE)", name, x.m.Workspace)
	}
	version = cmp.Or(version, r.Version)
	if version > r.Version {
		return nil, notFound("/version", "ritual %q has no version %d: its versions are 1 to %d", name, version, r.Version)
	}
	rv, err := x.o.RitualVersion(id, version)
	if err != nil {
		return nil, err
	}
	if rv == nil {
		return nil, fmt.Errorf("domain: ritual %s: version %d is missing", id, version)
	}
	return rv, nil
}

// paramsRefused is the refusal of a run's params that fail the ritual's
// parameters schema, err: invalid, naming the first offending param
// (/params/<name>).
func paramsRefused(what string, err error) error {
	var we *schemas.Error
	if !errors.As(err, &we) {
		return err
	}
	field := "/params"
	if len(we.Fields) > 0 {
		field += we.Fields[0].Pointer
	}
	return &Error{Code: Code(we.Code), Field: field,
		Message: fmt.Sprintf("%s: %s (ritual.get shows its parameters)", what,
			strings.Replace(we.Message, "the params is invalid: ", "a param fails the parameters' schema: ", 1))}
}

// fromRitual returns err, a refusal of the goal.create a ritual rendered,
// as a refusal of the run: a field of the rendered goal is named where it
// came from, "/ritual/goal/..." or "/ritual/tasks/...", and the message
// says which ritual version rendered it. /goal_id, the run's own, stays.
func fromRitual(what string, err error) error {
	err = asDomainError(err)
	var de *Error
	if !errors.As(err, &de) || de.Code == CodeConflict || de.Code == CodeNotFound {
		return err // about the goal id, not the templates
	}
	out := *de
	switch {
	case out.Field == "" || out.Field == "/goal_id":
	case strings.HasPrefix(out.Field, "/tasks"):
		out.Field = "/ritual" + out.Field
	default:
		out.Field = "/ritual/goal" + out.Field
	}
	out.Message = fmt.Sprintf("%s renders a goal that goal.create refuses: %s", what, de.Message)
	return &out
}
