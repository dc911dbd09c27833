package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	dwrclient "github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/integration/conformance"
	"github.com/dwr-run/dwr/schemas"
)

// tsProgram returns the path of a program of the TypeScript SDK's build
// (rel under executors/typescript/dist), made by `npm ci && npm run build`
// in executors/typescript. Without it (or without node) the test is
// skipped — and fails when CI is set.
func tsProgram(t *testing.T, rel string) string {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("..", "executors", "typescript", "dist", rel))
	require.NoError(t, err)
	_, statErr := os.Stat(script)
	_, nodeErr := exec.LookPath("node")
	if statErr == nil && nodeErr == nil {
		return script
	}
	msg := "run npm ci && npm run build in executors/typescript"
	if nodeErr != nil {
		msg = "node is not installed; " + msg
	}
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// clientCreds adds a user of role client (once) and returns its credential.
func (e *execEnv) clientCreds(name string) string {
	e.t.Helper()
	path := filepath.Join(filepath.Dir(e.data), name+".creds")
	e.cli("users", "add", name, "--role", "client", "--out", path, "--force")
	return path
}

// TestTypeScriptClient runs the TypeScript client's round trip
// (executors/typescript/src/test/client_e2e.ts) against a real dwr serve,
// as a client's identity, with a TypeScript Worker as an executor's: a goal
// and its plan run and waited for, a task signalled and cancelled, a
// command id sent twice, refusals read as DwrError. It checks what the
// program says against the service's own answers.
func TestTypeScriptClient(t *testing.T) {
	if testing.Short() {
		t.Skip("starts dwr serve and node")
	}
	script := tsProgram(t, "test/client_e2e.js")
	e := newExecEnv(t)
	const queue = "ts-e2e"
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	key, approverCreds := filepath.Join(t.TempDir(), "ada.key"), filepath.Join(t.TempDir(), "ada.creds")
	out, err := exec.Command(e.bin, "--server", e.url, "--creds", e.adminCreds(), "keys", "create", "ada",
		"--role", "ops", "--out", key, "--creds-out", approverCreds).CombinedOutput()
	require.NoError(t, err, "dwr keys create: %s", out)
	cmd.Env = append(os.Environ(), "DWR_SERVER="+e.url, "DWR_CREDS="+e.clientCreds("ts-client"),
		"DWR_EXECUTOR_CREDS="+e.executorCreds("ts", queue), "E2E_QUEUE="+queue,
		"DWR_APPROVER_CREDS="+approverCreds, "DWR_APPROVER_KEY="+key)
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, e.logs
	require.NoError(t, cmd.Run(), "the TypeScript client's round trip; its output: %s", stdout.String())

	var got struct {
		GoalID     string             `json:"goal_id"`
		PlanTasks  []schemas.PlanTask `json:"plan_tasks"`
		GoalState  string             `json:"goal_state"`
		BResult    map[string]any     `json:"b_result"`
		IdleID     string             `json:"idle_id"`
		Pending    int                `json:"idle_pending"`
		IdleState  string             `json:"idle_state"`
		SameID     bool               `json:"same_id"`
		OnceID     string             `json:"once_id"`
		Refused    map[string]string  `json:"refused"`
		NotFound   string             `json:"not_found"`
		Stored     string             `json:"stored"`
		Read       map[string]any     `json:"read"`
		ReadBack   string             `json:"read_back"`
		Listed     []string           `json:"listed"`
		OtherQ     []string           `json:"listed_other_queue"`
		Newest     string             `json:"newest_goal"`
		Elsewhere  string             `json:"elsewhere"`
		Approval   string             `json:"approval_task"`
		Forged     string             `json:"forged"`
		Approved   map[string]any     `json:"approved"`
		Labeled    []string           `json:"labeled"`
		GoalLabels map[string]string  `json:"goal_labels"`
		RelabelDup bool               `json:"relabel_duplicate"`
		KeyRefused string             `json:"key_refused"`
		KeyUsed    bool               `json:"key_used"`
		ByKey      int                `json:"by_key"`
		RitualKey  bool               `json:"ritual_key"`
		ConfRefuse string             `json:"configure_refused"`
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &got), "output: %s", stdout.String())

	// The goal ran to its end through the TypeScript worker, b after a.
	require.Equal(t, schemas.GoalStateAchieved, got.GoalState)
	require.Len(t, got.PlanTasks, 2)
	require.Equal(t, []string{"a", "b"}, got.Listed, "the goal's tasks, listed a page at a time")
	require.Empty(t, got.OtherQ, "none of its tasks is on queue other")
	require.Equal(t, got.GoalID, got.Newest, "the newest goal first: the one the script made last")
	var goal schemas.GoalView
	require.NoError(t, e.c.query("goal.get", schemas.Query{ID: got.GoalID}, 0, &goal))
	require.Equal(t, schemas.GoalStateAchieved, goal.State)
	require.Equal(t, []string{got.GoalID}, got.Labeled, "the goal, listed by its label")
	require.Equal(t, map[string]string{"stage": "done"}, got.GoalLabels, "relabeled once achieved")
	require.Equal(t, schemas.Labels{"stage": "done"}, goal.Labels)
	require.True(t, got.RelabelDup, "removing a label it no longer holds records nothing")
	require.Equal(t, "conflict", got.KeyRefused, "a key an open goal holds")
	require.True(t, got.KeyUsed, "if_open use answers the open goal")
	require.Equal(t, 1, got.ByKey, "read by its key, with the priority set after")
	require.True(t, got.RitualKey, "the key a ritual's template rendered")
	require.Equal(t, "forbidden", got.ConfRefuse, "a client does not configure queues")
	require.Equal(t, map[string]any{"doubled": 4.0, "deps": []any{"a"}, "attempt": 1.0}, got.BResult,
		"b ran once, handed a's result as a dependency")
	for _, pt := range got.PlanTasks {
		var task schemas.Task
		require.NoError(t, e.c.query("task.get", schemas.Query{ID: pt.TaskID}, 0, &task))
		require.Equal(t, schemas.StateAccepted, task.State)
		require.Equal(t, "ts-e2e", task.Current().Executor)
	}

	// An artifact the client stored is the job's to read by its digest, and the client's.
	sum := sha256.Sum256([]byte("a few words, stored by the client"))
	require.Equal(t, hex.EncodeToString(sum[:]), got.Stored)
	require.Equal(t, map[string]any{"text": "a few words, stored by the client"}, got.Read)
	require.Equal(t, "a few words, stored by the client", got.ReadBack)

	// The signal was kept for the idle task, which was then cancelled.
	require.Equal(t, 1, got.Pending)
	require.Equal(t, schemas.StateCancelled, got.IdleState)
	require.Contains(t, e.history(got.IdleID), "task.signal_buffered")
	require.Contains(t, e.history(got.IdleID), "task.cancelled")

	// One command id, one task.
	require.True(t, got.SameID, "a command sent again with its id is answered with the first outcome")
	var tasks []schemas.Task
	require.NoError(t, e.c.query("task.list", schemas.Query{State: schemas.StateReady}, 0, &tasks))
	n := 0
	for _, task := range tasks {
		if task.Spec.Title == "once" {
			n++
		}
	}
	require.Equal(t, 1, n, "the command sent twice made one task")

	// Refusals are DwrErrors with the service's code and field.
	require.Equal(t, schemas.CodeInvalid, got.Refused["code"], "%v", got.Refused)
	require.Equal(t, "/spec/queue", got.Refused["field"], "%v", got.Refused)
	require.Equal(t, schemas.CodeNotFound, got.NotFound)
	require.Equal(t, schemas.CodeForbidden, got.Elsewhere, "another workspace's subjects are refused to a client of this one")

	// The approver decided with its key; a decision signed by ada's key in
	// another approver's name was refused.
	require.Equal(t, schemas.CodeForbidden, got.Forged, "a decision in another approver's name")
	require.Equal(t, map[string]any{"response": "approve", "approver": "ada"}, got.Approved)
	var approved schemas.Task
	require.NoError(t, e.c.query("task.get", schemas.Query{ID: got.Approval}, 0, &approved))
	require.Len(t, approved.Approvals, 1)
	require.Equal(t, "ada", approved.Approvals[0].Decision.Approver)
	require.Equal(t, "fine", approved.Approvals[0].Decision.Comment)
}

