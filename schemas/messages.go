package schemas

import (
	"cmp"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// patternText says in words what each pattern of the schemas asks for; a
// test checks that every pattern has its words here.
var patternText = map[string]string{
	`^[0-7][0-9A-HJKMNP-TV-Z]{25}$`:                       "must be a ULID: 26 characters of Crockford base32 in upper case, such as 01J9ZQ3M5W8X2K4N6P7R9T1V3B",
	`^[a-z0-9][a-z0-9_-]{0,62}$`:                          "must be a name of 1-63 lower-case letters, digits, '_' or '-', starting with a letter or digit",
	`^[a-z0-9][a-z0-9_-]{0,62}:[a-z0-9][a-z0-9_-]{0,62}$`: "must be a ritual's or a schedule's id: its workspace's name, ':' and its own name, such as default:onboard",
	`^([a-z0-9][a-z0-9_-]{0,62})?$`:                       "must be empty or a name of 1-63 lower-case letters, digits, '_' or '-', starting with a letter or digit",
	`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`:                  "must be a key of 1-128 letters, digits, '_', '.' or '-', starting with a letter or digit",
	`^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|μs|ms|s|m|h))+)$`:    `must be a duration such as "30s", "1m30s" or "250ms" (units h, m, s, ms, us, ns), or a number of seconds`,
	`^[0-9]{4}-[0-9]{2}-[0-9]{2}T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$`: timeText,
	`^[0-9a-f]{64}$`:       "must be a SHA-256 digest: 64 lower-case hex digits",
	`^[A-Za-z0-9_-]{43}$`:  "must be an attempt token: the 43 characters of unpadded base64url that the attempt's claim returned",
	`^[0-9a-f]{32}$`:       "must be 32 lower-case hex digits",
	`^(/([^~/]|~[01])*)*$`: "must be a JSON pointer such as /tasks/0/key",
	`^[0-7][0-9A-HJKMNP-TV-Z]{25}-[1-9][0-9]{0,8}$`: "must be an approval id: a task's ULID, '-' and the approval's number, such as 01J9ZQ3M5W8X2K4N6P7R9T1V3B-1",
	`^sha256:[0-9a-f]{64}$`:                         `must be an action digest: "sha256:" and 64 lower-case hex digits`,
	`^[0-9a-f]{16}$`:                                "must be a key id: 16 lower-case hex digits",
	`^[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=$`:        "must be the standard base64, with padding, of a 32-byte Ed25519 public key (44 characters)",
	`^[A-Za-z0-9+/]{85}[AQgw]==$`:                   "must be the standard base64, with padding, of a 64-byte Ed25519 signature (88 characters)",
	`^U[A-D][A-Z2-7]{54}$`:                          `must be a NATS user's public nkey: "U" and 55 more characters of base32 (A-Z, 2-7), such as UA5WUJ54Z23KILLCUOUNAKTPBVZWKMQVO4O6EQ5GHLAERIMLLHNCTYM5`,
}

const timeText = "must be an RFC 3339 time such as 2025-06-01T12:00:00Z or 2025-06-01T14:00:00.5+02:00"

// leaf is one thing wrong at one place; typ is set when the thing is only the
// value's type, which matters when alternatives are weighed.
type leaf struct {
	loc []string
	msg string
	typ *kind.Type
}

// fieldErrors flattens a validation error into its leaves, one FieldError
// each, with messages a person can act on.
func (r *registry) fieldErrors(ve *jsonschema.ValidationError) []FieldError {
	ls := r.leaves(ve)
	out := make([]FieldError, 0, len(ls))
	for _, l := range ls {
		out = append(out, FieldError{Pointer: pointer(l.loc), Message: l.msg})
	}
	return out
}

func (r *registry) leaves(e *jsonschema.ValidationError) []leaf {
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		out := make([]leaf, 0, len(k.Missing))
		for _, m := range k.Missing {
			out = append(out, leaf{loc: child(e.InstanceLocation, m), msg: "is required"})
		}
		return out
	case *kind.AdditionalProperties:
		known := r.properties(e.SchemaURL)
		out := make([]leaf, 0, len(k.Properties))
		for _, p := range k.Properties {
			out = append(out, unknownField(e.InstanceLocation, p, known))
		}
		return out
	case *kind.PropertyNames:
		// The name's own refusal, at the member it names. (Its location
		// is the object's as its parent has it: the library (v6.0.3) gives
		// this error the validator's location stack itself, which later
		// members overwrite.)
		var out []leaf
		for _, c := range e.Causes {
			for _, l := range r.leaves(c) {
				l.loc = child(e.InstanceLocation, k.Property)
				l.msg = "the name " + l.msg
				out = append(out, l)
			}
		}
		if len(out) > 0 {
			return out
		}
	case *kind.AnyOf:
		return r.alternatives(e)
	case *kind.OneOf:
		if len(k.Subschemas) == 0 {
			return r.alternatives(e)
		}
	}
	if len(e.Causes) > 0 {
		var out []leaf
		for _, c := range e.Causes {
			if _, ok := c.ErrorKind.(*kind.PropertyNames); ok {
				c.InstanceLocation = slices.Clone(e.InstanceLocation)
			}
			out = append(out, r.leaves(c)...)
		}
		return out
	}
	l := leaf{loc: e.InstanceLocation, msg: describe(e)}
	if t, ok := e.ErrorKind.(*kind.Type); ok {
		l.typ = t
	}
	return []leaf{l}
}

