package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	dwrclient "github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/integration/conformance"
	"github.com/dwr-run/dwr/schemas"
)

// The executor conformance suite drives every executor implementation
// through one language-neutral set of scenarios (package conformance says
// what each asks of an executor), against a real `dwr serve`, and checks
// the outcome on the log. An implementation is a program started with the
// conformance.Env variables; the Go SDK's is ./integration/conformance/goexec,
// `dwr worker`'s runs ./integration/conformance/cmdexec as its command.
//
// With DWR_CONFORMANCE_TABLE=FILE the suite writes its results as a
// Markdown table (scenario × implementation), the README's.

// conformanceLease is the lease the executors under the suite take: short,
// so that a frozen executor loses its task quickly.
const conformanceLease = 1500 * time.Millisecond

// executorImpl is an executor implementation under the suite.
type executorImpl struct {
	name string
	// start starts one executor serving queue as role, its credential
	// creds, with the suite's variables env; it is killed at cleanup.
	start func(t *testing.T, e *execEnv, creds, queue, role string, env []string) *serverProc
	// prepare, when set, runs before the implementation's scenarios: it
	// skips (or fails) them when the implementation cannot run here.
	prepare func(t *testing.T)
}

var goexecBuild, cmdexecBuild servicetest.Binary

func conformanceImpls() []executorImpl {
	return []executorImpl{
		{name: "Go SDK", start: func(t *testing.T, e *execEnv, creds, queue, role string, env []string) *serverProc {
			bin := goexecBuild.Path(t, "goexec", "./integration/conformance/goexec", false)
			return startProc(t, e, "goexec "+queue, bin, nil, append(env, "DWR_SERVER="+e.url, "DWR_CREDS="+creds))
		}},
		{name: "dwr worker", start: func(t *testing.T, e *execEnv, creds, queue, role string, env []string) *serverProc {
			bin := cmdexecBuild.Path(t, "cmdexec", "./integration/conformance/cmdexec", false)
			args := []string{"--server", e.url, "--creds", creds, "worker", "--queue", queue, "--lease", conformanceLease.String(),
				"--executor", "dwr-worker"}
			if role == conformance.RoleVerifier {
				args = append(args, "--verify")
			}
			return startProc(t, e, "dwr worker "+queue, e.bin, append(args, "--", bin), env)
		}},
		{name: "TypeScript SDK", prepare: func(t *testing.T) { tsProgram(t, "conformance.js") }, start: func(t *testing.T, e *execEnv, creds, queue, role string, env []string) *serverProc {
			return startProc(t, e, "tsexec "+queue, "node", []string{tsProgram(t, "conformance.js")}, append(env, "DWR_SERVER="+e.url, "DWR_CREDS="+creds))
		}},
		{name: "Python SDK", prepare: func(t *testing.T) { pythonSDK(t) }, start: func(t *testing.T, e *execEnv, creds, queue, role string, env []string) *serverProc {
			py := pythonSDK(t)
			return startProc(t, e, "pyexec "+queue, py, []string{"-m", "dwr.conformance"},
				append(env, "DWR_SERVER="+e.url, "DWR_CREDS="+creds, "PYTHONPATH="+pythonSDKDir, "PYTHONUNBUFFERED=1"))
		}},
	}
}

// startProc starts bin with args and env (added to the test's), its output
// in e's logs, in a process group of its own that is killed at cleanup.
func startProc(t *testing.T, e *execEnv, label, bin string, args, env []string) *serverProc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = e.logs, e.logs
	fmt.Fprintf(e.logs, "==== %s: %s %s ====\n", label, bin, strings.Join(args, " "))
	p := &serverProc{cmd: cmd, done: make(chan struct{}), started: time.Now()}
	require.NoError(t, cmd.Start())
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		if !p.exited() {
			p.signal(syscall.SIGCONT)
			p.signal(syscall.SIGKILL)
			<-p.done
		}
	})
	return p
}

// conformanceRun is one implementation's run of the scenarios, on its own
// `dwr serve`.
type conformanceRun struct {
	t    *testing.T
	e    *execEnv
	impl executorImpl
	c    *dwrclient.Client // an admin's
	dir  string            // CONFORMANCE_DIR
	obs  string            // CONFORMANCE_OBSERVE
	ctx  context.Context
}

