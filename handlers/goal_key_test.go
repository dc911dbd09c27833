package handlers_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/schemas"
)

// A goal's key is kept by the views: after a restart (the writer decides
// against the views alone), a goal.create with the key of an open goal is
// refused, or answered with it (if_open use); goal.get reads the goal made
// last with a key; once that goal has ended, the key takes a new goal.
func TestAGoalKeyOutlastsARestart(t *testing.T) {
	b := setupJetStream(t)
	first, _ := b.mustCommand(t, "goal.create", map[string]any{"title": "Order 1042", "key": "order-1042"})
	b.stop()

	b2 := start(t, b.dir)
	r := b2.command(t, "goal.create", map[string]any{"title": "Order 1042 again", "key": "order-1042"}, "")
	requireRefused(t, r, domain.CodeConflict)
	require.Contains(t, r.Error.Message, first.ID)
	used, seq := b2.mustCommand(t, "goal.create", map[string]any{"title": "Order 1042 again", "key": "order-1042", "if_open": "use"})
	require.Equal(t, first.ID, used.ID)
	require.True(t, used.Duplicate)
	var g schemas.GoalView
	b2.query(t, "goal.get", schemas.Query{Key: "order-1042"}, seq, &g)
	require.Equal(t, first.ID, g.ID)
	require.Equal(t, "order-1042", g.Key)

	b2.mustCommand(t, "goal.cancel", map[string]any{"goal_id": first.ID})
	second, seq := b2.mustCommand(t, "goal.create", map[string]any{"title": "Order 1042, a new try", "key": "order-1042"})
	require.NotEqual(t, first.ID, second.ID)
	b2.query(t, "goal.get", schemas.Query{Key: "order-1042"}, seq, &g)
	require.Equal(t, second.ID, g.ID, "the goal made last with the key")

	r = b2.request(t, "dwr.q.default.goal.get", schemas.Query{Key: "order-9"}, nil)
	requireRefused(t, r, domain.CodeNotFound)
	for name, q := range map[string]schemas.Query{"goal.get": {Key: "order-1042", ID: second.ID}, "task.list": {Key: "order-1042"}, "goal.get ": {Key: "-order"}} {
		name = strings.TrimSpace(name)
		r = b2.request(t, "dwr.q.default."+name, q, nil)
		require.False(t, r.OK, name)
		require.Equal(t, string(domain.CodeInvalid), r.Error.Code, r.Error.Message)
		require.Equal(t, "/key", r.Error.Fields[0].Pointer)
	}
}
