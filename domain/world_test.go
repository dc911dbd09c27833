package domain

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Apply reads an aggregate from its States, applies the event and keeps the
// result, at the next version or the one given; a version that does not
// follow, an unknown kind or a failing apply leave the States unchanged.
func TestApplyKeepsTheNewStateAtTheNextVersion(t *testing.T) {
	o := NewOverlay(Empty{})
	r := Recorded{CommandID: "c", Actor: "a", Time: epoch}
	v, err := Apply(overlayStates{o}, AggWorkspace, "acme", "acme", 0, &WorkspaceCreated{Name: "acme"}, r)
	require.NoError(t, err)
	require.Equal(t, uint64(1), v)
	v, err = Apply(overlayStates{o}, AggTask, "t1", "acme", 1, &TaskCreated{State: StateReady}, r)
	require.NoError(t, err)
	require.Equal(t, uint64(1), v)
	v, err = Apply(overlayStates{o}, AggTask, "t1", "acme", 0, &TaskCancelled{}, r)
	require.NoError(t, err)
	require.Equal(t, uint64(2), v)
	task, err := o.Task("t1")
	require.NoError(t, err)
	require.Equal(t, StateCancelled, task.State)
	require.Equal(t, uint64(2), task.Version)

	_, err = Apply(overlayStates{o}, AggGoal, "g1", "acme", 2, &GoalCreated{Title: "g"}, r)
	require.ErrorContains(t, err, "domain: goal g1: event version 2, want 1")
	_, err = Apply(overlayStates{o}, AggTask, "t2", "acme", 0, &TaskCancelled{}, r)
	require.ErrorContains(t, err, "before task t2 was created")
	_, err = Apply(overlayStates{o}, "thing", "x", "acme", 0, &TaskCancelled{}, r)
	require.ErrorContains(t, err, `unknown aggregate type "thing"`)
	g, err := o.Goal("g1")
	require.NoError(t, err)
	require.Nil(t, g)
	tk, err := o.Task("t2")
	require.NoError(t, err)
	require.Nil(t, tk)
}
