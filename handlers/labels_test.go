package handlers_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/schemas"
)

// goal.list with labels: through the index of one label, the others
// checked, in both orders and page by page; goal.label moves a goal in and
// out of a listing at once.
func TestGoalListByLabels(t *testing.T) {
	b := setup(t)
	create := func(labels schemas.Labels) string {
		g, _ := b.mustCommand(t, "goal.create", schemas.CreateGoal{Title: "g", Labels: labels})
		return g.ID
	}
	acmeGold := create(schemas.Labels{"customer": "acme", "tier": "gold"})
	acme := create(schemas.Labels{"customer": "acme"})
	globex := create(schemas.Labels{"customer": "globex", "tier": "gold"})
	create(nil)
	flagged := create(schemas.Labels{"customer": "acme", "urgent": ""})
	_, seq := b.mustCommand(t, "goal.cancel", map[string]any{"goal_id": acme})
	b.applied(t, seq)

	list := func(q schemas.Query) []string { t.Helper(); return b.listedIDs(t, "goal.list", q) }
	require.Equal(t, []string{acmeGold, acme, flagged}, list(schemas.Query{Labels: schemas.Labels{"customer": "acme"}, Limit: 2}))
	require.Equal(t, []string{flagged, acme, acmeGold}, list(schemas.Query{Labels: schemas.Labels{"customer": "acme"}, NewestFirst: true, Limit: 1}))
	require.Equal(t, []string{acmeGold}, list(schemas.Query{Labels: schemas.Labels{"customer": "acme", "tier": "gold"}}))
	require.Equal(t, []string{acmeGold, globex}, list(schemas.Query{Labels: schemas.Labels{"tier": "gold"}}))
	require.Equal(t, []string{acme}, list(schemas.Query{Labels: schemas.Labels{"customer": "acme"}, State: schemas.GoalStateCancelled}))
	require.Equal(t, []string{flagged}, list(schemas.Query{Labels: schemas.Labels{"urgent": ""}}), "an empty value is a value: the label is there")
	require.Empty(t, list(schemas.Query{Labels: schemas.Labels{"customer": "ac"}}), "a value is matched whole")
	require.Empty(t, list(schemas.Query{Labels: schemas.Labels{"customer": "acme", "urgent": "yes"}}))

	// Relabeled, a goal leaves one listing and joins another; an ended
	// goal too.
	_, seq = b.mustCommand(t, "goal.label", map[string]any{"goal_id": acme, "set": map[string]any{"customer": "globex"}})
	b.applied(t, seq)
	require.Equal(t, []string{acmeGold, flagged}, list(schemas.Query{Labels: schemas.Labels{"customer": "acme"}}))
	require.Equal(t, []string{acme, globex}, list(schemas.Query{Labels: schemas.Labels{"customer": "globex"}}))
	_, seq = b.mustCommand(t, "goal.label", map[string]any{"goal_id": acmeGold, "remove": []string{"tier"}})
	b.applied(t, seq)
	require.Equal(t, []string{globex}, list(schemas.Query{Labels: schemas.Labels{"tier": "gold"}}))
	r := b.request(t, "dwr.q.default.goal.get", schemas.Query{ID: acmeGold}, nil)
	require.True(t, r.OK)
	var g schemas.Goal
	require.NoError(t, json.Unmarshal(r.Result, &g))
	require.Equal(t, schemas.Labels{"customer": "acme"}, g.Labels)

	// A page passes at most its scan limit of goals that hold the first
	// label but not the others.
	defer handlers.SetListScanLimit(1)()
	require.Equal(t, [][]string{{}, {flagged}}, b.pages(t, "goal.list", schemas.Query{Labels: schemas.Labels{"customer": "acme", "urgent": ""}}))

	// Bad filters are refused, naming the field; so are labels sent to
	// another list.
	for _, c := range []struct {
		query, field string
		q            any
	}{
		{"goal.list", "/labels", map[string]any{"labels": map[string]any{"Customer": "acme"}}},
		{"goal.list", "/labels", map[string]any{"labels": "customer=acme"}},
		{"approval.list", "/labels", schemas.Query{Labels: schemas.Labels{"customer": "acme"}}},
	} {
		r := b.request(t, "dwr.q.default."+c.query, c.q, nil)
		require.False(t, r.OK, "%v", c.q)
		require.Equal(t, schemas.CodeInvalid, r.Error.Code)
		require.NotEmpty(t, r.Error.Fields, "%+v", r.Error)
		require.Contains(t, r.Error.Fields[0].Pointer, c.field, "%+v", r.Error)
	}
}

// task.list with labels: a standalone task's labels, through the index of
// one label, with the other filters checked, in both orders; task.label
// moves a task in and out of a listing at once.
func TestTaskListByLabels(t *testing.T) {
	b := setup(t)
	create := func(queue string, labels schemas.Labels) string {
		r, _ := b.mustCommand(t, "task.create", schemas.CreateTask{Spec: schemas.TaskSpec{Queue: queue}, Labels: labels})
		return r.ID
	}
	a := create("mail", schemas.Labels{"customer": "acme"})
	other := create("mail", schemas.Labels{"customer": "globex"})
	c := create("sms", schemas.Labels{"customer": "acme", "urgent": ""})
	create("mail", nil)
	_, seq := b.mustCommand(t, "task.cancel", map[string]any{"task_id": a})
	b.applied(t, seq)

	list := func(q schemas.Query) []string { t.Helper(); return b.listedIDs(t, "task.list", q) }
	require.Equal(t, []string{a, c}, list(schemas.Query{Labels: schemas.Labels{"customer": "acme"}, Limit: 1}))
	require.Equal(t, []string{c, a}, list(schemas.Query{Labels: schemas.Labels{"customer": "acme"}, NewestFirst: true}))
	require.Equal(t, []string{c}, list(schemas.Query{Labels: schemas.Labels{"customer": "acme"}, Queue: "sms"}))
	require.Equal(t, []string{a}, list(schemas.Query{Labels: schemas.Labels{"customer": "acme"}, State: schemas.StateCancelled}))
	require.Equal(t, []string{c}, list(schemas.Query{Labels: schemas.Labels{"urgent": ""}}))

	_, seq = b.mustCommand(t, "task.label", map[string]any{"task_id": other, "set": map[string]any{"customer": "acme"}})
	b.applied(t, seq)
	require.Equal(t, []string{a, other, c}, list(schemas.Query{Labels: schemas.Labels{"customer": "acme"}}))
	require.Empty(t, list(schemas.Query{Labels: schemas.Labels{"customer": "globex"}}), "relabeled: gone from its old listing")

	r := b.request(t, "dwr.q.default.task.list", map[string]any{"labels": map[string]any{"Customer": "acme"}}, nil)
	require.False(t, r.OK)
	require.Equal(t, "/labels/Customer", r.Error.Fields[0].Pointer)
}

// listedIDs lists query name from q, every page, and returns the ids.
func (b *bundle) listedIDs(t *testing.T, name string, q schemas.Query) []string {
	t.Helper()
	got, _ := b.listAll(t, name, q)
	return ids(t, got)
}
