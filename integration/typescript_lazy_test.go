package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// The TypeScript SDK's lazy claim and trace propagation, driven from Go:
// a closed service in this process (as dwr serve runs, its NATS server
// listening on loopback, its spans kept in memory), the SDK's test worker
// (executors/typescript/dist/test/lazy_worker.js) as node processes with an
// executor's credential, and a subscription of the service's own account
// that sees every command and query the workers send, with its headers.

// tsSent is one request a TypeScript process sent: its command (or query)
// name, the task it names, the token or claim it carries, and its trace.
type tsSent struct {
	Name        string
	Query       bool
	TaskID      string               `json:"task_id"`
	ID          string               `json:"id"` // a query's
	Token       string               `json:"token"`
	Executor    string               `json:"executor"` // a claim's
	Claim       *schemas.ReportClaim `json:"claim"`
	Spec        struct{ Title string }
	Traceparent string
}

// tsEvent is one line of lazy_worker.js.
type tsEvent struct {
	TaskID string          `json:"task_id"`
	Event  string          `json:"event"`
	Detail json.RawMessage `json:"detail"`
}

type tsLazyEnv struct {
	t     *testing.T
	s     *servicetest.Service
	k     *servicetest.Client // an admin's
	spans *tracetest.InMemoryExporter
	dir   string
	logs  *syncBuffer

	requests *servicetest.RequestLog // every command and query of the workspace

	mu     sync.Mutex
	events []tsEvent
}

func newTSLazyEnv(t *testing.T) *tsLazyEnv {
	t.Helper()
	return newTSLazyEnvWith(t, handlers.Config{})
}

// newTSLazyEnvWith starts the service with cfg (its tracer set here).
func newTSLazyEnvWith(t *testing.T, cfg handlers.Config) *tsLazyEnv {
	t.Helper()
	if testing.Short() {
		t.Skip("starts node")
	}
	tsProgram(t, "test/lazy_worker.js")
	tp, spans := servicetest.Tracing(t)
	cfg.Tracer = tp
	s := servicetest.Start(t, t.TempDir(), servicetest.Options{Secure: true, Listen: "127.0.0.1:0", Config: cfg})
	e := &tsLazyEnv{t: t, s: s, k: s.Client("default"), spans: spans, dir: t.TempDir(), logs: logOnFailure(t, "TypeScript processes")}
	e.requests = servicetest.WatchRequests(t, s.Conn, "default")
	return e
}

// creds adds a member of role (an executor of queue) and returns a
// credential file holding its seed.
func (e *tsLazyEnv) creds(name string, role domain.Role, queues ...string) string {
	e.t.Helper()
	kp, err := nkeys.CreateUser()
	require.NoError(e.t, err)
	pub, err := kp.PublicKey()
	require.NoError(e.t, err)
	seed, err := kp.Seed()
	require.NoError(e.t, err)
	servicetest.Must(e.t, e.s.Admin, "default", "member.add", schemas.AddMember{Name: name, Role: role, PublicKey: pub, Queues: queues})
	path := filepath.Join(e.dir, name+".creds")
	require.NoError(e.t, os.WriteFile(path, append(seed, '\n'), 0o600))
	return path
}

// worker starts lazy_worker.js as executor on queue with the lease given
// (env: more of its environment, LAZY_VERIFY=1 for a verifier).
func (e *tsLazyEnv) worker(queue, executor string, lease time.Duration, env ...string) *serverProc {
	e.t.Helper()
	cmd := exec.Command("node", tsProgram(e.t, "test/lazy_worker.js"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(os.Environ(), "DWR_SERVER="+e.s.URL, "DWR_CREDS="+e.creds(executor, domain.RoleExecutor, queue),
		"LAZY_QUEUE="+queue, "LAZY_EXECUTOR="+executor, fmt.Sprintf("LAZY_LEASE_MS=%d", lease.Milliseconds()), "LAZY_DIR="+e.dir)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = e.logs
	out, err := cmd.StdoutPipe()
	require.NoError(e.t, err)
	p := &serverProc{cmd: cmd, done: make(chan struct{}), started: time.Now()}
	require.NoError(e.t, cmd.Start())
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			fmt.Fprintf(e.logs, "%s: %s\n", executor, sc.Text())
			var ev tsEvent
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				e.mu.Lock()
				e.events = append(e.events, ev)
				e.mu.Unlock()
			}
		}
	}()
	go func() { <-read; p.err = cmd.Wait(); close(p.done) }()
	e.t.Cleanup(func() {
		if !p.exited() {
			p.signal(syscall.SIGCONT)
			p.signal(syscall.SIGKILL)
			<-p.done
		}
	})
	// Its worker takes work once the queue is configured: wait for its log line.
	e.waitEvent("the worker taking work from "+queue, func(ev tsEvent) bool {
		return ev.Event == "log" && strings.Contains(string(ev.Detail), "taking work from queue "+queue)
	})
	return p
}

