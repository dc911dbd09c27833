package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/projections"
)

// cliServer starts the service on an embedded NATS server listening on a
// free loopback port and returns its URL.
func cliServer(t *testing.T) string {
	t.Helper()
	url, _ := cliServerIn(t, t.TempDir())
	return url
}

// cliServerIn is cliServer on data directory dir; stop stops it (also at
// cleanup).
func cliServerIn(t *testing.T, dir string) (url string, stop func()) {
	t.Helper()
	st := servicetest.Start(t, dir, servicetest.Options{Listen: "127.0.0.1:0"})
	return st.URL, st.Stop
}

// refusals runs each command of cases, each of which must exit
// exitInvalid saying its message.
func refusals(t *testing.T, url string, cases map[string][]string) {
	t.Helper()
	for msg, args := range cases {
		code, _, errs := run(t, url, args...)
		require.Equal(t, exitInvalid, code, args)
		require.Contains(t, errs, msg, args)
	}
}

// run runs the CLI and returns its exit code, stdout and stderr.
func run(t *testing.T, url string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(append([]string{"--server", url}, args...), strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func runJSON(t *testing.T, url string, v any, args ...string) {
	t.Helper()
	code, out, errs := run(t, url, append(args, "--json")...)
	require.Equal(t, 0, code, errs)
	require.NoError(t, json.Unmarshal([]byte(out), v), out)
}

func TestCLIWithoutAServerExitsUnavailable(t *testing.T) {
	code, _, errs := run(t, "nats://127.0.0.1:1", "task", "list")
	require.Equal(t, exitUnavailable, code)
	require.Contains(t, errs, "dwr serve")
}

// What is wrong with the key file is said before the network is tried:
// an existing --out is bad input (exit 2) even with no service to reach.
func TestCLIKeysCreateChecksItsFileFirst(t *testing.T) {
	out := filepath.Join(t.TempDir(), "ada.key")
	require.NoError(t, os.WriteFile(out, []byte("an earlier key"), 0o600))
	code, _, errs := run(t, "nats://127.0.0.1:1", "keys", "create", "ada", "--role", "ops", "--out", out)
	require.Equal(t, exitInvalid, code, errs)
	require.Contains(t, errs, "already exists")
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, "an earlier key", string(b), "the file is left as it was")
	entries, err := os.ReadDir(filepath.Dir(out))
	require.NoError(t, err)
	require.Len(t, entries, 1, "nothing is left beside it")
}

func TestCLITour(t *testing.T) {
	url := cliServer(t)

	var ws []map[string]any
	runJSON(t, url, &ws, "workspace", "list")
	require.Equal(t, "default", ws[0]["id"])

	var goal map[string]any
	runJSON(t, url, &goal, "goal", "create", "--title", "Onboard ACME", "--criterion", "account exists", "--command-id", "g-1")
	require.Equal(t, "open", goal["state"])
	var again map[string]any
	runJSON(t, url, &again, "goal", "create", "--title", "Onboard ACME", "--criterion", "account exists", "--command-id", "g-1")
	require.Equal(t, goal["id"], again["id"], "the same command id returns the first outcome")
	code, _, errs0 := run(t, url, "goal", "create", "--title", "Onboard ACME", "--command-id", "g-1")
	require.Equal(t, exitConflict, code, "the same id for another command is refused")
	require.Contains(t, errs0, "command id g-1 was used before for another command (goal.create")

	plan := filepath.Join(t.TempDir(), "plan.yaml")
	require.NoError(t, os.WriteFile(plan, []byte(`tasks:
  - key: extract
    queue: shell
    input: {doc: acme.pdf}
  - key: check
    queue: shell
    depends_on: [extract]
    retry: {max_attempts: 5, initial_backoff: 2s}
`), 0o600))
	code, out, errs := run(t, url, "plan", "submit", "--goal", goal["id"].(string), "-f", plan)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "plan version 1")

	var tasks []map[string]any
	runJSON(t, url, &tasks, "task", "list", "--goal", goal["id"].(string))
	require.Len(t, tasks, 2)
	states := map[string]any{}
	for _, tk := range tasks {
		states[tk["key"].(string)] = tk["state"]
		require.NotEmpty(t, tk["id"])
	}
	require.Equal(t, map[string]any{"extract": "ready", "check": "pending"}, states)

	code, out, _ = run(t, url, "goal", "get", goal["id"].(string))
	require.Equal(t, 0, code)
	require.Contains(t, out, "pending=1 ready=1")

	var hist []map[string]any
	runJSON(t, url, &hist, "events", goal["id"].(string))
	require.Equal(t, "goal.created", hist[0]["type"])

	var cancelled map[string]any
	runJSON(t, url, &cancelled, "task", "cancel", tasks[0]["id"].(string))
	require.Equal(t, "cancelled", cancelled["state"])
	code, _, errs = run(t, url, "task", "cancel", tasks[0]["id"].(string))
	require.Equal(t, exitConflict, code)
	require.Contains(t, errs, "already cancelled")
}

