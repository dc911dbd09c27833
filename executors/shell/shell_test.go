package shell

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/executors/executortest"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// workerEnv is the service, in-process, and the kit's client of it (its
// commands must be accepted; its queries read its own writes).
type workerEnv struct {
	*servicetest.Client
	t   *testing.T
	srv *servicetest.Service
	dir string
}

func newWorkerEnv(t *testing.T) *workerEnv {
	st := servicetest.Start(t, "", servicetest.Options{})
	return &workerEnv{Client: st.Client("default"), t: t, srv: st, dir: t.TempDir()}
}

// waitFor is how long a test waits for a task to reach a state.
const waitFor = 20 * time.Second

// script writes an executable shell script and returns its path.
func (e *workerEnv) script(name, body string) string {
	p := filepath.Join(e.dir, name)
	require.NoError(e.t, os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o700)) //nolint:gosec // a test script must be executable
	return p
}

// logBuffer collects a worker's logs and sends every line to t.Log.
type logBuffer struct {
	t    *testing.T
	mu   sync.Mutex
	buf  bytes.Buffer
	done bool
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		l.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return l.buf.Write(p)
}

// waitFor waits until the logs hold s: a worker logs a job's line after
// the service answered its report, so after the task's state changed.
func (l *logBuffer) waitFor(t *testing.T, s string) {
	t.Helper()
	servicetest.Eventually(t, waitFor, func() bool { return strings.Contains(l.String(), s) },
		func() string { return fmt.Sprintf("the worker's logs never held %q", s) })
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// workerOpts are the settings of a test's worker that differ from the
// defaults.
type workerOpts struct {
	concurrency int           // default 1
	lease       time.Duration // default 3s
	verify      bool          // a verifier
	tracer      trace.TracerProvider
}

// startWorker runs argv for the queue's tasks, as `dwr worker --queue
// queue --lease 3s --executor cli-<queue> -- argv...` does, until the test
// ends, and returns its logs.
func (e *workerEnv) startWorker(queue string, o workerOpts, argv ...string) *logBuffer {
	t := e.t
	lease := o.lease
	if lease <= 0 {
		lease = 3 * time.Second
	}
	logs := &logBuffer{t: t}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	nc, err := e.srv.Server.Connect(nats.Name("dwr-worker"))
	require.NoError(t, err)
	w, err := NewWorker(executors.Config{Conn: nc, Queue: queue, Lease: lease, Executor: "cli-" + queue, Concurrency: o.concurrency, Logger: logger,
		Tracer: o.tracer},
		argv, o.verify)
	require.NoError(t, err)
	t.Cleanup(func() { // after the worker stops
		nc.Close()
		logs.mu.Lock()
		logs.done = true
		logs.mu.Unlock()
	})
	executortest.StartWorker(t, w)
	return logs
}

func TestWorkerSucceedsWithTheCommandsStdout(t *testing.T) {
	e := newWorkerEnv(t)
	echo := e.script("echo.sh", `input="$(cat)"
case "$input" in
*text*) printf 'hello\nworld\n'; exit 0 ;;
esac
printf '{"input": %s, "task": "%s", "attempt": %s, "op": "%s", "ws": "%s", "queue": "%s", "prior": %s, "cp": "%s"}\n' \
  "$input" "$DWR_TASK_ID" "$DWR_ATTEMPT" "$DWR_OPERATION_KEY" "$DWR_WORKSPACE" "$DWR_QUEUE" "$DWR_PRIOR_ATTEMPTS" "$(cat "$DWR_CHECKPOINT_FILE")"
`)
	logs := e.startWorker("echo", workerOpts{concurrency: 2}, echo)
	id := e.CreateTask(t, map[string]any{"queue": "echo", "input": map[string]any{"n": 7}})
	text := e.CreateTask(t, map[string]any{"queue": "echo", "input": "text"})

	tk := e.WaitState(t, id, "accepted", waitFor)
	require.JSONEq(t, fmt.Sprintf(`{"input": {"n": 7}, "task": %q, "attempt": 1, "op": "op-%s", "ws": "default", "queue": "echo", "prior": [], "cp": ""}`, id, id),
		string(tk.Attempts[0].Result))
	require.Equal(t, "cli-echo", tk.Attempts[0].Executor)
	tk = e.WaitState(t, text, "accepted", waitFor)
	require.JSONEq(t, `"hello\nworld"`, string(tk.Attempts[0].Result), "stdout that is not JSON is a JSON string")
	logs.waitFor(t, "task="+id+" attempt=1 outcome=succeeded duration=") // one line per job, written once its report is answered
}

// A command gets the accepted results of its task's dependencies, by plan
// key, inline and in a file.
func TestWorkerHandsTheDependenciesResults(t *testing.T) {
	e := newWorkerEnv(t)
	flow := e.script("flow.sh", `input="$(cat)"
if [ -z "${DWR_DEPENDENCIES_FILE:-}" ]; then
  printf '{"leaf": %s}\n' "$input"; exit 0
fi
printf '{"inline": %s, "file": %s}\n' "$DWR_DEPENDENCIES" "$(cat "$DWR_DEPENDENCIES_FILE")"
`)
	e.startWorker("flow", workerOpts{concurrency: 2}, flow)
	var plan struct {
		Tasks []struct {
			Key    string `json:"key"`
			TaskID string `json:"task_id"`
		} `json:"tasks"`
	}
	require.NoError(t, json.Unmarshal(e.Command(t, "goal.create", map[string]any{"title": "flow", "tasks": []map[string]any{
		{"key": "a", "queue": "flow", "input": 1}, {"key": "b", "queue": "flow", "input": 2},
		{"key": "sum", "queue": "flow", "depends_on": []string{"a", "b"}},
	}}), &plan))
	ids := map[string]string{}
	for _, pt := range plan.Tasks {
		ids[pt.Key] = pt.TaskID
	}
	tk := e.WaitState(t, ids["sum"], "accepted", waitFor)
	want := fmt.Sprintf(`{"a": {"key": "a", "task_id": %q, "result": {"leaf": 1}}, "b": {"key": "b", "task_id": %q, "result": {"leaf": 2}}}`, ids["a"], ids["b"])
	var got struct{ Inline, File json.RawMessage }
	require.NoError(t, json.Unmarshal(tk.Attempts[0].Result, &got))
	require.JSONEq(t, want, string(got.Inline))
	require.JSONEq(t, want, string(got.File))
}

// A command delegates a child goal through its wait file; the child's
// command answers; the resumed command reads the child's result from
// DWR_DELEGATIONS and DWR_DELEGATIONS_FILE.
func TestWorkerCommandDelegates(t *testing.T) {
	e := newWorkerEnv(t)
	flow := e.script("delegates.sh", `input="$(cat)"
case "$input" in
*leaf*) echo '{"found": 42}'; exit 0 ;;
esac
if [ -n "${DWR_DELEGATIONS_FILE:-}" ]; then
  printf '{"inline": %s, "file": %s}\n' "$DWR_DELEGATIONS" "$(cat "$DWR_DELEGATIONS_FILE")"
  exit 0
fi
echo '{"delegate": {"key": "dig", "goal": {"title": "dig", "tasks": [{"key": "leaf", "queue": "deleg", "input": "leaf"}]}}}' >"$DWR_WAIT_FILE"
exit 101
`)
	e.startWorker("deleg", workerOpts{concurrency: 2}, flow)
	id := e.CreateTask(t, map[string]any{"queue": "deleg"})
	tk := e.WaitState(t, id, "accepted", waitFor)
	require.Len(t, tk.Delegations, 1)
	d := tk.Delegations[0]
	want := fmt.Sprintf(`{"dig": {"key": "dig", "goal_id": %q, "state": "achieved", "results": {"leaf": {"key": "leaf", "task_id": %q, "result": {"found": 42}}}}}`,
		d.GoalID, d.Tasks[0].TaskID)
	var got struct{ Inline, File json.RawMessage }
	require.NoError(t, json.Unmarshal(tk.Attempts[1].Result, &got), string(tk.Attempts[1].Result))
	require.JSONEq(t, want, string(got.Inline))
	require.JSONEq(t, want, string(got.File))
}

func TestWorkerExit100FailsTheTaskAtOnce(t *testing.T) {
	e := newWorkerEnv(t)
	bad := e.script("bad.sh", `cat >/dev/null
echo "noise" >&2
echo "the input names no customer" >&2
exit 100
`)
	e.startWorker("strict", workerOpts{}, bad)
	id := e.CreateTask(t, map[string]any{"queue": "strict", "retry": map[string]any{"max_attempts": 5}})
	tk := e.WaitState(t, id, "failed", waitFor)
	require.Len(t, tk.Attempts, 1)
	require.Equal(t, "not_retryable", tk.Reason)
	require.False(t, tk.Attempts[0].Retryable)
	require.Equal(t, "exit_100", tk.Attempts[0].Error.Code)
	require.Equal(t, "noise\nthe input names no customer", tk.Attempts[0].Error.Message, "the message is the end of stderr")
}

func TestWorkerRetriesAFailedCommandWhichResumesFromItsCheckpoint(t *testing.T) {
	e := newWorkerEnv(t)
	steps := e.script("steps.sh", `cat >/dev/null
if [ "$DWR_ATTEMPT" = 1 ]; then
	echo '{"step": 1}' >"$DWR_CHECKPOINT_FILE"
	exit 1
fi
printf '{"resumed": %s, "prior": %s}\n' "$(cat "$DWR_CHECKPOINT_FILE")" "$DWR_PRIOR_ATTEMPTS"
`)
	e.startWorker("steps", workerOpts{}, steps)
	id := e.CreateTask(t, map[string]any{"queue": "steps", "retry": map[string]any{"max_attempts": 3, "initial_backoff": "100ms"}})
	tk := e.WaitState(t, id, "accepted", waitFor)
	require.Len(t, tk.Attempts, 2)
	require.Equal(t, "failed", tk.Attempts[0].State)
	require.True(t, tk.Attempts[0].Retryable)
	require.Equal(t, "exit_1", tk.Attempts[0].Error.Code)
	require.Equal(t, "exit status 1", tk.Attempts[0].Error.Message, "no stderr: the exit status is the message")
	var res struct {
		Resumed json.RawMessage
		Prior   []struct {
			N     int
			State string
		}
	}
	require.NoError(t, json.Unmarshal(tk.Attempts[1].Result, &res))
	require.JSONEq(t, `{"step": 1}`, string(res.Resumed), "attempt 2 was handed attempt 1's checkpoint")
	require.Len(t, res.Prior, 1)
	require.Equal(t, "failed", res.Prior[0].State)
}

func TestWorkerSavesTheCheckpointFileWhileTheCommandRuns(t *testing.T) {
	e := newWorkerEnv(t)
	half, release := filepath.Join(e.dir, "half"), filepath.Join(e.dir, "release")
	slow := e.script("slow.sh", fmt.Sprintf(`cat >/dev/null
echo 'not json' >"$DWR_CHECKPOINT_FILE"
until [ -e %[1]q ]; do sleep 0.05; done
echo '{"half": true}' >"$DWR_CHECKPOINT_FILE"
until [ -e %[2]q ]; do sleep 0.05; done
echo '{"done": true}' >"$DWR_CHECKPOINT_FILE"
echo '"ok"'
`, half, release))
	logs := e.startWorker("checkpoints", workerOpts{lease: 1500 * time.Millisecond}, slow)
	id := e.CreateTask(t, map[string]any{"queue": "checkpoints"})
	logs.waitFor(t, "does not hold valid JSON") // an invalid checkpoint file is not ignored with a log line
	require.NoError(t, os.WriteFile(half, nil, 0o600))
	tk := e.WaitTask(t, id, 10*time.Second, "the checkpoint saved while the command runs",
		func(tk domain.Task) bool { return tk.State == "running" && len(tk.Checkpoint) > 0 })
	require.JSONEq(t, `{"half": true}`, string(tk.Checkpoint))
	require.NoError(t, os.WriteFile(release, nil, 0o600))
	tk = e.WaitState(t, id, "accepted", waitFor)
	require.JSONEq(t, `{"done": true}`, string(tk.Checkpoint), "the file is read once more when the command exits")
}

func TestWorkerStopsTheCommandWhenTheTaskIsCancelled(t *testing.T) {
	e := newWorkerEnv(t)
	stopped, started := filepath.Join(e.dir, "stopped"), filepath.Join(e.dir, "started")
	long := e.script("long.sh", fmt.Sprintf(`cat >/dev/null
trap 'echo "$DWR_TASK_ID" >>%q; exit 143' TERM
sleep 60 &
touch %q
wait
`, stopped, started))
	logs := e.startWorker("long", workerOpts{}, long)
	id := e.CreateTask(t, map[string]any{"queue": "long"})
	servicetest.Eventually(t, 10*time.Second, func() bool {
		_, err := os.Stat(started)
		return err == nil
	}, func() string { return "the command did not start" })
	// The job claims its attempt at its first heartbeat moment (the lazy
	// claim): cancel the running attempt.
	e.WaitState(t, id, "running", waitFor)
	e.Command(t, "task.cancel", map[string]any{"task_id": id})
	servicetest.Eventually(t, 3*time.Second, func() bool {
		b, _ := os.ReadFile(stopped)
		return strings.Contains(string(b), id)
	}, func() string { return "the command's group did not get SIGTERM" })
	tk := e.WaitState(t, id, "cancelled", waitFor)
	require.Equal(t, "cancelled", tk.Attempts[0].State)
	logs.waitFor(t, "outcome=refused") // the stopped command's report is refused
}

func TestWorkerRefusesTooMuchStdout(t *testing.T) {
	e := newWorkerEnv(t)
	chatty := e.script("chatty.sh", `cat >/dev/null
head -c 300000 /dev/zero | tr '\0' a
`)
	e.startWorker("chatty", workerOpts{}, chatty)
	id := e.CreateTask(t, map[string]any{"queue": "chatty"})
	tk := e.WaitState(t, id, "failed", waitFor)
	require.Equal(t, "invalid_result", tk.Attempts[0].Error.Code)
	require.False(t, tk.Attempts[0].Retryable)
}

func TestWorkerAsAVerifierJudgesResults(t *testing.T) {
	e := newWorkerEnv(t)
	draft := e.script("draft.sh", `cat >/dev/null
case "${DWR_VERIFICATIONS:-}" in
*missing*) echo '{"text": "draft", "title": "T"}' ;;
*) echo '{"text": "draft"}' ;;
esac
`)
	check := e.script("check.sh", `result="$(cat)"
case "$result" in
*title*) echo '{"outcome": "PASS", "evidence": {"checked": "title"}}' ;;
*) printf 'no title' >"$DWR_ARTIFACTS_DIR/lint.log"
   echo '{"outcome": "FAIL", "evidence": {"missing": "title"}}' ;;
esac
`)
	e.startWorker("drafts", workerOpts{}, draft)
	logs := e.startWorker("checks", workerOpts{verify: true}, check)
	id := e.CreateTask(t, map[string]any{"queue": "drafts", "verification": map[string]any{"queue": "checks"}})
	tk := e.WaitState(t, id, "accepted", waitFor)
	require.Len(t, tk.Attempts, 2, "FAIL started attempt 2, PASS accepted it")
	require.JSONEq(t, `{"text": "draft", "title": "T"}`, string(tk.Attempts[1].Result))
	logs.waitFor(t, "verdict=FAIL")
	logs.waitFor(t, "verdict=PASS")
	require.Equal(t, executors.Fail, tk.Verifications[0].Outcome)
	sum := sha256.Sum256([]byte("no title"))
	refs := tk.Verifications[0].EvidenceRefs
	require.Len(t, refs, 1, "bulky evidence travels by reference: a file the verifier left in its artifacts directory")
	require.Equal(t, executors.Artifact{Name: "lint.log", SHA256: hex.EncodeToString(sum[:]), Size: 8, Type: refs[0].Type}, refs[0])
}

// The files a command leaves in DWR_ARTIFACTS_DIR are stored as artifacts
// and attached to its report, named by their path in it; a failed command's
// are not.
func TestWorkerCommandLeavesArtifacts(t *testing.T) {
	e := newWorkerEnv(t)
	report := e.script("report.sh", `cat >/dev/null
mkdir -p "$DWR_ARTIFACTS_DIR/charts"
printf 'a,b\n1,2\n' >"$DWR_ARTIFACTS_DIR/data.csv"
printf 'chart' >"$DWR_ARTIFACTS_DIR/charts/q2.svg"
ln -s /etc/passwd "$DWR_ARTIFACTS_DIR/link"
[ "$DWR_ATTEMPT" = 1 ] && exit 3
echo '{"rows": 1}'
`)
	e.startWorker("reports", workerOpts{}, report)
	id := e.CreateTask(t, map[string]any{"queue": "reports", "retry": map[string]any{"max_attempts": 2, "initial_backoff": "10ms"}})
	tk := e.WaitState(t, id, "accepted", waitFor)
	require.Len(t, tk.Attempts, 2)
	require.Empty(t, tk.Attempts[0].Artifacts, "a failed attempt reports no artifacts")
	got := map[string]executors.Artifact{}
	for _, a := range tk.Attempts[1].Artifacts {
		got[a.Name] = a
	}
	require.Len(t, got, 2, "regular files only: %+v", tk.Attempts[1].Artifacts)
	cl := client.New(e.srv.Conn, client.Workspace("default"))
	for name, want := range map[string]string{"data.csv": "a,b\n1,2\n", "charts/q2.svg": "chart"} {
		a, ok := got[name]
		require.True(t, ok, name)
		require.Equal(t, int64(len(want)), a.Size)
		r, err := cl.GetArtifact(context.Background(), a.SHA256)
		require.NoError(t, err)
		b, err := io.ReadAll(r)
		require.NoError(t, err)
		require.Equal(t, want, string(b))
	}
	require.Equal(t, "image/svg+xml", got["charts/q2.svg"].Type)
}

// What a command that succeeds prints on stderr is logged and kept with its
// attempt; a failing one's stays the error message, its end only.
func TestWorkerKeepsASuccessfulCommandsStderr(t *testing.T) {
	e := newWorkerEnv(t)
	noisy := e.script("noisy.sh", `cat >/dev/null
i=0
while [ $i -lt 2000 ]; do echo "progress line $i of a chatty command" >&2; i=$((i+1)); done
echo "resized 3 images" >&2
[ "$DWR_ATTEMPT" = 1 ] && exit 3
echo '"done"'
`)
	logs := e.startWorker("noisy", workerOpts{}, noisy)
	id := e.CreateTask(t, map[string]any{"queue": "noisy", "retry": map[string]any{"max_attempts": 2, "initial_backoff": "10ms"}})
	tk := e.WaitState(t, id, "accepted", waitFor)
	require.Len(t, tk.Attempts, 2)
	msg := tk.Attempts[0].Error.Message
	require.True(t, strings.HasSuffix(msg, "resized 3 images"), msg)
	require.LessOrEqual(t, len(msg), MaxStderrTail, "a failure's message is the end of stderr")

	require.Len(t, tk.Attempts[1].Artifacts, 1)
	a := tk.Attempts[1].Artifacts[0]
	require.Equal(t, StderrArtifact, a.Name)
	require.Equal(t, int64(MaxStderrKept), a.Size, "the last 64 KiB of a longer stderr")
	r, err := client.New(e.srv.Conn, client.Workspace("default")).GetArtifact(context.Background(), a.SHA256)
	require.NoError(t, err)
	b, err := io.ReadAll(r)
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(string(b), "resized 3 images\n"))
	logs.waitFor(t, "the command's stderr")
	require.Contains(t, logs.String(), "resized 3 images", "the end of stderr is logged")
}

