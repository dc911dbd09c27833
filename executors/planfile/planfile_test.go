package planfile_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/executors/planfile"
	"github.com/dwr-run/dwr/schemas"
)

var now = time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)

func read(t *testing.T, doc string) ([]schemas.TaskSpec, error) {
	t.Helper()
	return planfile.Read("plan.yaml", strings.NewReader(doc), now)
}

// A plan is a list of tasks or an object with a "tasks" list, in YAML or
// JSON; it reads into the specs the wire carries.
func TestReadYAMLAndJSON(t *testing.T) {
	want := []schemas.TaskSpec{
		{Key: "extract", Queue: "shell", Input: json.RawMessage(`{"doc":"acme.pdf"}`)},
		{Key: "check", Queue: "shell", DependsOn: []string{"extract"},
			Retry: &schemas.RetryPolicy{MaxAttempts: 5, InitialBackoff: schemas.Duration(2 * time.Second)}, Timeout: schemas.Duration(5 * time.Minute)},
	}
	for _, doc := range []string{
		"tasks:\n  - key: extract\n    queue: shell\n    input: {doc: acme.pdf}\n" +
			"  - key: check\n    queue: shell\n    depends_on: [extract]\n    retry: {max_attempts: 5, initial_backoff: 2s}\n    timeout: 5m\n",
		`[{"key":"extract","queue":"shell","input":{"doc":"acme.pdf"}},` +
			`{"key":"check","queue":"shell","depends_on":["extract"],"retry":{"max_attempts":5,"initial_backoff":"2s"},"timeout":"5m"}]`,
	} {
		got, err := read(t, doc)
		require.NoError(t, err, doc)
		require.Equal(t, want, got, doc)
	}

	file := filepath.Join(t.TempDir(), "plan.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"tasks": [{"key": "a", "queue": "q"}]}`), 0o600))
	got, err := planfile.ReadFile(file, now)
	require.NoError(t, err)
	require.Equal(t, []schemas.TaskSpec{{Key: "a", Queue: "q"}}, got)
	_, err = planfile.ReadFile(filepath.Join(t.TempDir(), "missing.yaml"), now)
	require.ErrorContains(t, err, "missing.yaml")
}

// A plan's YAML is read as YAML 1.2: keys and values such as n, no, on,
// off and NO stay strings (YAML 1.1 read them as booleans, so an input
// {n: 3} reached the service as {"false": 3}); true and false are
// booleans, numbers numbers, dates and times the strings they are written
// as, and a key that is not a string takes its YAML form.
func TestPlanYAMLKeepsWordsThatYAML11ReadAsBooleans(t *testing.T) {
	got, err := read(t, "- key: a\n  queue: q\n  input: {n: 3, y: 1, answer: no, country: NO, on: push, off: true, flag: false, ratio: 0.5, 7: seven,"+
		" day: 2026-01-02, at: 2026-01-02T03:04:05Z, base: &b {k: v}, more: {<<: *b, x: 1}}\n")
	require.NoError(t, err)
	require.JSONEq(t, `{"n": 3, "y": 1, "answer": "no", "country": "NO", "on": "push", "off": true, "flag": false, "ratio": 0.5, "7": "seven",
		"day": "2026-01-02", "at": "2026-01-02T03:04:05Z", "base": {"k": "v"}, "more": {"k": "v", "x": 1}}`, string(got[0].Input),
		"dates and times stay as written; anchors and merge keys are YAML's")

	_, err = read(t, "- {key: a, queue: q, input: {n: 1, n: 2}}\n")
	require.ErrorContains(t, err, "plan file plan.yaml is neither YAML nor JSON", "a key given twice")
}

// start_after and deadline_after are durations from the moment the plan is
// read: they become start_at and deadline.
func TestPlanDeadlineAfterResolvesToADeadline(t *testing.T) {
	got, err := read(t, "- {key: a, queue: q, deadline_after: 2h, start_after: 1h}\n")
	require.NoError(t, err)
	require.Equal(t, now.Add(2*time.Hour), *got[0].Deadline)
	require.Equal(t, now.Add(time.Hour), *got[0].StartAt)

	_, err = read(t, "- {key: a, queue: q}\n- {key: b, queue: q, deadline_after: later}\n")
	require.ErrorContains(t, err, "/tasks/1/deadline_after")
	_, err = read(t, "- {key: a, queue: q, deadline_after: 1h, deadline: \"2026-01-02T17:04:05Z\"}\n")
	require.ErrorContains(t, err, "not both")
	_, err = read(t, "- {key: a, queue: q, start_after: -1h}\n")
	require.ErrorContains(t, err, "/tasks/0/start_after")
}

// What is not a plan is refused with a message that names the file and,
// for a task, where in it.
func TestReadRefusesWhatIsNotAPlan(t *testing.T) {
	for doc, want := range map[string]string{
		"tasks: [unclosed":                      "plan.yaml is neither YAML nor JSON",
		"key: a\nqueue: q\n":                    "a list of tasks or an object with a \"tasks\" list",
		"\"just a string\"":                     "a list of tasks or an object",
		"{tasks: {key: a}}":                     "a list of tasks or an object",
		"- {key: a, queue: q, dependson: [b]}":  `/tasks/0: json: unknown field "dependson"`,
		"- {key: a, queue: q}\n- just a string": "/tasks/1:",
		"- {key: a, queue: [q]}":                "/tasks/0:",
		"- {key: a, queue: q, timeout: soon}":   "/tasks/0:",
	} {
		_, err := read(t, doc)
		require.ErrorContains(t, err, want, doc)
		require.ErrorContains(t, err, "plan file plan.yaml", doc)
	}
	_, err := read(t, strings.Repeat(" ", planfile.MaxSize+1))
	require.ErrorContains(t, err, "larger than")
}