func TestCLIBadInputNamesTheField(t *testing.T) {
	url := cliServer(t)
	var goal map[string]any
	runJSON(t, url, &goal, "goal", "create", "--title", "g")
	plan := filepath.Join(t.TempDir(), "plan.json")
	require.NoError(t, os.WriteFile(plan, []byte(`[{"key":"a","queue":"q"},{"key":"b","queue":"q","depends_on":["nope"]}]`), 0o600))
	code, _, errs := run(t, url, "plan", "submit", "--goal", goal["id"].(string), "-f", plan)
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, "/tasks/1/depends_on/0")

	code, _, errs = run(t, url, "goal", "create")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, "title")

	code, _, errs = run(t, url, "task", "get", "01ARZ3NDEKTSV4RRFFQ69G5FAV")
	require.Equal(t, exitNotFound, code, errs)

	require.NoError(t, os.WriteFile(plan, []byte("tasks: [unclosed"), 0o600))
	code, _, errs = run(t, url, "plan", "submit", "--goal", goal["id"].(string), "-f", plan)
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, "YAML")
}

func TestCLIAdminRebuildMatchesTheLiveViews(t *testing.T) {
	dir := t.TempDir()
	url, stop := cliServerIn(t, dir)
	goalWithPlan(t, url, "g", "- {key: a, queue: q}\n- {key: b, queue: q, depends_on: [a]}\n")
	stop()

	code, out, errs := run(t, url, "admin", "rebuild", "--data", dir)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "identical to the current views, byte for byte")
	require.Contains(t, errs, "rebuilding: record", "progress is shown")

	// The rebuilt views serve the same state.
	url, _ = cliServerIn(t, dir)
	var tasks []map[string]any
	runJSON(t, url, &tasks, "task", "list")
	require.Len(t, tasks, 2)
}

// rawCommand sends a command over NATS, as an executor would, requires that
// it is accepted, and returns its result's token (a claim's), if any.
func rawCommand(t *testing.T, url, name string, body any) string {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	var r struct {
		Token string `json:"token"`
	}
	require.NoError(t, json.Unmarshal(servicetest.NewClient(nc, "default").Command(t, name, body), &r))
	return r.Token
}

func TestCLISignalResumesAWaitingTask(t *testing.T) {
	url := cliServer(t)
	var task map[string]any
	runJSON(t, url, &task, "task", "create", "--queue", "q")
	id := task["id"].(string)
	token := rawCommand(t, url, "task.claim", map[string]any{"task_id": id, "executor": "e"})
	rawCommand(t, url, "task.wait", map[string]any{"task_id": id, "attempt": 1, "token": token, "kind": "signal", "signal": "payment-settled"})

	var kept map[string]any
	runJSON(t, url, &kept, "signal", id, "vendor-answered")
	require.Equal(t, "waiting", kept["state"], "another signal is kept for a later wait")

	var got map[string]any
	runJSON(t, url, &got, "signal", id, "payment-settled", "--data", `{"amount": 12}`)
	require.Equal(t, "ready", got["state"])

	run(t, url, "task", "cancel", id)
	code, _, errs := run(t, url, "signal", id, "payment-settled")
	require.Equal(t, exitConflict, code)
	require.Contains(t, errs, "has ended")
}

