package schemas

import (
	"encoding/json"
	"strconv"
)

// fastDecode decodes b, a JSON document of valid UTF-8 that CheckBounds
// bounded, as decode's json.Decoder does (objects as map[string]any, arrays
// as []any, numbers as json.Number, a repeated key reported in dups in the
// same order), in one pass over the bytes and without the decoder's tokens.
// It returns false for anything that is not one valid JSON value, which
// decode then reads again to say what is wrong.
func fastDecode(b []byte) (v any, dups []FieldError, ok bool) {
	d := &fastDecoder{b: b}
	d.space()
	v, ok = d.value()
	if !ok {
		return nil, nil, false
	}
	d.space()
	if d.i != len(d.b) {
		return nil, nil, false
	}
	return v, d.dups, true
}

type fastDecoder struct {
	b    []byte
	i    int
	loc  []string // the place of the value being read, for dups
	dups []FieldError
}

func (d *fastDecoder) space() { d.i = spaceEnd(d.b, d.i) }

// spaceEnd returns where the JSON whitespace that starts at b[i] ends.
func spaceEnd(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

func (d *fastDecoder) value() (any, bool) {
	if d.i >= len(d.b) {
		return nil, false
	}
	switch c := d.b[d.i]; {
	case c == '{':
		return d.object()
	case c == '[':
		return d.array()
	case c == '"':
		return d.str()
	case c == '-' || c >= '0' && c <= '9':
		return d.number()
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	}
	return nil, false
}

func (d *fastDecoder) literal(word string) bool {
	if len(d.b)-d.i < len(word) || string(d.b[d.i:d.i+len(word)]) != word {
		return false
	}
	d.i += len(word)
	return d.i == len(d.b) || delimiter(d.b[d.i])
}

// delimiter reports whether c may follow a literal or a number.
func delimiter(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', ',', ']', '}':
		return true
	}
	return false
}

func (d *fastDecoder) object() (any, bool) {
	m := map[string]any{}
	if d.open('}') {
		return m, true
	}
	for {
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != '"' {
			return nil, false
		}
		kv, ok := d.str()
		if !ok {
			return nil, false
		}
		k := kv.(string)
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != ':' {
			return nil, false
		}
		d.i++
		d.space()
		x, ok := d.member(k)
		if !ok {
			return nil, false
		}
		if _, dup := m[k]; dup {
			d.dups = append(d.dups, FieldError{Pointer: pointer(child(d.loc, k)), Message: "appears more than once in its object"})
		}
		m[k] = x
		if more, ok := d.next('}'); !more {
			return m, ok
		}
	}
}

func (d *fastDecoder) array() (any, bool) {
	a := []any{}
	if d.open(']') {
		return a, true
	}
	for {
		d.space()
		x, ok := d.member(strconv.Itoa(len(a)))
		if !ok {
			return nil, false
		}
		a = append(a, x)
		if more, ok := d.next(']'); !more {
			return a, ok
		}
	}
}

// open steps over the opening bracket of an object or an array and reports
// whether closing follows at once (the container is empty; stepped over).
func (d *fastDecoder) open(closing byte) bool {
	d.i++
	d.space()
	if d.i < len(d.b) && d.b[d.i] == closing {
		d.i++
		return true
	}
	return false
}

// member reads the value of an object's member or an array's element, with
// key on loc while it is read.
func (d *fastDecoder) member(key string) (any, bool) {
	d.loc = append(d.loc, key)
	x, ok := d.value()
	d.loc = d.loc[:len(d.loc)-1]
	return x, ok
}

// next reads what follows a member or an element: a comma (more), or
// closing (ok and not more); anything else is neither.
func (d *fastDecoder) next(closing byte) (more, ok bool) {
	d.space()
	if d.i >= len(d.b) {
		return false, false
	}
	switch d.b[d.i] {
	case ',':
		d.i++
		return true, true
	case closing:
		d.i++
		return false, true
	}
	return false, false
}

// str reads a string; one with escapes is unquoted by encoding/json.
func (d *fastDecoder) str() (any, bool) {
	start := d.i
	d.i++ // "
	escaped := false
	for d.i < len(d.b) {
		switch c := d.b[d.i]; {
		case c == '"':
			d.i++
			if !escaped {
				return string(d.b[start+1 : d.i-1]), true
			}
			var s string
			if json.Unmarshal(d.b[start:d.i], &s) != nil {
				return nil, false
			}
			return s, true
		case c == '\\':
			escaped = true
			d.i += 2
		case c < 0x20:
			return nil, false
		default:
			d.i++
		}
	}
	return nil, false
}

// number reads a number as the JSON grammar has it.
func (d *fastDecoder) number() (any, bool) {
	start := d.i
	end, ok := numberEnd(d.b, d.i)
	if !ok || end < len(d.b) && !delimiter(d.b[end]) {
		return nil, false
	}
	d.i = end
	return json.Number(d.b[start:end]), true
}

// numberEnd returns where the number that starts at b[i] ends, as the JSON
// grammar has it: false when none does.
func numberEnd(b []byte, i int) (int, bool) {
	digits := func() bool {
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > start
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		digits()
	default:
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return 0, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return 0, false
		}
	}
	return i, true
}