// A command records its model calls in DWR_MODEL_STEPS_FILE, one JSON
// object a line: they are recorded with its report, a failure's too; a line
// that is not a model step fails the attempt, naming the line.
func TestWorkerRecordsTheCommandsModelSteps(t *testing.T) {
	e := newWorkerEnv(t)
	steps := e.script("steps.sh", `cat >/dev/null
echo '{"model": "fake-1", "prompt_version": "p1", "tokens": 120, "cost": 0.01}' >> "$DWR_MODEL_STEPS_FILE"
[ "$DWR_ATTEMPT" = 1 ] && { echo "the model's answer did not parse" >&2; exit 3; }
echo '{"model": "fake-1", "prompt_version": "p2", "tokens": 80}' >> "$DWR_MODEL_STEPS_FILE"
echo '"done"'
`)
	bad := e.script("bad-steps.sh", `cat >/dev/null
echo '{"model": "fake-1"}' >> "$DWR_MODEL_STEPS_FILE"
echo '{"tokens": 3}' >> "$DWR_MODEL_STEPS_FILE"
echo '"done"'
`)
	e.startWorker("steps", workerOpts{}, steps)
	e.startWorker("bad-steps", workerOpts{}, bad)
	id := e.CreateTask(t, map[string]any{"queue": "steps", "retry": map[string]any{"max_attempts": 2, "initial_backoff": "10ms"}})
	tk := e.WaitState(t, id, "accepted", waitFor)
	require.Len(t, tk.Attempts, 2)
	require.Equal(t, []schemas.ModelStep{{Model: "fake-1", PromptVersion: "p1", Tokens: 120, Cost: 0.01}}, tk.Attempts[0].ModelSteps,
		"a failed attempt's model calls are recorded")
	require.Equal(t, []schemas.ModelStep{{Model: "fake-1", PromptVersion: "p1", Tokens: 120, Cost: 0.01},
		{Model: "fake-1", PromptVersion: "p2", Tokens: 80}}, tk.Attempts[1].ModelSteps)

	id = e.CreateTask(t, map[string]any{"queue": "bad-steps", "retry": map[string]any{"max_attempts": 3}})
	tk = e.WaitState(t, id, "failed", waitFor)
	require.Len(t, tk.Attempts, 1, "a bad model-steps file is not retried")
	require.Contains(t, tk.Attempts[0].Error.Message, EnvModelStepsFile+" line 2")
	require.Contains(t, tk.Attempts[0].Error.Message, `"model" is required`)
}

