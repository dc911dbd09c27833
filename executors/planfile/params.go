package planfile

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/dwr-run/dwr/schemas"
)

// Params returns the params of a run of ritual version rv: base with each
// NAME=VALUE of pairs set (as `dwr ritual run --param` gives them), VALUE
// taken as text for a parameter whose schema says it is a string and as
// JSON for any other (a parameter the schema does not declare is JSON when
// it parses, else text). A VALUE that is not what its parameter needs is
// refused, naming it and saying how to write it.
func Params(rv *schemas.RitualVersion, base map[string]any, pairs []string) (json.RawMessage, error) {
	props := ParamProperties(rv.Parameters)
	for _, p := range pairs {
		name, value, ok := strings.Cut(p, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("--param %q: write NAME=VALUE", p)
		}
		prop, declared := props[name]
		if declared && textParam(prop) {
			base[name] = value
			continue
		}
		v, err := decodeJSON(value)
		if err != nil {
			if !declared {
				base[name] = value
				continue
			}
			return nil, fmt.Errorf("--param %s: parameter %q of ritual %s version %d is of type %s, so its value is read as JSON, which %q is not (%v); a string in JSON is quoted: --param '%s=\"%s\"'",
				p, name, rv.Name, rv.Version, ParamType(prop), value, err, name, value)
		}
		base[name] = v
	}
	return json.Marshal(base)
}

// decodeJSON decodes s as one JSON value, its numbers kept as written.
func decodeJSON(s string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("more follows the first JSON value")
	}
	return v, nil
}

// ParamProperties returns the properties of a ritual's parameters schema,
// by name (none when the schema has another shape: the service compiled
// it, so it declares nothing then).
func ParamProperties(schema json.RawMessage) map[string]map[string]any {
	var s struct {
		Properties map[string]map[string]any `json:"properties"`
	}
	_ = json.Unmarshal(schema, &s)
	return s.Properties
}

// ParamNames returns the names of a ritual's parameters, sorted.
func ParamNames(schema json.RawMessage) []string {
	return slices.Sorted(maps.Keys(ParamProperties(schema)))
}

// textParam reports whether a parameter's schema, prop, takes text: its
// type is "string" (alone), or it has no type and an enum or const of
// strings only.
func textParam(prop map[string]any) bool {
	switch t := prop["type"].(type) {
	case string:
		return t == "string"
	case []any:
		return len(t) == 1 && t[0] == "string"
	}
	values, _ := prop["enum"].([]any)
	if c, ok := prop["const"]; ok {
		values = append(values, c)
	}
	return len(values) > 0 && !slices.ContainsFunc(values, func(v any) bool { _, isString := v.(string); return !isString })
}

// ParamType says a parameter's type as its schema, prop, gives it: its
// type, else the values of its enum ("eu"|"us"), else "any".
func ParamType(prop map[string]any) string {
	if t, ok := prop["type"]; ok {
		b, _ := json.Marshal(t)
		return strings.Trim(string(b), `"`)
	}
	if values, ok := prop["enum"].([]any); ok {
		out := make([]string, len(values))
		for i, v := range values {
			b, _ := json.Marshal(v)
			out[i] = string(b)
		}
		return strings.Join(out, "|")
	}
	return "any"
}
