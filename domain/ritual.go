package domain

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/dwr-run/dwr/schemas"
)

// A ritual is a versioned template of a goal and its first plan, with
// parameters (schemas.RitualTemplate). ritual.define stores a version;
// ritual.run renders one into an ordinary goal.create, decided in the same
// commit. The runtime never runs a ritual itself: what it creates is an
// ordinary goal, whose goal.created names the ritual and the version.
type (
	// Ritual is the state of a ritual aggregate: its name and its latest
	// version (Versioned.Version).
	Ritual = schemas.Ritual
	// RitualVersion is one version of a ritual, whole.
	RitualVersion = schemas.RitualVersion
	// RitualTemplate is the content of a ritual's version.
	RitualTemplate = schemas.RitualTemplate
	// RitualRef names a version of a ritual.
	RitualRef = schemas.RitualRef
)

// RitualDefined records a version of a ritual, whole: the ritual's
// aggregate version is the ritual's version.
type RitualDefined struct {
	Name    string `json:"name"`
	Version uint64 `json:"version"`
	Digest  string `json:"digest"`
	RitualTemplate
}

// MaxParamNameLength bounds a parameter's name in a template reference.
const MaxParamNameLength = 64

// MaxRenderedBytes bounds the goal.create a ritual renders: what the edge
// lets a goal.create body be (handlers.MaxCommandBytes), so that a run's
// events fit in one log record as the goal.create's would.
const MaxRenderedBytes = 512 << 10

// RitualID returns the aggregate id of the ritual name of workspace ws:
// "<ws>:<name>" (names hold no ':').
func RitualID(ws, name string) string { return ws + ":" + name }

// ritualVersionKey is the key of a ritual's version in an overlay.
func ritualVersionKey(id string, version uint64) string {
	return id + "/" + strconv.FormatUint(version, 10)
}

// NewRitualVersion returns the version of ritual that ev, an event of
// workspace ws that r recorded, defined.
func NewRitualVersion(ws string, ev *RitualDefined, r Recorded) *RitualVersion {
	return &RitualVersion{Workspace: ws, Name: ev.Name, Version: ev.Version, Digest: ev.Digest,
		RitualTemplate: ev.RitualTemplate, DefinedAt: r.Time, DefinedBy: r.Actor}
}

// RitualDigest returns the SHA-256, hex-encoded, of t in canonical JSON
// (schemas.CanonicalJSON): the same content has the same digest however it
// is spaced or its keys ordered. It returns an error when t does not encode.
func RitualDigest(t RitualTemplate) (string, error) {
	b, err := json.Marshal(t)
	if err != nil {
		return "", err
	}
	canon, err := schemas.CanonicalJSON(b)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}

// ApplyRitual applies e to x (nil before the first event) and returns the
// new state; x itself is not modified.
func ApplyRitual(x *Ritual, id, workspace string, e Event, r Recorded) (*Ritual, error) {
	ev, ok := e.(*RitualDefined)
	if !ok {
		return nil, fmt.Errorf("domain: ritual cannot apply %s", e.EventType())
	}
	var next uint64 = 1
	if x != nil {
		next = x.Version + 1
	}
	if ev.Version != next {
		return nil, fmt.Errorf("domain: ritual %s: version %d defined, want %d", id, ev.Version, next)
	}
	if x == nil {
		return &Ritual{Workspace: workspace, Name: ev.Name, Description: ev.Description, Digest: ev.Digest,
			Versioned: created(r)}, nil
	}
	x = x.Clone()
	x.Description, x.Digest = ev.Description, ev.Digest
	applied(&x.Versioned, r)
	return x, nil
}