// A command gets its job's trace as TRACEPARENT, so that the dwr commands
// it runs join the trace; without tracing it gets none.
func TestWorkerHandsTheCommandItsTrace(t *testing.T) {
	e := newWorkerEnv(t)
	tp, exp := servicetest.Tracing(t)
	echo := e.script("traceparent.sh", `cat >/dev/null; printf '"%s"' "${TRACEPARENT:-none}"`)
	e.startWorker("traced", workerOpts{tracer: tp}, echo)
	e.startWorker("untraced", workerOpts{}, echo)
	id := e.CreateTask(t, map[string]any{"queue": "traced"})
	tk := e.WaitState(t, id, "accepted", waitFor)
	var tp0 string
	require.NoError(t, json.Unmarshal(tk.Attempts[0].Result, &tp0))
	var job sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		for _, sp := range exp.GetSpans().Snapshots() {
			if sp.Name() == "dwr.job traced" {
				job = sp
				return true
			}
		}
		return false
	}, waitFor, 20*time.Millisecond)
	require.Equal(t, "00-"+job.SpanContext().TraceID().String()+"-"+job.SpanContext().SpanID().String()+"-01", tp0,
		"TRACEPARENT names the job's span")
	id = e.CreateTask(t, map[string]any{"queue": "untraced"})
	tk = e.WaitState(t, id, "accepted", waitFor)
	require.JSONEq(t, `"none"`, string(tk.Attempts[0].Result))
}