// waitEvent waits until a line of a worker satisfies ok, and returns it.
func (e *tsLazyEnv) waitEvent(what string, ok func(tsEvent) bool) tsEvent {
	e.t.Helper()
	var found tsEvent
	servicetest.Eventually(e.t, 20*time.Second, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, ev := range e.events {
			if ok(ev) {
				found = ev
				return true
			}
		}
		return false
	}, func() string { return "waiting for " + what })
	return found
}

// jobLine waits for the worker's log line of task id's job with outcome.
func (e *tsLazyEnv) jobLine(id, outcome string) string {
	e.t.Helper()
	ev := e.waitEvent("task "+id+"'s outcome "+outcome, func(ev tsEvent) bool {
		s := string(ev.Detail)
		return ev.Event == "log" && strings.Contains(s, "task="+id+" ") && strings.Contains(s, "outcome="+outcome)
	})
	return string(ev.Detail)
}

func (e *tsLazyEnv) task(queue string, in map[string]any, adjust ...func(map[string]any)) string {
	e.t.Helper()
	spec := map[string]any{"queue": queue, "input": in}
	for _, a := range adjust {
		a(spec)
	}
	return e.k.CreateTask(e.t, spec)
}

// sentFor returns the requests sent for task id (naming it), in order,
// but for the commands the test sends itself (task.create, task.cancel).
// The test reads the task only once its job has ended, after sentFor: the
// service's account sees every client's requests alike.
func (e *tsLazyEnv) sentFor(id string) []tsSent {
	var out []tsSent
	for _, r := range e.sent() {
		if (r.TaskID == id || r.ID == id) && r.Name != "task.create" && r.Name != "task.cancel" {
			out = append(out, r)
		}
	}
	return out
}

// sent returns every request of the workspace so far, decoded.
func (e *tsLazyEnv) sent() []tsSent {
	var out []tsSent
	for _, r := range e.requests.All() {
		var s tsSent
		if r.Decode(&s) != nil {
			continue
		}
		s.Name, s.Query, s.Traceparent = r.Name, r.Query, r.Traceparent
		out = append(out, s)
	}
	return out
}

func tsCommandNames(rs []tsSent) []string {
	var out []string
	for _, r := range rs {
		if !r.Query {
			out = append(out, r.Name)
		}
	}
	return out
}

// waitSettled waits until queue's items are all acknowledged.
func (e *tsLazyEnv) waitSettled(queue string) {
	e.t.Helper()
	js, err := e.s.Conn.JetStream()
	require.NoError(e.t, err)
	servicetest.Eventually(e.t, 20*time.Second, func() bool {
		info, err := js.ConsumerInfo("DWR_WORK", "dwr-default-"+queue)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	}, func() string { return "queue " + queue + " settled" })
}

