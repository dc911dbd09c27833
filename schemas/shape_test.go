package schemas_test

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain" //nolint:depguard // tests may import domain, to prove the schemas describe its types
	"github.com/dwr-run/dwr/schemas"
)

// The shape tests prove, by reflection, that each schema describes its Go
// type exactly: the same properties as the json tags, a JSON type that the Go
// type encodes to, and required fields that a Go client always sends. The Go
// types are schemas' own (command bodies, the reply envelope and its error,
// the command result, the work item, the query, the states a reply
// carries) and, for the events, the domain's.

// optionalByDesign lists the fields without omitempty that a schema leaves
// optional because the domain gives their zero value a meaning.
var optionalByDesign = map[string]string{
	"commands/workspace.create.json#name":     "empty means the workspace in the subject",
	"commands/goal.create.json#envelope":      "absent means no budget and any queue",
	"commands/goal.create.json#goal_id":       "absent: the service assigns a new ULID",
	"commands/task.create.json#task_id":       "absent: the service assigns a new ULID",
	"common.json#/$defs/Envelope#budget":      "absent means no limit",
	"common.json#/$defs/Envelope#permissions": "absent means any queue",
}

// requiredByDomain lists the omitempty fields that a schema requires where
// the domain refuses their zero value anyway.
var requiredByDomain = map[string]string{
	"commands/plan.submit.json.tasks[].key":        "a plan's task needs a key (domain.ValidKey)",
	"commands/goal.create.json.tasks[].key":        "a plan's task needs a key (domain.ValidKey)",
	"commands/task.delegate.json.goal.tasks[].key": "a plan's task needs a key (domain.ValidKey)",
}

type doc struct {
	file string
	node map[string]any
}

type shapes struct {
	t    *testing.T
	docs map[string]any
}

func newShapes(t *testing.T) *shapes {
	s := &shapes{t: t, docs: map[string]any{}}
	for p, b := range schemas.All() {
		var v any
		require.NoError(t, json.Unmarshal(b, &v), p)
		s.docs[p] = v
	}
	return s
}

// deref follows a $ref from a node of file to the node it names.
func (s *shapes) deref(file, ref string) doc {
	target, frag, _ := strings.Cut(ref, "#")
	if target == "" {
		target = file
	} else {
		target = path.Join(path.Dir(file), target)
	}
	v := s.docs[target]
	require.NotNil(s.t, v, "$ref %s from %s", ref, file)
	for _, tok := range strings.Split(frag, "/") {
		if tok == "" {
			continue
		}
		v = v.(map[string]any)[tok]
		require.NotNil(s.t, v, "$ref %s from %s", ref, file)
	}
	return doc{target, v.(map[string]any)}
}

// parts returns node and every node it is made of through $ref and allOf.
func (s *shapes) parts(d doc) []doc {
	out := []doc{d}
	if ref, ok := d.node["$ref"].(string); ok {
		out = append(out, s.parts(s.deref(d.file, ref))...)
	}
	if all, ok := d.node["allOf"].([]any); ok {
		for _, a := range all {
			out = append(out, s.parts(doc{d.file, a.(map[string]any)})...)
		}
	}
	return out
}

