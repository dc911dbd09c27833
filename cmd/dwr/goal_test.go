package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/schemas"
)

// `dwr goal get` shows what the goal's work has spent, each dimension
// beside its budget when it has one.
func TestGoalGetShowsTheSpendBesideTheBudget(t *testing.T) {
	v := &schemas.GoalView{Goal: &schemas.Goal{ID: "g", Title: "t", State: "failed",
		Envelope: schemas.Envelope{Budget: schemas.Budget{Tokens: 100, Attempts: 3}}},
		Spent: schemas.Spend{Attempts: 2, Tokens: 140, Cost: 1, WallMS: 3200}}
	var b bytes.Buffer
	require.NoError(t, printGoal(&b, v))
	require.Contains(t, b.String(), "spent: attempts 2/3  tokens 140/100  cost 1  wall 3.2s\n")
}

// `dwr goal list` says what the goals it lists spent together: what a
// customer's goals cost, listed by their label.
func TestGoalListSumsTheSpendOfTheGoalsListed(t *testing.T) {
	goals := []schemas.GoalView{
		{Goal: &schemas.Goal{ID: "a", Title: "t", State: "achieved", Labels: schemas.Labels{"customer": "acme"}}, Spent: schemas.Spend{Attempts: 2, Tokens: 1500, Cost: 0.25, WallMS: 1200}},
		{Goal: &schemas.Goal{ID: "b", Title: "u", State: "open"}, Spent: schemas.Spend{Attempts: 1, Tokens: 500, Cost: 0.5, WallMS: 800}},
	}
	var b bytes.Buffer
	require.NoError(t, goalTable(&b, goals))
	require.Contains(t, b.String(), "customer=acme")
	require.True(t, strings.HasSuffix(b.String(), "\nspent by these 2 goals: attempts 3  tokens 2000  cost 0.75  wall 2s\n"), b.String())
	b.Reset()
	require.NoError(t, goalTable(&b, nil))
	require.NotContains(t, b.String(), "spent", "nothing listed, nothing summed")
}

// `dwr task get` says how many attempts a task no longer lists, and where
// they are.
func TestTaskGetSaysWhichAttemptsAreNotListed(t *testing.T) {
	tk := &schemas.Task{ID: "T", State: "running", Attempts: []schemas.Attempt{{N: 151, State: "running"}},
		Earlier: &schemas.EarlierAttempts{Count: 150, Spent: 2}, Omitted: []string{"/pending_signals"}}
	var b bytes.Buffer
	require.NoError(t, printTask(&b, tk))
	require.Contains(t, b.String(), "attempts 1-150 not listed (dwr events T has them): 2 used the retry budget since the last retry\n")
	require.Contains(t, b.String(), "151")
	require.Contains(t, b.String(), "too large to show whole; left out (dwr events T has them): /pending_signals\n")
}

// dwr goal list lists the oldest first; --newest the newest first.
func TestCLIGoalListNewestFirst(t *testing.T) {
	url := cliServer(t)
	var made []string
	for i := range 3 {
		var r map[string]any
		runJSON(t, url, &r, "goal", "create", "--title", fmt.Sprintf("g%d", i))
		made = append(made, r["id"].(string))
	}
	listed := func(args ...string) []string {
		var gs []map[string]any
		runJSON(t, url, &gs, append([]string{"goal", "list", "--limit", "2", "--all"}, args...)...)
		var out []string
		for _, g := range gs {
			out = append(out, g["id"].(string))
		}
		return out
	}
	require.Equal(t, made, listed())
	require.Equal(t, []string{made[2], made[1], made[0]}, listed("--newest"))
	require.Empty(t, listed("--schedule", "nightly"), "no schedule started them")
	code, _, errs := run(t, url, "goal", "list", "--schedule", "Nightly Run")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, "/schedule")
}

