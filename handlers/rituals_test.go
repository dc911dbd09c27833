package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/schemas"
)

// onboardRitual is the body of a ritual.define of ritual onboard: a
// required customer, a region with a default, and a two-task plan.
func onboardRitual(title string) map[string]any {
	return map[string]any{"name": "onboard", "description": "Onboard a customer.",
		"parameters": map[string]any{"type": "object", "additionalProperties": false, "required": []string{"customer"},
			"properties": map[string]any{
				"customer": map[string]any{"type": "string", "minLength": 1},
				"region":   map[string]any{"enum": []string{"eu", "us"}, "default": "eu"},
			}},
		"goal": map[string]any{"title": title, "success_criteria": []string{"${customer} has an account"}},
		"tasks": []map[string]any{
			{"key": "check", "queue": "shell", "input": map[string]any{"customer": "${customer}", "region": "${region}"}},
			{"key": "create", "queue": "shell", "depends_on": []string{"check"}},
		}}
}

func TestRitualDefineAndRunOverTheWire(t *testing.T) {
	b := setup(t)
	rep, _ := b.mustCommand(t, "ritual.define", onboardRitual("Onboard ${customer}"))
	require.Equal(t, "onboard", rep.ID)
	require.Equal(t, uint64(1), rep.Version)
	before := b.lastSeq(t)
	rep, _ = b.mustCommand(t, "ritual.define", onboardRitual("Onboard ${customer}"))
	require.True(t, rep.Duplicate, "the same content again is the latest version")
	require.Equal(t, uint64(1), rep.Version)
	require.Equal(t, before, b.lastSeq(t), "a duplicate appends nothing")
	rep, _ = b.mustCommand(t, "ritual.define", onboardRitual("Welcome ${customer} (${region})"))
	require.Equal(t, uint64(2), rep.Version)

	// A run of version 1 still renders version 1; the goal and its tasks
	// are ordinary ones, and goal.created names the ritual and the version.
	run, seq := b.mustCommand(t, "ritual.run", map[string]any{"name": "onboard", "version": 1, "params": map[string]any{"customer": "ACME"}})
	require.Len(t, run.Tasks, 2)
	var g schemas.GoalView
	b.query(t, "goal.get", schemas.Query{ID: run.ID}, seq, &g)
	require.Equal(t, "Onboard ACME", g.Title)
	require.Equal(t, &schemas.RitualRef{Name: "onboard", Version: 1}, g.Ritual)
	require.Len(t, g.Nodes, 2)
	check := b.c.Task(t, run.Tasks[0].TaskID)
	require.JSONEq(t, `{"customer": "ACME", "region": "eu"}`, string(check.Spec.Input))
	require.Equal(t, domain.StateReady, check.State)
	var events []schemas.Event
	b.query(t, "events", schemas.Query{ID: run.ID}, seq, &events)
	require.Equal(t, "goal.created", events[0].Type)
	require.JSONEq(t, `{"name": "onboard", "version": 1}`, string(field(t, events[0].Data, "ritual")))
	require.Equal(t, "goal.plan_committed", events[1].Type)
	require.Equal(t, events[0].CommandID, events[1].CommandID, "the goal and its plan come from the one command")

	latest, seq := b.mustCommand(t, "ritual.run", map[string]any{"name": "onboard", "params": map[string]any{"customer": "Initech", "region": "us"}})
	b.query(t, "goal.get", schemas.Query{ID: latest.ID}, seq, &g)
	require.Equal(t, "Welcome Initech (us)", g.Title)
	require.Equal(t, uint64(2), g.Ritual.Version)

	// The queries: a version, the latest, the list; and the ritual's history.
	var v schemas.RitualVersion
	b.query(t, "ritual.get", schemas.Query{ID: "onboard", Version: 1}, seq, &v)
	require.Equal(t, uint64(1), v.Version)
	require.JSONEq(t, `{"title": "Onboard ${customer}", "success_criteria": ["${customer} has an account"]}`, string(v.Goal))
	b.query(t, "ritual.get", schemas.Query{ID: "onboard"}, seq, &v)
	require.Equal(t, uint64(2), v.Version)
	require.NotEmpty(t, v.DefinedBy)
	var list []schemas.Ritual
	b.query(t, "ritual.list", schemas.Query{}, seq, &list)
	require.Len(t, list, 1)
	require.Equal(t, uint64(2), list[0].Version)
	b.query(t, "events", schemas.Query{ID: "onboard", Aggregate: domain.AggRitual}, seq, &events)
	require.Len(t, events, 2)
	require.Equal(t, "default:onboard", events[1].AggregateID)
	r := b.request(t, "dwr.q.default.ritual.get", schemas.Query{ID: "onboard", Version: 3}, nil)
	require.False(t, r.OK)
	require.Equal(t, schemas.CodeNotFound, r.Error.Code)
	b.requireRebuildEqual(t)
}

// field returns the raw value of the top-level key of a JSON object.
func field(t *testing.T, obj json.RawMessage, key string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(obj, &m))
	return m[key]
}