func TestWorkerCommandWaitsAndResumes(t *testing.T) {
	e := newWorkerEnv(t)
	waits := e.script("waits.sh", `input="$(cat)"
case "$input" in
*empty*) exit 101 ;;
esac
if [ -n "$(cat "$DWR_CHECKPOINT_FILE")" ]; then
	printf '{"slept": true, "attempt": %s}\n' "$DWR_ATTEMPT"
	exit 0
fi
echo '{"asleep": true}' >"$DWR_CHECKPOINT_FILE"
echo '{"after": "200ms"}' >"$DWR_WAIT_FILE"
exit 101
`)
	logs := e.startWorker("waits", workerOpts{}, waits)
	id := e.CreateTask(t, map[string]any{"queue": "waits"})
	bad := e.CreateTask(t, map[string]any{"queue": "waits", "input": "empty", "retry": map[string]any{"max_attempts": 5}})

	tk := e.WaitState(t, id, "accepted", waitFor)
	require.Len(t, tk.Attempts, 2)
	require.Equal(t, "parked", tk.Attempts[0].State)
	require.JSONEq(t, `{"slept": true, "attempt": 2}`, string(tk.Attempts[1].Result))
	logs.waitFor(t, "task="+id+" attempt=1 outcome=waiting")

	tk = e.WaitState(t, bad, "failed", waitFor)
	require.Len(t, tk.Attempts, 1, "an empty wait file is not retried")
	require.Equal(t, CodeInvalidWait, tk.Attempts[0].Error.Code)
	require.Contains(t, tk.Attempts[0].Error.Message, "DWR_WAIT_FILE is empty")
}

