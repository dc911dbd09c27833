package domain

import "time"

// GoalSpend returns what goal g's work has used by now: over the tasks of
// every version of its plan (the current one's and RetiredTasks, so that a
// revision that drops spent tasks does not give their spend back) and every
// attempt of each, failed ones included, and over the goals those tasks
// delegated to, down the tree: work handed on is still the goal's. task
// and goal read a task's and a goal's state (nil when there is none).
func GoalSpend(g *Goal, now time.Time, task func(id string) (*Task, error), goal func(id string) (*Goal, error)) (Spend, error) {
	return goalSpend(g, now, task, goal, 0)
}

func goalSpend(g *Goal, now time.Time, task func(id string) (*Task, error), goal func(id string) (*Goal, error), depth int) (Spend, error) {
	var sp Spend
	if r := g.RetiredSpend; r != nil {
		sp = *r
	}
	for _, id := range g.RetiredTasks {
		if err := addTaskSpend(&sp, id, now, task, goal, depth); err != nil {
			return Spend{}, err
		}
	}
	for _, pt := range g.Plan {
		if err := addTaskSpend(&sp, pt.TaskID, now, task, goal, depth); err != nil {
			return Spend{}, err
		}
	}
	return sp, nil
}

// addTaskSpend adds to sp what task id has used by now: every attempt of it,
// failed ones included, and the goals it delegated to, down the tree.
func addTaskSpend(sp *Spend, id string, now time.Time, task func(id string) (*Task, error), goal func(id string) (*Goal, error), depth int) error {
	t, err := task(id)
	if err != nil || t == nil {
		return err
	}
	for _, d := range t.Delegations {
		if depth >= MaxDelegationDepth {
			break // deeper than delegations go: a history that is not one
		}
		c, err := goal(d.GoalID)
		if err != nil || c == nil {
			return err
		}
		csp, err := goalSpend(c, now, task, goal, depth+1)
		if err != nil {
			return err
		}
		sp.Add(csp)
	}
	sp.Attempts += t.AttemptCount()
	if e := t.Earlier; e != nil {
		sp.Add(Spend{Tokens: e.Tokens, Cost: e.Cost, WallMS: e.WallMS})
	}
	for i := range t.Attempts {
		sp.Add(attemptSpend(&t.Attempts[i], now))
	}
	return nil
}

// attemptSpend returns what attempt a used: its model steps' tokens and
// cost, and the time it ran — until it ended, or until now while it runs.
func attemptSpend(a *Attempt, now time.Time) Spend {
	var sp Spend
	for _, s := range a.ModelSteps {
		sp.Tokens += s.Tokens
		sp.Cost += s.Cost
	}
	end := now
	if a.EndedAt != nil {
		end = *a.EndedAt
	}
	if d := end.Sub(a.StartedAt); d > 0 {
		sp.WallMS = d.Milliseconds()
	}
	return sp
}
