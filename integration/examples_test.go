package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	dwrclient "github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// The examples in examples/ run as a reader of their READMEs runs them: the
// fake model and the agent as processes, the plan file submitted and the
// refund approved with the dwr CLI, against a real `dwr serve`.

// agentExample is one of the agent examples (examples/<dir>).
type agentExample struct {
	dir string
	// startModel starts the example's fake model on port.
	startModel func(t *testing.T, e *execEnv, port int) *serverProc
	// startAgent starts its worker, an executor of the queues agent and
	// agent-checks, with env (the server, the credential, the model's URL
	// and the outbox).
	startAgent func(t *testing.T, e *execEnv, env []string) *serverProc
	// executor is the name the agent claims attempts and verifies under.
	executor string
	// steps are the model calls the agent makes before it proposes the
	// refund; the last proposes it.
	steps int
}

// exampleDir is the absolute path of examples/<dir>.
func exampleDir(t *testing.T, dir string) string {
	t.Helper()
	abs, err := filepath.Abs(filepath.Join("..", "examples", dir))
	require.NoError(t, err)
	return abs
}

// cli runs the dwr CLI against e with args (as the admin unless args give
// --creds), retrying while no writer serves commands yet, and returns its
// standard output.
func (e *execEnv) cli(args ...string) string {
	e.t.Helper()
	if !strings.Contains(strings.Join(args, " "), "--creds ") {
		args = append([]string{"--creds", e.adminCreds()}, args...)
	}
	args = append([]string{"--server", e.url}, args...)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(e.bin, args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 3 && time.Now().Before(deadline) {
			continue // no writer serves commands yet
		}
		require.NoError(e.t, err, "dwr %s: %s%s", strings.Join(args, " "), stdout.String(), stderr.String())
		return stdout.String()
	}
}

// waitListening waits until something accepts connections on port.
func waitListening(t *testing.T, port int, what string) {
	t.Helper()
	servicetest.Eventually(t, 30*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err != nil {
			return false
		}
		_ = c.Close()
		return true
	}, func() string { return what + " is not listening on port " + fmt.Sprint(port) })
}