func TestWorkerOutputBuffers(t *testing.T) {
	c := &capped{max: 4}
	n, err := c.Write([]byte("abc"))
	require.NoError(t, err)
	require.Equal(t, 3, n)
	n, _ = c.Write([]byte("def"))
	require.Equal(t, 3, n, "a write is never refused")
	require.Equal(t, "abcd", string(c.Bytes()))
	require.True(t, c.over)
	exact := &capped{max: 3}
	_, _ = exact.Write([]byte("abc"))
	require.False(t, exact.over)

	tl := &tail{max: 4}
	_, _ = tl.Write([]byte("hello "))
	_, _ = tl.Write([]byte("world"))
	require.Equal(t, "orld", tl.String())

	require.Nil(t, outputOf([]byte(" \n")))
	require.Equal(t, json.RawMessage(`{"a":1}`), outputOf([]byte(" {\"a\":1}\n")))
	require.Equal(t, "two\nlines", outputOf([]byte("two\nlines\n\n")))
}

func TestWorkerPriorAttemptsFitInTheEnvironment(t *testing.T) {
	require.Equal(t, "[]", string(priorJSON(nil)))
	small := []executors.PriorAttempt{{N: 1, State: "failed", Result: json.RawMessage(`{"a":1}`)}}
	require.Contains(t, string(priorJSON(small)), `"result":{"a":1}`)
	big := json.RawMessage(`"` + strings.Repeat("x", 100<<10) + `"`)
	prior := []executors.PriorAttempt{{N: 1, State: "failed", Result: big}, {N: 2, State: "failed", Result: big}}
	b := priorJSON(prior)
	require.LessOrEqual(t, len(b), maxPriorEnv)
	var got []executors.PriorAttempt
	require.NoError(t, json.Unmarshal(b, &got))
	require.Len(t, got, 2, "the attempts are kept, their results left out")
	require.Nil(t, got[0].Result)
}