// TestTypeScriptLazyClaimShortJobs: a short job's only command is its
// report, which carries the claim (a success, and a failure); a job whose
// first command needs the token (a checkpoint) claims then.
func TestTypeScriptLazyClaimShortJobs(t *testing.T) {
	e := newTSLazyEnv(t)
	e.worker("short", "ts-quick", 30*time.Second)

	id := e.task("short", map[string]any{"scenario": "quick"})
	e.jobLine(id, "succeeded")
	sent := e.sentFor(id)
	tk := e.k.WaitState(t, id, "accepted", 20*time.Second)
	require.Equal(t, []string{"task.succeed"}, tsCommandNames(sent), "a short job's only command is its report, which carries the claim")
	require.Empty(t, sent[0].Token)
	require.Equal(t, &schemas.ReportClaim{Executor: "ts-quick", ExecutorVersion: "test-1"}, sent[0].Claim)
	require.Len(t, tk.Attempts, 1)
	require.Equal(t, "ts-quick", tk.Attempts[0].Executor)
	require.Len(t, tk.Attempts[0].TokenHash, 64)

	f := e.task("short", map[string]any{"scenario": "fail"}, func(s map[string]any) { s["retry"] = map[string]any{"max_attempts": 1} })
	e.jobLine(f, "failed")
	sent = e.sentFor(f)
	e.k.WaitState(t, f, "failed", 20*time.Second)
	require.Equal(t, []string{"task.fail"}, tsCommandNames(sent))
	require.NotNil(t, sent[0].Claim)

	c := e.task("short", map[string]any{"scenario": "checkpoint"})
	e.jobLine(c, "succeeded")
	sent = e.sentFor(c)
	tk = e.k.WaitState(t, c, "accepted", 20*time.Second)
	require.Equal(t, []string{"task.claim", "task.checkpoint", "task.succeed"}, tsCommandNames(sent), "the checkpoint claimed first")
	for _, r := range sent[1:] {
		require.Len(t, r.Token, 43, "%s carries the token the claim returned", r.Name)
		require.Nil(t, r.Claim)
		require.Equal(t, domain.TokenHash(r.Token), tk.Attempts[0].TokenHash)
	}
	e.waitSettled("short")
}

// TestTypeScriptLazyClaimLongJob: a job that outlives its first heartbeat
// moment claims then, and heartbeats from then on with the claim's token.
func TestTypeScriptLazyClaimLongJob(t *testing.T) {
	e := newTSLazyEnv(t)
	const lease = 1500 * time.Millisecond // a heartbeat every 500 ms
	e.worker("long", "ts-long", lease)
	id := e.task("long", map[string]any{"scenario": "run", "millis": 1700})
	e.jobLine(id, "succeeded")
	sent := e.sentFor(id)
	tk := e.k.WaitState(t, id, "accepted", 20*time.Second)
	names := tsCommandNames(sent)
	require.Equal(t, "task.claim", names[0], "the job claimed before anything else: %v", names)
	require.Equal(t, "task.succeed", names[len(names)-1])
	require.GreaterOrEqual(t, strings.Count(strings.Join(names, " "), "task.heartbeat"), 2, "%v", names)
	for _, r := range sent[1:] {
		require.Len(t, r.Token, 43, "%s carries the token the claim returned", r.Name)
		require.Nil(t, r.Claim, "%s of a claimed attempt carries no claim", r.Name)
		require.Equal(t, domain.TokenHash(r.Token), tk.Attempts[0].TokenHash)
	}
	e.waitSettled("long")
}

// TestTypeScriptLazyClaimCancelledTask: a task cancelled while its job runs
// unclaimed: the watch aborts the job (cancelled), its report (which
// carries the claim) is refused, and no attempt is recorded.
func TestTypeScriptLazyClaimCancelledTask(t *testing.T) {
	e := newTSLazyEnv(t)
	e.worker("unclaimed", "ts-cancel", 30*time.Second) // its first heartbeat moment is 10 s away
	id := e.task("unclaimed", map[string]any{"scenario": "hold"})
	e.waitEvent("the job started", func(ev tsEvent) bool { return ev.TaskID == id && ev.Event == "started" })
	e.k.Command(t, "task.cancel", map[string]any{"task_id": id})
	ev := e.waitEvent("the job aborted", func(ev tsEvent) bool { return ev.TaskID == id && ev.Event == "aborted" })
	require.JSONEq(t, `"cancelled"`, string(ev.Detail))
	e.jobLine(id, "refused")
	sent := e.sentFor(id)
	require.Equal(t, []string{"task.fail"}, tsCommandNames(sent), "only the report, carrying its claim, was sent")
	require.NotNil(t, sent[0].Claim)
	tk := e.k.Task(t, id)
	require.Equal(t, "cancelled", tk.State)
	require.Empty(t, tk.Attempts, "the job never started its attempt")
	e.waitSettled("unclaimed")
}

