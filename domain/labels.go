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
	g, dup, err := x.commandGoal(c.GoalID)
	if err != nil || dup {
		return duplicateGoalOr(g, err)
	}
	labels, changed, err := relabel(g.Labels, c.Set, c.Remove, "goal "+g.ID)
	if err != nil {
		return Reply{}, err
	}
	if !changed {
		return duplicateGoal(g), nil // as the goal is labeled already: nothing to record
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

// labelTask sets and removes labels of a task (task.label), in whatever
// state the task is.
func (x *tx) labelTask(c *LabelTask) (Reply, error) {
	t, dup, err := x.commandTask(c.TaskID)
	if err != nil || dup {
		return duplicateTaskOr(t, err)
	}
	labels, changed, err := relabel(t.Labels, c.Set, c.Remove, "task "+t.ID)
	if err != nil {
		return Reply{}, err
	}
	if !changed {
		return duplicateTask(t), nil
	}
	if err := x.emit(t.ID, &TaskLabeled{Labels: labels}); err != nil {
		return Reply{}, err
	}
	return x.after(t.ID)
}

// duplicateTaskOr returns err, or when there is none the duplicate reply
// for t.
func duplicateTaskOr(t *Task, err error) (Reply, error) {
	if err != nil {
		return Reply{}, err
	}
	return duplicateTask(t), nil
}

// relabel returns have with set's labels set and remove's names removed
// (nil for none), and whether that changes them; it refuses, naming the
// field, a command that does neither, a name in both, labels that are not
// labels, or more than MaxLabels after it on what (a goal, a task).
func relabel(have, set Labels, remove []string, what string) (Labels, bool, error) {
	if len(set) == 0 && len(remove) == 0 {
		return nil, false, invalid("/set", "sets no label and removes none: give set, remove or both")
	}
	if err := CheckLabels("/set", set); err != nil {
		return nil, false, err
	}
	if len(remove) > MaxLabels {
		return nil, false, invalid("/remove", "has %d entries; at most %d are allowed", len(remove), MaxLabels)
	}
	labels := maps.Clone(have)
	if labels == nil {
		labels = Labels{}
	}
	maps.Copy(labels, set)
	for i, k := range remove {
		at := fmt.Sprintf("/remove/%d", i)
		if !ValidName(k) {
			return nil, false, invalid(at, "label %q is not a valid name: use 1-63 lower-case letters, digits, '_' or '-'", k)
		}
		if _, both := set[k]; both {
			return nil, false, invalid(at, "label %q is both set and removed: give it in one of them", k)
		}
		delete(labels, k)
	}
	if len(labels) > MaxLabels {
		return nil, false, invalid("/set", "would give %s %d labels; at most %d are allowed: remove some", what, len(labels), MaxLabels)
	}
	if maps.Equal(labels, have) {
		return nil, false, nil
	}
	if len(labels) == 0 {
		labels = nil
	}
	return labels, true, nil
}