// dwr goal create --label, dwr goal list --label, dwr goal label and dwr
// goal get: a goal found by its labels, relabeled, and shown with them.
func TestCLIGoalLabels(t *testing.T) {
	url := cliServer(t)
	create := func(labels ...string) string {
		var r map[string]any
		args := []string{"goal", "create", "--title", "order"}
		for _, l := range labels {
			args = append(args, "--label", l)
		}
		runJSON(t, url, &r, args...)
		return r["id"].(string)
	}
	a := create("customer=acme", "note=a=b")
	b := create("customer=globex")
	listed := func(labels ...string) []string {
		args := []string{"goal", "list", "--all"}
		for _, l := range labels {
			args = append(args, "--label", l)
		}
		var gs []map[string]any
		runJSON(t, url, &gs, args...)
		var out []string
		for _, g := range gs {
			out = append(out, g["id"].(string))
		}
		return out
	}
	require.Equal(t, []string{a}, listed("customer=acme"))
	require.Equal(t, []string{a}, listed("customer=acme", "note=a=b"), "a value may hold '='")

	code, out, errs := run(t, url, "goal", "label", b, "customer=acme", "tier=", "--remove", "absent")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, b)
	require.Equal(t, []string{a, b}, listed("customer=acme"))
	require.Equal(t, []string{b}, listed("tier="))

	code, out, errs = run(t, url, "goal", "list", "--label", "customer=acme")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "LABELS")
	require.Contains(t, out, "customer=acme,note=a=b")
	code, out, errs = run(t, url, "goal", "get", b)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "labels: customer=acme,tier=\n")

	for _, args := range [][]string{
		{"goal", "list", "--label", "customer"},
		{"goal", "create", "--title", "t", "--label", "=x"},
		{"goal", "label", b},
	} {
		code, _, errs = run(t, url, args...)
		require.Equal(t, exitInvalid, code, "%v", args)
		require.NotEmpty(t, errs)
	}
	code, _, errs = run(t, url, "goal", "label", b, "Customer=x")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, "/set/Customer")
}

// dwr goal cancel with --label (or --schedule) cancels every open goal
// they select, each by a command of its own; without --yes it only says
// what it would do; with an id, that goal alone.
func TestCLIGoalCancelEveryGoalALabelSelects(t *testing.T) {
	url := cliServer(t)
	create := func(label string) string {
		var r map[string]any
		runJSON(t, url, &r, "goal", "create", "--title", "order of "+label, "--label", label)
		return r["id"].(string)
	}
	acme := []string{create("customer=acme"), create("customer=acme")}
	other := create("customer=globex")

	code, out, errs := run(t, url, "goal", "cancel", "--label", "customer=acme")
	require.Equal(t, exitOK, code, errs)
	require.Equal(t, 2, strings.Count(out, "would cancel goal"), out)
	require.Contains(t, out, "(order of customer=acme), open")
	require.Contains(t, errs, "2 goals would be cancelled: add --yes to cancel them")

	var outcomes []bulkOutcome
	runJSON(t, url, &outcomes, "goal", "cancel", "--label", "customer=acme", "--yes", "--reason", "the customer left", "--command-id", "offboard")
	require.Len(t, outcomes, 2)
	for i, o := range outcomes {
		require.Equal(t, bulkOutcome{GoalID: acme[i], Title: "order of customer=acme", State: "cancelled", Outcome: "done"}, o)
	}
	var g map[string]any
	runJSON(t, url, &g, "goal", "get", acme[0])
	require.Equal(t, "cancelled", g["state"])
	require.Equal(t, "the customer left", g["reason"])
	runJSON(t, url, &g, "goal", "get", other)
	require.Equal(t, "open", g["state"], "another label's goal is left")
	code, out, errs = run(t, url, "goal", "cancel", "--label", "customer=acme", "--yes")
	require.Equal(t, exitOK, code, errs)
	require.Empty(t, out, "the cancelled goals are no longer open")
	require.Contains(t, errs, "cancelled 0 goals")

	refusals(t, url, map[string][]string{
		"give a goal's ID, or filters (--label, --schedule) to cancel every goal they select": {"goal", "cancel"},
		"not both":        {"goal", "cancel", other, "--label", "customer=globex"},
		"want NAME=VALUE": {"goal", "cancel", "--label", "customer"},
	})
	var one map[string]any
	runJSON(t, url, &one, "goal", "cancel", other)
	require.Equal(t, "cancelled", one["state"], "with an id: that goal alone")
}