// TestTypeScriptLazyClaimRedeliveredItem: a job that never claimed, whose
// item was redelivered (its process stopped past the lease): the new
// delivery claims first and runs the attempt; the stopped job, resumed, is
// refused its claim, and nothing of it is recorded.
func TestTypeScriptLazyClaimRedeliveredItem(t *testing.T) {
	e := newTSLazyEnv(t)
	const lease = 1500 * time.Millisecond
	stale := e.worker("hung", "stale", lease)
	id := e.task("hung", map[string]any{"scenario": "hang_once"})
	e.waitEvent("the stale job started", func(ev tsEvent) bool { return ev.TaskID == id && ev.Event == "started" })
	stale.signal(syscall.SIGSTOP) // as if hung: no renewal, no claim
	staleSent := len(e.sentFor(id))
	e.worker("hung", "fresh", lease)
	e.jobLine(id, "succeeded")
	var fresh []tsSent
	for _, r := range e.sentFor(id)[staleSent:] {
		if !r.Query {
			fresh = append(fresh, r)
		}
	}
	require.Equal(t, []string{"task.claim", "task.succeed"}, tsCommandNames(fresh), "the redelivered item was claimed first")
	require.NotEmpty(t, fresh[len(fresh)-1].Token)
	tk := e.k.WaitState(t, id, "accepted", 30*time.Second)
	require.Len(t, tk.Attempts, 1)
	require.Equal(t, "fresh", tk.Attempts[0].Executor)

	stale.signal(syscall.SIGCONT)
	require.NoError(t, os.WriteFile(filepath.Join(e.dir, "release-"+id), nil, 0o600))
	e.jobLine(id, "refused")
	after := e.k.Task(t, id)
	require.Equal(t, tk.Version, after.Version, "the stale job recorded nothing")
	e.waitSettled("hung")
}