// types returns the JSON types a schema node allows; nil means any.
func (s *shapes) types(d doc) []string {
	var out []string
	add := func(ts ...string) {
		for _, t := range ts {
			if !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	for _, p := range s.parts(d) {
		switch t := p.node["type"].(type) {
		case string:
			add(t)
		case []any:
			for _, x := range t {
				add(x.(string))
			}
		}
		if enum, ok := p.node["enum"].([]any); ok {
			for _, e := range enum {
				add(jsonType(e))
			}
		}
		if c, ok := p.node["const"]; ok {
			add(jsonType(c))
		}
		if alts, ok := p.node["anyOf"].([]any); ok && p.node["type"] == nil {
			for _, a := range alts {
				add(s.types(doc{p.file, a.(map[string]any)})...)
			}
		}
	}
	return out
}

func jsonType(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case bool:
		return "boolean"
	case float64:
		return "number"
	case nil:
		return "null"
	}
	return "object"
}

// refs returns the names of the $defs a node refers to, directly or not.
func (s *shapes) refs(d doc) []string {
	var out []string
	for _, p := range s.parts(d) {
		if ref, ok := p.node["$ref"].(string); ok {
			out = append(out, path.Base(ref))
		}
	}
	return out
}

var (
	timeType     = reflect.TypeFor[time.Time]()
	durationType = reflect.TypeFor[schemas.Duration]()
	rawType      = reflect.TypeFor[json.RawMessage]()
)

// check compares the schema d with the Go type typ; where names the place.
func (s *shapes) check(where string, typ reflect.Type, d doc) {
	t := s.t
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	types := s.types(d)
	switch typ {
	case timeType:
		require.Contains(t, s.refs(d), "Time", "%s: a time.Time is common.json#/$defs/Time", where)
		return
	case durationType:
		require.Contains(t, s.refs(d), "Duration", "%s: a schemas.Duration is common.json#/$defs/Duration", where)
		return
	case rawType:
		require.Contains(t, s.refs(d), "JSON", "%s: a json.RawMessage is common.json#/$defs/JSON", where)
		return
	}
	switch typ.Kind() {
	case reflect.String:
		require.Equal(t, []string{"string"}, types, "%s: a Go string", where)
	case reflect.Bool:
		require.Equal(t, []string{"boolean"}, types, "%s: a Go bool", where)
	case reflect.Int, reflect.Int64, reflect.Uint64:
		require.Equal(t, []string{"integer"}, types, "%s: a Go integer", where)
		s.requireBounded(where, d, typ)
	case reflect.Float64:
		require.Equal(t, []string{"number"}, types, "%s: a Go float", where)
	case reflect.Slice:
		require.Equal(t, []string{"array"}, types, "%s: a Go slice", where)
		items := s.child(d, "items")
		require.NotEmpty(t, items, "%s: an array needs items", where)
		s.check(where+"[]", typ.Elem(), items[0])
	case reflect.Struct:
		require.Equal(t, []string{"object"}, types, "%s: a Go struct", where)
		s.checkObject(where, typ, d)
	case reflect.Map:
		require.Equal(t, []string{"object"}, types, "%s: a Go map", where)
		require.Equal(t, reflect.String, typ.Key().Kind(), "%s: a map's keys are strings", where)
		s.checkMap(where, typ, d)
	default:
		t.Fatalf("%s: no rule for Go type %s", where, typ)
	}
}

// child returns the nodes under key in the parts of d.
func (s *shapes) child(d doc, key string) []doc {
	var out []doc
	for _, p := range s.parts(d) {
		if c, ok := p.node[key].(map[string]any); ok {
			out = append(out, doc{p.file, c})
		}
	}
	return out
}

// requireBounded checks that an integer's bounds fit its Go type.
func (s *shapes) requireBounded(where string, d doc, typ reflect.Type) {
	var max float64
	for _, p := range s.parts(d) {
		if m, ok := p.node["maximum"].(float64); ok {
			max = m
		}
	}
	require.NotZero(s.t, max, "%s: an integer needs a maximum", where)
	require.LessOrEqual(s.t, max, float64(1<<53), "%s: an integer's maximum must be exact in every language", where)
	if typ.Kind() == reflect.Int {
		require.LessOrEqual(s.t, max, float64(1<<31-1), "%s: a Go int may be 32 bits", where)
	}
}

func (s *shapes) checkObject(where string, typ reflect.Type, d doc) {
	t := s.t
	props := map[string]doc{}
	var required []string
	closed := false
	var base doc // the part that declares additionalProperties: false
	for _, p := range s.parts(d) {
		if ap, ok := p.node["additionalProperties"].(bool); ok && !ap {
			closed, base = true, p
		}
		if ps, ok := p.node["properties"].(map[string]any); ok {
			for name, n := range ps {
				// A boolean schema (false: the field is not allowed here)
				// narrows a property declared elsewhere.
				if m, isSchema := n.(map[string]any); isSchema {
					if _, seen := props[name]; !seen {
						props[name] = doc{p.file, m}
					}
				}
			}
		}
		if r, ok := p.node["required"].([]any); ok {
			for _, x := range r {
				required = append(required, x.(string))
			}
		}
	}
	require.True(t, closed, "%s: an object schema needs additionalProperties: false", where)

	var tags []string
	for _, f := range jsonFields(typ) {
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		require.NotEmpty(t, name, "%s.%s has no json tag", where, f.Name)
		tags = append(tags, name)
		omitempty := strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero") // either leaves out a zero value
		isRequired := slices.Contains(required, name)
		key := base.file + "#" + name
		if base.file == "common.json" {
			key = base.file + "#" + s.defName(base) + "#" + name
		}
		if isRequired && requiredByDomain[where+"."+name] == "" {
			require.False(t, omitempty, "%s.%s is required but omitempty: a Go client would leave out its zero value and be refused", where, name)
		} else if !omitempty {
			_, ok := optionalByDesign[key]
			require.True(t, ok, "%s.%s has no omitempty, so the domain always sends it: the schema should require it (or list it in optionalByDesign, key %q)", where, name, key)
		}
		pd, ok := props[name]
		require.True(t, ok, "%s: the schema has no property %q (field %s)", where, name, f.Name)
		s.check(where+"."+name, f.Type, pd)
	}
	slices.Sort(tags)
	var names []string
	for n := range props {
		names = append(names, n)
	}
	slices.Sort(names)
	require.Equal(t, tags, names, "%s: the schema's properties are not exactly the json tags of %s", where, typ)
}

// jsonFields returns the exported fields of struct type typ as encoding/json
// sees them: the fields of an embedded struct without a json name are
// promoted into typ.
func jsonFields(typ reflect.Type) []reflect.StructField {
	var out []reflect.StructField
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if f.IsExported() {
			out = append(out, f)
		}
	}
	return out
}

