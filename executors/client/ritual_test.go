package client_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/schemas"
)

// A client defines a ritual twice and runs both versions: the goals are
// ordinary ones that name their ritual's version; a param its schema
// refuses is an ErrInvalid naming the param.
func TestClientDefinesAndRunsRituals(t *testing.T) {
	s := start(t)
	ctx := within(t, 30*time.Second)
	c := connectAs(t, s, "caller", domain.RoleClient)
	def := schemas.DefineRitual{Name: "release", RitualTemplate: schemas.RitualTemplate{
		Parameters: json.RawMessage(`{"type": "object", "required": ["version"], "properties": {"version": {"type": "string", "pattern": "^v[0-9]+$"}}}`),
		Goal:       json.RawMessage(`{"title": "Release ${version}"}`),
		Tasks:      json.RawMessage(`[{"key": "build", "queue": "ci", "input": {"tag": "${version}"}}]`),
	}}
	r, err := c.DefineRitual(ctx, def)
	require.NoError(t, err)
	require.Equal(t, uint64(1), r.Version)
	def.Goal = json.RawMessage(`{"title": "Ship ${version}"}`)
	r, err = c.DefineRitual(ctx, def)
	require.NoError(t, err)
	require.Equal(t, uint64(2), r.Version)

	run, err := c.RunRitual(ctx, schemas.RunRitual{Name: "release", Version: 1, Params: json.RawMessage(`{"version": "v7"}`)})
	require.NoError(t, err)
	g, err := c.Goal(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, "Release v7", g.Title)
	require.Equal(t, &schemas.RitualRef{Name: "release", Version: 1}, g.Ritual)
	require.Len(t, run.Tasks, 1)

	_, err = c.RunRitual(ctx, schemas.RunRitual{Name: "release", Params: json.RawMessage(`{"version": "7"}`)})
	require.ErrorIs(t, err, client.ErrInvalid)
	var we *schemas.Error
	require.ErrorAs(t, err, &we)
	require.Equal(t, "/params/version", we.Fields[0].Pointer)

	v, err := c.Ritual(ctx, "release", 0)
	require.NoError(t, err)
	require.Equal(t, uint64(2), v.Version)
	require.JSONEq(t, `{"title": "Ship ${version}"}`, string(v.Goal))
	var names []string
	for r, err := range c.Rituals(ctx) {
		require.NoError(t, err)
		names = append(names, r.Name)
	}
	require.Equal(t, []string{"release"}, names)
	_, err = c.Ritual(ctx, "nope", 0)
	require.ErrorIs(t, err, client.ErrNotFound)
}