// TestTypeScriptJobCommandsCarryTheItemsTrace: every command of a job (its
// claim, checkpoint, heartbeats and report) and a client the job makes
// from job.traceparent carry the trace its work item carries, which the
// service's spans of them join; a client's requests carry the trace of
// TRACEPARENT, of its option, or of the call.
func TestTypeScriptJobCommandsCarryTheItemsTrace(t *testing.T) {
	e := newTSLazyEnv(t)
	e.worker("traced", "ts-trace", 1500*time.Millisecond)
	const root = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	r := e.k.Request(t, "dwr.cmd.default.task.create", map[string]any{"spec": map[string]any{"queue": "traced",
		"input": map[string]any{"scenario": "checkpoint", "millis": 1200}}}, nats.Header{schemas.HeaderTraceparent: {root}})
	require.True(t, r.OK, "%+v", r.Error)
	var res schemas.CommandResult
	require.NoError(t, json.Unmarshal(r.Result, &res))
	id := res.ID
	e.jobLine(id, "succeeded")
	sent := e.sentFor(id)
	started := e.waitEvent("the job started", func(ev tsEvent) bool { return ev.TaskID == id && ev.Event == "started" })
	var seen struct{ Traceparent string }
	require.NoError(t, json.Unmarshal(started.Detail, &seen))
	traceID := strings.Split(root, "-")[1]
	require.Regexp(t, "^00-"+traceID+"-[0-9a-f]{16}-01$", seen.Traceparent, "job.traceparent is the item's, in the creator's trace")
	require.NotEqual(t, root, seen.Traceparent, "the item's parent is the service's dispatch span")

	names := tsCommandNames(sent)
	for _, want := range []string{"task.claim", "task.checkpoint", "task.heartbeat", "task.succeed"} {
		require.Contains(t, names, want)
	}
	for _, r := range sent {
		require.Equal(t, seen.Traceparent, r.Traceparent, "%s carries the item's trace", r.Name)
	}
	servicetest.Eventually(t, 10*time.Second, func() bool {
		var got []string
		for _, sp := range e.spans.GetSpans() {
			if sp.SpanContext.TraceID().String() == traceID && sp.Parent.SpanID().String() == strings.Split(seen.Traceparent, "-")[2] {
				got = append(got, sp.Name)
			}
		}
		for _, want := range []string{"dwr.command task.claim", "dwr.command task.checkpoint", "dwr.command task.succeed"} {
			if !slices.Contains(got, want) {
				return false
			}
		}
		return true
	}, func() string { return "the service's spans of the job's commands, children of the item's" })

	// A job hands its trace to a client of its own.
	c := e.task("traced", map[string]any{"scenario": "client"})
	e.jobLine(c, "succeeded")
	started = e.waitEvent("the job started", func(ev tsEvent) bool { return ev.TaskID == c && ev.Event == "started" })
	require.NoError(t, json.Unmarshal(started.Detail, &seen))
	var read []tsSent
	for _, r := range e.sentFor(c) { // before the test reads it
		if r.Query && r.Name == "task.get" {
			read = append(read, r)
		}
	}
	require.NotEmpty(t, read, "the job's client read its task")
	for _, r := range read {
		require.Equal(t, seen.Traceparent, r.Traceparent)
	}

	// A client: TRACEPARENT, its option, one call's; "" sends none.
	const env, option, call = "00-11111111111111111111111111111111-1111111111111111-01",
		"00-22222222222222222222222222222222-2222222222222222-01", "00-33333333333333333333333333333333-3333333333333333-00"
	cmd := exec.Command("node", tsProgram(t, "test/trace_client.js"))
	cmd.Env = append(os.Environ(), "DWR_SERVER="+e.s.URL, "DWR_CREDS="+e.creds("ts-caller", domain.RoleClient),
		"TRACE_QUEUE=nobody", "TRACEPARENT="+env, "TRACE_OPTION="+option, "TRACE_CALL="+call)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	byTitle := map[string]string{}
	for _, r := range e.sent() {
		if r.Name == "task.create" && r.Spec.Title != "" {
			byTitle[r.Spec.Title] = r.Traceparent
		}
	}
	require.Equal(t, map[string]string{"env": env, "option": option, "call": call, "none": ""}, byTitle)
}

// TestTypeScriptDelegation: a job delegates a child goal (task.delegate,
// claiming its attempt first) and parks; the child goal's task runs, and
// the resumed attempt returns the child's accepted result. A child goal
// that fails resumes its parent (on_failure resume), whose delegate throws
// DelegationFailed, and the job falls back.
func TestTypeScriptDelegation(t *testing.T) {
	e := newTSLazyEnv(t)
	e.worker("deleg", "ts-deleg", 30*time.Second)
	var top schemas.CommandResult
	require.NoError(t, json.Unmarshal(e.k.Command(t, "goal.create", map[string]any{"title": "top", "tasks": []map[string]any{
		{"key": "lead", "queue": "deleg", "input": map[string]any{"scenario": "delegate"}},
		{"key": "fallback", "queue": "deleg", "input": map[string]any{"scenario": "delegate_failing"}}}}), &top))
	lead, fallback := top.Tasks[0].TaskID, top.Tasks[1].TaskID
	e.jobLine(lead, "waiting")
	e.jobLine(lead, "succeeded")
	e.jobLine(fallback, "succeeded")
	sent := e.sentFor(lead)
	require.Equal(t, []string{"task.claim", "task.delegate", "task.succeed"}, tsCommandNames(sent),
		"the delegation claimed the attempt first; the resumed attempt's report carried its own claim")
	require.Len(t, sent[1].Token, 43)
	require.NotNil(t, sent[2].Claim)

	tk := e.k.WaitState(t, lead, "accepted", 20*time.Second)
	require.Len(t, tk.Delegations, 1)
	require.Equal(t, schemas.GoalStateAchieved, tk.Delegations[0].State)
	require.Len(t, tk.Attempts, 2, "parked, then resumed")
	require.Equal(t, schemas.AttemptStateParked, tk.Attempts[0].State)
	require.JSONEq(t, fmt.Sprintf(`{"child": {"done": true}, "goal": %q, "attempt": 2}`, tk.Delegations[0].GoalID), string(tk.Attempts[1].Result))

	fb := e.k.WaitState(t, fallback, "accepted", 20*time.Second)
	require.Len(t, fb.Delegations, 1)
	require.Equal(t, schemas.GoalStateFailed, fb.Delegations[0].State)
	require.JSONEq(t, fmt.Sprintf(`{"fallback": "failed", "goal": %q}`, fb.Delegations[0].GoalID), string(fb.Attempts[len(fb.Attempts)-1].Result))
	e.waitSettled("deleg")
}

