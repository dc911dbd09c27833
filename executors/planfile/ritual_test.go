package planfile_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/executors/planfile"
	"github.com/dwr-run/dwr/schemas"
)

func TestReadRitual(t *testing.T) {
	def, err := planfile.ReadRitual("r.yaml", strings.NewReader(`
name: onboard
parameters:
  type: object
  properties:
    customer: {type: string}
    attempts: {type: integer, default: 3}
goal:
  title: Onboard ${customer}
tasks:
  - key: check
    queue: shell
    retry: {max_attempts: "${attempts}"}
`))
	require.NoError(t, err)
	require.Equal(t, "onboard", def.Name)
	require.JSONEq(t, `{"title": "Onboard ${customer}"}`, string(def.Goal))
	require.JSONEq(t, `[{"key": "check", "queue": "shell", "retry": {"max_attempts": "${attempts}"}}]`, string(def.Tasks))
	require.JSONEq(t, `{"type": "object", "properties": {"customer": {"type": "string"}, "attempts": {"type": "integer", "default": 3}}}`, string(def.Parameters))

	for doc, want := range map[string]string{
		`[1, 2]`:               "must be an object",
		`{name: x, steps: []}`: "/steps is not a field of a ritual",
		`{name: x, tasks: [{key: a, start_after: 4s}]}`: "/tasks/0/start_after",
		`{name: [x]}`: "ritual file r.yaml",
	} {
		_, err := planfile.ReadRitual("r.yaml", strings.NewReader(doc))
		require.ErrorContains(t, err, want, doc)
	}
}

func TestReadParamsFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "params.yaml")
	require.NoError(t, os.WriteFile(file, []byte("customer: ACME\nattempts: 5\n"), 0o600))
	params, err := planfile.ReadParamsFile(file)
	require.NoError(t, err)
	require.Equal(t, map[string]any{"customer": "ACME", "attempts": json.Number("5")}, params)
	require.NoError(t, os.WriteFile(file, []byte("[1]"), 0o600))
	_, err = planfile.ReadParamsFile(file)
	require.ErrorContains(t, err, "must be an object")
}

// A --param's value is text for a string parameter and JSON for any other;
// an undeclared one is JSON when it parses; a value its type cannot take is
// refused, saying how to write it.
func TestParams(t *testing.T) {
	rv := &schemas.RitualVersion{Name: "onboard", Version: 2, RitualTemplate: schemas.RitualTemplate{Parameters: json.RawMessage(`{"type": "object", "properties": {
		"customer": {"type": "string"}, "attempts": {"type": "integer"}, "region": {"enum": ["eu", "us"]}, "tags": {"type": "array"}}}`)}}
	got, err := planfile.Params(rv, map[string]any{"attempts": 3, "keep": true},
		[]string{"customer=42", "attempts=5", "region=eu", "tags=[\"a\"]", "extra={\"x\":1}", "note=plain text"})
	require.NoError(t, err)
	require.JSONEq(t, `{"customer": "42", "attempts": 5, "region": "eu", "tags": ["a"], "extra": {"x": 1}, "note": "plain text", "keep": true}`, string(got))

	_, err = planfile.Params(rv, map[string]any{}, []string{"attempts=many"})
	require.ErrorContains(t, err, `parameter "attempts" of ritual onboard version 2 is of type integer`)
	require.ErrorContains(t, err, `--param 'attempts="many"'`)
	_, err = planfile.Params(rv, map[string]any{}, []string{"customer"})
	require.ErrorContains(t, err, "write NAME=VALUE")

	require.Equal(t, []string{"attempts", "customer", "region", "tags"}, planfile.ParamNames(rv.Parameters))
	require.Equal(t, `"eu"|"us"`, planfile.ParamType(planfile.ParamProperties(rv.Parameters)["region"]))
}