// checkMap compares the schema d of a Go map with string keys: an object
// whose named properties and additional properties all hold the map's value
// type.
func (s *shapes) checkMap(where string, typ reflect.Type, d doc) {
	values := 0
	for _, p := range s.parts(d) {
		if ps, ok := p.node["properties"].(map[string]any); ok {
			for name, n := range ps {
				if m, isSchema := n.(map[string]any); isSchema {
					s.check(where+"."+name, typ.Elem(), doc{p.file, m})
					values++
				}
			}
		}
		if ap, ok := p.node["additionalProperties"].(map[string]any); ok {
			s.check(where+"{}", typ.Elem(), doc{p.file, ap})
			values++
		}
	}
	require.NotZero(s.t, values, "%s: a map's schema needs properties or additionalProperties for its values", where)
}

// defName returns "/$defs/<Name>" for a node of common.json.
func (s *shapes) defName(d doc) string {
	defs := s.docs["common.json"].(map[string]any)["$defs"].(map[string]any)
	for name, n := range defs {
		if reflect.ValueOf(n).Pointer() == reflect.ValueOf(d.node).Pointer() {
			return "/$defs/" + name
		}
	}
	return ""
}

// commandBodies is every command's body, as schemas defines it.
var commandBodies = map[string]schemas.Command{
	"workspace.create": schemas.CreateWorkspace{}, "goal.create": schemas.CreateGoal{}, "goal.cancel": schemas.CancelGoal{}, "goal.label": schemas.LabelGoal{}, "goal.prioritize": schemas.PrioritizeGoal{}, "task.label": schemas.LabelTask{},
	"plan.submit": schemas.SubmitPlan{}, "task.create": schemas.CreateTask{}, "task.cancel": schemas.CancelTask{},
	"task.claim": schemas.ClaimTask{}, "task.checkpoint": schemas.SaveCheckpoint{}, "task.succeed": schemas.ReportSuccess{},
	"task.fail": schemas.ReportFailure{}, "task.heartbeat": schemas.Heartbeat{}, "task.verify": schemas.RecordVerification{},
	"task.review": schemas.ReviewTask{}, "approval.decide": schemas.DecideApproval{}, "approver.register": schemas.RegisterApprover{},
	"approver.revoke": schemas.RevokeApprover{}, "member.add": schemas.AddMember{}, "member.remove": schemas.RemoveMember{},
	"queue.configure": schemas.ConfigureQueue{}, "queue.delete": schemas.DeleteQueue{}, "queue.pause": schemas.PauseQueue{}, "queue.resume": schemas.ResumeQueue{}, "task.request_approval": schemas.RequestApproval{}, "task.wait": schemas.WaitTask{},
	"task.delegate": schemas.DelegateTask{},
	"goal.shred":    schemas.ShredGoal{}, "workspace.shred": schemas.ShredWorkspace{},
	"task.retry":          schemas.RetryTask{},
	"workspace.configure": schemas.ConfigureWorkspace{},
	"task.signal":         schemas.SendSignal{}, "timer.fire": schemas.FireTimer{}, "task.quarantine": schemas.QuarantineTask{},
	"ritual.define": schemas.DefineRitual{}, "ritual.run": schemas.RunRitual{},
	"schedule.create": schemas.CreateSchedule{}, "schedule.pause": schemas.PauseSchedule{},
	"schedule.resume": schemas.ResumeSchedule{}, "schedule.delete": schemas.DeleteSchedule{},
}

func TestCommandSchemasMatchTypes(t *testing.T) {
	s := newShapes(t)
	require.ElementsMatch(t, schemas.CommandNames(), slices.Collect(maps.Keys(commandBodies)), "a Go body for every command's schema, and a schema for every body")
	for name, body := range commandBodies {
		require.Equal(t, name, body.CommandName())
		p := schemas.CommandPath(name)
		s.check(p, reflect.TypeOf(body), doc{p, s.docs[p].(map[string]any)})
	}
}