// dwr goal get shows the tree of goals its tasks delegated to; dwr task get
// what a delegating task waits for and its delegations.
func TestCLIGoalGetShowsTheDelegationTree(t *testing.T) {
	url := cliServer(t)
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	k := servicetest.NewClient(nc, "default")
	var top, child struct {
		ID     string `json:"id"`
		GoalID string `json:"goal_id"`
		Tasks  []struct {
			TaskID string `json:"task_id"`
		} `json:"tasks"`
	}
	require.NoError(t, json.Unmarshal(k.Command(t, "goal.create", map[string]any{"title": "report",
		"tasks": []map[string]any{{"key": "lead", "queue": "q"}}}), &top))
	lead := top.Tasks[0].TaskID
	token := rawCommand(t, url, "task.claim", map[string]any{"task_id": lead, "executor": "e"})
	require.NoError(t, json.Unmarshal(k.Command(t, "task.delegate", map[string]any{"task_id": lead, "attempt": 1, "token": token,
		"key": "sources", "goal": map[string]any{"title": "sources", "tasks": []map[string]any{{"key": "crm", "queue": "q"}}}}), &child))

	code, out, errs := run(t, url, "goal", "get", top.ID)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "\ndelegations:\n  lead "+lead+" waiting\n    \"sources\" -> goal "+child.GoalID+" open\n      crm ")
	code, out, errs = run(t, url, "goal", "get", child.GoalID)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, fmt.Sprintf("delegated by task %s as \"sources\" (goal %s, depth 1)", lead, top.ID))
	require.NotContains(t, out, "delegations:", "no task of the child delegated")
	code, out, errs = run(t, url, "task", "get", lead)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "waiting for: goal "+child.GoalID+", delegated to (dwr goal get "+child.GoalID+")")
	require.Regexp(t, `sources\s+1\s+`+child.GoalID+`\s+open\s+fail`, out)
}

// dwr goal create --own-key, then dwr shred --goal: the goal's payloads read
// [shredded]; dwr shred --all shreds the workspace.
func TestCLIShred(t *testing.T) {
	st := servicetest.Start(t, t.TempDir(), servicetest.Options{Listen: "127.0.0.1:0",
		Config: handlers.Config{Encryption: true, MasterKey: bytes.Repeat([]byte{5}, 32)}})
	url := st.URL
	code, _, errs := run(t, url, "shred")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, "give --goal ID, or --workspace NAME (or --all)")
	code, _, errs = run(t, url, "workspace", "set", "default", "--retain-ended", "-1s")
	require.Equal(t, exitInvalid, code, errs)
	code, out, errs := run(t, url, "workspace", "set", "default", "--retain-ended", "720h", "--json")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, `"id": "default"`)
	var ws []map[string]any
	runJSON(t, url, &ws, "workspace", "list")
	require.Equal(t, "720h0m0s", ws[0]["retain_ended"])

	var goal map[string]any
	runJSON(t, url, &goal, "goal", "create", "--title", "erasable", "--own-key")
	id := goal["id"].(string)
	plan := filepath.Join(t.TempDir(), "plan.yaml")
	require.NoError(t, os.WriteFile(plan, []byte("- key: a\n  queue: q\n  input: {card: 4111}\n"), 0o600))
	var committed struct {
		Tasks []struct {
			TaskID string `json:"task_id"`
		} `json:"tasks"`
	}
	runJSON(t, url, &committed, "plan", "submit", "--goal", id, "-f", plan)
	task := committed.Tasks[0].TaskID
	_, out, _ = run(t, url, "task", "get", task)
	require.Contains(t, out, `input: {"card":4111}`)

	code, out, errs = run(t, url, "shred", "--goal", id, "--reason", "erasure request")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "goal "+id+" is cancelled")
	_, out, _ = run(t, url, "task", "get", task)
	require.Contains(t, out, `input: "[shredded]"`)
	code, _, errs = run(t, url, "shred", "--workspace", "default")
	require.Equal(t, 0, code, errs)
	code, _, errs = run(t, url, "task", "create", "--queue", "q", "--input", "1")
	require.Equal(t, exitConflict, code)
	require.Contains(t, errs, "the data of workspace default was shredded")
}