// checkTemplates checks that the goal template is an object and the plan
// template a list, and that every parameter their strings refer to is one
// the parameters' schema declares: else invalid, naming the string.
func checkTemplates(ps *schemas.ParamsSchema, t RitualTemplate) error {
	goal, err := decodeTemplate(t.Goal)
	if _, ok := goal.(map[string]any); err != nil || !ok {
		return invalid("/goal", "must be an object: what goal.create takes, without goal_id and tasks")
	}
	tasks, err := decodeTemplate(t.Tasks)
	if list, ok := tasks.([]any); err != nil || !ok || len(list) == 0 {
		return invalid("/tasks", "must be a list of task specs, at least one: what goal.create's tasks take")
	} else if len(list) > MaxPlanTasks {
		return invalid("/tasks", "has %d tasks; at most %d are allowed", len(list), MaxPlanTasks)
	}
	check := func(ptr, s string) error {
		parts, err := parseTemplate(s)
		if err != nil {
			return invalid(ptr, "%v", err)
		}
		for _, p := range parts {
			if p.ref != "" && !ps.Declares(p.ref) {
				return invalid(ptr, "refers to parameter %q, which the parameters' schema does not declare (declared: %s): add it under /parameters/properties, or write $${ for a literal ${",
					p.ref, strings.Join(quoteAll(ps.Names()), ", "))
			}
		}
		return nil
	}
	if err := walkStrings(goal, "/goal", check); err != nil {
		return err
	}
	return walkStrings(tasks, "/tasks", check)
}

// quoteAll quotes names for a message: at most 20 of them, then how many
// more there are.
func quoteAll(names []string) []string {
	if len(names) == 0 {
		return []string{"none"}
	}
	const shown = 20
	out := make([]string, 0, min(len(names), shown)+1)
	for _, n := range names[:min(len(names), shown)] {
		out = append(out, strconv.Quote(n))
	}
	if len(names) > shown {
		out = append(out, fmt.Sprintf("and %d more", len(names)-shown))
	}
	return out
}

// decodeTemplate decodes a template, its numbers kept as written.
func decodeTemplate(b json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// walkStrings calls fn with every string value in v and its JSON pointer
// (below ptr), in a fixed order, until fn returns an error.
func walkStrings(v any, ptr string, fn func(ptr, s string) error) error {
	switch x := v.(type) {
	case string:
		return fn(ptr, x)
	case []any:
		for i, e := range x {
			if err := walkStrings(e, ptr+"/"+strconv.Itoa(i), fn); err != nil {
				return err
			}
		}
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			if err := walkStrings(x[k], ptr+"/"+pointerToken(k), fn); err != nil {
				return err
			}
		}
	}
	return nil
}

func pointerToken(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

// templatePart is a piece of a template string: literal text, or a
// reference to the parameter ref.
type templatePart struct {
	lit string
	ref string
}

// parseTemplate splits s into literal text and parameter references:
// "${name}" refers to parameter name (a letter or '_', then letters,
// digits, '_' or '-'), "$${" is a literal "${", and any other '$' is
// itself. A "${" that does not start a reference is an error.
func parseTemplate(s string) ([]templatePart, error) {
	var parts []templatePart
	var lit strings.Builder
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			lit.WriteString("${")
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			end := strings.IndexByte(s[i:], '}')
			name := ""
			if end > 0 {
				name = s[i+2 : i+end]
			}
			if !validParamName(name) {
				return nil, fmt.Errorf("has a \"${\" that starts no parameter reference: write ${name} with the name of a parameter (letters, digits, '_' or '-'), or $${ for a literal ${")
			}
			if lit.Len() > 0 {
				parts = append(parts, templatePart{lit: lit.String()})
				lit.Reset()
			}
			parts = append(parts, templatePart{ref: name})
			i += end + 1
		default:
			lit.WriteByte(s[i])
			i++
		}
	}
	if lit.Len() > 0 || len(parts) == 0 {
		parts = append(parts, templatePart{lit: lit.String()})
	}
	return parts, nil
}

func validParamName(name string) bool {
	if name == "" || len(name) > MaxParamNameLength {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
		if !letter && (i == 0 || (c < '0' || c > '9') && c != '-') {
			return false
		}
	}
	return true
}