// runAgentExample runs ex end to end and checks on the log what its README
// says: the model steps recorded with their raw responses as artifacts, the
// approval asked by the first attempt and decided by the approver, the
// refund written to the outbox once although the task ran two attempts,
// and the verifier's PASS with its evidence.
func runAgentExample(t *testing.T, e *execEnv, ex agentExample) {
	dir := exampleDir(t, ex.dir)
	work := t.TempDir()
	start := time.Now()
	creds := filepath.Join(work, "agent.creds")
	e.cli("users", "add", "agent", "--role", "executor", "--queue", "agent", "--queue", "agent-checks", "--out", creds)
	key, approverCreds := filepath.Join(work, "lee.key"), filepath.Join(work, "lee.creds")
	e.cli("keys", "create", "lee", "--role", "support-lead", "--out", key, "--creds-out", approverCreds)

	t.Logf("%s: users and keys added in %s", ex.dir, time.Since(start).Round(time.Millisecond))
	port := freePort(t)
	ex.startModel(t, e, port)
	waitListening(t, port, "the fake model")
	outbox := filepath.Join(work, "outbox.jsonl")
	agent := ex.startAgent(t, e, []string{"DWR_SERVER=" + e.url, "DWR_CREDS=" + creds, "OUTBOX=" + outbox,
		fmt.Sprintf("MODEL_URL=http://127.0.0.1:%d/v1/chat/completions", port)})

	t.Logf("%s: the model and the agent started in %s", ex.dir, time.Since(start).Round(time.Millisecond))
	// The plan file, submitted to a goal with a token budget, as the README does.
	var goal struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal([]byte(e.cli("--json", "goal", "create", "--title", "Answer ticket T-9", "--budget-tokens", "20000")), &goal))
	var plan struct {
		Tasks []schemas.PlanTask `json:"tasks"`
	}
	require.NoError(t, json.Unmarshal([]byte(e.cli("--json", "plan", "submit", "--goal", goal.ID, "-f", filepath.Join(dir, "plan.yaml"))), &plan))
	require.Len(t, plan.Tasks, 1)
	id := plan.Tasks[0].TaskID

	read := func() (schemas.Task, error) {
		var tk schemas.Task
		err := e.c.query("task.get", schemas.Query{ID: id}, 0, &tk)
		return tk, err
	}
	task := func() schemas.Task {
		tk, err := read()
		require.NoError(t, err)
		return tk
	}
	describe := func() string {
		tk, err := read()
		if err != nil {
			return "task.get: " + err.Error()
		}
		return describeTask(&tk) + "; agent exited: " + fmt.Sprint(agent.exited())
	}

	// The first attempt calls the model, asks for approval of the refund and parks.
	servicetest.Eventually(t, 60*time.Second, func() bool {
		tk, err := read()
		return err == nil && tk.State == schemas.StateWaiting && len(tk.Approvals) == 1
	}, describe)
	asked := task()
	t.Logf("%s: the approval was asked %s after the start", ex.dir, time.Since(start).Round(time.Millisecond))
	require.Equal(t, schemas.AttemptStateParked, asked.Attempts[0].State, "the approval request parked the first attempt")
	require.NoError(t, readLines(outbox, func(string) { t.Fatal("the outbox was written before the approval") }))
	ap := asked.Approvals[0]
	require.Equal(t, "support-lead", ap.Role)
	var action map[string]any
	require.NoError(t, json.Unmarshal(ap.Action, &action))
	require.Equal(t, map[string]any{"type": "refund", "ticket": "T-9", "order_id": "o-7", "amount": 80.0, "currency": "EUR"}, action,
		"the approval is asked of the exact refund the model proposed")

	// The approver decides with the CLI, signing with her key.
	out := e.cli("--creds", approverCreds, "approve", ap.ID, "--response", "approve", "--key", key, "--comment", "photo attached")
	require.Contains(t, out, "approve by lee")

	servicetest.Eventually(t, 60*time.Second, func() bool {
		var g schemas.GoalView
		return e.c.query("goal.get", schemas.Query{ID: goal.ID}, 0, &g) == nil && g.State == schemas.GoalStateAchieved
	}, describe)
	t.Logf("%s: the goal was achieved %s after the start", ex.dir, time.Since(start).Round(time.Millisecond))
	done := task()
	require.Equal(t, schemas.StateAccepted, done.State)
	require.Len(t, done.Attempts, 2, "%s", describeTask(&done))
	last := done.Attempts[1]
	require.Equal(t, schemas.AttemptStateSucceeded, last.State)
	require.Equal(t, ex.executor, last.Executor)
	require.Equal(t, done.Attempts[0].OperationKey, last.OperationKey, "every attempt has the task's operation key")

	// The model steps: each with its model, prompt version and tokens, and
	// its raw response readable by the digest its response_ref names.
	require.Len(t, last.ModelSteps, ex.steps, "the model calls, reported with the result")
	c := dwrclient.New(e.c.nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var tokens int64
	var responses []map[string]any
	for i, st := range last.ModelSteps {
		require.Equal(t, "fake-gpt-1", st.Model, "step %d", i+1)
		require.NotEmpty(t, st.PromptVersion, "step %d", i+1)
		require.Positive(t, st.Tokens, "step %d", i+1)
		tokens += st.Tokens
		sha, ok := schemas.ArtifactOfRef(st.ResponseRef)
		require.True(t, ok, "step %d: response_ref %q names an artifact", i+1, st.ResponseRef)
		rd, err := c.GetArtifact(ctx, sha)
		require.NoError(t, err, "step %d: the raw response %s", i+1, sha)
		var raw bytes.Buffer
		_, err = raw.ReadFrom(rd)
		require.NoError(t, err)
		require.NoError(t, rd.Close())
		sum := sha256.Sum256(raw.Bytes())
		require.Equal(t, sha, hex.EncodeToString(sum[:]))
		var resp map[string]any
		require.NoError(t, json.Unmarshal(raw.Bytes(), &resp), "step %d: the raw response is the model's JSON", i+1)
		require.Equal(t, "chat.completion", resp["object"])
		require.EqualValues(t, st.Tokens, resp["usage"].(map[string]any)["total_tokens"], "step %d: the tokens the model counted", i+1)
		responses = append(responses, resp)
	}
	msg := func(r map[string]any) map[string]any {
		return r["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	}
	if ex.steps > 1 {
		calls := msg(responses[0])["tool_calls"].([]any)
		require.Equal(t, "lookup_order", calls[0].(map[string]any)["function"].(map[string]any)["name"], "the first call asks for the tool")
	}
	var proposal map[string]any
	require.NoError(t, json.Unmarshal([]byte(msg(responses[ex.steps-1])["content"].(string)), &proposal))
	require.Equal(t, "refund", proposal["action"])
	require.Equal(t, 80.0, proposal["amount"])
	var g schemas.GoalView
	require.NoError(t, e.c.query("goal.get", schemas.Query{ID: goal.ID}, 0, &g))
	require.Equal(t, tokens, g.Spent.Tokens, "the steps' tokens count against the goal's budget")

	// The decision was on that action, by lee, and the result says so.
	require.Len(t, done.Approvals, 1)
	require.NotNil(t, done.Approvals[0].Decision)
	require.Equal(t, "lee", done.Approvals[0].Decision.Approver)
	var res map[string]any
	require.NoError(t, json.Unmarshal(last.Result, &res))
	require.Equal(t, done.Approvals[0].ActionDigest, res["action_digest"])
	require.Equal(t, "lee", res["approved_by"])

	// The side effect, once: one line, keyed by the operation key.
	var lines []map[string]any
	require.NoError(t, readLines(outbox, func(l string) {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), "outbox line %q", l)
		lines = append(lines, m)
	}))
	require.Len(t, lines, 1, "the refund is applied once")
	require.Equal(t, last.OperationKey, lines[0]["operation_key"])
	require.Equal(t, action, lines[0]["refund"])

	// The verifier passed the result, with its evidence.
	require.Len(t, done.Verifications, 1)
	v := done.Verifications[0]
	require.Equal(t, schemas.OutcomePass, v.Outcome)
	require.Equal(t, 2, v.Attempt)
	require.Equal(t, ex.executor, v.Verifier)
	var ev map[string]any
	require.NoError(t, json.Unmarshal(v.Evidence, &ev))
	require.Equal(t, 120.0, ev["order_total"])
	require.Equal(t, 80.0, ev["refund"])
	require.Equal(t, "lee", ev["approved_by"])
	require.Equal(t, 1.0, ev["outbox_lines"])
	require.Equal(t, last.ModelSteps[ex.steps-1].ResponseRef, ev["model_response"], "the verifier read the model's last response")
}

