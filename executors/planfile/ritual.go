package planfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/dwr-run/dwr/schemas"
)

// ritualFields are the fields of a ritual file, in the order they are
// listed in errors.
var ritualFields = []string{"name", "description", "parameters", "goal", "tasks"}

// ReadRitualFile reads the ritual file at path with ReadRitual.
func ReadRitualFile(path string) (schemas.DefineRitual, error) {
	f, err := os.Open(path)
	if err != nil {
		return schemas.DefineRitual{}, fmt.Errorf("ritual file %s: %w", path, err)
	}
	defer func() { _ = f.Close() }() // read-only: nothing to lose
	return ReadRitual(path, f)
}

// ReadRitual reads a ritual file from r (name names it in errors): YAML or
// JSON, an object with the fields of a ritual.define — name, description,
// parameters (a JSON Schema), goal and tasks (templates) — at most MaxSize
// bytes. It returns the command, or an error that names the file and the
// field (such as /tasks/1/start_after): an unknown field, and a task's
// start_after or deadline_after, which a template cannot hold (they would
// count from the moment the file is read, not from a run).
func ReadRitual(name string, r io.Reader) (schemas.DefineRitual, error) {
	var def schemas.DefineRitual
	doc, err := readDoc("ritual file", name, r)
	if err != nil {
		return def, err
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return def, fmt.Errorf("ritual file %s must be an object with the fields %s", name, strings.Join(ritualFields, ", "))
	}
	for k := range m {
		if !slices.Contains(ritualFields, k) {
			return def, fmt.Errorf("ritual file %s: /%s is not a field of a ritual (its fields: %s)", name, k, strings.Join(ritualFields, ", "))
		}
	}
	if err := noRelativeTimes(m["tasks"], func(i int, rt [2]string) error {
		return fmt.Errorf("ritual file %s: /tasks/%d/%s: a ritual's task cannot count from when the file is read; give %s (a time, which may be a parameter), or leave it out",
			name, i, rt[0], rt[1])
	}); err != nil {
		return def, err
	}
	j, err := json.Marshal(m)
	if err != nil {
		return def, fmt.Errorf("ritual file %s: %w", name, err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&def); err != nil {
		return def, fmt.Errorf("ritual file %s: %w", name, err)
	}
	return def, nil
}

// ReadParamsFile reads a params file at path: the params of a ritual's run,
// a YAML or JSON object of at most MaxSize bytes, a value for each
// parameter by name (numbers kept as written).
func ReadParamsFile(path string) (map[string]any, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("params file %s: %w", path, err)
	}
	defer func() { _ = f.Close() }() // read-only: nothing to lose
	doc, err := readDoc("params file", path, f)
	if err != nil {
		return nil, err
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("params file %s must be an object: a value for each parameter by name", path)
	}
	return m, nil
}

// noRelativeTimes returns refuse's error for the first task of tasks (a
// decoded list) that has a start_after or deadline_after: a template, read
// once and used later, cannot count from when it was read.
func noRelativeTimes(tasks any, refuse func(i int, rt [2]string) error) error {
	list, _ := tasks.([]any)
	for i, t := range list {
		task, _ := t.(map[string]any)
		for _, rt := range relativeTimes {
			if _, has := task[rt[0]]; has {
				return refuse(i, rt)
			}
		}
	}
	return nil
}
