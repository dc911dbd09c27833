package schemas

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// requireSameDecode requires fastDecode to read b as slowDecode does, or to
// refuse it when slowDecode finds it wrong.
func requireSameDecode(t require.TestingT, b []byte) {
	want, wantDups, werr := slowDecode(b)
	got, gotDups, ok := fastDecode(b)
	if werr != nil {
		require.False(t, ok, "%q: fastDecode read what json.Decoder refuses (%v)", b, werr)
		return
	}
	require.True(t, ok, "%q: fastDecode refused what json.Decoder reads", b)
	require.Equal(t, want, got, "%q", b)
	require.Equal(t, wantDups, gotDups, "%q", b)
}

// TestFastDecodeReadsAsTheDecoderDoes checks fastDecode against the
// decoder on the golden commands and on random documents, valid and broken.
func TestFastDecodeReadsAsTheDecoderDoes(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "commands", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		requireSameDecode(t, b)
	}
	for _, s := range []string{`{"a":1,"a":2,"b":{"c":[1,{"c":1,"c":2}],"c":0}}`, `[]`, `{}`, ` 1 `, `-0.5e+3`, `01`, `1.`, `.5`, `-`,
		`"a\u00e9\ud83d\ude00\n"`, `"\ud800"`, `"\x"`, `"a`, `[1,]`, `{"a":1,}`, `{"a" 1}`, `truex`, `[true false]`, `nul`, `1 2`,
		`{"~/":{"~/":0,"~/":1}}`, "\"tab\there\"", `[1e5,1E-5,-0,0.0]`, `{"a":[]}x`} {
		requireSameDecode(t, []byte(s))
	}
	rapid.Check(t, func(rt *rapid.T) {
		doc := genJSON(rt, 0)
		if rapid.IntRange(0, 3).Draw(rt, "break") == 0 && len(doc) > 0 {
			i := rapid.IntRange(0, len(doc)-1).Draw(rt, "at")
			switch rapid.IntRange(0, 2).Draw(rt, "how") {
			case 0:
				doc = doc[:i] + doc[i+1:]
			case 1:
				doc = doc[:i] + rapid.SampledFrom([]string{",", "}", "]", "\"", ":", " ", "x", "0", "\\", "\n"}).Draw(rt, "insert") + doc[i:]
			default:
				doc = doc[:i]
			}
		}
		if !utf8.ValidString(doc) {
			return // decode refuses it before either reads it
		}
		requireSameDecode(rt, []byte(doc))
	})
}

// genJSON draws a JSON document with spaces, escapes, numbers of every
// shape and repeated keys.
func genJSON(rt *rapid.T, depth int) string {
	sp := func() string { return rapid.SampledFrom([]string{"", "", " ", "\n\t", "\r\n "}).Draw(rt, "space") }
	kind := rapid.IntRange(0, 6).Draw(rt, "kind")
	if depth > 3 {
		kind = rapid.IntRange(2, 6).Draw(rt, "leaf")
	}
	switch kind {
	case 0:
		n := rapid.IntRange(0, 4).Draw(rt, "keys")
		var parts []string
		for range n {
			k := rapid.SampledFrom([]string{"a", "b", "task_id", "x/y", "t~0", "é", `q\"k`, `\u0061`}).Draw(rt, "key")
			parts = append(parts, sp()+`"`+k+`"`+sp()+":"+sp()+genJSON(rt, depth+1)+sp())
		}
		return "{" + strings.Join(parts, ",") + sp() + "}"
	case 1:
		n := rapid.IntRange(0, 4).Draw(rt, "items")
		var parts []string
		for range n {
			parts = append(parts, sp()+genJSON(rt, depth+1)+sp())
		}
		return "[" + strings.Join(parts, ",") + sp() + "]"
	case 2:
		return `"` + rapid.SampledFrom([]string{"", "plain", `a\"b`, `\\`, `\/`, `\b\f\n\r\t`, `\u00e9`, `\ud83d\ude00`, `\ud800x`, "é日本", `\u0000`}).Draw(rt, "string") + `"`
	case 3:
		return rapid.SampledFrom([]string{"0", "-0", "12", "-12.50", "1e9", "1E+2", "2.5e-3", "123456789012345678901234567890", "0.1"}).Draw(rt, "number")
	case 4:
		return "true"
	case 5:
		return "false"
	}
	return "null"
}

// BenchmarkDecode reads a golden task.succeed with the decoder's tokens and
// in one pass.
func BenchmarkDecode(b *testing.B) {
	body, err := os.ReadFile(filepath.Join("testdata", "commands", "task.succeed.json"))
	require.NoError(b, err)
	b.Run("tokens", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := slowDecode(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("one-pass", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, ok := fastDecode(body); !ok {
				b.Fatal("refused")
			}
		}
	})
}