// renderGoal renders the templates of t with params (a JSON object, its
// defaults in place) into the body of a goal.create: the goal template's
// fields, the plan template as its tasks, and goalID when it is set. A
// string that is exactly "${name}" becomes the param's JSON value; a
// reference inside a longer string, the param's text (a string as it is,
// any other value as JSON). It refuses (invalid, naming /params/<name>) a
// reference to a param that was not given and has no default, and
// (too_large, naming /params) params that would render more than
// MaxRenderedBytes.
func renderGoal(t RitualTemplate, params json.RawMessage, goalID string) ([]byte, error) {
	values, err := decodeTemplate(params)
	m, ok := values.(map[string]any)
	if err != nil || !ok {
		return nil, invalid("/params", "must be a JSON object")
	}
	r := &renderer{params: m, texts: map[string]string{}, left: MaxRenderedBytes - len(t.Goal) - len(t.Tasks)}
	goal, _ := decodeTemplate(t.Goal)
	tasks, _ := decodeTemplate(t.Tasks)
	g, err := r.render(goal)
	if err != nil {
		return nil, err
	}
	body, ok := g.(map[string]any)
	if !ok {
		return nil, invalid("/ritual/goal", "the ritual's goal template is not an object")
	}
	if body["tasks"], err = r.render(tasks); err != nil {
		return nil, err
	}
	if goalID != "" {
		body["goal_id"] = goalID
	}
	b, err := json.Marshal(body)
	if err == nil && len(b) > MaxRenderedBytes {
		return nil, tooMuch()
	}
	return b, err
}

// tooMuch is the refusal of params that render more than MaxRenderedBytes.
func tooMuch() error {
	return &Error{Code: CodeTooLarge, Field: "/params",
		Message: fmt.Sprintf("the ritual's templates with these params render more than a goal.create may hold (%d bytes)", MaxRenderedBytes)}
}

// renderer replaces parameter references with params, within a budget of
// bytes (left) that the substitutions may add.
type renderer struct {
	params map[string]any
	texts  map[string]string // a param's text (a string as it is, else its JSON)
	left   int
}

func (r *renderer) render(v any) (any, error) {
	switch x := v.(type) {
	case string:
		return r.renderString(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			var err error
			if out[i], err = r.render(e); err != nil {
				return nil, err
			}
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(x))
		for _, k := range slices.Sorted(maps.Keys(x)) { // in order: the same refusal every time
			var err error
			if out[k], err = r.render(x[k]); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return v, nil
}

func (r *renderer) renderString(s string) (any, error) {
	parts, err := parseTemplate(s)
	if err != nil {
		return nil, invalid("/ritual", "a template string %v", err) // checked when the ritual was defined
	}
	if len(parts) == 1 && parts[0].ref != "" {
		if _, err := r.text(parts[0].ref); err != nil { // given, and within the budget
			return nil, err
		}
		return r.params[parts[0].ref], nil // its JSON value, its type kept
	}
	var b strings.Builder
	for _, p := range parts {
		if p.ref == "" {
			b.WriteString(p.lit)
			continue
		}
		text, err := r.text(p.ref)
		if err != nil {
			return nil, err
		}
		b.WriteString(text)
	}
	return b.String(), nil
}

// text returns the text of param name, counting it against the budget.
func (r *renderer) text(name string) (string, error) {
	v, given := r.params[name]
	if !given {
		return "", invalid("/params/"+pointerToken(name), "is required: the ritual's templates refer to it and its schema gives it no default")
	}
	t, ok := r.texts[name]
	if !ok {
		if s, isString := v.(string); isString {
			t = s
		} else {
			b, err := json.Marshal(v)
			if err != nil {
				return "", invalid("/params/"+pointerToken(name), "does not encode: %v", err)
			}
			t = string(b)
		}
		r.texts[name] = t
	}
	if r.left -= len(t); r.left < 0 {
		return "", tooMuch()
	}
	return t, nil
}
