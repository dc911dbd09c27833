package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/schemas"
)

// `dwr goal get` shows what the goal's work has spent, each dimension
// beside its budget when it has one.
func TestGoalGetShowsTheSpendBesideTheBudget(t *testing.T) {
	v := &schemas.GoalView{Goal: &schemas.Goal{ID: "g", Title: "t", State: "failed",
		Envelope: schemas.Envelope{Budget: schemas.Budget{Tokens: 100, Attempts: 3}}},
		Spent: schemas.Spend{Attempts: 2, Tokens: 140, Cost: 1, WallMS: 3200}}
	var b bytes.Buffer
	require.NoError(t, printGoal(&b, v))
	require.Contains(t, b.String(), "spent: attempts 2/3  tokens 140/100  cost 1  wall 3.2s\n")
}
