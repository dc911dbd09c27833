package domain

import (
	"fmt"
	"maps"
	"slices"
)

// Bounds on a goal's labels: how many it holds, and each value's bytes.
const (
	MaxLabels     = 16
	MaxLabelValue = 256
)

// CheckLabels refuses labels that are not a goal's labels, naming field
// (the labels' JSON pointer) or the label at fault under it: more than
// MaxLabels, a name that is not a name (ValidName), a value that is not
// UTF-8 text of at most MaxLabelValue bytes.
func CheckLabels(field string, labels Labels) error {
	if len(labels) > MaxLabels {
		return invalid(field, "has %d labels; at most %d are allowed", len(labels), MaxLabels)
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) { // the same label named each time
		at := field + "/" + pointerToken(k)
		if !ValidName(k) {
			return invalid(at, "label %q is not a valid name: use 1-63 lower-case letters, digits, '_' or '-'", k)
		}
		if err := checkText(at, labels[k], MaxLabelValue, false); err != nil {
			return err
		}
	}
	return nil
}

// labelGoal sets and removes labels of a goal (goal.label), in whatever
// state the goal is: labels are for finding work, an ended goal's too.
func (x *tx) labelGoal(c *LabelGoal) (Reply, error) {
	g, err := x.goal(c.GoalID, "/goal_id")
	if err != nil {
		return Reply{}, err
	}
	if g.HasCommand(x.m.Key()) {
		return duplicateGoal(g), nil
	}
	if len(c.Set) == 0 && len(c.Remove) == 0 {
		return Reply{}, invalid("/set", "sets no label and removes none: give set, remove or both")
	}
	if err := CheckLabels("/set", c.Set); err != nil {
		return Reply{}, err
	}
	if len(c.Remove) > MaxLabels {
		return Reply{}, invalid("/remove", "has %d entries; at most %d are allowed", len(c.Remove), MaxLabels)
	}
	labels := maps.Clone(g.Labels)
	if labels == nil {
		labels = Labels{}
	}
	maps.Copy(labels, c.Set)
	for i, k := range c.Remove {
		at := fmt.Sprintf("/remove/%d", i)
		if !ValidName(k) {
			return Reply{}, invalid(at, "label %q is not a valid name: use 1-63 lower-case letters, digits, '_' or '-'", k)
		}
		if _, set := c.Set[k]; set {
			return Reply{}, invalid(at, "label %q is both set and removed: give it in one of them", k)
		}
		delete(labels, k)
	}
	if len(labels) > MaxLabels {
		return Reply{}, invalid("/set", "would give goal %s %d labels; at most %d are allowed: remove some", g.ID, len(labels), MaxLabels)
	}
	if maps.Equal(labels, g.Labels) {
		return duplicateGoal(g), nil // as the goal is labeled already: nothing to record
	}
	if len(labels) == 0 {
		labels = nil
	}
	if err := x.emit(g.ID, &GoalLabeled{Labels: labels}); err != nil {
		return Reply{}, err
	}
	g, err = x.o.Goal(g.ID)
	if err != nil {
		return Reply{}, err
	}
	return goalReply(g), nil
}
