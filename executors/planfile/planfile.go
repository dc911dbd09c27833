package planfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/dwr-run/dwr/schemas"
)

// MaxSize bounds a plan file, in bytes, before it is parsed.
const MaxSize = 1 << 20

// ReadFile reads the plan file at path with Read, relative times counted
// from now.
func ReadFile(path string, now time.Time) ([]schemas.TaskSpec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("plan file %s: %w", path, err)
	}
	defer func() { _ = f.Close() }() // read-only: nothing to lose
	return Read(path, f, now)
}

// Read reads a plan file from r (name names it in errors): YAML or JSON, a
// list of tasks or an object with a "tasks" list, at most MaxSize bytes.
// Each task's start_after and deadline_after (a duration from now) become
// its start_at and deadline. It returns the tasks in the file's order, or
// an error that names the file and, for a task, where in it (such as
// /tasks/1/start_after).
func Read(name string, r io.Reader, now time.Time) ([]schemas.TaskSpec, error) {
	doc, err := readDoc("plan file", name, r)
	if err != nil {
		return nil, err
	}
	tasks, ok := doc.([]any)
	if m, isObject := doc.(map[string]any); isObject {
		tasks, ok = m["tasks"].([]any)
	}
	if !ok {
		return nil, fmt.Errorf("plan file %s must be a list of tasks or an object with a \"tasks\" list", name)
	}
	specs := make([]schemas.TaskSpec, len(tasks))
	for i, t := range tasks {
		if err := resolveRelativeTimes(i, t, now); err != nil {
			return nil, fmt.Errorf("plan file %s: %w", name, err)
		}
		if err := decodeStrict(t, &specs[i]); err != nil {
			return nil, fmt.Errorf("plan file %s: /tasks/%d: %w", name, i, err)
		}
	}
	return specs, nil
}

// readDoc reads a YAML or JSON document of at most MaxSize bytes from r;
// kind and name name it in errors ("plan file", its path). YAML is read as
// YAML 1.2 reads it: only true and false are booleans, so a key or value
// such as n, no, off or NO stays the string it is (YAML 1.1 read them as
// false).
func readDoc(kind, name string, r io.Reader) (any, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxSize+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s %s: %w", kind, name, err)
	case len(b) > MaxSize:
		return nil, fmt.Errorf("%s %s: larger than %d bytes", kind, name, MaxSize)
	}
	if !json.Valid(b) {
		var n yaml.Node
		if err := yaml.Unmarshal(b, &n); err != nil {
			return nil, fmt.Errorf("%s %s is neither YAML nor JSON: %w", kind, name, err)
		}
		untime(&n)
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, fmt.Errorf("%s %s is neither YAML nor JSON: %w", kind, name, err)
		}
		if b, err = json.Marshal(jsonValue(v)); err != nil {
			return nil, fmt.Errorf("%s %s: %w", kind, name, err)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%s %s: %w", kind, name, err)
	}
	return doc, nil
}

// untime keeps a date or time written without a tag (2026-01-02) the
// string it was written as: decoded, it would become a time, and its JSON
// another text (2026-01-02T00:00:00Z).
func untime(n *yaml.Node) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!timestamp" && n.Style&yaml.TaggedStyle == 0 {
		n.Tag = "!!str"
	}
	for _, c := range n.Content {
		untime(c)
	}
}

// jsonValue turns what YAML decoded into what JSON can encode: a mapping
// whose keys are not all strings gets each key in its YAML form (1, true).
func jsonValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			v[k] = jsonValue(x)
		}
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, x := range v {
			m[fmt.Sprint(k)] = jsonValue(x)
		}
		return m
	case []any:
		for i, x := range v {
			v[i] = jsonValue(x)
		}
	}
	return v
}

// relativeTimes are the plan file's conveniences, each a duration from now,
// and the absolute time on the wire that each becomes.
var relativeTimes = [][2]string{{"start_after", "start_at"}, {"deadline_after", "deadline"}}

// resolveRelativeTimes turns task i's start_after and deadline_after into
// its start_at and deadline, counted from now. A task that is not an object
// is left for decoding to refuse.
func resolveRelativeTimes(i int, task any, now time.Time) error {
	m, ok := task.(map[string]any)
	if !ok {
		return nil
	}
	for _, rt := range relativeTimes {
		after, at := rt[0], rt[1]
		v, ok := m[after]
		if !ok {
			continue
		}
		s, _ := v.(string)
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return fmt.Errorf("/tasks/%d/%s: %v is not a duration such as \"4s\" or \"2h\"", i, after, v)
		}
		if _, both := m[at]; both {
			return fmt.Errorf("/tasks/%d: give %s or %s, not both", i, at, after)
		}
		delete(m, after)
		m[at] = now.Add(d).UTC().Format(time.RFC3339Nano)
	}
	return nil
}

// decodeStrict decodes task, a decoded JSON value, into spec, refusing a
// field that spec does not have.
func decodeStrict(task any, spec *schemas.TaskSpec) error {
	j, err := json.Marshal(task)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	return dec.Decode(spec)
}
