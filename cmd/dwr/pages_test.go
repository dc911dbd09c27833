package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// dwr task list shows a page and says on stderr when more follow, with the
// cursor of the next page; --after lists that page, and --all every task.
func TestCLITaskListPages(t *testing.T) {
	url := cliServer(t)
	var plan strings.Builder
	plan.WriteString("tasks:\n")
	for i := range 5 {
		queue := "q"
		if i == 3 {
			queue = "other"
		}
		fmt.Fprintf(&plan, "  - key: k%d\n    queue: %s\n", i, queue)
	}
	goalWithPlan(t, url, "five tasks", plan.String())

	code, out, errs := run(t, url, "task", "list", "--limit", "2")
	require.Equal(t, 0, code, errs)
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 3, "a header and two tasks:\n%s", out)
	m := regexp.MustCompile(`more tasks follow: repeat with --all .* --after (\S+) for the next page`).FindStringSubmatch(errs)
	require.NotNil(t, m, errs)

	var page []map[string]any
	runJSON(t, url, &page, "task", "list", "--limit", "2", "--after", m[1])
	require.Len(t, page, 2)

	var all []map[string]any
	code, out, errs = run(t, url, "task", "list", "--limit", "2", "--all", "--json")
	require.Equal(t, 0, code, errs)
	require.Empty(t, errs, "with --all nothing more follows")
	require.NoError(t, json.Unmarshal([]byte(out), &all), out)
	require.Len(t, all, 5)
	seen := map[any]bool{}
	for _, tk := range all {
		require.False(t, seen[tk["id"]], "listed once")
		seen[tk["id"]] = true
	}

	code, out, errs = run(t, url, "task", "list", "--queue", "other")
	require.Equal(t, 0, code, errs)
	require.Regexp(t, `(?m)^\S+ +k3 +ready +other `, out, "only the task of queue other")
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 2, "a header and one task:\n%s", out)

	var ready, newest []map[string]any
	runJSON(t, url, &ready, "task", "list", "--state", "ready")
	runJSON(t, url, &newest, "task", "list", "--state", "ready", "--newest", "--limit", "2", "--all")
	require.Len(t, newest, len(ready))
	for i := range ready {
		require.Equal(t, ready[i]["id"], newest[len(newest)-1-i]["id"], "the newest first")
	}
	code, _, errs = run(t, url, "task", "list", "--newest")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, "give state, goal_id or labels with newest_first")

	code, _, errs = run(t, url, "task", "list", "--after", "nostate/x")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, "after")
}