// TestTypeScriptActionDigest holds the TypeScript SDK's canonical JSON and
// action digests against the service's (schemas.CanonicalJSON,
// schemas.ActionDigest), byte for byte: a decision is found by its digest,
// so an SDK that computed another would ask for approval again forever.
func TestTypeScriptActionDigest(t *testing.T) {
	script := tsProgram(t, "test/digest.js")
	docs := []string{
		`{"refund": 120, "order": "o-7"}`,
		`{"b":1,"a":{"d":[1,2,{"z":null,"y":true}],"c":"x"}}`,
		`{"amount": 1.50, "big": 12345678901234567890, "exp": 1e3, "neg": -0.0, "E": 2E-7}`,
		`{"é": 1, "e": 2, "z": 3, "€": 4, "😀": 5, "ｚ": 6}`,
		`{"s": "line\u2028sep\u2029par <tag> & \"quoted\" \\ \t\n\u0001\u001f \u00e9 😀"}`,
		`{"html": "<script>alert('x')</script>", "amp": "a&b"}`,
		`[ 1 , "two" , [ ] , { } , false ]`,
		`"just a string"`,
		`{"dup": 1, "dup": 2}`,
	}
	cmd := exec.Command("node", script)
	var in, out bytes.Buffer
	for _, d := range docs {
		in.WriteString(d + "\n")
	}
	in.WriteString(`{"not": json}` + "\n")
	cmd.Stdin, cmd.Stdout = &in, &out
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Run(), "%s", stderr.String())
	lines := bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n"))
	require.Len(t, lines, len(docs)+1)
	for i, d := range docs {
		var got struct{ Canonical, Digest, Error string }
		require.NoError(t, json.Unmarshal(lines[i], &got))
		require.Empty(t, got.Error, d)
		want, err := schemas.CanonicalJSON(json.RawMessage(d))
		require.NoError(t, err)
		require.Equal(t, string(want), got.Canonical, "canonical JSON of %s", d)
		digest, err := schemas.ActionDigest(json.RawMessage(d))
		require.NoError(t, err)
		require.Equal(t, digest, got.Digest, "digest of %s", d)
	}
	require.Contains(t, string(lines[len(docs)]), `"error"`, "a document that is not JSON is refused")
}

