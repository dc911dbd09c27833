package domain

import "time"

// GoalSpend returns what goal g's work has used by now: over the tasks of
// every version of its plan (the current one's and RetiredTasks, so that a
// revision that drops spent tasks does not give their spend back) and every
// attempt of each, failed ones included. task reads a task's state (nil
// when there is none).
func GoalSpend(g *Goal, now time.Time, task func(id string) (*Task, error)) (Spend, error) {
	var sp Spend
	add := func(id string) error {
		t, err := task(id)
		if err != nil || t == nil {
			return err
		}
		sp.Attempts += len(t.Attempts)
		for _, a := range t.Attempts {
			for _, s := range a.ModelSteps {
				sp.Tokens += s.Tokens
				sp.Cost += s.Cost
			}
			end := now
			if a.EndedAt != nil {
				end = *a.EndedAt
			}
			if d := end.Sub(a.StartedAt); d > 0 {
				sp.WallMS += d.Milliseconds()
			}
		}
		return nil
	}
	for _, id := range g.RetiredTasks {
		if err := add(id); err != nil {
			return Spend{}, err
		}
	}
	for _, pt := range g.Plan {
		if err := add(pt.TaskID); err != nil {
			return Spend{}, err
		}
	}
	return sp, nil
}