// TestDomainDecodesTheWireBodies: the domain's commands are schemas' bodies
// (aliases), or embed one and add only fields that never travel (json:"-"),
// so the service decodes exactly what the schemas describe.
func TestDomainDecodesTheWireBodies(t *testing.T) {
	require.ElementsMatch(t, schemas.CommandNames(), domain.CommandNames())
	for _, name := range domain.CommandNames() {
		cmd, ok := domain.NewCommand(name)
		require.True(t, ok)
		typ, want := reflect.TypeOf(cmd).Elem(), reflect.TypeOf(commandBodies[name])
		if typ == want {
			continue
		}
		require.True(t, typ.Field(0).Anonymous && typ.Field(0).Type == want, "%s: %s is not %s and does not embed it first", name, typ, want)
		for i := 1; i < typ.NumField(); i++ {
			require.Equal(t, "-", typ.Field(i).Tag.Get("json"), "%s: %s.%s would travel", name, typ, typ.Field(i).Name)
		}
	}
}

func TestEventSchemasMatchTypes(t *testing.T) {
	s := newShapes(t)
	for _, typ := range domain.EventTypes() {
		ev, err := domain.NewEvent(typ)
		require.NoError(t, err)
		p := schemas.EventPath(typ)
		s.check(p, reflect.TypeOf(ev), doc{p, s.docs[p].(map[string]any)})
	}
}

func TestReplySchemaMatchesTypes(t *testing.T) {
	s := newShapes(t)
	reply := s.child(doc{schemas.PathReply, s.docs[schemas.PathReply].(map[string]any)}, "properties")
	require.Len(t, reply, 1)
	s.check("reply.json#/properties/result", reflect.TypeFor[schemas.CommandResult](), doc{reply[0].file, reply[0].node["result"].(map[string]any)})

	werr := s.child(doc{schemas.PathError, s.docs[schemas.PathError].(map[string]any)}, "properties")
	require.Len(t, werr, 1)
	s.check("error.json#/properties/error", reflect.TypeFor[schemas.Error](), doc{werr[0].file, werr[0].node["error"].(map[string]any)})
}

// TestReplyEnvelopeMatchesType: schemas.Reply is both reply.json and
// error.json, so it has a field for every property of either and a property
// for each of its fields.
func TestReplyEnvelopeMatchesType(t *testing.T) {
	s := newShapes(t)
	props := map[string][]doc{}
	for _, p := range []string{schemas.PathReply, schemas.PathError} {
		for _, ps := range s.child(doc{p, s.docs[p].(map[string]any)}, "properties") {
			for name, n := range ps.node {
				props[name] = append(props[name], doc{ps.file, n.(map[string]any)})
			}
		}
	}
	var tags []string
	for _, f := range jsonFields(reflect.TypeFor[schemas.Reply]()) {
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		tags = append(tags, name)
		ds, ok := props[name]
		require.True(t, ok, "reply.json and error.json have no property %q (field %s)", name, f.Name)
		if name == "ok" {
			require.Len(t, ds, 2, "both envelopes say ok")
		} else {
			require.Len(t, ds, 1, "%s is in one envelope only", name)
			require.Contains(t, opts, "omitempty", "%s is absent from the other envelope", name)
		}
		for _, d := range ds {
			if name == "result" { // a command's CommandResult (checked above) or a query's result: JSON
				require.Equal(t, rawType, f.Type)
				continue
			}
			s.check("reply."+name, f.Type, d)
		}
	}
	require.ElementsMatch(t, slices.Collect(maps.Keys(props)), tags, "the envelopes' properties are the json tags of schemas.Reply")
}

func TestWorkItemAndQuerySchemasMatchTypes(t *testing.T) {
	s := newShapes(t)
	for p, typ := range map[string]reflect.Type{
		schemas.PathWorkItem: reflect.TypeFor[schemas.WorkItem](),
		schemas.PathQuery:    reflect.TypeFor[schemas.Query](),
	} {
		s.check(p, typ, doc{p, s.docs[p].(map[string]any)})
	}
}

// TestDefsMatchTypes checks the shared definitions that no command, event
// or reply reaches but a query answers.
func TestDefsMatchTypes(t *testing.T) {
	s := newShapes(t)
	defs := s.docs[schemas.PathCommon].(map[string]any)["$defs"].(map[string]any)
	for name, typ := range map[string]reflect.Type{
		"Approver":           reflect.TypeFor[schemas.Approver](),
		"Approval":           reflect.TypeFor[schemas.Approval](),
		"ApprovalSpec":       reflect.TypeFor[schemas.ApprovalSpec](),
		"Member":             reflect.TypeFor[schemas.Member](),
		"QueueConfig":        reflect.TypeFor[schemas.QueueConfig](),
		"Queue":              reflect.TypeFor[schemas.Queue](),
		"Workspace":          reflect.TypeFor[schemas.Workspace](),
		"Ritual":             reflect.TypeFor[schemas.Ritual](),
		"RitualVersionState": reflect.TypeFor[schemas.RitualVersion](),
		"RitualRef":          reflect.TypeFor[schemas.RitualRef](),
		"Schedule":           reflect.TypeFor[schemas.Schedule](),
		"ScheduleRef":        reflect.TypeFor[schemas.ScheduleRef](),
	} {
		s.check("common.json#/$defs/"+name, typ, doc{schemas.PathCommon, defs[name].(map[string]any)})
	}
}

