package domain

// prioritizeGoal sets a goal's priority (goal.prioritize), in whatever
// state the goal is: a failed goal's tasks retried take it too. The same
// priority again records nothing.
func (x *tx) prioritizeGoal(c *PrioritizeGoal) (Reply, error) {
	g, dup, err := x.commandGoal(c.GoalID)
	if err != nil || dup {
		return duplicateGoalOr(g, err)
	}
	if err := checkPriority("/priority", c.Priority, false); err != nil {
		return Reply{}, err
	}
	if effectivePriority(g.Priority) == c.Priority {
		return duplicateGoal(g), nil // as the goal is already: nothing to record
	}
	if err := x.emit(g.ID, &GoalPrioritized{Priority: c.Priority}); err != nil {
		return Reply{}, err
	}
	if g, err = x.o.Goal(g.ID); err != nil {
		return Reply{}, err
	}
	return goalReply(g), nil
}

// effectivePriority is priority p given, or DefaultPriority for none (0).
func effectivePriority(p int) int {
	if p == 0 {
		return DefaultPriority
	}
	return p
}