// TestTypeScriptLazyClaimRefused: another executor claims the ready task
// while the job runs unclaimed; the job's claim at its first heartbeat
// moment is refused, which aborts it as a lost attempt, and it reports
// nothing.
func TestTypeScriptLazyClaimRefused(t *testing.T) {
	e := newTSLazyEnv(t)
	e.worker("taken", "ts-lazy", 1500*time.Millisecond)
	id := e.task("taken", map[string]any{"scenario": "hold"})
	e.waitEvent("the job started", func(ev tsEvent) bool { return ev.TaskID == id && ev.Event == "started" })
	other := servicetest.NewClient(e.s.Member(t, "default", "other", domain.RoleExecutor, "taken"), "default")
	other.Command(t, "task.claim", map[string]any{"task_id": id, "executor": "other"})
	ev := e.waitEvent("the job aborted", func(ev tsEvent) bool { return ev.TaskID == id && ev.Event == "aborted" })
	require.JSONEq(t, `"lease_lost"`, string(ev.Detail))
	e.jobLine(id, "refused")
	var claims []string
	for _, r := range e.sentFor(id) {
		if !r.Query {
			claims = append(claims, r.Name+" by "+r.Executor)
		}
	}
	require.Equal(t, []string{"task.claim by other", "task.claim by ts-lazy"}, claims, "the other's claim, then the job's, refused; no report")
	tk := e.k.Task(t, id)
	require.Len(t, tk.Attempts, 1)
	require.Equal(t, "other", tk.Attempts[0].Executor, "the other claim's attempt stands")
	require.Equal(t, "running", tk.Attempts[0].State)
}

// TestTypeScriptLazyClaimKeepsTheGoalsBudget: two jobs of a goal whose
// budget allows one attempt both run unclaimed; the second report's claim
// fails the task instead, as a claim would, and nothing of it is recorded.
func TestTypeScriptLazyClaimKeepsTheGoalsBudget(t *testing.T) {
	e := newTSLazyEnv(t)
	e.worker("budget", "ts-budget", 30*time.Second)
	var goal schemas.CommandResult
	require.NoError(t, json.Unmarshal(e.k.Command(t, "goal.create", map[string]any{"title": "one attempt",
		"envelope": map[string]any{"budget": map[string]any{"attempts": 1}}, "tasks": []map[string]any{
			{"key": "a", "queue": "budget", "input": map[string]any{"scenario": "hold"}},
			{"key": "b", "queue": "budget", "input": map[string]any{"scenario": "hold"}}}}), &goal))
	for _, pt := range goal.Tasks {
		e.waitEvent("job "+pt.Key+" started", func(ev tsEvent) bool { return ev.TaskID == pt.TaskID && ev.Event == "started" })
	}
	for _, pt := range goal.Tasks {
		require.NoError(t, os.WriteFile(filepath.Join(e.dir, "release-"+pt.TaskID), nil, 0o600))
	}
	line := e.waitEvent("a report's claim refused by the budget", func(ev tsEvent) bool {
		return ev.Event == "log" && strings.Contains(string(ev.Detail), "the report's claim started no attempt")
	})
	require.Contains(t, string(line.Detail), "outcome=refused")
	attempts := 0
	for _, pt := range goal.Tasks {
		tk := e.k.WaitTask(t, pt.TaskID, 20*time.Second, "ended", func(tk domain.Task) bool {
			return tk.State == "accepted" || tk.State == "failed"
		})
		attempts += len(tk.Attempts)
	}
	require.Equal(t, 1, attempts, "the goal's budget allowed one attempt")
	e.waitSettled("budget")
}
