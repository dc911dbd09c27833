package schemas

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// jsonText draws JSON documents written in many ways — keys in any order,
// any spacing, characters raw or escaped, numbers as people write them —
// and says whether canonicalFast must read the document itself (no
// surrogate escapes, no repeated keys).
type jsonText struct {
	b          strings.Builder
	mustAccept bool
}

func (j *jsonText) space(t *rapid.T) {
	j.b.WriteString(rapid.SampledFrom([]string{"", "", " ", "\n", "\t ", "\r\n  "}).Draw(t, "space"))
}

var canonicalRunes = []rune{'a', 'Z', '0', ' ', '"', '\\', '/', '<', '>', '&', '\x00', '\x01', '\b', '\f', '\n',
	'\r', '\t', '\x1f', '\x7f', 'é', 'ß', '€', '\u2028', '\u2029', '\ufffd', '\uffff', '😀', '𝄞'}

func (j *jsonText) str(t *rapid.T) string {
	runes := rapid.SliceOfN(rapid.SampledFrom(canonicalRunes), 0, 8).Draw(t, "runes")
	j.b.WriteByte('"')
	for _, r := range runes {
		switch form := rapid.IntRange(0, 2).Draw(t, "form"); {
		case r > 0xFFFF && form > 0:
			hi, lo := utf16.EncodeRune(r)
			fmt.Fprintf(&j.b, `\u%04x\u%04X`, hi, lo)
			j.mustAccept = false // canonicalFast leaves surrogates to encoding/json
		case form == 1 && r <= 0xFFFF:
			fmt.Fprintf(&j.b, `\u%04x`, r)
		case r == '"' || r == '\\' || r == '/' && form == 2:
			j.b.WriteString(`\` + string(r))
		case r < 0x20:
			short := map[rune]string{'\b': `\b`, '\f': `\f`, '\n': `\n`, '\r': `\r`, '\t': `\t`}[r]
			if short == "" {
				short = fmt.Sprintf(`\u%04X`, r)
			}
			j.b.WriteString(short) // raw, a control character is not JSON
		default:
			j.b.WriteRune(r)
		}
	}
	j.b.WriteByte('"')
	return string(runes)
}

func (j *jsonText) value(t *rapid.T, depth int) {
	kinds := []string{"null", "true", "false", "number", "string"}
	if depth < 4 {
		kinds = append(kinds, "array", "object")
	}
	switch rapid.SampledFrom(kinds).Draw(t, "kind") {
	case "number":
		j.b.WriteString(rapid.SampledFrom([]string{"0", "-0", "1", "-17", "1.50", "10.0", "1e3", "1E-2", "2.5e+10",
			"12345678901234567890", "0.000001", strconv.FormatInt(rapid.Int64().Draw(t, "int"), 10),
			strconv.FormatFloat(rapid.Float64().Draw(t, "float"), 'g', -1, 64)}).Draw(t, "number"))
	case "string":
		j.str(t)
	case "array":
		j.b.WriteByte('[')
		n := rapid.IntRange(0, 4).Draw(t, "len")
		for i := range n {
			if i > 0 {
				j.b.WriteByte(',')
			}
			j.space(t)
			j.value(t, depth+1)
			j.space(t)
		}
		j.b.WriteByte(']')
	case "object":
		j.b.WriteByte('{')
		n := rapid.IntRange(0, 5).Draw(t, "members")
		seen := map[string]bool{}
		for i := range n {
			if i > 0 {
				j.b.WriteByte(',')
			}
			j.space(t)
			if k := j.str(t); seen[k] {
				j.mustAccept = false // a repeated key: encoding/json keeps the last
			} else {
				seen[k] = true
			}
			j.space(t)
			j.b.WriteByte(':')
			j.space(t)
			j.value(t, depth+1)
			j.space(t)
		}
		j.b.WriteByte('}')
	default:
		j.b.WriteString(rapid.SampledFrom([]string{"null", "true", "false"}).Draw(t, "literal"))
	}
}

// TestCanonicalFastIsEncodingJSONsForm: whatever canonicalFast reads, it
// writes exactly as encoding/json's decoding and encoding again does, for
// any document and any way of writing it; the documents commands carry it
// reads itself; what it declines CanonicalJSON reads as before.
func TestCanonicalFastIsEncodingJSONsForm(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		j := &jsonText{mustAccept: true}
		j.space(t)
		j.value(t, 0)
		j.space(t)
		doc := []byte(j.b.String())
		if cut := rapid.IntRange(-1, len(doc)).Draw(t, "cut"); cut >= 0 && rapid.Bool().Draw(t, "damage") {
			doc = append(doc[:cut:cut], rapid.SampledFrom([]string{"", "x", "}", ",", `"`, "\xff"}).Draw(t, "junk")...)
			j.mustAccept = false
		}
		want, werr := canonicalByDecoding(doc)
		got, ok := canonicalFast(doc)
		if ok {
			require.NoError(t, werr, "canonicalFast read what encoding/json refuses: %q", doc)
			require.Equal(t, string(want), string(got), "%q", doc)
		} else {
			require.False(t, j.mustAccept, "canonicalFast declined %q", doc)
		}
		all, err := CanonicalJSON(doc)
		if werr != nil {
			require.Error(t, err)
			return
		}
		require.NoError(t, err)
		require.Equal(t, string(want), string(all))
	})
}

func BenchmarkCanonicalJSON(b *testing.B) {
	doc := []byte(`{"title":"chain 17","envelope":{"budget":{"attempts":10}},"tasks":[{"key":"a","title":"a","queue":"chain","input":{"n":1}},{"key":"b","title":"b","queue":"chain","depends_on":["a"],"input":{"n":2}},{"key":"c","title":"c","queue":"chain","depends_on":["b"],"input":{"n":3}}]}`)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := canonicalFast(doc); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("decoding", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := canonicalByDecoding(doc); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCanonicalJSONLargeInput canonicalizes a task.create body with a
// 256 KiB input, as a command's body name is made.
func BenchmarkCanonicalJSONLargeInput(b *testing.B) {
	doc := []byte(`{"spec":{"queue":"q","input":{"text":"` + strings.Repeat("lorem ipsum dolor sit amet, ", 256<<10/28) + `"}}}`)
	b.SetBytes(int64(len(doc)))
	for b.Loop() {
		if _, ok := canonicalFast(doc); !ok {
			b.Fatal("declined")
		}
	}
}