// readLines calls fn with each non-empty line of file; a missing file has none.
func readLines(file string, fn func(string)) error {
	f, err := os.Open(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			fn(l)
		}
	}
	return sc.Err()
}

// TestPythonAgentExample runs examples/python-agent as its README does.
func TestPythonAgentExample(t *testing.T) {
	if testing.Short() {
		t.Skip("starts dwr serve and python3")
	}
	py := pythonSDK(t)
	e := newExecEnv(t)
	dir := exampleDir(t, "python-agent")
	runAgentExample(t, e, agentExample{
		dir: "python-agent",
		startModel: func(t *testing.T, e *execEnv, port int) *serverProc {
			return startProc(t, e, "fake model", py, []string{filepath.Join(dir, "fake_model.py"), "--port", fmt.Sprint(port)}, nil)
		},
		startAgent: func(t *testing.T, e *execEnv, env []string) *serverProc {
			return startProc(t, e, "python agent", py, []string{filepath.Join(dir, "agent.py")},
				append(env, "PYTHONPATH="+pythonSDKDir, "PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1"))
		},
		executor: "python-agent",
		steps:    2,
	})
}

// tsExample returns the path of a program of the TypeScript example's build
// (examples/typescript-agent/dist/rel), made by `npm ci && npm run build`
// there after the SDK's own build. Without it (or without node) the test
// is skipped — and fails when CI is set.
func tsExample(t *testing.T, rel string) string {
	t.Helper()
	tsProgram(t, "index.js") // the SDK's build, which the example links to
	script := filepath.Join(exampleDir(t, "typescript-agent"), "dist", rel)
	if _, err := os.Stat(script); err == nil {
		return script
	}
	msg := "run npm ci && npm run build in examples/typescript-agent (after executors/typescript)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// TestTypeScriptAgentExample runs examples/typescript-agent as its README does.
func TestTypeScriptAgentExample(t *testing.T) {
	if testing.Short() {
		t.Skip("starts dwr serve and node")
	}
	model, agent := tsExample(t, "fake-model.js"), tsExample(t, "agent.js")
	e := newExecEnv(t)
	runAgentExample(t, e, agentExample{
		dir: "typescript-agent",
		startModel: func(t *testing.T, e *execEnv, port int) *serverProc {
			return startProc(t, e, "fake model", "node", []string{model, fmt.Sprint(port)}, nil)
		},
		startAgent: func(t *testing.T, e *execEnv, env []string) *serverProc {
			return startProc(t, e, "typescript agent", "node", []string{agent}, env)
		},
		executor: "typescript-agent",
		steps:    1,
	})
}
