package schemas_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dwr-run/dwr/domain" //nolint:depguard // tests may import domain, to prove the schemas describe its types
	"github.com/dwr-run/dwr/schemas"
)

var codes = []string{schemas.CodeInvalid, schemas.CodeNotFound, schemas.CodeTooLarge}

// requireWireError fails unless err is nil or an *Error with a known code.
func requireWireError(t *testing.T, err error) *schemas.Error {
	t.Helper()
	if err == nil {
		return nil
	}
	var e *schemas.Error
	if !errors.As(err, &e) {
		t.Fatalf("want a *schemas.Error, got %T: %v", err, err)
	}
	if !slices.Contains(codes, e.Code) || e.Message == "" {
		t.Fatalf("unexpected error %+v", e)
	}
	return e
}

// depth returns the deepest nesting of valid JSON b, by decoding it.
func depth(t *testing.T, b []byte) int {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	d, deepest := 0, 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return deepest
		}
		if err != nil {
			t.Fatalf("valid JSON did not tokenize: %v", err)
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			d++
			deepest = max(deepest, d)
		case json.Delim('}'), json.Delim(']'):
			d--
		}
	}
}

func goldenSeeds(f *testing.F, dir string) map[string][]byte {
	out := map[string][]byte{}
	entries, err := os.ReadDir(filepath.Join("testdata", dir))
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("testdata", dir, e.Name()))
		if err != nil {
			f.Fatal(err)
		}
		out[strings.TrimSuffix(e.Name(), ".json")] = b
	}
	return out
}

func FuzzCheckBounds(f *testing.F) {
	for _, dir := range []string{"commands", "events"} {
		for _, b := range goldenSeeds(f, dir) {
			f.Add(b, 8)
		}
	}
	for _, s := range []string{`[[["]]]"]]]`, `{"a":"\\"}`, `"\\\"[[["`, `[[[[[[[[[`, `]]]]][[[`, `{"a":{"b":{"c":{}}}}`} {
		f.Add([]byte(s), 3)
	}
	f.Fuzz(func(t *testing.T, b []byte, maxDepth int) {
		maxDepth = 1 + (maxDepth&0xff)%40
		err := schemas.CheckBounds(b, 1<<16, maxDepth)
		e := requireWireError(t, err)
		if len(b) > 1<<16 {
			if e == nil || e.Code != schemas.CodeTooLarge {
				t.Fatalf("%d bytes passed a bound of %d", len(b), 1<<16)
			}
			return
		}
		if json.Valid(b) {
			tooDeep := depth(t, b) > maxDepth
			if tooDeep != (e != nil) {
				t.Fatalf("depth %d, bound %d: CheckBounds says %v", depth(t, b), maxDepth, err)
			}
		}
	})
}

// knownGap reports whether err, from decoding a command the schema accepted,
// is one of the differences between JSON Schema and Go's decoding that the
// package documents: an integer written 1.0 or 1e2 (an integer to JSON
// Schema, not to Go), or a duration string too long for Go.
func knownGap(err error) bool {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && strings.HasPrefix(te.Value, "number") {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "schemas: duration")
}

func FuzzValidateCommand(f *testing.F) {
	names := schemas.CommandNames()
	for name, b := range goldenSeeds(f, "commands") {
		f.Add(slices.Index(names, name), b)
	}
	f.Add(slices.Index(names, "workspace.create"), []byte(`{"name":""}`))
	f.Add(-1, []byte(`{}`))
	f.Fuzz(func(t *testing.T, n int, body []byte) {
		name := "no.such.command"
		if n >= 0 && n < len(names) {
			name = names[n]
		}
		err := schemas.ValidateCommand(name, body)
		e := requireWireError(t, err)
		if e != nil {
			if e.Code == schemas.CodeNotFound && name != "no.such.command" {
				t.Fatalf("%s not found", name)
			}
			for _, fe := range e.Fields {
				if !strings.HasPrefix(fe.Pointer, "/") && fe.Pointer != "" || fe.Message == "" {
					t.Fatalf("bad field error %+v", fe)
				}
			}
			if _, err := json.Marshal(e); err != nil {
				t.Fatal(err)
			}
			return
		}
		// What the schema accepts, the domain decodes.
		cmd, ok := domain.NewCommand(name)
		if !ok {
			t.Fatalf("%s validated but is no domain command", name)
		}
		if err := decodeStrict(body, cmd); err != nil && !knownGap(err) {
			t.Fatalf("the schema accepted %s %q, the domain does not decode it: %v", name, body, err)
		}
	})
}