// enumOf returns the values of a schema node's enum.
func enumOf(node any) []string {
	var out []string
	for _, e := range node.(map[string]any)["enum"].([]any) {
		out = append(out, e.(string))
	}
	return out
}

// TestEnumsMatchConstants ties the contract's enumerations to schemas'
// constants.
func TestEnumsMatchConstants(t *testing.T) {
	s := newShapes(t)
	common := s.docs[schemas.PathCommon].(map[string]any)["$defs"].(map[string]any)
	prop := func(node any, name string) any { return node.(map[string]any)["properties"].(map[string]any)[name] }
	require.Equal(t, schemas.Codes, enumOf(common["ErrorCode"]))
	require.Equal(t, []string{schemas.StatePending, schemas.StateReady, schemas.StateRunning, schemas.StateWaiting, schemas.StateVerifying,
		schemas.StateNeedsReview, schemas.StateBackoff, schemas.StateAccepted, schemas.StateRejected, schemas.StateFailed, schemas.StateCancelled},
		enumOf(common["TaskState"]))
	require.Equal(t, domain.TaskStates, enumOf(common["TaskState"]))
	require.Equal(t, []string{schemas.AttemptStateRunning, schemas.AttemptStateSucceeded, schemas.AttemptStateFailed, schemas.AttemptStateAbandoned,
		schemas.AttemptStateParked, schemas.AttemptStateCancelled}, enumOf(prop(common["Attempt"], "state")))
	require.Equal(t, []string{schemas.WaitApproval, schemas.WaitSignal, schemas.WaitTimer, schemas.WaitBudget, schemas.WaitDelegation}, enumOf(prop(common["TaskWaiting"], "kind")))
	require.Equal(t, []string{schemas.DelegationFail, schemas.DelegationReview, schemas.DelegationResume}, enumOf(common["DelegationOnFailure"]))
	require.Equal(t, []string{schemas.OutcomePass, schemas.OutcomeFail, schemas.OutcomeInconclusive}, enumOf(prop(common["VerificationRecorded"], "outcome")))
	require.Equal(t, []string{schemas.WorkKindExecute, schemas.WorkKindVerify}, enumOf(prop(s.docs[schemas.PathWorkItem], "kind")))
	require.Equal(t, []string{domain.AggWorkspace, domain.AggGoal, domain.AggTask, domain.AggRitual, domain.AggSchedule}, enumOf(prop(s.docs[schemas.PathQuery], "aggregate")))
	for _, st := range enumOf(common["TaskState"]) {
		require.Equal(t, domain.Terminal(st), schemas.Terminal(st), st)
	}
}

func TestEnvelopeDispatchesEveryType(t *testing.T) {
	s := newShapes(t)
	env := s.docs[schemas.PathEnvelope].(map[string]any)
	var dispatched []string
	for _, x := range env["allOf"].([]any) {
		c := x.(map[string]any)
		typ := c["if"].(map[string]any)["properties"].(map[string]any)["type"].(map[string]any)["const"].(string)
		then := c["then"].(map[string]any)["properties"].(map[string]any)
		ev, err := domain.NewEvent(typ)
		require.NoError(t, err)
		require.Equal(t, ev.AggregateType(), then["agg"].(map[string]any)["const"], typ)
		require.Equal(t, schemas.EventPath(typ), then["data"].(map[string]any)["$ref"], typ)
		dispatched = append(dispatched, typ)
	}
	slices.Sort(dispatched)
	require.Equal(t, schemas.EventTypes(), dispatched)
	var enum []string
	for _, e := range env["properties"].(map[string]any)["type"].(map[string]any)["enum"].([]any) {
		enum = append(enum, e.(string))
	}
	require.Equal(t, schemas.EventTypes(), enum)
}