func TestRitualRefusalsNameTheFieldAndAppendNothing(t *testing.T) {
	b := setup(t)
	b.mustCommand(t, "ritual.define", onboardRitual("Onboard ${customer}"))
	for _, c := range []struct {
		name  string
		cmd   string
		body  map[string]any
		field string
	}{
		{"a param failing its schema", "ritual.run", map[string]any{"name": "onboard", "params": map[string]any{"customer": "ACME", "region": "mars"}}, "/params/region"},
		{"a required param left out", "ritual.run", map[string]any{"name": "onboard"}, "/params/customer"},
		{"an undeclared parameter", "ritual.define", onboardRitual("Onboard ${customer} for ${owner}"), "/goal/title"},
		{"a schema that does not compile", "ritual.define", func() map[string]any {
			d := onboardRitual("Onboard ${customer}")
			d["parameters"] = map[string]any{"type": "object", "properties": map[string]any{"customer": map[string]any{"minLength": "one"}}}
			return d
		}(), "/parameters/properties/customer/minLength"},
	} {
		before := b.lastSeq(t)
		r := b.command(t, c.cmd, c.body, "")
		require.False(t, r.OK, c.name)
		require.Equal(t, schemas.CodeInvalid, r.Error.Code, c.name)
		require.NotEmpty(t, r.Error.Fields, c.name)
		require.Equal(t, c.field, r.Error.Fields[0].Pointer, "%s: %s", c.name, r.Error.Message)
		require.Equal(t, before, b.lastSeq(t), "%s: nothing appended", c.name)
	}
	var goals []schemas.GoalView
	b.query(t, "goal.list", schemas.Query{}, 0, &goals)
	require.Empty(t, goals)
}

// The roles of the ritual subjects, through the NATS permissions and the
// service: admins and clients define and run, viewers read, executors and
// approvers do neither (TestPermissionMatrix probes every subject for every
// role; this follows the rituals' through to their answers).
func TestRitualPermissionsPerRole(t *testing.T) {
	b := setup(t)
	b.mustCommand(t, "ritual.define", onboardRitual("Onboard ${customer}"))
	for _, role := range domain.Roles {
		nc := b.st.Member(t, "default", "m-"+string(role), role, queuesOf(role)...)
		may := role == domain.RoleAdmin || role == domain.RoleClient
		for name, body := range map[string]any{"ritual.define": onboardRitual(fmt.Sprintf("Onboard ${customer} by %s", role)),
			"ritual.run": map[string]any{"name": "onboard", "params": map[string]any{"customer": "ACME"}}} {
			require.Equal(t, may, answered(t, nc, "dwr.cmd.default."+name, body, may), "%s sends %s", role, name)
		}
		mayRead := role != domain.RoleExecutor && role != domain.RoleApprover
		for name, q := range map[string]schemas.Query{"ritual.get": {ID: "onboard"}, "ritual.list": {}} {
			require.Equal(t, mayRead, answered(t, nc, "dwr.q.default."+name, q, mayRead), "%s queries %s", role, name)
		}
	}
}

// answered sends body to subject on nc and reports whether it was taken: a
// reply that is not a refusal. NATS refuses a subject the identity may not
// publish on, and the request then goes unanswered: when a refusal is
// expected, a short wait is enough (an allowed request is answered in
// milliseconds).
func answered(t *testing.T, nc *nats.Conn, subject string, body any, expected bool) bool {
	t.Helper()
	data, err := json.Marshal(body)
	require.NoError(t, err)
	wait := 300 * time.Millisecond
	if expected {
		wait = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	// The NATS server's refusal of the subject ends the wait.
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`) {
			cancel()
		}
	})
	defer nc.SetErrorHandler(nil)
	m, err := nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		return false
	}
	var r schemas.Reply
	require.NoError(t, json.Unmarshal(m.Data, &r))
	if !r.OK {
		require.Equal(t, schemas.CodeForbidden, r.Error.Code, "%s: %s", subject, r.Error.Message)
	}
	return r.OK
}

func queuesOf(r domain.Role) []string {
	if r == domain.RoleExecutor {
		return []string{"shell"}
	}
	return nil
}

// A run renders at most what the edge lets a goal.create be, so that its
// events fit in one record as the goal.create's would.
func TestRitualRenderBoundIsTheCommandBound(t *testing.T) {
	require.Equal(t, handlers.MaxCommandBytes, domain.MaxRenderedBytes)
}

// ritual.list pages by name, like the other list queries.
func TestRitualListPages(t *testing.T) {
	b := setup(t)
	for _, name := range []string{"b-ritual", "a-ritual", "c-ritual"} {
		d := onboardRitual("Onboard ${customer}")
		d["name"] = name
		b.mustCommand(t, "ritual.define", d)
	}
	var names []string
	q := schemas.Query{Limit: 2}
	for range 3 {
		r := b.request(t, "dwr.q.default.ritual.list", q, nil)
		require.True(t, r.OK, "%+v", r.Error)
		var page []schemas.Ritual
		require.NoError(t, json.Unmarshal(r.Result, &page))
		for _, p := range page {
			names = append(names, p.Name)
		}
		if r.Next == "" {
			break
		}
		q.After = r.Next
	}
	require.Equal(t, []string{"a-ritual", "b-ritual", "c-ritual"}, names)
	r := b.request(t, "dwr.q.default.ritual.list", schemas.Query{After: "not/a-name"}, nil)
	require.False(t, r.OK)
	require.Equal(t, schemas.CodeInvalid, r.Error.Code)
}
