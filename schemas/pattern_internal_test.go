package schemas

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// patternsOf collects every "pattern" string in a decoded schema.
func patternsOf(v any, out map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && k == "pattern" {
				out[s] = true
			}
			patternsOf(e, out)
		}
	case []any:
		for _, e := range x {
			patternsOf(e, out)
		}
	}
}

// TestRunPatternsMatchAsRegexpDoes checks that every pattern of the
// embedded schemas, and a few more, says of random strings — most of them
// near misses built from the pattern's own parts — what regexp says.
func TestRunPatternsMatchAsRegexpDoes(t *testing.T) {
	r := load()
	require.NoError(t, r.err)
	all := map[string]bool{}
	for _, d := range r.docs {
		patternsOf(d, all)
	}
	require.NotEmpty(t, all)
	runs := 0
	for _, extra := range []string{"^a+$", "^[a-c]*$", "^x?$", "^[0-9]{2,}$", "^ab{1,3}$", "^[-a]{2}b$",
		"^[a-z]+?$", "^a|b$", "^[^a]{3}$", `^\d{3}$`, "^a.b$", "^(ab)$", "^$", "a{3}", "^[a-z]{2}[0-9]?[a-z]$"} {
		all[extra] = true
	}
	for _, src := range slices.Sorted(func(yield func(string) bool) {
		for s := range all {
			if !yield(s) {
				return
			}
		}
	}) {
		re := regexp.MustCompile(src)
		got, err := compilePattern(src)
		require.NoError(t, err)
		require.Equal(t, src, got.String())
		p, ok := got.(*runPattern)
		if !ok {
			continue
		}
		runs++
		t.Run(src, func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				s := nearMiss(rt, p)
				require.Equal(rt, re.MatchString(s), p.MatchString(s), "%q against %s", s, src)
			})
		})
	}
	require.GreaterOrEqual(t, runs, 10, "the schemas' ids and tokens are matched by the scan")
}

// nearMiss draws a string for p: its items' bytes in counts around theirs,
// now and then with a byte from elsewhere.
func nearMiss(rt *rapid.T, p *runPattern) string {
	var b strings.Builder
	others := []byte{'x', 'Z', '0', '9', '-', '_', ' ', '\n', 0, 0xc3, 0xa9, '$', '^', '.'}
	for _, it := range p.items {
		var in []byte
		for c := 0; c < 256; c++ {
			if it.has(byte(c)) {
				in = append(in, byte(c))
			}
		}
		hi := it.max
		if hi < 0 {
			hi = it.min + 5
		}
		n := rapid.IntRange(max(0, it.min-1), hi+1).Draw(rt, "count")
		for range n {
			if rapid.IntRange(0, 20).Draw(rt, "other") == 0 {
				b.WriteByte(rapid.SampledFrom(others).Draw(rt, "byte"))
			} else {
				b.WriteByte(rapid.SampledFrom(in).Draw(rt, "in"))
			}
		}
	}
	if rapid.IntRange(0, 10).Draw(rt, "tail") == 0 {
		b.WriteByte(rapid.SampledFrom(others).Draw(rt, "tailByte"))
	}
	return b.String()
}

// BenchmarkPattern matches a ULID with regexp and with the scan.
func BenchmarkPattern(b *testing.B) {
	const src, id = "^[0-7][0-9A-HJKMNP-TV-Z]{25}$", "01JWTD0Q80H4QX4FR84G98PBSK"
	p, _ := parseRun(src)
	for name, re := range map[string]interface{ MatchString(string) bool }{"regexp": regexp.MustCompile(src), "scan": p} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if !re.MatchString(id) {
					b.Fatal("no match")
				}
			}
		})
	}
}