// TestBoundsMatchDomain ties the schemas' bounds to domain/validate.go.
func TestBoundsMatchDomain(t *testing.T) {
	s := newShapes(t)
	common := s.docs[schemas.PathCommon].(map[string]any)["$defs"].(map[string]any)
	num := func(v any, key string) int {
		return int(v.(map[string]any)[key].(float64))
	}
	require.Equal(t, domain.MaxTitle, num(common["Title"], "maxLength"))
	require.Equal(t, domain.MaxTitle, num(common["Label"], "maxLength"))
	require.Equal(t, domain.MaxText, num(common["Text"], "maxLength"))
	require.Equal(t, domain.MaxReason, num(common["Reason"], "maxLength"))
	spec := common["TaskSpec"].(map[string]any)["properties"].(map[string]any)
	require.Equal(t, domain.MaxDependencies, num(spec["depends_on"], "maxItems"))
	require.Contains(t, s.refs(doc{schemas.PathCommon, spec["title"].(map[string]any)}), "Title")

	plan := s.docs[schemas.CommandPath("plan.submit")].(map[string]any)["properties"].(map[string]any)
	require.Equal(t, domain.MaxPlanTasks, num(plan["tasks"], "maxItems"))
	goal := s.docs[schemas.CommandPath("goal.create")].(map[string]any)["properties"].(map[string]any)
	require.Equal(t, domain.MaxCriteria, num(goal["success_criteria"], "maxItems"))
	require.Equal(t, domain.MaxText, num(goal["success_criteria"].(map[string]any)["items"], "maxLength"))
	require.Equal(t, domain.MaxTitle, num(goal["title"], "maxLength"))
	require.Equal(t, domain.MaxPlanTasks, num(common["RitualTasks"], "maxItems"), "a ritual's plan is a plan")
	require.Equal(t, domain.MaxLabels, num(common["Labels"], "maxProperties"))
	require.Equal(t, domain.MaxLabelValue, num(common["Labels"].(map[string]any)["additionalProperties"], "maxLength"))
	label := s.docs[schemas.CommandPath("goal.label")].(map[string]any)["properties"].(map[string]any)
	require.Equal(t, domain.MaxLabels, num(label["remove"], "maxItems"))
}

// TestPatternsMatchDomain checks that the ULID, name and key patterns accept
// exactly what domain.ValidID, ValidName and ValidKey accept.
func TestPatternsMatchDomain(t *testing.T) {
	strs := []string{"", "a", "A", "0", "-a", "_a", "a-b_c", "a.b", "a b", "é", "ab/c", "x\n",
		strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("K", 128), strings.Repeat("K", 129),
		"01JWQYPRT84TFF59TDWH9EDD1R", "7ZZZZZZZZZZZZZZZZZZZZZZZZZ", "8ZZZZZZZZZZZZZZZZZZZZZZZZZ",
		"01JWQYPRT84TFF59TDWH9EDD1", "01jwqyprt84tff59tdwh9edd1r", "01JWQYPRT84TFF59TDWH9EDDUR", "01JWQYPRT84TFF59TDWH9EDDLR"}
	for i := range 200 {
		strs = append(strs, domain.DeriveID(time.UnixMilli(int64(i)*987654321987), fmt.Sprint(i)))
	}
	check := func(valid bool, name string, body map[string]any, s string) {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		err = schemas.ValidateCommand(name, b)
		require.Equal(t, valid, err == nil, "%s %q: domain says %v, schema says %v", name, s, valid, err)
	}
	for _, s := range strs {
		check(domain.ValidID(s), "task.cancel", map[string]any{"task_id": s}, s)
		check(domain.ValidName(s), "goal.create", map[string]any{"title": "t",
			"envelope": map[string]any{"permissions": map[string]any{"queues": []string{s}}}}, s)
		check(domain.ValidKey(s), "task.signal", map[string]any{"task_id": "01JWQYPRT84TFF59TDWH9EDD1R", "name": s}, s)
		check(domain.ValidName(s), "approver.register", map[string]any{"name": s, "role": "editor", "public_key": testKey}, s)
		check(domain.ValidName(s), "goal.create", map[string]any{"title": "t", "labels": map[string]any{s: "v"}}, s)
		check(domain.ValidName(s), "approver.register", map[string]any{"name": "maria", "role": s, "public_key": testKey}, s)
	}
}

const testKey = "VU6Cbm8vZboUwILz9USUel4y3e+Z2bA8xTd9VGdbM9A="

