package planfile

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// scheduleFields are the fields of a schedule's goal file.
var scheduleFields = []string{"goal", "tasks"}

// ScheduleGoal is what a schedule's file holds: the goal each slot starts
// (what goal.create takes, minus goal_id and tasks) and its first plan.
type ScheduleGoal struct {
	Goal  json.RawMessage
	Tasks json.RawMessage
}

// ReadScheduleFile reads the schedule's goal file at path with
// ReadSchedule.
func ReadScheduleFile(path string) (ScheduleGoal, error) {
	f, err := os.Open(path)
	if err != nil {
		return ScheduleGoal{}, fmt.Errorf("schedule file %s: %w", path, err)
	}
	defer func() { _ = f.Close() }() // read-only: nothing to lose
	return ReadSchedule(path, f)
}

// ReadSchedule reads a schedule's goal file from r (name names it in
// errors): YAML or JSON, an object {goal: {...}, tasks: [...]} of at most
// MaxSize bytes. It returns the goal and the tasks as JSON, or an error
// that names the file and the field: an unknown field, a missing one, and
// a task's start_after or deadline_after (they would count from the moment
// the file is read, not from a slot).
func ReadSchedule(name string, r io.Reader) (ScheduleGoal, error) {
	doc, err := readDoc("schedule file", name, r)
	if err != nil {
		return ScheduleGoal{}, err
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return ScheduleGoal{}, fmt.Errorf("schedule file %s must be an object with the fields %s", name, strings.Join(scheduleFields, ", "))
	}
	for k := range m {
		if !slices.Contains(scheduleFields, k) {
			return ScheduleGoal{}, fmt.Errorf("schedule file %s: /%s is not a field of a schedule's file (its fields: %s)", name, k, strings.Join(scheduleFields, ", "))
		}
	}
	for _, k := range scheduleFields {
		if _, has := m[k]; !has {
			return ScheduleGoal{}, fmt.Errorf("schedule file %s: /%s is required", name, k)
		}
	}
	if err := noRelativeTimes(m["tasks"], func(i int, rt [2]string) error {
		return fmt.Errorf("schedule file %s: /tasks/%d/%s: a schedule's task cannot count from when the file is read; leave it out (each slot's goal starts its tasks at once)",
			name, i, rt[0])
	}); err != nil {
		return ScheduleGoal{}, err
	}
	var out ScheduleGoal
	if out.Goal, err = json.Marshal(m["goal"]); err != nil {
		return out, fmt.Errorf("schedule file %s: /goal: %w", name, err)
	}
	if out.Tasks, err = json.Marshal(m["tasks"]); err != nil {
		return out, fmt.Errorf("schedule file %s: /tasks: %w", name, err)
	}
	return out, nil
}
