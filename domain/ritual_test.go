package domain

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// onboard returns the definition of a ritual with a required string
// param, one with a default and an integer.
func onboard() *DefineRitual {
	return &DefineRitual{Name: "onboard", RitualTemplate: RitualTemplate{
		Description: "Onboard a customer.",
		Parameters: json.RawMessage(`{"type": "object", "additionalProperties": false, "required": ["customer"], "properties": {
			"customer": {"type": "string", "minLength": 1},
			"region": {"enum": ["eu", "us"], "default": "eu"},
			"attempts": {"type": "integer", "minimum": 1, "default": 3}}}`),
		Goal: json.RawMessage(`{"title": "Onboard ${customer}", "success_criteria": ["${customer} has an account in ${region}"]}`),
		Tasks: json.RawMessage(`[
			{"key": "check", "queue": "shell", "input": {"customer": "${customer}", "region": "${region}", "note": "costs $${currency}"},
			 "retry": {"max_attempts": "${attempts}"}},
			{"key": "create", "queue": "shell", "depends_on": ["check"], "input": "${customer}@${region}/${attempts}"}]`),
	}}
}

func TestRitualDefineNumbersVersions(t *testing.T) {
	w := setup(t)
	out := w.must(onboard())
	require.Equal(t, uint64(1), out.Reply.Version)
	require.Equal(t, "onboard", out.Reply.ID)
	ev := eventOf[*RitualDefined](t, out, RitualID(w.ws, "onboard"))
	require.Equal(t, uint64(1), ev.Version)

	// The same content, spaced otherwise, is the same version.
	same := onboard()
	same.Goal = json.RawMessage(`{"success_criteria":["${customer} has an account in ${region}"],"title":"Onboard ${customer}"}`)
	dup := w.duplicate(w.nextCommandID(), same)
	require.Equal(t, uint64(1), dup.Reply.Version)

	changed := onboard()
	changed.Description = "Onboard a customer, v2."
	require.Equal(t, uint64(2), w.must(changed).Reply.Version)
	r := present(t, w.o.Ritual, "ritual", RitualID(w.ws, "onboard"))
	require.Equal(t, uint64(2), r.Version)
	require.Equal(t, "Onboard a customer, v2.", r.Description)
	v1, err := w.o.RitualVersion(RitualID(w.ws, "onboard"), 1)
	require.NoError(t, err)
	require.Equal(t, "Onboard a customer.", v1.Description)
	w.requireReplays()
	w.requireReplaysFromWire()
}

func TestRitualRunRendersAnOrdinaryGoal(t *testing.T) {
	w := setup(t)
	w.must(onboard())
	goalID := w.newID()
	out := w.must(&RunRitual{Name: "onboard", Params: json.RawMessage(`{"customer": "ACME"}`), GoalID: goalID})
	require.Equal(t, goalID, out.Reply.ID)
	require.Len(t, out.Reply.Tasks, 2)
	g := w.goal(goalID)
	require.Equal(t, "Onboard ACME", g.Title)
	require.Equal(t, []string{"ACME has an account in eu"}, g.SuccessCriteria, "the default of region")
	require.Equal(t, &RitualRef{Name: "onboard", Version: 1}, g.Ritual)
	require.Equal(t, &RitualRef{Name: "onboard", Version: 1}, eventOf[*GoalCreated](t, out, goalID).Ritual)
	check, create := w.task(out.Reply.Tasks[0].TaskID), w.task(out.Reply.Tasks[1].TaskID)
	require.Equal(t, 3, check.Spec.Retry.MaxAttempts, "a whole-string reference keeps the param's type")
	require.JSONEq(t, `{"customer": "ACME", "region": "eu", "note": "costs ${currency}"}`, string(check.Spec.Input))
	require.JSONEq(t, `"ACME@eu/3"`, string(create.Spec.Input), "inside a longer string, a param's text")
	require.Equal(t, StateReady, check.State)
	require.Equal(t, StatePending, create.State)
	w.requireReplays()
}

func TestRitualRunOfAnEarlierVersion(t *testing.T) {
	w := setup(t)
	w.must(onboard())
	v2 := onboard()
	v2.Goal = json.RawMessage(`{"title": "Welcome ${customer}"}`)
	w.must(v2)
	old := w.must(&RunRitual{Name: "onboard", Version: 1, Params: json.RawMessage(`{"customer": "ACME"}`), GoalID: w.newID()})
	require.Equal(t, "Onboard ACME", w.goal(old.Reply.ID).Title)
	latest := w.must(&RunRitual{Name: "onboard", Params: json.RawMessage(`{"customer": "ACME"}`), GoalID: w.newID()})
	require.Equal(t, "Welcome ACME", w.goal(latest.Reply.ID).Title)
	require.Equal(t, uint64(2), w.goal(latest.Reply.ID).Ritual.Version)
	e := w.refused(&RunRitual{Name: "onboard", Version: 3, GoalID: w.newID()}, CodeNotFound)
	require.Equal(t, "/version", e.Field)
	e = w.refused(&RunRitual{Name: "nope", GoalID: w.newID()}, CodeNotFound)
	require.Equal(t, "/name", e.Field)
}

