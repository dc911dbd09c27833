package integration

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/schemas"
)

// Three levels of delegation through `dwr worker` ride out two kill -9 of
// `dwr serve`: one once every top task has delegated, one while the leaves
// run. Every goal of the tree is achieved once, every task accepted once,
// each task delegated once, and each leaf's result reaches its top task two
// levels up.
func TestDelegationThreeLevelsSurvivesKillNine(t *testing.T) {
	e := newExecEnv(t)
	phase := phases(t)
	e.worker("agent", "agents", 5*time.Second, 5, "delegate.sh", "LEAF_SECONDS=2")
	const tops = 3
	var top []string
	for i := range tops {
		var r schemas.CommandResult
		require.NoError(t, json.Unmarshal(e.k.Command(t, "goal.create", map[string]any{"title": fmt.Sprint("top ", i),
			"tasks": []map[string]any{{"key": "lead", "queue": "agents", "input": map[string]int{"depth": 1}}}}), &r))
		top = append(top, r.Tasks[0].TaskID)
	}
	for _, id := range top {
		e.k.WaitTask(t, id, 30*time.Second, "waiting on its delegation", func(t domain.Task) bool {
			return t.State == domain.StateWaiting && t.Wait != nil && t.Wait.Kind == domain.WaitDelegation
		})
	}
	phase("every top task delegated")
	e.srv.kill9(t)
	e.startServe()
	phase("restarted after the first kill -9")

	leafRunning := func() bool {
		var running []domain.Task
		if err := e.c.query("task.list", schemas.Query{State: domain.StateRunning}, 0, &running); err != nil {
			return false
		}
		for _, tk := range running {
			if strings.Contains(string(tk.Spec.Input), `"depth":3`) {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(40 * time.Second)
	for !leafRunning() {
		require.True(t, time.Now().Before(deadline), "no leaf ran within 40s")
		tick := time.NewTimer(50 * time.Millisecond)
		<-tick.C
	}
	phase("a leaf runs")
	e.srv.kill9(t)
	e.startServe()
	phase("restarted after the second kill -9")

	goals := map[string]bool{}
	for _, id := range top {
		lead := e.k.WaitTask(t, id, 90*time.Second, "accepted", func(t domain.Task) bool { return t.State == domain.StateAccepted })
		// Walk the tree down: each level delegated once, to one goal,
		// achieved, whose one task was accepted once.
		tk := lead
		var leafID string
		for depth := 1; depth <= 3; depth++ {
			h := e.history(tk.ID)
			require.Equal(t, 1, count(h, "task.accepted"), "task %s at depth %d: %v", tk.ID, depth, h)
			if depth == 3 {
				require.Zero(t, count(h, "task.delegated"))
				leafID = tk.ID
				break
			}
			require.Equal(t, 1, count(h, "task.delegated"), "task %s at depth %d delegated once: %v", tk.ID, depth, h)
			require.Equal(t, 1, count(h, "task.delegation_ended"), "task %s: %v", tk.ID, h)
			require.Len(t, tk.Delegations, 1)
			d := tk.Delegations[0]
			require.Equal(t, domain.GoalStateAchieved, d.State)
			gh := e.history(d.GoalID)
			require.Equal(t, 1, count(gh, "goal.created"))
			require.Equal(t, 1, count(gh, "goal.achieved"), "goal %s: %v", d.GoalID, gh)
			goals[d.GoalID] = true
			require.Len(t, d.Tasks, 1)
			tk = e.k.Task(t, d.Tasks[0].TaskID)
		}
		// The leaf's result came up two levels, as each level's accepted
		// result.
		var res struct {
			Delegations struct {
				Deeper struct {
					Results struct {
						Child struct {
							Result struct {
								Delegations struct {
									Deeper struct {
										Results struct {
											Child struct{ Result struct{ Leaf string } }
										}
									}
								}
							}
						}
					}
				}
			}
		}
		last := lead.Attempts[len(lead.Attempts)-1]
		require.NoError(t, json.Unmarshal(last.Result, &res), string(last.Result))
		require.Equal(t, leafID, res.Delegations.Deeper.Results.Child.Result.Delegations.Deeper.Results.Child.Result.Leaf, string(last.Result))
	}
	require.Len(t, goals, 2*tops, "two child goals a top task")
	var all []schemas.GoalView
	require.NoError(t, e.c.query("goal.list", schemas.Query{Limit: 100}, 0, &all))
	require.Len(t, all, 3*tops, "no goal was made twice")
	t.Logf("delegation: %d trees of 3 levels through 2 kill -9 of dwr serve: %d goals, every task accepted once", tops, len(all))
}