// TestApprovalPatternsMatchDomain checks the approval id, key, signature and
// digest patterns against what the domain makes and reads. The schema asks
// for the canonical forms: where the domain is more lenient (a number with a
// leading zero or sign, base64 with stray bits), what the schema accepts the
// domain reads.
func TestApprovalPatternsMatchDomain(t *testing.T) {
	task := "01JWTD0Q80H4QX4FR84G98PBSK"
	decide := func(field, value string) error {
		body := map[string]any{"approval_id": task + "-1", "approver": "maria", "response": "approve",
			"action_digest": "sha256:" + strings.Repeat("0", 64), "signature": strings.Repeat("A", 86) + "=="}
		body[field] = value
		b, err := json.Marshal(body)
		require.NoError(t, err)
		return schemas.ValidateCommand("approval.decide", b)
	}
	for _, n := range []int{1, 2, 9, 10, 99, 123456789} {
		id := domain.ApprovalID(task, n)
		require.NoError(t, decide("approval_id", id), id)
	}
	for _, id := range []string{task, task + "-", task + "-0", task + "-01", task + "-+1", task + "--1", task + "-1a",
		"01jwtd0q80h4qx4fr84g98pbsk-1", task + "1-1", task + "-1234567890"} {
		_, _, ok := domain.ParseApprovalID(id)
		if err := decide("approval_id", id); err == nil {
			require.True(t, ok, "the schema accepts %q, the domain does not", id)
		}
	}
	require.Error(t, decide("approval_id", task+"-01"), "one spelling per approval")

	action := json.RawMessage(`{"b": [1, 2.50], "a": "x"}`)
	digest, err := domain.ActionDigest(action)
	require.NoError(t, err)
	require.NoError(t, decide("action_digest", digest))
	for _, bad := range []string{strings.TrimPrefix(digest, "sha256:"), strings.ToUpper(digest), digest + "0", "sha1:" + digest[7:47]} {
		require.Error(t, decide("action_digest", bad), bad)
	}

	register := func(key string) error {
		b, err := json.Marshal(map[string]any{"name": "maria", "role": "editor", "public_key": key})
		require.NoError(t, err)
		return schemas.ValidateCommand("approver.register", b)
	}
	for i := range 64 {
		seed := sha256.Sum256([]byte{byte(i)})
		key := ed25519.NewKeyFromSeed(seed[:])
		pub := base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey))
		require.NoError(t, register(pub), pub)
		sig := domain.SignDecision(key, task+"-1", "approve", digest)
		require.NoError(t, decide("signature", sig), sig)
	}
	b64 := "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	for _, c := range b64 {
		key := strings.Repeat("A", 42) + string(c) + "="
		sig := strings.Repeat("A", 85) + string(c) + "=="
		for _, x := range []struct {
			err  error
			s    string
			size int
		}{{register(key), key, ed25519.PublicKeySize}, {decide("signature", sig), sig, ed25519.SignatureSize}} {
			raw, derr := base64.StdEncoding.DecodeString(x.s)
			if x.err == nil {
				require.NoError(t, derr, x.s)
				require.Len(t, raw, x.size, x.s)
				require.Equal(t, x.s, base64.StdEncoding.EncodeToString(raw), "the schema accepts only the canonical encoding")
			}
		}
	}
	for _, bad := range []string{testKey[:43], testKey + "A", strings.TrimSuffix(testKey, "=") + "A", base64.RawStdEncoding.EncodeToString(make([]byte, 32)),
		base64.StdEncoding.EncodeToString(make([]byte, 31)), base64.StdEncoding.EncodeToString(make([]byte, 33)), base64.URLEncoding.EncodeToString(bytes32(0xfb))} {
		require.Error(t, register(bad), bad)
	}
	for _, bad := range []string{base64.StdEncoding.EncodeToString(make([]byte, 63)), base64.StdEncoding.EncodeToString(make([]byte, 65)),
		base64.RawStdEncoding.EncodeToString(make([]byte, 64))} {
		require.Error(t, decide("signature", bad), bad)
	}
}

func bytes32(b byte) []byte {
	out := make([]byte, 32)
	for i := range out {
		out[i] = b
	}
	return out
}

// TestApprovalEnumsMatchDomain ties the approval enums and bounds to
// domain/approvals.go and the timer kinds to domain/commands.go.
func TestApprovalEnumsMatchDomain(t *testing.T) {
	s := newShapes(t)
	common := s.docs[schemas.PathCommon].(map[string]any)["$defs"].(map[string]any)
	require.Equal(t, domain.Responses, enumOf(common["Response"]))
	require.Equal(t, domain.Branches, enumOf(common["Branch"]))
	require.Equal(t, []string{domain.RefusedUnknownApprover, domain.RefusedUnauthorized, domain.RefusedBadSignature, domain.RefusedReplayed,
		domain.RefusedActionMismatch, domain.RefusedExpired, domain.RefusedAlreadyDecided, domain.RefusedAlreadySigned, domain.RefusedSelfApproval, domain.RefusedNotPermitted,
		domain.RefusedRevoked, domain.RefusedKeyExpired, domain.RefusedNotApprover}, enumOf(common["RefusalReason"]))
	approval := common["Approval"].(map[string]any)["properties"].(map[string]any)
	require.Equal(t, []string{domain.ApprovalStatePending, domain.ApprovalStateDecided, domain.ApprovalStateExpired, domain.ApprovalStateWithdrawn},
		enumOf(approval["state"]))
	require.Equal(t, enumOf(approval["state"]), schemas.ApprovalStates, "the states approval.list takes are the schema's")
	require.Equal(t, domain.MaxRefusalsKept, int(approval["refusals"].(map[string]any)["maxItems"].(float64)))
	require.Equal(t, schemas.MaxQuorum-1, int(approval["sign_offs"].(map[string]any)["maxItems"].(float64)), "all but the deciding one")
	require.Equal(t, schemas.MaxQuorum, int(common["Quorum"].(map[string]any)["maximum"].(float64)))
	require.Equal(t, len(domain.Responses), int(common["Responses"].(map[string]any)["maxItems"].(float64)))
	var branches []string
	for k := range common["Branches"].(map[string]any)["properties"].(map[string]any) {
		branches = append(branches, k)
	}
	require.ElementsMatch(t, domain.Responses, branches, "a branch for each response")

	cmd := func(name string) map[string]any {
		return s.docs[schemas.CommandPath(name)].(map[string]any)["properties"].(map[string]any)
	}
	ref := func(node any) []string { return s.refs(doc{"commands/x.json", node.(map[string]any)}) }
	require.Contains(t, ref(cmd("task.request_approval")["summary"]), "Title", "summary: at most MaxTitle")
	require.Contains(t, ref(cmd("approval.decide")["comment"]), "Reason", "comment: at most MaxReason")
	require.Equal(t, []string{domain.TimerBackoff, domain.TimerAttempt, domain.TimerWait, domain.TimerGoal, domain.TimerTask, domain.TimerApproval, domain.TimerSchedule},
		enumOf(cmd("timer.fire")["kind"]))
}