// executor starts an executor of the implementation on queue.
func (r *conformanceRun) executor(queue, role string) *serverProc {
	r.t.Helper()
	creds := r.e.executorCreds("conf", queue)
	env := []string{"CONFORMANCE_QUEUE=" + queue, "CONFORMANCE_ROLE=" + role,
		fmt.Sprintf("CONFORMANCE_LEASE_MS=%d", conformanceLease.Milliseconds()),
		"CONFORMANCE_OBSERVE=" + r.obs, "CONFORMANCE_DIR=" + r.dir}
	return r.impl.start(r.t, r.e, creds, queue, role, env)
}

// task creates a standalone task on queue with input in, and returns its id.
func (r *conformanceRun) task(queue string, in conformance.Input, adjust ...func(*schemas.TaskSpec)) string {
	r.t.Helper()
	raw, err := json.Marshal(in)
	require.NoError(r.t, err)
	spec := schemas.TaskSpec{Title: "conformance " + in.Scenario, Queue: queue, Input: raw}
	for _, f := range adjust {
		f(&spec)
	}
	res, err := r.c.CreateTask(r.ctx, spec)
	require.NoError(r.t, err)
	return res.ID
}

// waitTask waits until task id satisfies cond, and returns it.
func (r *conformanceRun) waitTask(id, what string, cond func(*schemas.Task) bool) *schemas.Task {
	r.t.Helper()
	var last *schemas.Task
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		task, err := r.c.Task(ctx, id)
		if err == nil {
			last = task
			if cond(task) {
				return task
			}
		}
		select {
		case <-ctx.Done():
			r.t.Fatalf("task %s: %s: not before the deadline; it is %s", id, what, describeTask(last))
		case <-tick.C:
		}
	}
}

// waitState waits until task id is in state.
func (r *conformanceRun) waitState(id, state string) *schemas.Task {
	r.t.Helper()
	return r.waitTask(id, "state "+state, func(t *schemas.Task) bool { return t.State == state })
}

// observed waits until an executor observed event for attempt of task id
// (attempt 0: any), and returns the observation.
func (r *conformanceRun) observed(id string, attempt int, event string) conformance.Observation {
	r.t.Helper()
	var found conformance.Observation
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	waitFor(r.t, ctx, fmt.Sprintf("observation %s of task %s attempt %d", event, id, attempt), func() bool {
		for _, o := range r.observations() {
			if o.TaskID == id && o.Event == event && (attempt == 0 || o.Attempt == attempt) {
				found = o
				return true
			}
		}
		return false
	})
	return found
}

func (r *conformanceRun) observations() []conformance.Observation {
	b, err := os.ReadFile(r.obs)
	if err != nil {
		return nil
	}
	var out []conformance.Observation
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var o conformance.Observation
		if json.Unmarshal(sc.Bytes(), &o) == nil {
			out = append(out, o)
		}
	}
	return out
}

// result decodes the accepted result of task.
func result(t *testing.T, task *schemas.Task) map[string]any {
	t.Helper()
	a := task.Current()
	require.NotNil(t, a, "task %s has no attempt", task.ID)
	var out map[string]any
	require.NoError(t, json.Unmarshal(a.Result, &out), "result of task %s: %s", task.ID, a.Result)
	return out
}

