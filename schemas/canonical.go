package schemas

import (
	"bytes"
	"slices"
	"unicode/utf8"
)

// canonicalFast writes doc as CanonicalJSON does, byte for byte, reading
// the bytes directly instead of decoding them into maps and encoding those
// again (several times faster, a few allocations instead of one per value).
// It handles the documents commands carry; on anything else — a syntax
// error, invalid UTF-8, a \u escape of a surrogate, a repeated key, deep
// nesting — it returns false, and CanonicalJSON takes its own way, which
// says what is wrong or decides as encoding/json does.
func canonicalFast(doc []byte) ([]byte, bool) {
	c := canonicalizer{in: doc, out: make([]byte, 0, len(doc))}
	c.space()
	if !c.value(0) {
		return nil, false
	}
	c.space()
	if c.i != len(c.in) {
		return nil, false
	}
	return c.out, true
}

// maxCanonicalDepth bounds canonicalFast's recursion; deeper documents go
// CanonicalJSON's own way.
const maxCanonicalDepth = 64

type canonicalizer struct {
	in  []byte
	i   int
	out []byte
	key []byte // scratch: a decoded key
	// The members of the objects being read, innermost last, and their
	// decoded keys: each object truncates both back when it is written.
	members []member
	keys    []byte
	tmp     []byte // scratch: an object's members as they came
}

// member is an object's member as written to out: from start to end, its
// decoded key at keyAt in keys.
type member struct {
	start, end     int
	keyAt, keySize int
}

func (c *canonicalizer) space() { c.i = spaceEnd(c.in, c.i) }

func (c *canonicalizer) value(depth int) bool {
	if c.i >= len(c.in) || depth > maxCanonicalDepth {
		return false
	}
	switch c.in[c.i] {
	case '{':
		return c.object(depth)
	case '[':
		return c.array(depth)
	case '"':
		if end, ok := plainString(c.in, c.i+1); ok { // as it is: no decoding
			c.out = append(c.out, c.in[c.i:end]...)
			c.i = end
			return true
		}
		s, ok := c.str(c.key[:0])
		if !ok {
			return false
		}
		c.key = s
		c.out = appendCanonicalString(c.out, s)
		return true
	case 't':
		return c.literal("true")
	case 'f':
		return c.literal("false")
	case 'n':
		return c.literal("null")
	default:
		return c.number()
	}
}

func (c *canonicalizer) literal(lit string) bool {
	if !bytes.HasPrefix(c.in[c.i:], []byte(lit)) {
		return false
	}
	c.out = append(c.out, lit...)
	c.i += len(lit)
	return true
}

// number copies a number as written (encoding/json keeps a json.Number's
// digits as they are).
func (c *canonicalizer) number() bool {
	end, ok := numberEnd(c.in, c.i)
	if !ok {
		return false
	}
	c.out = append(c.out, c.in[c.i:end]...)
	c.i = end
	return true
}

func (c *canonicalizer) array(depth int) bool {
	c.i++ // [
	c.out = append(c.out, '[')
	c.space()
	if c.i < len(c.in) && c.in[c.i] == ']' {
		c.i++
		c.out = append(c.out, ']')
		return true
	}
	for {
		c.space()
		if !c.value(depth + 1) {
			return false
		}
		more, ok := c.next(']')
		if !ok {
			return false
		}
		if !more {
			c.out = append(c.out, ']')
			return true
		}
		c.out = append(c.out, ',')
	}
}

// next reads what follows a member of an array or object: a comma (more)
// or its closer (not more); anything else is not ok.
func (c *canonicalizer) next(closer byte) (more, ok bool) {
	c.space()
	if c.i >= len(c.in) {
		return false, false
	}
	switch c.in[c.i] {
	case ',':
		c.i++
		return true, true
	case closer:
		c.i++
		return false, true
	}
	return false, false
}