func TestRitualRunRefusesParamsThatFailTheSchema(t *testing.T) {
	w := setup(t)
	w.must(onboard())
	for params, field := range map[string]string{
		`{"customer": "ACME", "region": "mars"}`: "/params/region",
		`{"customer": ""}`:                       "/params/customer",
		`{"region": "us"}`:                       "/params/customer",
		`{"customer": "A", "extra": 1}`:          "/params/extra",
		`{"customer": "A", "attempts": "three"}`: "/params/attempts",
	} {
		e := w.refused(&RunRitual{Name: "onboard", Params: json.RawMessage(params), GoalID: w.newID()}, CodeInvalid)
		require.Equal(t, field, e.Field, params)
		require.Contains(t, e.Message, "ritual onboard version 1", params)
	}
}

func TestRitualRunRefusesARenderedGoalNamingTheTemplate(t *testing.T) {
	w := setup(t)
	d := onboard()
	d.Tasks = json.RawMessage(`[{"key": "check", "queue": "${customer}"}]`)
	w.must(d)
	e := w.refused(&RunRitual{Name: "onboard", Params: json.RawMessage(`{"customer": "Not A Queue"}`), GoalID: w.newID()}, CodeInvalid)
	require.Equal(t, "/ritual/tasks/0/queue", e.Field)
	require.Contains(t, e.Message, "ritual onboard version 1 renders a goal that goal.create refuses")
}

func TestRitualDefineRefusals(t *testing.T) {
	w := setup(t)
	undeclared := onboard()
	undeclared.Tasks = json.RawMessage(`[{"key": "check", "queue": "shell", "input": {"owner": "${owner}"}}]`)
	e := w.refused(undeclared, CodeInvalid)
	require.Equal(t, "/tasks/0/input/owner", e.Field)
	require.Contains(t, e.Message, `"owner"`)

	broken := onboard()
	broken.Parameters = json.RawMessage(`{"type": "object", "properties": {"customer": {"type": "strange"}}}`)
	e = w.refused(broken, CodeInvalid)
	require.Equal(t, "/parameters/properties/customer/type", e.Field, "the keyword that breaks the metaschema")

	open := onboard()
	open.Goal = json.RawMessage(`{"title": "Onboard ${customer"}`)
	e = w.refused(open, CodeInvalid)
	require.Equal(t, "/goal/title", e.Field)

	external := onboard()
	external.Parameters = json.RawMessage(`{"$ref": "https://example.com/schema.json"}`)
	e = w.refused(external, CodeInvalid)
	require.Equal(t, "/parameters", e.Field)
	require.Empty(t, w.aggregates(AggRitual))
}

func TestParseTemplate(t *testing.T) {
	for s, want := range map[string][]templatePart{
		"":                {{lit: ""}},
		"plain $5":        {{lit: "plain $5"}},
		"${a}":            {{ref: "a"}},
		"x ${a-b}${_c} y": {{lit: "x "}, {ref: "a-b"}, {ref: "_c"}, {lit: " y"}},
		"$${a}":           {{lit: "${a}"}},
		"$$${a}":          {{lit: "$${a}"}}, // "$", then "$${" for "${", then "a}"
	} {
		got, err := parseTemplate(s)
		require.NoError(t, err, s)
		require.Equal(t, want, got, s)
	}
	for _, s := range []string{"${", "${}", "${1a}", "${a b}", "x ${a"} {
		_, err := parseTemplate(s)
		require.Error(t, err, s)
	}
}

func FuzzParseTemplate(f *testing.F) {
	for _, s := range []string{"${a}", "x $${y} ${z}", "${", "$$$", "${a}${b}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		parts, err := parseTemplate(s)
		if err != nil {
			return
		}
		for _, p := range parts {
			if p.ref != "" && !validParamName(p.ref) {
				t.Fatalf("%q: reference to %q", s, p.ref)
			}
		}
	})
}