// dwr admin rotate-master-key rewraps the data keys: the service reads its
// payloads with the new key, and not with the old one.
func TestCLIRotateMasterKey(t *testing.T) {
	dir := t.TempDir()
	old, err := handlers.LoadOrMakeMasterKey(filepath.Join(dir, handlers.MasterKeyFile))
	require.NoError(t, err)
	start := func(key []byte) (*servicetest.Service, error) {
		return servicetest.TryStart(t, dir, servicetest.Options{Listen: "127.0.0.1:0", Config: handlers.Config{Encryption: true, MasterKey: key}})
	}
	st, err := start(old)
	require.NoError(t, err)
	var task map[string]any
	runJSON(t, st.URL, &task, "task", "create", "--queue", "q", "--input", `{"card": 4111}`)
	id := task["id"].(string)
	st.Stop()

	newKey := filepath.Join(t.TempDir(), "new.key")
	code, out, errs := run(t, "nats://127.0.0.1:1", "admin", "rotate-master-key", "--data", dir, "--new-key-file", newKey)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "rewrapped 1 data keys")
	next, err := os.ReadFile(newKey)
	require.NoError(t, err)
	inPlace, err := os.ReadFile(filepath.Join(dir, handlers.MasterKeyFile))
	require.NoError(t, err)
	require.Equal(t, next, inPlace, "DATA/master.key holds the new key")

	st, err = start(next)
	require.NoError(t, err)
	_, out, _ = run(t, st.URL, "task", "get", id)
	require.Contains(t, out, `input: {"card":4111}`)
	st.Stop()
	_, err = start(old)
	if err == nil {
		t.Fatal("the old master key still opens the data keys")
	}
}

