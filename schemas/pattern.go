package schemas

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// compilePattern is the schemas' regular expression engine. A pattern that
// is a run of byte classes and literals with fixed counts, anchored at both
// ends, such as "^[0-7][0-9A-HJKMNP-TV-Z]{25}$" (a ULID) or
// "^[A-Za-z0-9_-]{43}$" (an attempt token), with at most its last item
// repeated a variable number of times, is matched by a scan of the string's
// bytes; any other pattern by regexp. Both say the same of every string
// (TestRunPatternsMatchAsRegexpDoes); the scan takes a fraction of the time,
// on every id of every command.
func compilePattern(s string) (jsonschema.Regexp, error) {
	re, err := regexp.Compile(s)
	if err != nil {
		return nil, err
	}
	if p, ok := parseRun(s); ok {
		return p, nil
	}
	return re, nil
}

// runPattern is a pattern that parseRun understood: items in sequence, all
// but the last repeated a fixed number of times.
type runPattern struct {
	src   string
	items []runItem
}

// runItem is one byte class (or literal) repeated min to max times (max < 0:
// without bound).
type runItem struct {
	set      [4]uint64 // the bytes it matches, as a bitmap
	min, max int
}

func (it *runItem) has(c byte) bool { return it.set[c>>6]&(1<<(c&63)) != 0 }
func (it *runItem) add(c byte)      { it.set[c>>6] |= 1 << (c & 63) }

// String returns the pattern's source.
func (p *runPattern) String() string { return p.src }

// MatchString reports whether s matches the pattern, whole.
func (p *runPattern) MatchString(s string) bool {
	i := 0
	for k := range p.items {
		it := &p.items[k]
		n := it.min
		if k == len(p.items)-1 {
			n = len(s) - i
			if n < it.min || (it.max >= 0 && n > it.max) {
				return false
			}
		}
		if n > len(s)-i {
			return false
		}
		for j := i; j < i+n; j++ {
			if !it.has(s[j]) {
				return false
			}
		}
		i += n
	}
	return i == len(s)
}

// parseRun parses s as a runPattern; false when it is not one.
func parseRun(s string) (*runPattern, bool) {
	if !strings.HasPrefix(s, "^") || !strings.HasSuffix(s, "$") || strings.HasSuffix(s, `\$`) {
		return nil, false
	}
	body := s[1 : len(s)-1]
	p := &runPattern{src: s}
	for i := 0; i < len(body); {
		var it runItem
		switch c := body[i]; {
		case c == '[':
			end := strings.IndexByte(body[i+1:], ']')
			if end < 1 || !parseClass(body[i+1:i+1+end], &it) {
				return nil, false
			}
			i += end + 2
		case isLiteral(c):
			it.add(c)
			i++
		default:
			return nil, false
		}
		it.min, it.max = 1, 1
		if i < len(body) {
			n, lo, hi, ok := parseCount(body[i:])
			if !ok {
				return nil, false
			}
			i += n
			it.min, it.max = lo, hi
		}
		if len(p.items) > 0 {
			if last := p.items[len(p.items)-1]; last.min != last.max {
				return nil, false // only the last item may vary
			}
		}
		p.items = append(p.items, it)
	}
	return p, len(p.items) > 0
}

// isLiteral reports whether c stands for itself in a pattern.
func isLiteral(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-:=_/@#%&!<>,;'\" ", c) >= 0
}

// parseClass adds the bytes of class (between its brackets) to it: ASCII
// characters and ranges, no negation and no escapes.
func parseClass(class string, it *runItem) bool {
	if class == "" || class[0] == '^' {
		return false
	}
	for i := 0; i < len(class); i++ {
		c := class[i]
		if c >= 0x80 || c == '\\' || c == '[' || c == ']' {
			return false
		}
		if i+2 < len(class) && class[i+1] == '-' {
			hi := class[i+2]
			if hi >= 0x80 || hi == '\\' || hi == '[' || hi < c {
				return false
			}
			for b := c; ; b++ {
				it.add(b)
				if b == hi {
					break
				}
			}
			i += 2
			continue
		}
		it.add(c)
	}
	return true
}

// parseCount parses the count that opens s — {n}, {m,n}, {m,}, +, * or ? —
// and returns its length and bounds (hi < 0: none); a count of 1 when s
// opens with none.
func parseCount(s string) (n, lo, hi int, ok bool) {
	switch s[0] {
	case '+':
		return 1, 1, -1, !lazy(s[1:])
	case '*':
		return 1, 0, -1, !lazy(s[1:])
	case '?':
		return 1, 0, 1, !lazy(s[1:])
	case '{':
	default:
		return 0, 1, 1, true
	}
	end := strings.IndexByte(s, '}')
	if end < 0 || lazy(s[end+1:]) {
		return 0, 0, 0, false
	}
	a, b, comma := strings.Cut(s[1:end], ",")
	lo, err := strconv.Atoi(a)
	if err != nil || lo < 0 || lo > 1000 {
		return 0, 0, 0, false
	}
	hi = lo
	if comma {
		hi = -1
		if b != "" {
			if hi, err = strconv.Atoi(b); err != nil || hi < lo || hi > 1000 {
				return 0, 0, 0, false
			}
		}
	}
	return end + 1, lo, hi, true
}

// lazy reports whether s opens with a modifier of the count before it (a
// lazy ? or a possessive +), which parseRun leaves to regexp.
func lazy(s string) bool { return s != "" && (s[0] == '?' || s[0] == '+') }
