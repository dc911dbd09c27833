package schemas

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

func TestEmbeddedSchemasCompile(t *testing.T) {
	r := load()
	require.NoError(t, r.err)
	require.NotEmpty(t, r.commands)
	require.NotEmpty(t, r.events)
	for p := range r.raw {
		require.Contains(t, r.compiled, p)
	}
	for _, p := range []string{PathCommon, PathEnvelope, PathReply, PathError, PathWorkItem, PathQuery} {
		require.Contains(t, r.compiled, p)
	}
}

func TestSchemaIDsArePaths(t *testing.T) {
	for p, b := range All() {
		var d struct {
			Schema string `json:"$schema"`
			ID     string `json:"$id"`
		}
		require.NoError(t, json.Unmarshal(b, &d), p)
		require.Equal(t, "https://json-schema.org/draft/2020-12/schema", d.Schema, p)
		require.Equal(t, baseURL+p, d.ID, p)
	}
}

// TestEveryPatternHasWords keeps messages readable: a pattern without words
// in patternText would be shown to a person as a regular expression.
func TestEveryPatternHasWords(t *testing.T) {
	var walk func(p string, v any)
	walk = func(p string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && k == "pattern" {
					require.Contains(t, patternText, s, "%s: pattern %s has no words in patternText", p, s)
				}
				walk(p, x)
			}
		case []any:
			for _, x := range v {
				walk(p, x)
			}
		}
	}
	for p, d := range load().docs {
		walk(p, d)
	}
}

func TestBrokenSchemaIsReportedNotPanicked(t *testing.T) {
	good := load().raw
	cases := map[string]string{
		"not JSON":          `{"type": "object",`,
		"dangling $ref":     `{"$schema": "https://json-schema.org/draft/2020-12/schema", "$ref": "common.json#/$defs/Nope"}`,
		"bad pattern":       `{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "string", "pattern": "(["}`,
		"bad keyword":       `{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "strung"}`,
		"missing file":      `{"$schema": "https://json-schema.org/draft/2020-12/schema", "$ref": "elsewhere.json"}`,
		"remote metaschema": `{"$schema": "https://example.com/my-schema", "type": "object"}`,
	}
	for name, broken := range cases {
		t.Run(name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for p, b := range good {
				fsys[p] = &fstest.MapFile{Data: b}
			}
			fsys["commands/task.create.json"] = &fstest.MapFile{Data: []byte(broken)}
			r := compileAll(fsys)
			require.Error(t, r.err)
			require.Contains(t, r.err.Error(), "commands/task.create.json")
		})
	}
}

func TestBrokenRegistryHidesItsCause(t *testing.T) {
	cause := errors.New("schema commands/x.json does not compile")
	e := (&registry{err: cause}).internal().(*Error)
	require.Equal(t, CodeInternal, e.Code)
	require.NotContains(t, e.Message, "x.json", "the wire message shows no internals")
	b, err := json.Marshal(e)
	require.NoError(t, err)
	require.NotContains(t, string(b), "x.json")
	require.True(t, strings.HasPrefix(e.Error(), "schemas: "))
	require.Contains(t, e.Error(), "x.json", "the log shows the cause")
	require.ErrorIs(t, e, cause)
	require.ErrorIs(t, e, ErrInternal)
}

func TestSchemaAndAllReturnCopies(t *testing.T) {
	b, ok := Schema(PathReply)
	require.True(t, ok)
	b[0] = 'X'
	again, _ := Schema(PathReply)
	require.Equal(t, byte('{'), again[0])

	all := All()
	all[PathReply][0] = 'X'
	require.Equal(t, byte('{'), All()[PathReply][0])

	_, ok = Schema("nope.json")
	require.False(t, ok)
	require.Len(t, All(), len(CommandNames())+len(EventTypes())+6) // common, envelope, reply, error, work item, query
}

func TestPointer(t *testing.T) {
	require.Equal(t, "", pointer(nil))
	require.Equal(t, "/tasks/0/key", pointer([]string{"tasks", "0", "key"}))
	require.Equal(t, "/a~1b/c~0d", pointer([]string{"a/b", "c~d"}))
}

func TestComparePointers(t *testing.T) {
	fs := []FieldError{{Pointer: "/tasks/10/key"}, {Pointer: "/tasks/2/key"}, {Pointer: "/goal_id"}, {Pointer: ""}, {Pointer: "/tasks/2"}}
	sortFields(fs)
	var got []string
	for _, f := range fs {
		got = append(got, f.Pointer)
	}
	require.Equal(t, []string{"", "/goal_id", "/tasks/2", "/tasks/2/key", "/tasks/10/key"}, got)
}