// dwr task create --label, dwr task list --label, dwr task label and dwr
// task get: a standalone task found by its labels, relabeled, and shown.
func TestCLITaskLabels(t *testing.T) {
	url := cliServer(t)
	var a, b map[string]any
	runJSON(t, url, &a, "task", "create", "--queue", "mail", "--label", "customer=acme")
	runJSON(t, url, &b, "task", "create", "--queue", "mail")
	listed := func(args ...string) []string {
		var ts []map[string]any
		runJSON(t, url, &ts, append([]string{"task", "list", "--all"}, args...)...)
		var out []string
		for _, tk := range ts {
			out = append(out, tk["id"].(string))
		}
		return out
	}
	require.Equal(t, []string{a["id"].(string)}, listed("--label", "customer=acme"))
	code, _, errs := run(t, url, "task", "label", b["id"].(string), "customer=acme")
	require.Zero(t, code, errs)
	require.Equal(t, []string{b["id"].(string), a["id"].(string)}, listed("--label", "customer=acme", "--newest"))
	code, out, errs := run(t, url, "task", "get", b["id"].(string))
	require.Zero(t, code, errs)
	require.Contains(t, out, "labels: customer=acme\n")
	refusals(t, url, map[string][]string{
		"want NAME=VALUE": {"task", "list", "--label", "customer"},
		"/set/Customer":   {"task", "label", b["id"].(string), "Customer=x"},
	})
}

// `dwr goal create --priority` and `dwr goal prioritize` set a goal's
// priority, which `dwr goal get` shows; a priority out of bounds is
// refused, named.
func TestCLIGoalPriority(t *testing.T) {
	url := cliServer(t)
	var g map[string]any
	runJSON(t, url, &g, "goal", "create", "--title", "urgent", "--priority", "2")
	id := g["id"].(string)
	code, out, errs := run(t, url, "goal", "get", id)
	require.Zero(t, code, errs)
	require.Contains(t, out, "\npriority: 2\n")
	code, _, errs = run(t, url, "goal", "prioritize", id, "1")
	require.Zero(t, code, errs)
	_, out, _ = run(t, url, "goal", "get", id)
	require.Contains(t, out, "\npriority: 1\n")
	refusals(t, url, map[string][]string{
		"want a whole number": {"goal", "prioritize", id, "first"},
		"/priority":           {"goal", "prioritize", id, "9"},
	})
	code, _, errs = run(t, url, "goal", "create", "--title", "x", "--priority", "0")
	require.Zero(t, code, errs, "0: none given")
}

// `dwr goal create --key` makes a goal that holds the key while open:
// again, refused (exit 5) or, with --if-open use, that goal; `dwr goal get
// --key` reads it.
func TestCLIGoalKey(t *testing.T) {
	url := cliServer(t)
	var g, again map[string]any
	runJSON(t, url, &g, "goal", "create", "--title", "order", "--key", "order-1042")
	code, _, errs := run(t, url, "goal", "create", "--title", "order", "--key", "order-1042")
	require.Equal(t, exitConflict, code)
	require.Contains(t, errs, g["id"].(string))
	runJSON(t, url, &again, "goal", "create", "--title", "order", "--key", "order-1042", "--if-open", "use")
	require.Equal(t, g["id"], again["id"])
	code, out, errs := run(t, url, "goal", "get", "--key", "order-1042")
	require.Zero(t, code, errs)
	require.Contains(t, out, "goal "+g["id"].(string))
	require.Contains(t, out, "\nkey: order-1042\n")
	refusals(t, url, map[string][]string{
		"one of the two": {"goal", "get"},
		"/key":           {"goal", "create", "--title", "x", "--key", "order 1042"},
	})
	code, _, _ = run(t, url, "goal", "get", "--key", "order-9")
	require.Equal(t, exitNotFound, code)
}