func TestWorkerEnvHandsTheSignalAndTheLatestDecision(t *testing.T) {
	lookup := func(env []string, name string) (string, bool) {
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, name+"="); ok {
				return v, true
			}
		}
		return "", false
	}
	job := &executors.Job{TaskID: "T", Attempt: 1}
	env := jobEnv(job, &jobFiles{checkpoint: "/tmp/cp", wait: "/tmp/wait"})
	wait, ok := lookup(env, "DWR_WAIT_FILE")
	require.True(t, ok)
	require.Equal(t, "/tmp/wait", wait)
	wait, ok = lookup(jobEnv(job, &jobFiles{checkpoint: "/tmp/cp"}), "DWR_WAIT_FILE")
	require.True(t, ok, "a command that may not wait gets DWR_WAIT_FILE empty, not the worker's own")
	require.Empty(t, wait)
	_, ok = lookup(env, "DWR_APPROVAL")
	require.False(t, ok, "no decision, no DWR_APPROVAL")
	_, ok = lookup(env, "DWR_SIGNAL")
	require.False(t, ok)

	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	job = &executors.Job{TaskID: "T", Attempt: 3, Signal: &executors.Signal{Name: "go", Payload: json.RawMessage(`{"n":1}`)},
		Decisions: []executors.Decision{
			{ApprovalID: "T-1", ActionDigest: "sha256:aa", Action: json.RawMessage(`{"cents":1250}`), Response: "revise",
				Comment: "cap 900", Approver: "ada", Role: "finance", DecidedAt: at},
			{ApprovalID: "T-2", ActionDigest: "sha256:bb", Action: json.RawMessage(`{"cents":900}`), Response: "approve",
				Approver: "bob", Role: "finance", DecidedAt: at.Add(time.Hour)},
		}}
	env = jobEnv(job, &jobFiles{checkpoint: "/tmp/cp", wait: "/tmp/wait"})
	approval, ok := lookup(env, "DWR_APPROVAL")
	require.True(t, ok)
	require.JSONEq(t, `{"approval_id": "T-2", "action_digest": "sha256:bb", "action": {"cents": 900}, "response": "approve",
		"approver": "bob", "role": "finance", "decided_at": "2025-03-01T13:00:00Z"}`, approval, "the latest decision")
	signal, ok := lookup(env, "DWR_SIGNAL")
	require.True(t, ok)
	require.JSONEq(t, `{"name": "go", "payload": {"n": 1}}`, signal)
	_, ok = lookup(env, "DWR_APPROVALS_FILE")
	require.False(t, ok, "no approvals file, no DWR_APPROVALS_FILE")

	// Every decision, oldest first: inline, and in the file the job's files hold.
	f, err := newJobFiles(job, true)
	require.NoError(t, err)
	defer f.remove()
	require.NotEmpty(t, f.approvals)
	env = jobEnv(job, f)
	path, ok := lookup(env, "DWR_APPROVALS_FILE")
	require.True(t, ok)
	require.Equal(t, f.approvals, path)
	inline, ok := lookup(env, "DWR_APPROVALS")
	require.True(t, ok)
	inFile, err := os.ReadFile(path)
	require.NoError(t, err)
	require.JSONEq(t, string(inFile), inline)
	var all []executors.Decision
	require.NoError(t, json.Unmarshal(inFile, &all))
	require.Equal(t, job.Decisions, all)
	f.remove()
	_, err = os.Stat(path)
	require.ErrorIs(t, err, os.ErrNotExist, "the file goes with the job's files")

	none, err := newJobFiles(&executors.Job{TaskID: "T", Attempt: 1}, true)
	require.NoError(t, err)
	defer none.remove()
	require.Empty(t, none.approvals, "no decision, no file")
}