// dwr version, dwr goal cancel, and errors as JSON under --json.
func TestCLIVersionGoalCancelAndJSONErrors(t *testing.T) {
	url := cliServer(t)
	code, out, errs := run(t, url, "version")
	require.Equal(t, 0, code, errs)
	require.Regexp(t, `^dwr \S+.*, go1\.\d+`, out)
	var v map[string]any
	runJSON(t, url, &v, "version")
	require.NotEmpty(t, v["version"])

	var goal map[string]any
	runJSON(t, url, &goal, "goal", "create", "--title", "to cancel")
	id := goal["id"].(string)
	var cancelled map[string]any
	runJSON(t, url, &cancelled, "goal", "cancel", id, "--reason", "not needed")
	require.Equal(t, "cancelled", cancelled["state"])

	code, out, errs = run(t, url, "goal", "cancel", id, "--json")
	require.Equal(t, exitConflict, code)
	require.Empty(t, out)
	var e struct {
		Error struct {
			Message  string `json:"message"`
			ExitCode int    `json:"exit_code"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(errs), &e), errs)
	require.Equal(t, exitConflict, e.Error.ExitCode)
	require.Contains(t, e.Error.Message, "already cancelled")

	code, _, errs = run(t, url, "watch", "bad subject")
	require.Equal(t, exitInvalid, code, "a bad filter is bad input, not a service down")
	require.Contains(t, errs, "is not a subject filter")
}

func TestCLIReviewDecidesAnInconclusiveTask(t *testing.T) {
	url := cliServer(t)
	var task map[string]any
	runJSON(t, url, &task, "task", "create", "--queue", "q", "--verify-queue", "checks")
	id := task["id"].(string)
	token := rawCommand(t, url, "task.claim", map[string]any{"task_id": id, "executor": "e"})
	rawCommand(t, url, "task.succeed", map[string]any{"task_id": id, "attempt": 1, "token": token, "result": "draft"})
	rawCommand(t, url, "task.verify", map[string]any{"task_id": id, "attempt": 1, "outcome": "INCONCLUSIVE",
		"verifier": "checker", "result_digest": domain.ResultDigest([]byte(`"draft"`)), "evidence": map[string]any{"why": "unsure"}})

	code, _, errs := run(t, url, "review", id, "maybe")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, "accept, reject or retry")

	var got map[string]any
	runJSON(t, url, &got, "review", id, "accept", "--reason", "read it myself")
	require.Equal(t, "accepted", got["state"])
}

func TestCLIPlanStartAfterWaitsUntilItsTime(t *testing.T) {
	url := cliServer(t)
	goalID := goalWithPlan(t, url, "later", "- {key: now, queue: q}\n- {key: later, queue: q, start_after: 1h}\n")
	var tasks []map[string]any
	runJSON(t, url, &tasks, "task", "list", "--goal", goalID)
	states := map[string]any{}
	for _, tk := range tasks {
		states[tk["key"].(string)] = tk["state"]
	}
	require.Equal(t, map[string]any{"now": "ready", "later": "waiting"}, states)

	plan := filepath.Join(t.TempDir(), "plan.yaml")
	require.NoError(t, os.WriteFile(plan, []byte("- {key: bad, queue: q, start_after: soon}\n"), 0o600))
	code, _, errs := run(t, url, "plan", "submit", "--goal", goalID, "-f", plan)
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, "/tasks/0/start_after")
}

// goalWithPlan creates a goal titled title and submits plan (YAML) to it
// with the CLI; it returns the goal's id.
func goalWithPlan(t *testing.T, url, title, plan string) string {
	t.Helper()
	var goal map[string]any
	runJSON(t, url, &goal, "goal", "create", "--title", title)
	file := filepath.Join(t.TempDir(), "plan.yaml")
	require.NoError(t, os.WriteFile(file, []byte(plan), 0o600))
	code, _, errs := run(t, url, "plan", "submit", "--goal", goal["id"].(string), "-f", file)
	require.Equal(t, 0, code, errs)
	return goal["id"].(string)
}

// stoppedWithAGoal runs the service in a fresh data directory, creates a
// goal there (command id g-1) and stops the service; it returns the
// directory, the URL the service had and the goal's id.
func stoppedWithAGoal(t *testing.T) (dir, url, goalID string) {
	t.Helper()
	dir = t.TempDir()
	url, stop := cliServerIn(t, dir)
	var goal map[string]any
	runJSON(t, url, &goal, "goal", "create", "--title", "g", "--command-id", "g-1")
	stop()
	return dir, url, goal["id"].(string)
}

// republishLast publishes a copy of the log's last record on the log subject
// of a stopped server's data directory: a foreign record.
func republishLast(t *testing.T, dir string) (seq uint64) {
	t.Helper()
	servicetest.OnStopped(t, dir, func(ctx context.Context, js jetstream.JetStream) { seq = servicetest.Forge(t, ctx, js, nil, "") })
	return seq
}

func TestCLIAdminRebuildRefusesADamagedLog(t *testing.T) {
	dir, url, _ := stoppedWithAGoal(t)
	views := filepath.Join(dir, "views")
	before := viewsSum(t, views)
	seq := republishLast(t, dir)

	code, _, errs := run(t, url, "admin", "rebuild", "--data", dir)
	require.Equal(t, exitDamaged, code, errs)
	require.Contains(t, errs, fmt.Sprintf("log damaged at seq %d", seq))
	require.Contains(t, errs, "repeated position")
	require.Contains(t, errs, "the views were left untouched")
	require.Equal(t, before, viewsSum(t, views), "the views hold what they held")
	matches, err := filepath.Glob(filepath.Join(dir, "views.*"))
	require.NoError(t, err)
	require.Empty(t, matches, "no rebuilt or old views were left behind")
}

func viewsSum(t *testing.T, dir string) string {
	t.Helper()
	s, err := projections.Open(dir, projections.Options{})
	require.NoError(t, err)
	defer s.Close()
	sum, err := handlers.ViewsSum(s)
	require.NoError(t, err)
	return fmt.Sprintf("%x@%d", sum, s.Checkpoint())
}

func TestCLIAdminRebuildAcceptsTheVerifiedPrefix(t *testing.T) {
	dir, url, goalID := stoppedWithAGoal(t)
	republishLast(t, dir)

	code, out, errs := run(t, url, "admin", "rebuild", "--data", dir, "--accept-verified-prefix")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "accepted the log's verified prefix")
	require.Contains(t, out, "repeated position")
	require.Contains(t, out, "acknowledged commands lost (0)", "the copied record's command is in the prefix: not lost")
	require.Contains(t, out, "every record verified")

	// The log now verifies through the acceptance: the service starts on it.
	url, _ = cliServerIn(t, dir)
	var goal map[string]any
	runJSON(t, url, &goal, "goal", "get", goalID)
}

func TestCLIAdminVerify(t *testing.T) {
	dir, url, _ := stoppedWithAGoal(t)

	code, out, errs := run(t, url, "admin", "verify", "--data", dir)
	require.Equal(t, 0, code, errs)
	require.Contains(t, errs, "verifying: record", "progress is shown")
	require.Contains(t, out, "verified to the end")
	require.Contains(t, out, "on the log's verified chain")
	require.Regexp(t, `result\s+OK`, out)

	seq := republishLast(t, dir)
	code, out, errs = run(t, url, "admin", "verify", "--data", dir, "--json")
	require.Equal(t, exitDamaged, code, errs)
	require.Contains(t, errs, fmt.Sprintf("log damaged at seq %d", seq))
	var r struct {
		OK     bool `json:"ok"`
		Damage struct {
			Seq     uint64 `json:"seq"`
			Problem string `json:"problem"`
			Lost    []struct {
				Seq      uint64   `json:"seq"`
				Commands []string `json:"commands"`
			} `json:"lost"`
		} `json:"damage"`
		Verified struct {
			Seq uint64 `json:"seq"`
		} `json:"verified"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	require.False(t, r.OK)
	require.Equal(t, seq, r.Damage.Seq)
	require.Equal(t, "repeated position", r.Damage.Problem)
	require.Equal(t, seq-1, r.Verified.Seq)
	require.Len(t, r.Damage.Lost, 1)
	require.Equal(t, []string{"default/g-1 (by anonymous)"}, r.Damage.Lost[0].Commands)

	code, out, _ = run(t, url, "admin", "verify", "--data", dir)
	require.Equal(t, exitDamaged, code)
	require.Regexp(t, fmt.Sprintf(`chain\s+DAMAGED at seq %d`, seq), out)
	require.Regexp(t, `result\s+FAILED`, out)
}

// dwr goal list --state lists the goals in that state only; an unknown state
// exits invalid, naming the states.
func TestCLIGoalListByState(t *testing.T) {
	url := cliServer(t)
	var kept, gone map[string]any
	runJSON(t, url, &kept, "goal", "create", "--title", "kept")
	runJSON(t, url, &gone, "goal", "create", "--title", "gone")
	code, _, errs := run(t, url, "goal", "cancel", gone["id"].(string), "--reason", "not needed")
	require.Equal(t, 0, code, errs)

	var cancelled []map[string]any
	runJSON(t, url, &cancelled, "goal", "list", "--state", "cancelled")
	require.Len(t, cancelled, 1)
	require.Equal(t, gone["id"], cancelled[0]["id"])
	var open []map[string]any
	runJSON(t, url, &open, "goal", "list", "--state", "open")
	require.Len(t, open, 1)
	require.Equal(t, kept["id"], open[0]["id"])

	code, _, errs = run(t, url, "goal", "list", "--state", "done")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, `state "done" is not one of [open achieved failed cancelled]`)
}
