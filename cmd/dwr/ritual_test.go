package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const onboardYAML = `name: onboard
description: Onboard a customer
parameters:
  type: object
  additionalProperties: false
  required: [customer]
  properties:
    customer: {type: string, minLength: 1}
    region: {enum: [eu, us], default: eu}
    attempts: {type: integer, minimum: 1, default: 3}
goal:
  title: Onboard ${customer}
  success_criteria: ["${customer} has an account in ${region}"]
tasks:
  - key: registry-check
    queue: shell
    input: {customer: "${customer}", region: "${region}"}
    retry: {max_attempts: "${attempts}"}
  - key: create-account
    queue: shell
    depends_on: [registry-check]
`

func TestCLIRitualDefineRunListGet(t *testing.T) {
	url := cliServer(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "ritual.yaml")
	require.NoError(t, os.WriteFile(file, []byte(onboardYAML), 0o600))

	code, out, errs := run(t, url, "ritual", "define", "-f", file)
	require.Equal(t, 0, code, errs)
	require.Equal(t, "ritual onboard version 1 defined\n", out)
	code, out, _ = run(t, url, "ritual", "define", "-f", file)
	require.Equal(t, 0, code)
	require.Equal(t, "ritual onboard is unchanged: version 1 has this content\n", out)

	// A string parameter takes its text; an integer, JSON; region takes
	// its default.
	var run1 map[string]any
	runJSON(t, url, &run1, "ritual", "run", "onboard", "--param", "customer=ACME Corp", "--param", "attempts=5")
	goalID := run1["id"].(string)
	code, out, errs = run(t, url, "goal", "get", goalID)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "Onboard ACME Corp")
	require.Contains(t, out, "from ritual onboard version 1")
	var tasks []map[string]any
	runJSON(t, url, &tasks, "task", "list", "--goal", goalID)
	require.Len(t, tasks, 2)

	// A param that fails its schema: refused, the param named, nothing made.
	code, _, errs = run(t, url, "ritual", "run", "onboard", "--param", "customer=ACME", "--param", "region=mars")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, "/params/region")
	// A value that is not JSON for an integer parameter: refused before sending.
	code, _, errs = run(t, url, "ritual", "run", "onboard", "--param", "customer=ACME", "--param", "attempts=many")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, `parameter "attempts"`)
	var goals []map[string]any
	runJSON(t, url, &goals, "goal", "list")
	require.Len(t, goals, 1)

	// A second version; a run of --version 1 still renders version 1.
	v2 := strings.Replace(onboardYAML, "description: Onboard a customer", "description: Onboard a customer, v2", 1)
	require.NoError(t, os.WriteFile(file, []byte(v2), 0o600))
	code, out, _ = run(t, url, "ritual", "define", "-f", file)
	require.Equal(t, 0, code)
	require.Equal(t, "ritual onboard version 2 defined\n", out)
	params := filepath.Join(dir, "params.yaml")
	require.NoError(t, os.WriteFile(params, []byte("customer: Initech\nregion: us\n"), 0o600))
	code, out, errs = run(t, url, "ritual", "run", "onboard", "--version", "1", "--params-file", params)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "created from ritual onboard version 1")
	require.Contains(t, out, "registry-check")

	code, out, _ = run(t, url, "ritual", "list")
	require.Equal(t, 0, code)
	require.Contains(t, out, "onboard")
	require.Contains(t, out, "Onboard a customer, v2")
	code, out, _ = run(t, url, "ritual", "get", "onboard", "--version", "1")
	require.Equal(t, 0, code)
	require.Contains(t, out, "ritual onboard version 1")
	require.Contains(t, out, "attempts   integer")
	var v map[string]any
	runJSON(t, url, &v, "ritual", "get", "onboard")
	require.Equal(t, float64(2), v["version"])

	// An undeclared parameter is refused at define time, naming the field.
	require.NoError(t, os.WriteFile(file, []byte("name: broken\nparameters: {type: object}\ngoal: {title: \"${who}\"}\ntasks: [{key: a, queue: q}]\n"), 0o600))
	code, _, errs = run(t, url, "ritual", "define", "-f", file)
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, "/goal/title")
	code, _, errs = run(t, url, "ritual", "get", "nope")
	require.Equal(t, exitNotFound, code, errs)

	// A run's key: again, refused; with --if-open use, the open goal.
	var keyed, again map[string]any
	runJSON(t, url, &keyed, "ritual", "run", "onboard", "--param", "customer=Initech", "--key", "onboard-initech")
	code, _, errs = run(t, url, "ritual", "run", "onboard", "--param", "customer=Initech", "--key", "onboard-initech")
	require.Equal(t, exitConflict, code, errs)
	runJSON(t, url, &again, "ritual", "run", "onboard", "--param", "customer=Initech", "--key", "onboard-initech", "--if-open", "use")
	require.Equal(t, keyed["id"], again["id"])
}