// The roles of the ritual subjects: admins and clients define and run,
// viewers read, executors and approvers neither.
// TestOnlyAnAdminChangesWhoMayDoWhat: the commands that change members,
// approvers, a workspace's configuration or its keys are no other role's;
// workspace.create is not even a workspace admin's (the service's own
// admins send it: no member exists before it).
func TestOnlyAnAdminChangesWhoMayDoWhat(t *testing.T) {
	for _, name := range []string{"approver.register", "approver.revoke", "member.add", "member.remove",
		"goal.shred", "workspace.shred", "workspace.configure"} {
		for _, r := range Roles {
			require.Equal(t, r == RoleAdmin, MayCommand(r, name), "%s %s", r, name)
		}
	}
	for _, r := range Roles {
		require.False(t, MayCommand(r, "workspace.create"), r)
	}
}

func TestRitualRoles(t *testing.T) {
	for _, r := range Roles {
		client := r == RoleAdmin || r == RoleClient
		require.Equal(t, client, MayCommand(r, "ritual.define"), r)
		require.Equal(t, client, MayCommand(r, "ritual.run"), r)
		reader := client || r == RoleViewer
		require.Equal(t, reader, MayQuery(r, "ritual.get"), r)
		require.Equal(t, reader, MayQuery(r, "ritual.list"), r)
	}
}

func TestRitualRunRefusesAParamWithNoValue(t *testing.T) {
	w := setup(t)
	d := onboard()
	d.Parameters = json.RawMessage(`{"type": "object", "properties": {"customer": {"type": "string"}, "note": {"type": "string"}}}`)
	d.Goal = json.RawMessage(`{"title": "Onboard ${customer}", "description": "${note}"}`)
	d.Tasks = json.RawMessage(`[{"key": "a", "queue": "shell"}]`)
	w.must(d)
	e := w.refused(&RunRitual{Name: "onboard", Params: json.RawMessage(`{"customer": "ACME"}`), GoalID: w.newID()}, CodeInvalid)
	require.Equal(t, "/params/note", e.Field, "referred to, neither given nor defaulted")
}

func TestRitualRunRefusesParamsThatRenderTooMuch(t *testing.T) {
	w := setup(t)
	d := onboard()
	d.Parameters = json.RawMessage(`{"type": "object", "properties": {"big": {"type": "string"}}}`)
	d.Goal = json.RawMessage(`{"title": "t", "description": "${big}"}`)
	d.Tasks = json.RawMessage(`[` + strings.Repeat(`{"key": "k", "queue": "q", "input": "${big}${big}"},`, 10) + `{"key": "z", "queue": "q"}]`)
	w.must(d)
	big, err := json.Marshal(map[string]string{"big": strings.Repeat("x", 100_000)})
	require.NoError(t, err)
	e := w.refused(&RunRitual{Name: "onboard", Params: big, GoalID: w.newID()}, CodeTooLarge)
	require.Equal(t, "/params", e.Field)
}

// A retried run is its first outcome, even once the ritual has a newer
// version whose schema its params would fail.
func TestRitualRunRetryIsItsFirstOutcome(t *testing.T) {
	w := setup(t)
	w.must(onboard())
	run := &RunRitual{Name: "onboard", Params: json.RawMessage(`{"customer": "ACME"}`), GoalID: w.newID()}
	first, err := w.runID("run-1", run)
	require.NoError(t, err)
	v2 := onboard()
	v2.Parameters = json.RawMessage(`{"type": "object", "required": ["owner"], "properties": {"customer": {"type": "string"},
		"region": {"type": "string"}, "attempts": {"type": "integer"}, "owner": {"type": "string"}}}`)
	w.must(v2)
	again := w.duplicate("run-1", run)
	require.Equal(t, first.Reply.Tasks, again.Reply.Tasks)
}

// FuzzRitualRun runs a ritual with any params: a run is taken or refused
// with a *Error naming a field, never anything else.
func FuzzRitualRun(f *testing.F) {
	for _, s := range []string{`{"customer": "ACME"}`, `{"customer": "A", "region": "us", "attempts": 2}`, `{}`, `[]`, `{"customer": "${x}"}`,
		`{"customer": "A", "attempts": 1e400}`, `{"customer": "A", "attempts": "3"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, params []byte) {
		w := setup(t)
		w.must(onboard())
		out, err := Execute(w.o, &RunRitual{Name: "onboard", Params: params, GoalID: w.newID()}, Meta{CommandID: "run", Workspace: w.ws, Actor: "a", Now: w.now})
		if err != nil {
			var de *Error
			if !errors.As(err, &de) || de.Message == "" {
				t.Fatalf("%q: %T %v", params, err, err)
			}
			return
		}
		if len(out.Changes) == 0 {
			t.Fatalf("%q: taken, but nothing made", params)
		}
	})
}