func describeTask(t *schemas.Task) string {
	if t == nil {
		return "unread"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s", t.State)
	if t.Reason != "" {
		fmt.Fprintf(&b, " (%s)", t.Reason)
	}
	for _, a := range t.Attempts {
		fmt.Fprintf(&b, "; attempt %d by %s %s", a.N, a.Executor, a.State)
		if a.Reason != "" {
			fmt.Fprintf(&b, " (%s)", a.Reason)
		}
		if a.Error != nil {
			fmt.Fprintf(&b, ": %s", a.Error.Message)
		}
	}
	return b.String()
}

// conformanceScenario is one row of the suite: it runs on its own queue.
type conformanceScenario struct {
	name string
	what string // what is done and checked, for the table
	run  func(r *conformanceRun, queue string)
}

func conformanceScenarios() []conformanceScenario {
	return []conformanceScenario{
		{conformance.Succeed, "returns its input's value; the result and the operation key reach the log", func(r *conformanceRun, q string) {
			r.executor(q, conformance.RoleWorker)
			id := r.task(q, conformance.Input{Scenario: conformance.Succeed, Value: map[string]any{"n": 42.0}})
			task := r.waitState(id, schemas.StateAccepted)
			res := result(r.t, task)
			require.Equal(r.t, map[string]any{"n": 42.0}, res["value"])
			require.Equal(r.t, task.Current().OperationKey, res["operation_key"], "the job is handed its operation key")
			require.Len(r.t, task.Attempts, 1)
		}},
		{conformance.Retry, "fails twice, retryably; the third attempt succeeds, every attempt with the same operation key", func(r *conformanceRun, q string) {
			r.executor(q, conformance.RoleWorker)
			id := r.task(q, conformance.Input{Scenario: conformance.Retry, FailTimes: 2}, func(s *schemas.TaskSpec) {
				s.Retry = &schemas.RetryPolicy{MaxAttempts: 5, InitialBackoff: schemas.Duration(50 * time.Millisecond)}
			})
			task := r.waitState(id, schemas.StateAccepted)
			require.Len(r.t, task.Attempts, 3, describeTask(task))
			for _, a := range task.Attempts[:2] {
				require.Equal(r.t, schemas.AttemptStateFailed, a.State)
				require.True(r.t, a.Retryable, "attempt %d's failure is retryable", a.N)
				require.Contains(r.t, a.Error.Message, "transient failure")
			}
			require.Equal(r.t, 3.0, result(r.t, task)["attempt"])
			keys := map[string]bool{}
			for _, a := range task.Attempts {
				keys[a.OperationKey] = true
			}
			require.Len(r.t, keys, 1, "every attempt has the task's operation key")
		}},
		{conformance.PermanentFailure, "fails permanently: the task fails after one attempt, with the message", func(r *conformanceRun, q string) {
			r.executor(q, conformance.RoleWorker)
			id := r.task(q, conformance.Input{Scenario: conformance.PermanentFailure, Message: "the order does not exist"},
				func(s *schemas.TaskSpec) { s.Retry = &schemas.RetryPolicy{MaxAttempts: 5} })
			task := r.waitState(id, schemas.StateFailed)
			require.Len(r.t, task.Attempts, 1, "a permanent failure is not retried: %s", describeTask(task))
			require.False(r.t, task.Attempts[0].Retryable)
			require.Contains(r.t, task.Attempts[0].Error.Message, "the order does not exist")
		}},
		{conformance.OutliveLease, "works for three leases: heartbeats keep it, no other attempt starts", func(r *conformanceRun, q string) {
			r.executor(q, conformance.RoleWorker)
			id := r.task(q, conformance.Input{Scenario: conformance.OutliveLease, Millis: int(3 * conformanceLease / time.Millisecond)})
			task := r.waitState(id, schemas.StateAccepted)
			require.Len(r.t, task.Attempts, 1, "the lease was kept for three leases' time: %s", describeTask(task))
		}},
		{conformance.CheckpointResume, "checkpoints, then its executor is killed -9: the next attempt resumes from the checkpoint", func(r *conformanceRun, q string) {
			first := r.executor(q, conformance.RoleWorker)
			id := r.task(q, conformance.Input{Scenario: conformance.CheckpointResume})
			r.waitTask(id, "checkpoint saved", func(t *schemas.Task) bool { return t.Checkpoint != nil })
			first.kill9(r.t)
			r.executor(q, conformance.RoleWorker)
			task := r.waitState(id, schemas.StateAccepted)
			require.GreaterOrEqual(r.t, len(task.Attempts), 2, describeTask(task))
			require.Equal(r.t, schemas.AttemptStateAbandoned, task.Attempts[0].State, "the killed attempt is abandoned")
			require.JSONEq(r.t, `{"step": 1, "attempt": 1}`, mustJSON(r.t, result(r.t, task)["resumed_from"]),
				"the next attempt resumes from the killed one's checkpoint")
		}},
		{conformance.Fencing, "its executor is frozen past the lease: another takes over, and the frozen one's report is refused", func(r *conformanceRun, q string) {
			first := r.executor(q, conformance.RoleWorker)
			id := r.task(q, conformance.Input{Scenario: conformance.Fencing})
			r.observed(id, 1, conformance.EventStarted)
			r.waitTask(id, "its checkpoint recorded", func(t *schemas.Task) bool { return t.Checkpoint != nil })
			first.signal(syscall.SIGSTOP) // frozen: no heartbeat, no ack
			second := r.executor(q, conformance.RoleWorker)
			r.observed(id, 2, conformance.EventStarted) // took the task over past the lease
			require.NoError(r.t, os.WriteFile(conformance.ReleaseFile(r.dir, id), nil, 0o600))
			r.waitState(id, schemas.StateAccepted)
			second.signal(syscall.SIGKILL)
			first.signal(syscall.SIGCONT) // it sees the release too, or its loss
			ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
			defer cancel()
			waitFor(r.t, ctx, "the frozen executor's attempt ends", func() bool {
				for _, o := range r.observations() {
					if o.TaskID == id && o.Attempt == 1 && (o.Event == conformance.EventReleased || o.Event == conformance.EventStopped) {
						return true
					}
				}
				return false
			})
			require.NoError(r.t, first.terminate(20*time.Second), "the first executor stops cleanly, its report done")
			task := r.waitState(id, schemas.StateAccepted)
			require.Equal(r.t, 2.0, result(r.t, task)["attempt"], "the result is the second attempt's: %s", describeTask(task))
			require.Equal(r.t, schemas.AttemptStateAbandoned, task.Attempts[0].State,
				"the superseded attempt's report is refused: %s", describeTask(task))
			require.Equal(r.t, 1, count(r.e.history(id), "task.attempt_succeeded"), "one report succeeded")
		}},
		{conformance.Cancel, "the task is cancelled while it runs: the handler is stopped (told why, where the API can)", func(r *conformanceRun, q string) {
			r.executor(q, conformance.RoleWorker)
			id := r.task(q, conformance.Input{Scenario: conformance.Cancel})
			r.observed(id, 1, conformance.EventStarted)
			r.waitTask(id, "its checkpoint recorded", func(t *schemas.Task) bool { return t.Checkpoint != nil })
			_, err := r.c.CancelTask(r.ctx, id, "conformance")
			require.NoError(r.t, err)
			o := r.observed(id, 1, conformance.EventStopped)
			if r.impl.name != "dwr worker" { // a command is only told SIGTERM
				require.Equal(r.t, conformance.CauseCancelled, o.Detail, "the handler learns why it stops")
			}
			task := r.waitState(id, schemas.StateCancelled)
			require.Len(r.t, task.Attempts, 1, describeTask(task))
			require.Equal(r.t, schemas.AttemptStateCancelled, task.Attempts[0].State)
		}},
		{conformance.Sleep, "sleeps durably for 1 s: the attempt ends parked, the next starts no earlier", func(r *conformanceRun, q string) {
			r.executor(q, conformance.RoleWorker)
			id := r.task(q, conformance.Input{Scenario: conformance.Sleep, Millis: 1000})
			task := r.waitState(id, schemas.StateAccepted)
			require.Len(r.t, task.Attempts, 2, describeTask(task))
			require.Equal(r.t, schemas.AttemptStateParked, task.Attempts[0].State, "the sleeping attempt ends, holding nothing")
			var cp struct{ Until time.Time }
			require.NoError(r.t, json.Unmarshal(task.Checkpoint, &cp))
			require.False(r.t, task.Attempts[1].StartedAt.Before(cp.Until.Truncate(time.Millisecond)),
				"the task wakes at the time it slept until (%s), not before: %s", cp.Until, task.Attempts[1].StartedAt)
			require.Contains(r.t, r.e.history(id), "task.waiting")
		}},
		{conformance.Signal, "waits for a signal: the resumed attempt gets its payload", func(r *conformanceRun, q string) {
			r.executor(q, conformance.RoleWorker)
			id := r.task(q, conformance.Input{Scenario: conformance.Signal, Name: "go-ahead"})
			r.waitTask(id, "waiting for the signal", func(t *schemas.Task) bool {
				return t.State == schemas.StateWaiting && t.Wait != nil && t.Wait.Signal == "go-ahead"
			})
			_, err := r.c.Signal(r.ctx, id, "go-ahead", map[string]any{"by": "conformance"})
			require.NoError(r.t, err)
			task := r.waitState(id, schemas.StateAccepted)
			require.Equal(r.t, map[string]any{"by": "conformance"}, result(r.t, task)["signal"])
		}},
		{conformance.Approval, "asks for approval of an action: `dwr approve` signs it, the resumed attempt gets the decision on that digest", func(r *conformanceRun, q string) {
			r.executor(q, conformance.RoleWorker)
			key, creds := r.approver("ada", "ops")
			id := r.task(q, conformance.Input{Scenario: conformance.Approval, Role: "ops",
				Action: json.RawMessage(`{"refund": 120, "order": "o-7"}`)})
			task := r.waitTask(id, "waiting for the approval", func(t *schemas.Task) bool {
				return t.State == schemas.StateWaiting && t.Wait != nil && t.Wait.ApprovalID != ""
			})
			out, err := exec.Command(r.e.bin, "--server", r.e.url, "--creds", creds, "approve", task.Wait.ApprovalID,
				"--response", "approve", "--key", key).CombinedOutput()
			require.NoError(r.t, err, "dwr approve: %s", out)
			task = r.waitState(id, schemas.StateAccepted)
			res := result(r.t, task)
			require.Equal(r.t, "approve", res["response"])
			require.Equal(r.t, "ada", res["approver"])
			require.Equal(r.t, task.Approvals[0].ActionDigest, res["action_digest"], "the decision is on the action asked about")
		}},
		{conformance.TwoApprovals, "asks two roles to approve one action: the first role's decision does not stand for the second's, which is an approval of its own", func(r *conformanceRun, q string) {
			r.executor(q, conformance.RoleWorker)
			ozKey, ozCreds := r.approver("oz", "ops")
			leeKey, leeCreds := r.approver("lee", "legal")
			id := r.task(q, conformance.Input{Scenario: conformance.TwoApprovals, Roles: []string{"ops", "legal"},
				Action: json.RawMessage(`{"pay": 990, "to": "acme"}`)})
			approve := func(n int, role, key, creds string) {
				task := r.waitTask(id, "waiting for approval "+strconv.Itoa(n)+" (of "+role+")", func(t *schemas.Task) bool {
					return t.State == schemas.StateWaiting && t.Wait != nil && t.Wait.ApprovalID == id+"-"+strconv.Itoa(n)
				})
				require.Equal(r.t, role, task.Approvals[n-1].Role)
				require.Equal(r.t, task.Approvals[0].ActionDigest, task.Approvals[n-1].ActionDigest, "the same action")
				out, err := exec.Command(r.e.bin, "--server", r.e.url, "--creds", creds, "approve", task.Wait.ApprovalID,
					"--response", "approve", "--key", key).CombinedOutput()
				require.NoError(r.t, err, "dwr approve: %s", out)
			}
			approve(1, "ops", ozKey, ozCreds)
			approve(2, "legal", leeKey, leeCreds)
			task := r.waitState(id, schemas.StateAccepted)
			require.Equal(r.t, []any{"oz", "lee"}, result(r.t, task)["approvers"])
			require.Len(r.t, task.Approvals, 2, "nothing was asked twice")
		}},
		{conformance.FourEyes, "asks two approvers of one role to approve one action (quorum 2): the first approval leaves the task waiting, the second decides, and the decision names both", func(r *conformanceRun, q string) {
			r.executor(q, conformance.RoleWorker)
			kaiKey, kaiCreds := r.approver("kai", "ops")
			mayKey, mayCreds := r.approver("may", "ops")
			id := r.task(q, conformance.Input{Scenario: conformance.FourEyes, Role: "ops", Quorum: 2,
				Action: json.RawMessage(`{"deploy": "v9", "to": "prod"}`)})
			task := r.waitTask(id, "waiting for the approval", func(t *schemas.Task) bool {
				return t.State == schemas.StateWaiting && t.Wait != nil && t.Wait.ApprovalID != ""
			})
			require.Equal(r.t, 2, task.Approvals[0].Quorum, "the request carried its quorum")
			approve := func(key, creds string) string {
				out, err := exec.Command(r.e.bin, "--server", r.e.url, "--creds", creds, "approve", task.Wait.ApprovalID,
					"--response", "approve", "--key", key).CombinedOutput()
				require.NoError(r.t, err, "dwr approve: %s", out)
				return string(out)
			}
			require.Contains(r.t, approve(kaiKey, kaiCreds), "it waits for the others")
			task = r.waitTask(id, "one approval of two recorded", func(t *schemas.Task) bool {
				return len(t.Approvals) == 1 && len(t.Approvals[0].SignOffs) == 1
			})
			require.Equal(r.t, schemas.StateWaiting, task.State, "one approver is not enough")
			approve(mayKey, mayCreds)
			task = r.waitState(id, schemas.StateAccepted)
			res := result(r.t, task)
			require.Equal(r.t, []any{"kai", "may"}, res["approvers"])
			require.Equal(r.t, "may", res["approver"], "the approval that made the quorum")
			require.Len(r.t, task.Approvals, 1, "one approval, two approvers")
		}},
		{conformance.NotByRequester, "asks two approvers of one role, excluding the identity that created the task: that identity's own approval is refused, and two others make the quorum", func(r *conformanceRun, q string) {
			r.executor(q, conformance.RoleWorker)
			cli := func(args ...string) (string, error) {
				out, err := exec.Command(r.e.bin, append([]string{"--server", r.e.url}, args...)...).CombinedOutput()
				return string(out), err
			}
			// lead, a workspace admin, is also an approver of ops.
			leadCreds, leadKey := filepath.Join(r.dir, "lead.creds"), filepath.Join(r.dir, "lead.key")
			for _, args := range [][]string{{"users", "add", "lead", "--role", "admin", "--out", leadCreds, "--force"},
				{"keys", "create", "lead", "--role", "ops", "--out", leadKey, "--force"}} {
				out, err := cli(append([]string{"--creds", r.e.adminCreds()}, args...)...)
				require.NoError(r.t, err, "dwr %s: %s", args[0], out)
			}
			noaKey, noaCreds := r.approver("noa", "ops")
			rosKey, rosCreds := r.approver("ros", "ops")
			lead, err := dwrclient.Connect(r.e.url, dwrclient.Credentials(leadCreds))
			require.NoError(r.t, err)
			defer lead.Close()
			raw := mustJSON(r.t, conformance.Input{Scenario: conformance.NotByRequester, Role: "ops", Quorum: 2, ExcludeRequester: true,
				Action: json.RawMessage(`{"pay": 9000, "to": "acct-4"}`)})
			res, err := lead.CreateTask(r.ctx, schemas.TaskSpec{Title: "conformance " + conformance.NotByRequester, Queue: q, Input: json.RawMessage(raw)})
			require.NoError(r.t, err)
			id := res.ID
			task := r.waitTask(id, "waiting for the approval", func(t *schemas.Task) bool {
				return t.State == schemas.StateWaiting && t.Wait != nil && t.Wait.ApprovalID != ""
			})
			a := task.Approvals[0]
			require.Equal(r.t, [3]any{"lead", true, 2}, [3]any{a.RequestedBy, a.ExcludeRequester, a.Quorum}, "the request carried exclude_requester")
			approve := func(key, creds string) (string, error) {
				return cli("--creds", creds, "approve", task.Wait.ApprovalID, "--response", "approve", "--key", key)
			}
			out, err := approve(leadKey, leadCreds)
			require.Error(r.t, err, "the requester approved: %s", out)
			require.Contains(r.t, out, "self_approval")
			out, err = approve(noaKey, noaCreds)
			require.NoError(r.t, err, "dwr approve: %s", out)
			require.Contains(r.t, out, "it waits for the others", "the requester's approval did not count")
			out, err = approve(rosKey, rosCreds)
			require.NoError(r.t, err, "dwr approve: %s", out)
			task = r.waitState(id, schemas.StateAccepted)
			require.Equal(r.t, []any{"noa", "ros"}, result(r.t, task)["approvers"])
		}},
		{conformance.Artifact, "stores a file as an artifact: attached to the result, readable by its digest", func(r *conformanceRun, q string) {
			r.executor(q, conformance.RoleWorker)
			content := "the report of " + r.impl.name
			id := r.task(q, conformance.Input{Scenario: conformance.Artifact, Name: "report.txt", Content: content})
			task := r.waitState(id, schemas.StateAccepted)
			sum := sha256.Sum256([]byte(content))
			i := slices.IndexFunc(task.Current().Artifacts, func(a schemas.ArtifactRef) bool { return a.Name == "report.txt" })
			require.GreaterOrEqual(r.t, i, 0, "the artifact is attached to the result: %+v", task.Current().Artifacts)
			require.Equal(r.t, hex.EncodeToString(sum[:]), task.Current().Artifacts[i].SHA256)
			rd, err := r.c.GetArtifact(r.ctx, hex.EncodeToString(sum[:]))
			require.NoError(r.t, err)
			var got bytes.Buffer
			_, err = got.ReadFrom(rd)
			require.NoError(r.t, err)
			require.NoError(r.t, rd.Close())
			require.Equal(r.t, content, got.String())
		}},
		{conformance.ModelStep, "records a model call: it is on the attempt", func(r *conformanceRun, q string) {
			r.executor(q, conformance.RoleWorker)
			id := r.task(q, conformance.Input{Scenario: conformance.ModelStep, Model: "fake-model-1", PromptVersion: "p3", Tokens: 1234})
			task := r.waitState(id, schemas.StateAccepted)
			require.Equal(r.t, []schemas.ModelStep{{Model: "fake-model-1", PromptVersion: "p3", Tokens: 1234}},
				task.Current().ModelSteps)
		}},
		{conformance.Verified, "a verifier fails the first result and passes the second, with evidence", func(r *conformanceRun, q string) {
			r.executor(q, conformance.RoleWorker)
			r.executor(q+"-verify", conformance.RoleVerifier)
			id := r.task(q, conformance.Input{Scenario: conformance.Verified, Verdicts: []string{schemas.OutcomeFail, schemas.OutcomePass}},
				func(s *schemas.TaskSpec) {
					s.Verification = &schemas.VerificationSpec{Queue: q + "-verify"}
					s.Retry = &schemas.RetryPolicy{MaxAttempts: 3, InitialBackoff: schemas.Duration(50 * time.Millisecond)}
				})
			task := r.waitState(id, schemas.StateAccepted)
			require.Len(r.t, task.Attempts, 2, describeTask(task))
			require.Len(r.t, task.Verifications, 2)
			for i, want := range []string{schemas.OutcomeFail, schemas.OutcomePass} {
				v := task.Verifications[i]
				require.Equal(r.t, want, v.Outcome)
				require.Equal(r.t, i+1, v.Attempt)
				require.JSONEq(r.t, fmt.Sprintf(`{"checked": "%d"}`, i+1), string(v.Evidence))
			}
		}},
	}
}

// approver registers an approver name of role (its signing key and its
// login) and returns the key file and the credential.
func (r *conformanceRun) approver(name, role string) (key, creds string) {
	r.t.Helper()
	key, creds = filepath.Join(r.dir, name+".key"), filepath.Join(r.dir, name+".creds")
	out, err := exec.Command(r.e.bin, "--server", r.e.url, "--creds", r.e.adminCreds(), "keys", "create", name,
		"--role", role, "--out", key, "--creds-out", creds).CombinedOutput()
	require.NoError(r.t, err, "dwr keys create: %s", out)
	return key, creds
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// TestExecutorConformance runs every scenario against every executor
// implementation.
func TestExecutorConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts dwr serve and executor processes")
	}
	var mu sync.Mutex
	passed := map[string]map[string]bool{}
	impls, scenarios := conformanceImpls(), conformanceScenarios()
	for _, impl := range impls {
		t.Run(impl.name, func(t *testing.T) {
			if impl.prepare != nil {
				impl.prepare(t)
			}
			e := newExecEnv(t)
			c, err := dwrclient.Connect(e.url, dwrclient.Credentials(e.adminCreds()))
			require.NoError(t, err)
			t.Cleanup(c.Close)
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			t.Cleanup(cancel)
			for _, sc := range scenarios {
				t.Run(sc.name, func(t *testing.T) {
					defer func() { // also when a check stopped the scenario
						mu.Lock()
						defer mu.Unlock()
						if passed[sc.name] == nil {
							passed[sc.name] = map[string]bool{}
						}
						passed[sc.name][impl.name] = !t.Failed()
					}()
					r := &conformanceRun{t: t, e: e, impl: impl, c: c, dir: dir, obs: filepath.Join(dir, "observations.jsonl"), ctx: ctx}
					sc.run(r, "conf-"+strings.ReplaceAll(sc.name, "_", "-"))
				})
			}
		})
	}
	if file := os.Getenv("DWR_CONFORMANCE_TABLE"); file != "" {
		var b strings.Builder
		b.WriteString("| scenario | done and checked |")
		for _, impl := range impls {
			b.WriteString(" " + impl.name + " |")
		}
		b.WriteString("\n| --- | --- |" + strings.Repeat(" --- |", len(impls)) + "\n")
		for _, sc := range scenarios {
			b.WriteString("| `" + sc.name + "` | " + sc.what + " |")
			for _, impl := range impls {
				mark := "—"
				if ok, ran := passed[sc.name][impl.name]; ran {
					mark = map[bool]string{true: "pass", false: "FAIL"}[ok]
				}
				b.WriteString(" " + mark + " |")
			}
			b.WriteString("\n")
		}
		require.NoError(t, os.WriteFile(file, []byte(b.String()), 0o600))
	}
}