// TestMemberAndQueueSchemasMatchDomain ties the member and queue schemas to
// domain/roles.go, domain/members.go and domain/queues.go: the roles, the
// bounds, and the NATS user key, which the schema checks by shape and the
// domain by shape and checksum.
func TestMemberAndQueueSchemasMatchDomain(t *testing.T) {
	s := newShapes(t)
	common := s.docs[schemas.PathCommon].(map[string]any)["$defs"].(map[string]any)
	num := func(v any, key string) int64 { return int64(v.(map[string]any)[key].(float64)) }

	var roles []domain.Role
	for _, r := range common["Role"].(map[string]any)["enum"].([]any) {
		roles = append(roles, domain.Role(r.(string)))
	}
	require.Equal(t, domain.Roles, roles)
	require.Equal(t, int64(domain.MaxMemberQueues), num(common["MemberQueues"], "maxItems"))
	require.Equal(t, int64(domain.MinLeaseMS), num(common["LeaseMS"], "minimum"))
	require.Equal(t, int64(domain.MaxLeaseMS), num(common["LeaseMS"], "maximum"))
	require.Equal(t, int64(domain.MinMaxDeliver), num(common["MaxDeliver"], "minimum"))
	require.Equal(t, int64(domain.MaxMaxDeliver), num(common["MaxDeliver"], "maximum"))
	require.Equal(t, int64(domain.MaxRateLimit), num(common["RateLimit"], "maximum"))
	require.Equal(t, int64(domain.MinRatePeriodMS), num(common["RatePeriodMS"], "minimum"))
	require.Equal(t, int64(domain.MaxRatePeriodMS), num(common["RatePeriodMS"], "maximum"))
	require.Equal(t, int64(schemas.MinPriority), num(common["Priority"], "minimum"))
	require.Equal(t, int64(schemas.MaxPriority), num(common["Priority"], "maximum"))
	var orders []string
	for _, o := range common["QueueOrder"].(map[string]any)["enum"].([]any) {
		orders = append(orders, o.(string))
	}
	require.Equal(t, []string{domain.QueueOrderFIFO, domain.QueueOrderPriority}, orders)

	add := func(key string) error {
		b, err := json.Marshal(map[string]any{"name": "ops", "role": "admin", "public_key": key})
		require.NoError(t, err)
		return schemas.ValidateCommand("member.add", b)
	}
	for _, k := range []string{userKey1, userKey2, nkeysUser} {
		require.True(t, domain.ValidUserKey(k), k)
		require.NoError(t, add(k), k)
	}
	// Every one-character change of a key: what the domain takes, the schema
	// takes; what the schema refuses, the domain refuses.
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567a0189=+/ "
	taken := 0
	for i := range len(userKey1) {
		for _, c := range alphabet {
			k := userKey1[:i] + string(c) + userKey1[i+1:]
			err := add(k)
			if domain.ValidUserKey(k) {
				taken++
				require.NoError(t, err, "the domain takes %s, the schema does not", k)
			}
			if err != nil {
				require.False(t, domain.ValidUserKey(k), k)
			}
		}
	}
	require.Equal(t, len(userKey1), taken, "a checksum catches every one-character change (only the key itself is taken)")
	for _, bad := range []string{"", userKey1[:55], userKey1 + "A", strings.ToLower(userKey1), "A" + userKey1[1:], "S" + userKey1[1:], testKey} {
		require.Error(t, add(bad), bad)
		require.False(t, domain.ValidUserKey(bad), bad)
	}
}