// tsConformanceWorker starts dwr serve and the TypeScript SDK's conformance
// executor on queue, as an executor of that queue, with a lease of 1.5 s
// and its observations and files in a directory of its own. It skips t
// under -short, and as tsProgram does without the SDK's build.
func tsConformanceWorker(t *testing.T, queue string) (*execEnv, *serverProc) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts dwr serve and node")
	}
	script := tsProgram(t, "conformance.js")
	e := newExecEnv(t)
	dir := t.TempDir()
	p := startProc(t, e, "tsexec "+queue, "node", []string{script}, []string{"CONFORMANCE_QUEUE=" + queue,
		"CONFORMANCE_LEASE_MS=1500", "CONFORMANCE_OBSERVE=" + filepath.Join(dir, "observations.jsonl"), "CONFORMANCE_DIR=" + dir,
		"DWR_SERVER=" + e.url, "DWR_CREDS=" + e.executorCreds("ts", queue)})
	return e, p
}

// TestTypeScriptWorkerDrain stops a TypeScript worker (SIGTERM: its
// stop()) while a job runs: the job is let finish and report, and the
// process exits cleanly after it — the task accepted by that one attempt.
func TestTypeScriptWorkerDrain(t *testing.T) {
	const queue = "ts-drain"
	e, p := tsConformanceWorker(t, queue)
	c, err := dwrclient.Connect(e.url, dwrclient.Credentials(e.adminCreds()))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	in, err := json.Marshal(conformance.Input{Scenario: conformance.OutliveLease, Millis: 3000})
	require.NoError(t, err)
	res, err := c.CreateTask(ctx, schemas.TaskSpec{Title: "drained", Queue: queue, Input: in})
	require.NoError(t, err)
	waitFor(t, ctx, "the job running", func() bool {
		task, err := c.Task(ctx, res.ID)
		return err == nil && task.State == schemas.StateRunning
	})
	require.NoError(t, p.terminate(30*time.Second), "the worker drains and exits cleanly")
	// No executor runs any more: only the drained job's report can end the task.
	var task *schemas.Task
	waitFor(t, ctx, "the drained job's report", func() bool {
		task, err = c.Task(ctx, res.ID)
		return err == nil && task.State == schemas.StateAccepted
	})
	require.Len(t, task.Attempts, 1, describeTask(task))
}

// TestTypeScriptWorkerSurvivesServerRestart kills dwr serve -9 under a
// TypeScript worker and starts it again: the worker reconnects, binds its
// queue again and runs the next task.
func TestTypeScriptWorkerSurvivesServerRestart(t *testing.T) {
	const queue = "ts-restart"
	e, _ := tsConformanceWorker(t, queue)
	survivesRestart(t, e, queue)
}

// survivesRestart runs a task on queue, kills dwr serve -9, starts it again
// and runs another: the executor of queue (in a process of its own) must
// have connected again and taken it.
func survivesRestart(t *testing.T, e *execEnv, queue string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	run := func(n int) {
		t.Helper()
		c, err := dwrclient.Connect(e.url, dwrclient.Credentials(e.adminCreds()))
		require.NoError(t, err)
		defer c.Close()
		in, err := json.Marshal(conformance.Input{Scenario: conformance.Succeed, Value: n})
		require.NoError(t, err)
		res, err := c.CreateTask(ctx, schemas.TaskSpec{Title: "restart", Queue: queue, Input: in})
		require.NoError(t, err)
		var task *schemas.Task
		waitFor(t, ctx, "the task accepted", func() bool {
			task, err = c.Task(ctx, res.ID)
			return err == nil && task.State == schemas.StateAccepted
		})
		require.Equal(t, float64(n), result(t, task)["value"])
	}
	run(1)
	e.srv.kill9(t)
	e.startServe()
	run(2)
}