func TestWorkerWaitFileForms(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

	w, err := parseWaitFile([]byte(`{"until": "2026-12-01T09:00:00Z"}`), now)
	require.NoError(t, err)
	require.Equal(t, waitRequest{until: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}, w)
	w, err = parseWaitFile([]byte(` {"until": "2026-03-01T14:00:00.5+02:00"}`+"\n"), now)
	require.NoError(t, err)
	require.Equal(t, now.Add(500*time.Millisecond), w.until, "an offset is kept as the instant it names")
	require.Equal(t, time.UTC, w.until.Location())

	w, err = parseWaitFile([]byte(`{"after": "10m"}`), now)
	require.NoError(t, err)
	require.Equal(t, waitRequest{until: now.Add(10 * time.Minute)}, w, "after counts from now")
	w, err = parseWaitFile([]byte(`{"after": 90}`), now)
	require.NoError(t, err)
	require.Equal(t, now.Add(90*time.Second), w.until, "a number is seconds")
	w, err = parseWaitFile([]byte(`{"after": "1s", "until": null}`), now)
	require.NoError(t, err)
	require.Equal(t, now.Add(time.Second), w.until, "null is absent")

	w, err = parseWaitFile([]byte(`{"signal": "payment-settled"}`), now)
	require.NoError(t, err)
	require.Equal(t, waitRequest{signal: "payment-settled"}, w)

	w, err = parseWaitFile([]byte(`{"approval": {"action": {"refund": "o-1", "cents": 1250}, "summary": "refund o-1",
		"basis": {"why": "damaged"}, "role": "ops", "responses": ["approve", "reject", "revise"], "expires_in": "1h",
		"on_expiry": "reject", "branches": {"revise": "resume"}, "escalate_to": "director", "quorum": 2, "exclude_requester": true}}`), now)
	require.NoError(t, err)
	require.Equal(t, &executors.ApprovalRequest{Action: json.RawMessage(`{"refund": "o-1", "cents": 1250}`), Summary: "refund o-1",
		Basis: json.RawMessage(`{"why": "damaged"}`), Role: "ops", Responses: []string{"approve", "reject", "revise"},
		ExpiresIn: time.Hour, OnExpiry: "reject", Branches: map[string]string{"revise": "resume"}, EscalateTo: "director",
		Quorum: 2, ExcludeRequester: true}, w.approval)
	require.Zero(t, w.until)
	w, err = parseWaitFile([]byte(`{"approval": {"action": "deploy v2", "expires_in": 30}}`), now)
	require.NoError(t, err)
	require.Equal(t, &executors.ApprovalRequest{Action: json.RawMessage(`"deploy v2"`), ExpiresIn: 30 * time.Second}, w.approval,
		"only the action is required; no basis is nil, not null")
	w, err = parseWaitFile([]byte(`{"approval": {"action": "deploy v2", "basis": null, "expires_in": null}}`), now)
	require.NoError(t, err)
	require.Equal(t, &executors.ApprovalRequest{Action: json.RawMessage(`"deploy v2"`)}, w.approval, "null is absent")

	w, err = parseWaitFile([]byte(`{"delegate": {"key": "sources", "on_failure": "review",
		"goal": {"title": "gather", "envelope": {"budget": {"tokens": 100}}, "tasks": [{"key": "crm", "queue": "agents", "input": {"q": 2}}]}}}`), now)
	require.NoError(t, err)
	require.Equal(t, &executors.Delegation{Key: "sources", OnFailure: "review", Title: "gather",
		Envelope: schemas.Envelope{Budget: schemas.Budget{Tokens: 100}},
		Tasks:    []schemas.TaskSpec{{Key: "crm", Queue: "agents", Input: json.RawMessage(`{"q": 2}`)}}}, w.delegate)
	w, err = parseWaitFile([]byte(`{"delegate": {"key": "q3", "ritual": {"name": "quarterly", "version": 2, "params": {"quarter": "Q3"}}}}`), now)
	require.NoError(t, err)
	require.Equal(t, &executors.Delegation{Key: "q3", Ritual: &executors.RitualRun{Name: "quarterly", Version: 2,
		Params: json.RawMessage(`{"quarter": "Q3"}`)}}, w.delegate)
}

func TestWorkerWaitFileErrors(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct{ file, want string }{
		{"", "DWR_WAIT_FILE is empty"},
		{" \n\t", "DWR_WAIT_FILE is empty"},
		{"signal go", `DWR_WAIT_FILE holds "signal go": invalid character`},
		{`["go"]`, "cannot unmarshal array"},
		{"null", "0 waits"},
		{"{}", "0 waits; name exactly one of until, after, signal, approval, delegate"},
		{`{"signal": "go", "after": "1s"}`, "2 waits"},
		{`{"sigal": "go"}`, `unknown field "sigal"`},
		{`{"approval": {"action": 1, "role": "ops", "rol": "x"}}`, `unknown field "rol"`},
		{`{"signal": "a"} {"signal": "b"}`, "more than one JSON value"},
		{`{"signal": "a"} x`, "more than one JSON value"},
		{`{"until": "tomorrow"}`, `"until" is not an RFC 3339 time`},
		{`{"until": 1767268800}`, "cannot unmarshal number"},
		{`{"after": "soon"}`, `"after" is not a positive duration`},
		{`{"after": "-1m"}`, `"after" is not a positive duration`},
		{`{"after": 0}`, `"after" is not a positive duration`},
		{`{"after": 1e300}`, `"after" is not a positive duration`},
		{`{"after": true}`, `"after" is not a positive duration`},
		{`{"signal": ""}`, `"signal" is not a valid signal name`},
		{`{"signal": "two words"}`, `"signal" is not a valid signal name`},
		{`{"approval": {"summary": "no action"}}`, `"approval" has no "action"`},
		{`{"approval": {"action": null}}`, `"approval" has no "action"`},
		{`{"approval": {"action": 1, "expires_in": "forever"}}`, `"expires_in" is not a duration`},
		{`{"approval": {"action": 1, "expires_in": "-1h"}}`, `"expires_in" is not a duration`},
		{`{"delegate": {"goal": {"title": "t", "tasks": [{"key": "a", "queue": "q"}]}}}`, `"delegate"."key" is not a valid key`},
		{`{"delegate": {"key": "k"}}`, `names "goal" (with its "tasks") or "ritual", one of the two`},
		{`{"delegate": {"key": "k", "goal": {"title": "t"}, "ritual": {"name": "r"}}}`, `one of the two`},
		{`{"delegate": {"key": "k", "goal": {"title": "t"}}}`, `"delegate"."goal" has no "tasks"`},
		{`{"delegate": {"key": "k", "goal": {"title": "t", "tasks": [{"key": "a", "queue": "q", "inptu": 1}]}}}`, `unknown field "inptu"`},
	} {
		_, err := parseWaitFile([]byte(c.file), now)
		require.Error(t, err, c.file)
		require.Contains(t, err.Error(), c.want, c.file)
	}
	past, err := parseWaitFile([]byte(`{"until": "2026-03-01T11:59:59Z"}`), now)
	require.NoError(t, err, "a time already passed resumes the task at once")
	require.Equal(t, now.Add(-time.Second), past.until)
	long := `{"signal": "` + strings.Repeat("x", 1000) + `!"}`
	_, err = parseWaitFile([]byte(long), now)
	require.Error(t, err)
	require.Less(t, len(err.Error()), 400, "what the file held is clipped in the message")
}