// alternatives explains a value that matches none of the schemas of an
// anyOf or oneOf. A branch that failed only on the value's type is the wrong
// branch; when exactly one branch failed on something else, its leaves are
// the explanation.
func (r *registry) alternatives(e *jsonschema.ValidationError) []leaf {
	var real [][]leaf
	var types []*kind.Type
	for _, c := range e.Causes {
		ls := r.leaves(c)
		wrongType := len(ls) > 0
		for _, l := range ls {
			if l.typ == nil || !slices.Equal(l.loc, e.InstanceLocation) {
				wrongType = false
			}
		}
		if wrongType {
			for _, l := range ls {
				types = append(types, l.typ)
			}
			continue
		}
		real = append(real, ls)
	}
	switch {
	case len(real) == 1:
		return real[0]
	case len(real) == 0 && len(types) > 0:
		var want []string
		for _, t := range types {
			for _, w := range t.Want {
				if !slices.Contains(want, w) {
					want = append(want, w)
				}
			}
		}
		t := &kind.Type{Got: types[0].Got, Want: want}
		return []leaf{{loc: e.InstanceLocation, msg: typeText(t), typ: t}}
	}
	if d := r.description(e.SchemaURL); d != "" {
		return []leaf{{loc: e.InstanceLocation, msg: "is not valid: " + d}}
	}
	var msgs []string
	for _, ls := range real {
		for _, l := range ls {
			if !slices.Contains(msgs, l.msg) {
				msgs = append(msgs, l.msg)
			}
		}
	}
	return []leaf{{loc: e.InstanceLocation, msg: strings.Join(msgs, ", or ")}}
}

// unknownField explains a property that its object's schema does not allow.
func unknownField(loc []string, p string, known []string) leaf {
	const maxName = 128
	if len(p) > maxName {
		return leaf{loc: loc, msg: fmt.Sprintf("has an unknown field %s (a name of %d bytes)", quote(p), len(p))}
	}
	msg := "is not a known field"
	if best := closest(p, known); best != "" {
		msg += fmt.Sprintf(": did you mean %q?", best)
	}
	if len(known) > 0 {
		msg += " (the known fields are " + strings.Join(known, ", ") + ")"
	}
	return leaf{loc: child(loc, p), msg: msg}
}

// describe says what is wrong in one leaf error.
func describe(e *jsonschema.ValidationError) string {
	switch k := e.ErrorKind.(type) {
	case *kind.Type:
		return typeText(k)
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = display(w)
		}
		return fmt.Sprintf("must be one of %s (got %s)", strings.Join(want, ", "), display(k.Got))
	case *kind.Const:
		return fmt.Sprintf("must be %s", display(k.Want))
	case *kind.Pattern:
		if t, ok := patternText[k.Want]; ok {
			return fmt.Sprintf("%s (got %s)", t, quote(k.Got))
		}
		return fmt.Sprintf("must match the pattern %s (got %s)", k.Want, quote(k.Got))
	case *kind.Format:
		if k.Want == "date-time" {
			return fmt.Sprintf("%s (got %s)", timeText, display(k.Got))
		}
		return fmt.Sprintf("must be a valid %s (got %s)", k.Want, display(k.Got))
	case *kind.MinLength:
		if k.Want == 1 {
			return "must not be empty"
		}
		return fmt.Sprintf("is %d characters long; at least %d are needed", k.Got, k.Want)
	case *kind.MaxLength:
		return fmt.Sprintf("is %d characters long; at most %d are allowed", k.Got, k.Want)
	case *kind.MinItems:
		if k.Want == 1 {
			return "must have at least one entry"
		}
		return fmt.Sprintf("has %d entries; at least %d are needed", k.Got, k.Want)
	case *kind.MaxItems:
		return fmt.Sprintf("has %d entries; at most %d are allowed", k.Got, k.Want)
	case *kind.UniqueItems:
		return fmt.Sprintf("lists the same value twice (entries %d and %d)", k.Duplicates[0], k.Duplicates[1])
	case *kind.Minimum:
		return fmt.Sprintf("must be at least %s (got %s)", ratText(k.Want), ratText(k.Got))
	case *kind.Maximum:
		return fmt.Sprintf("must be at most %s (got %s)", ratText(k.Want), ratText(k.Got))
	case *kind.ExclusiveMinimum:
		return fmt.Sprintf("must be more than %s (got %s)", ratText(k.Want), ratText(k.Got))
	case *kind.ExclusiveMaximum:
		return fmt.Sprintf("must be less than %s (got %s)", ratText(k.Want), ratText(k.Got))
	case *kind.FalseSchema, *kind.Not:
		return "is not allowed here"
	}
	// A kind our schemas do not use: the library's own words, without the
	// location it puts first.
	c := &jsonschema.ValidationError{SchemaURL: e.SchemaURL, ErrorKind: e.ErrorKind}
	return strings.TrimPrefix(c.Error(), "at '': ")
}