// object writes each member as it comes, then puts them in the order of
// their decoded keys (as encoding/json orders a map's).
func (c *canonicalizer) object(depth int) bool {
	c.i++ // {
	c.out = append(c.out, '{')
	start, base, kbase := len(c.out), len(c.members), len(c.keys)
	defer func() { c.members, c.keys = c.members[:base], c.keys[:kbase] }()
	c.space()
	if c.i < len(c.in) && c.in[c.i] == '}' {
		c.i++
		c.out = append(c.out, '}')
		return true
	}
	for {
		c.space()
		if c.i >= len(c.in) || c.in[c.i] != '"' {
			return false
		}
		k, ok := c.str(c.key[:0])
		if !ok {
			return false
		}
		c.key = k
		m := member{start: len(c.out), keyAt: len(c.keys), keySize: len(k)}
		c.keys = append(c.keys, k...)
		c.out = appendCanonicalString(c.out, k)
		c.space()
		if c.i >= len(c.in) || c.in[c.i] != ':' {
			return false
		}
		c.i++
		c.out = append(c.out, ':')
		c.space()
		if !c.value(depth + 1) { // its own members come and go above ours
			return false
		}
		m.end = len(c.out)
		c.members = append(c.members, m)
		more, ok := c.next('}')
		if !ok {
			return false
		}
		if !more {
			break
		}
		c.out = append(c.out, ',')
	}
	ms := c.members[base:]
	sorted := slices.IsSortedFunc(ms, c.byKey)
	if !sorted {
		slices.SortFunc(ms, c.byKey)
	}
	for i := 1; i < len(ms); i++ {
		if c.byKey(ms[i-1], ms[i]) == 0 {
			return false // a repeated key: encoding/json keeps the last one
		}
	}
	if !sorted {
		c.tmp = append(c.tmp[:0], c.out[start:]...)
		c.out = c.out[:start]
		for i, m := range ms {
			if i > 0 {
				c.out = append(c.out, ',')
			}
			c.out = append(c.out, c.tmp[m.start-start:m.end-start]...)
		}
	}
	c.out = append(c.out, '}')
	return true
}

// byKey orders members by their decoded keys, byte by byte.
func (c *canonicalizer) byKey(a, b member) int {
	return bytes.Compare(c.keys[a.keyAt:a.keyAt+a.keySize], c.keys[b.keyAt:b.keyAt+b.keySize])
}

// plainString reports whether the string whose content starts at in[i] is
// written as appendCanonicalString writes it already — no escapes, no
// control characters, valid UTF-8 without U+2028 or U+2029 — and returns
// its end, past the closing quote. Most strings are: a large input's are
// then copied as they are, not decoded byte by byte and encoded again.
func plainString(in []byte, i int) (end int, ok bool) {
	ascii := true
	j := i
	for ; j < len(in); j++ {
		b := in[j]
		if b == '"' {
			break
		}
		if b == '\\' || b < 0x20 {
			return 0, false
		}
		if b >= utf8.RuneSelf {
			ascii = false
		}
	}
	if j == len(in) {
		return 0, false
	}
	if s := in[i:j]; !ascii && (!utf8.Valid(s) || bytes.Contains(s, lineSeparator) || bytes.Contains(s, paragraphSeparator)) {
		return 0, false
	}
	return j + 1, true
}

// U+2028 and U+2029 in UTF-8: encoding/json escapes them.
var lineSeparator, paragraphSeparator = []byte("\u2028"), []byte("\u2029")

// str reads the string at c.i and appends its decoded bytes to dst. It
// declines (false) invalid UTF-8, control characters and \u escapes of
// surrogates, which CanonicalJSON's own way decides.
func (c *canonicalizer) str(dst []byte) ([]byte, bool) {
	c.i++ // "
	for c.i < len(c.in) {
		b := c.in[c.i]
		switch {
		case b == '"':
			c.i++
			return dst, true
		case b == '\\':
			if c.i+1 >= len(c.in) {
				return nil, false
			}
			switch e := c.in[c.i+1]; e {
			case '"', '\\', '/':
				dst = append(dst, e)
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r, ok := hex4(c.in[c.i+2:])
				if !ok || (r >= 0xD800 && r <= 0xDFFF) {
					return nil, false
				}
				dst = utf8.AppendRune(dst, r)
				c.i += 4
			default:
				return nil, false
			}
			c.i += 2
		case b < 0x20:
			return nil, false
		case b < utf8.RuneSelf:
			dst = append(dst, b)
			c.i++
		default:
			r, size := utf8.DecodeRune(c.in[c.i:])
			if r == utf8.RuneError && size == 1 {
				return nil, false
			}
			dst = append(dst, c.in[c.i:c.i+size]...)
			c.i += size
		}
	}
	return nil, false
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, x := range b[:4] {
		r <<= 4
		switch {
		case x >= '0' && x <= '9':
			r |= rune(x - '0')
		case x >= 'a' && x <= 'f':
			r |= rune(x - 'a' + 10)
		case x >= 'A' && x <= 'F':
			r |= rune(x - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}

// appendCanonicalString appends s (valid UTF-8) quoted as encoding/json
// writes a string without HTML escaping: \" \\ \b \f \n \r \t, other
// control characters as \u00XX, U+2028 and U+2029 as \u2028 and \u2029,
// everything else as it is.
func appendCanonicalString(dst, s []byte) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
			start = i + size
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