func TestWorkerParkTurnsTheWaitFileIntoAWait(t *testing.T) {
	x := &Command{}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	dir := t.TempDir()
	file := func(body string) string {
		p := filepath.Join(dir, fmt.Sprintf("wait-%d.json", len(body)))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	job := executors.NewJob(executors.Job{TaskID: "T", Attempt: 1}, nil)
	var wait *executors.WaitError

	_, err := x.park(context.Background(), job, file(`{"after": "1s"}`), now)
	require.ErrorAs(t, err, &wait)
	require.Equal(t, now.Add(time.Second), wait.Until)

	_, err = x.park(context.Background(), job, file(`{"signal": "go"}`), now)
	require.ErrorAs(t, err, &wait)
	require.Equal(t, "go", wait.Signal)

	action := `{"cents": 900, "order": "o-1"}`
	digest, err := executors.ActionDigest(json.RawMessage(action))
	require.NoError(t, err)
	_, err = x.park(context.Background(), job, file(`{"approval": {"action": `+action+`, "role": "ops"}}`), now)
	require.ErrorAs(t, err, &wait)
	require.NotNil(t, wait.Approval)
	require.Equal(t, digest, wait.ActionDigest)
	require.Equal(t, "ops", wait.Approval.Role)

	// Asking again for an action the task holds a decision on is a misuse:
	// the command would be run again and ask again.
	decided := executors.NewJob(executors.Job{TaskID: "T", Attempt: 2, Decisions: []executors.Decision{
		{ApprovalID: "T-1", ActionDigest: digest, Response: "approve", Approver: "ada"}}}, nil)
	_, err = x.park(context.Background(), decided, file(`{"approval": {"action": {"order": "o-1", "cents": 900}}}`), now)
	var f executors.Failure
	require.ErrorAs(t, err, &f)
	require.Equal(t, CodeApprovalDecided, f.Code)
	require.False(t, f.Retryable)
	require.Contains(t, f.Message, "read DWR_APPROVAL")
	require.Contains(t, f.Message, "approve by ada, approval T-1, action "+digest)
	// Another action is a new request.
	_, err = x.park(context.Background(), decided, file(`{"approval": {"action": {"order": "o-1", "cents": 800}}}`), now)
	require.ErrorAs(t, err, &wait)

	// Delegating again under a key whose goal has ended is a misuse too.
	_, err = x.park(context.Background(), job, file(`{"delegate": {"key": "k", "goal": {"title": "t", "tasks": [{"key": "a", "queue": "q"}]}}}`), now)
	require.ErrorAs(t, err, &wait)
	require.Equal(t, "k", wait.Delegation.Key)
	ended := executors.NewJob(executors.Job{TaskID: "T", Attempt: 2, Delegations: []executors.Delegated{
		{Key: "k", GoalID: "G", State: "achieved"}}}, nil)
	_, err = x.park(context.Background(), ended, file(`{"delegate": {"key": "k", "goal": {"title": "t", "tasks": [{"key": "b", "queue": "q"}]}}}`), now)
	require.ErrorAs(t, err, &f)
	require.Equal(t, CodeDelegationEnded, f.Code)
	require.Contains(t, f.Message, `key "k", whose goal G has ended (achieved): read DWR_DELEGATIONS`)

	for body, want := range map[string]string{
		"":                           "DWR_WAIT_FILE is empty",
		`{"wait": "1m"}`:             `unknown field "wait"`,
		strings.Repeat(" ", 300<<10): "DWR_WAIT_FILE holds more than 262144 bytes",
	} {
		_, err = x.park(context.Background(), job, file(body), now)
		require.ErrorAs(t, err, &f)
		require.Equal(t, CodeInvalidWait, f.Code)
		require.False(t, f.Retryable, "asking the same again would fail the same")
		require.Contains(t, f.Message, "the command exited 101 to wait, but ")
		require.Contains(t, f.Message, want)
		require.Contains(t, f.Message, waitForms)
	}
	_, err = x.park(context.Background(), job, filepath.Join(dir, "gone"), now)
	require.ErrorAs(t, err, &f)
	require.Contains(t, f.Message, "cannot read DWR_WAIT_FILE")
}

// NewWorker refuses what New and the executors constructors refuse: no
// command, or a configuration they do not take.
func TestNewWorkerRefusesABadCommandOrConfig(t *testing.T) {
	e := newWorkerEnv(t)
	nc, err := e.srv.Server.Connect(nats.Name("dwr-worker"))
	require.NoError(t, err)
	defer nc.Close()
	for _, verify := range []bool{false, true} {
		_, err = NewWorker(executors.Config{Conn: nc, Queue: "q"}, nil, verify)
		require.ErrorContains(t, err, "no command to run")
		_, err = NewWorker(executors.Config{Conn: nc, Queue: "Bad Queue"}, []string{"true"}, verify)
		require.ErrorContains(t, err, "Queue")
	}
}
