package schemas_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain" //nolint:depguard // tests may import domain, to prove the schemas describe its types
	"github.com/dwr-run/dwr/schemas"
)

// decodeStrict decodes b into v refusing unknown fields and trailing data.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return &json.SyntaxError{}
	}
	return nil
}

func readGolden(t *testing.T, dir, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", dir, name+".json"))
	require.NoError(t, err, "every %s needs a golden file testdata/%s/%s.json", dir, dir, name)
	return b
}

// requireJSONEqual compares two JSON texts as values.
func requireJSONEqual(t *testing.T, want, got []byte, msgAndArgs ...any) {
	t.Helper()
	require.JSONEq(t, string(want), string(got), msgAndArgs...)
}

func TestGoldenEvents(t *testing.T) {
	forEachGolden(t, "events", domain.EventTypes(), schemas.EventTypes(), func(t *testing.T, typ string, raw []byte) {
		require.NoError(t, schemas.Validate(schemas.PathEnvelope, raw), "the golden envelope")

		var env schemas.Event
		require.NoError(t, decodeStrict(raw, &env), "the golden envelope has exactly the envelope's fields")
		require.Equal(t, typ, env.Type)
		require.NoError(t, schemas.ValidateEvent(typ, env.Data))

		ev, err := domain.NewEvent(typ)
		require.NoError(t, err)
		require.NoError(t, decodeStrict(env.Data, ev), "the golden data decodes into %T with no unknown field", ev)
		require.Equal(t, ev.AggregateType(), env.AggregateType)
		_, err = domain.DecodeEvent(typ, env.Data)
		require.NoError(t, err)

		// The domain writes the golden data back exactly: a renamed field,
		// a changed omitempty or a changed encoding breaks this.
		again, err := json.Marshal(ev)
		require.NoError(t, err)
		require.NoError(t, schemas.ValidateEvent(typ, again), "the re-encoded event")
		requireJSONEqual(t, env.Data, again, "the domain's encoding of %s differs from its golden file", typ)

		env.Data = again
		whole, err := json.Marshal(env)
		require.NoError(t, err)
		require.NoError(t, schemas.Validate(schemas.PathEnvelope, whole))
		requireJSONEqual(t, raw, whole)
	})
}

func TestGoldenCommands(t *testing.T) {
	forEachGolden(t, "commands", domain.CommandNames(), schemas.CommandNames(), func(t *testing.T, name string, raw []byte) {
		require.NoError(t, schemas.ValidateCommand(name, raw))

		cmd, ok := domain.NewCommand(name)
		require.True(t, ok)
		require.NoError(t, decodeStrict(raw, cmd), "the golden command decodes into %T with no unknown field", cmd)
		require.Equal(t, name, cmd.CommandName())

		again, err := json.Marshal(cmd)
		require.NoError(t, err)
		require.NoError(t, schemas.ValidateCommand(name, again), "the command as the domain encodes it: %s", again)
	})
}

// forEachGolden requires that the domain knows the names the schemas do
// (each of its names needs a schema <dir>/<name>.json, and no other), then
// checks the golden file testdata/<dir>/<name>.json of each.
func forEachGolden(t *testing.T, dir string, domainNames, schemaNames []string, check func(t *testing.T, name string, raw []byte)) {
	slices.Sort(domainNames)
	require.Equal(t, domainNames, schemaNames, "every name the domain knows needs a schema %s/<name>.json, and no other", dir)
	for _, name := range domainNames {
		t.Run(name, func(t *testing.T) { check(t, name, readGolden(t, dir, name)) })
	}
}

// TestGoldenFilesAreKnown fails on a golden file whose name is no command or
// event type, so a renamed command cannot leave its golden file behind.
func TestGoldenFilesAreKnown(t *testing.T) {
	for dir, known := range map[string][]string{"events": schemas.EventTypes(), "commands": schemas.CommandNames()} {
		entries, err := os.ReadDir(filepath.Join("testdata", dir))
		require.NoError(t, err)
		for _, e := range entries {
			name := strings.TrimSuffix(e.Name(), ".json")
			require.Contains(t, known, name, "testdata/%s/%s", dir, e.Name())
		}
	}
}