func typeText(k *kind.Type) string {
	want := make([]string, len(k.Want))
	for i, w := range k.Want {
		want[i] = article(w)
	}
	got := article(k.Got)
	if k.Got == "number" && slices.Contains(k.Want, "integer") {
		got = "a number with a fraction"
	}
	return fmt.Sprintf("must be %s, not %s", strings.Join(want, " or "), got)
}

func article(jsonType string) string {
	switch jsonType {
	case "null":
		return "null"
	case "object", "array", "integer":
		return "an " + jsonType
	}
	return "a " + jsonType
}

// ratText writes r as a plain number.
func ratText(r *big.Rat) string {
	if r == nil {
		return "?"
	}
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// display writes a JSON value for a message: strings quoted, long ones cut.
func display(v any) string {
	switch v := v.(type) {
	case string:
		return quote(v)
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	s := fmt.Sprint(v)
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return s
}

// quote quotes s for a message, cut to a readable length.
func quote(s string) string {
	const max = 40
	if utf8.RuneCountInString(s) > max {
		rs := []rune(s)
		return strconv.Quote(string(rs[:max])) + "…"
	}
	return strconv.Quote(s)
}

// closest returns the name in known nearest to p when it is near enough to
// be a typo, or "".
func closest(p string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if d := distance(strings.ToLower(p), k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// distance is the Levenshtein distance between a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// node returns the schema object at an absolute schema location, such as
// https://dwr.run/schemas/common.json#/$defs/TaskSpec, or nil.
func (r *registry) node(schemaURL string) map[string]any {
	file, frag, _ := strings.Cut(strings.TrimPrefix(schemaURL, baseURL), "#")
	v := r.docs[file]
	for _, tok := range strings.Split(frag, "/") {
		if tok == "" {
			continue
		}
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := v.(type) {
		case map[string]any:
			v = x[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	m, _ := v.(map[string]any)
	return m
}

// properties returns the names of the properties the schema at schemaURL
// declares, sorted.
func (r *registry) properties(schemaURL string) []string {
	props, _ := r.node(schemaURL)["properties"].(map[string]any)
	names := make([]string, 0, len(props))
	for p := range props {
		names = append(names, p)
	}
	slices.Sort(names)
	return names
}

// description returns the description of the schema at schemaURL, or "".
func (r *registry) description(schemaURL string) string {
	d, _ := r.node(schemaURL)["description"].(string)
	return d
}

// child returns loc with tok appended, sharing nothing with loc.
func child(loc []string, tok string) []string {
	out := make([]string, len(loc), len(loc)+1)
	copy(out, loc)
	return append(out, tok)
}

// pointer writes loc as an RFC 6901 JSON pointer.
func pointer(loc []string) string {
	var b strings.Builder
	for _, tok := range loc {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1"))
	}
	return b.String()
}

// sortFields orders fields by pointer, comparing array indexes as numbers,
// then by message.
func sortFields(fs []FieldError) {
	slices.SortStableFunc(fs, func(a, b FieldError) int {
		if c := comparePointers(a.Pointer, b.Pointer); c != 0 {
			return c
		}
		return strings.Compare(a.Message, b.Message)
	})
}

func comparePointers(a, b string) int {
	at, bt := strings.Split(a, "/"), strings.Split(b, "/")
	for i := 0; i < len(at) && i < len(bt); i++ {
		x, errx := strconv.Atoi(at[i])
		y, erry := strconv.Atoi(bt[i])
		if errx == nil && erry == nil {
			if c := cmp.Compare(x, y); c != 0 {
				return c
			}
			continue
		}
		if c := strings.Compare(at[i], bt[i]); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(at), len(bt))
}

// dedupe drops repeated fields from sorted fs.
func dedupe(fs []FieldError) []FieldError {
	return slices.Compact(fs)
}
