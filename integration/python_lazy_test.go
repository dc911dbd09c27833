package integration

import (
	"bufio"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// The Python SDK's lazy claim and trace propagation, against the service
// run in this process (closed, listening on a loopback port, as dwr serve
// runs it), so that the test sees every command on the bus with its
// headers: the service's own connection subscribes to them.

// pythonService starts the service with cfg for a Python program, and
// returns it with a function that adds a member of the default workspace
// (role, and an executor's queues) and writes its credential file.
func pythonService(t *testing.T, cfg handlers.Config) (*servicetest.Service, func(name string, role domain.Role, queues ...string) string) {
	t.Helper()
	s := servicetest.Start(t, "", servicetest.Options{Secure: true, Listen: "127.0.0.1:0", Config: cfg})
	dir := t.TempDir()
	return s, func(name string, role domain.Role, queues ...string) string {
		t.Helper()
		c, err := access.NewCredential()
		require.NoError(t, err)
		servicetest.Must(t, s.Admin, "default", "member.add", domain.AddMember{Name: name, Role: role, PublicKey: c.PublicKey, Queues: queues})
		path := filepath.Join(dir, name+".creds")
		require.NoError(t, c.Write(path, string(role)+" "+name, false))
		return path
	}
}

// sentCommand is a command seen on the bus: its name, its trace header and
// what its body says of its task, attempt and authority.
type sentCommand struct {
	Name        string               `json:"-"`
	Traceparent string               `json:"-"`
	TaskID      string               `json:"task_id"`
	Attempt     int                  `json:"attempt"`
	Token       string               `json:"token"`
	Executor    string               `json:"executor"`
	Claim       *schemas.ReportClaim `json:"claim"`
}

// watchCommands records every command of the default workspace that
// reaches the service, from now on.
func watchCommands(t *testing.T, nc *nats.Conn) func(taskID string) []sentCommand {
	t.Helper()
	requests := servicetest.WatchRequests(t, nc, "default")
	return func(taskID string) []sentCommand {
		var out []sentCommand
		for _, r := range requests.All() {
			var c sentCommand
			if r.Query || r.Decode(&c) != nil || c.TaskID != taskID {
				continue
			}
			c.Name, c.Traceparent = r.Name, r.Traceparent
			out = append(out, c)
		}
		return out
	}
}

func commandNames(cs []sentCommand) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Name
	}
	return out
}

// scenarioTasks reads the "task <scenario> <id>" lines a live_*.py program
// prints.
func scenarioTasks(t *testing.T, out string) map[string]string {
	t.Helper()
	ids := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "task" {
			ids[f[1]] = f[2]
		}
	}
	return ids
}

// TestPythonLazyClaim runs executors/python/tests/live_lazy.py, which
// checks what the worker and the service did in each scenario, and checks
// here the commands each job sent: a short job's only command is its
// report, which carries the claim (a success and a failure); a long job
// claims at its first heartbeat and heartbeats with the token; a checkpoint
// or a wait claims first; a cancelled task's unclaimed job sends no claim
// and its report's claim is refused; a job whose task another claimed has
// its claim refused and reports nothing; a redelivered item is claimed
// first, and the hung first delivery's report (with its claim) is refused.
func TestPythonLazyClaim(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the service and python3")
	}
	py := pythonSDK(t)
	s, member := pythonService(t, handlers.Config{})
	commands := watchCommands(t, s.Conn)
	out := runPythonScript(t, py, "live_lazy.py", "DWR_SERVER="+s.URL,
		"DWR_CREDS="+member("py-caller", domain.RoleClient), "DWR_EXECUTOR_CREDS="+member("py-lazy", domain.RoleExecutor, "pyl", "pyh"))
	require.Contains(t, out, "live lazy: ok")
	ids := scenarioTasks(t, out)
	k := s.Client("default")

	for _, name := range []string{"short", "fail"} {
		sent := commands(ids[name])
		report := map[string]string{"short": "task.succeed", "fail": "task.fail"}[name]
		require.Equal(t, []string{report}, commandNames(sent), "%s: a short job's only command is its report", name)
		require.Empty(t, sent[0].Token, name)
		require.NotNil(t, sent[0].Claim, name)
		require.Equal(t, "py-lazy", sent[0].Claim.Executor)
		require.Equal(t, "v1", sent[0].Claim.ExecutorVersion)
		tk := k.Task(t, ids[name])
		require.Len(t, tk.Attempts, 1, name)
		require.Equal(t, "py-lazy", tk.Attempts[0].Executor, name)
	}

	long := commands(ids["long"])
	got := commandNames(long)
	require.NotEmpty(t, got)
	require.Equal(t, "task.claim", got[0], "the long job claimed before anything else: %v", got)
	require.Equal(t, "task.succeed", got[len(got)-1], "%v", got)
	require.GreaterOrEqual(t, strings.Count(strings.Join(got, " "), "task.heartbeat"), 2, "%v", got)
	tk := k.Task(t, ids["long"])
	for _, c := range long[1:] {
		require.Nil(t, c.Claim, "%s of a claimed attempt carries no claim", c.Name)
		require.Equal(t, tk.Attempts[0].TokenHash, domain.TokenHash(c.Token), "%s carries the token the claim returned", c.Name)
	}

	ck := commands(ids["checkpoint"])
	require.Equal(t, []string{"task.claim", "task.checkpoint", "task.succeed"}, commandNames(ck), "a checkpoint claims first")
	for _, c := range ck[1:] {
		require.NotEmpty(t, c.Token, c.Name)
		require.Nil(t, c.Claim, c.Name)
	}

	wt := commands(ids["wait"])
	require.Equal(t, []string{"task.claim", "task.wait", "task.signal", "task.succeed"}, commandNames(wt),
		"a wait claims first; the resumed attempt's report carries its claim")
	require.NotEmpty(t, wt[1].Token)
	require.NotNil(t, wt[3].Claim)
	require.Equal(t, 2, wt[3].Attempt)

	cancelled := commands(ids["cancel"])
	require.NotContains(t, commandNames(cancelled), "task.claim", "the cancelled job ran unclaimed")
	require.Contains(t, commandNames(cancelled), "task.fail", "its report was sent, carrying its claim")
	for _, c := range cancelled {
		if c.Name == "task.fail" {
			require.NotNil(t, c.Claim)
		}
	}

	var claims []string
	for _, c := range commands(ids["taken"]) {
		require.NotContains(t, []string{"task.succeed", "task.fail", "task.checkpoint"}, c.Name,
			"a job whose lazy claim was refused reports nothing")
		if c.Name == "task.claim" {
			claims = append(claims, c.Executor)
		}
	}
	require.GreaterOrEqual(t, len(claims), 2, "claims: %v", claims)
	require.Equal(t, []string{"other", "py-lazy"}, claims[:2], "the other claim, then the job's at its first heartbeat")

	var fresh, stale []string
	for _, c := range commands(ids["hung"]) {
		switch {
		case c.Name == "task.claim" && c.Executor == "py-fresh", c.Name == "task.succeed" && c.Token != "":
			fresh = append(fresh, c.Name)
		case c.Claim != nil:
			require.Equal(t, "py-stale", c.Claim.Executor)
			stale = append(stale, c.Name)
		}
	}
	require.Equal(t, []string{"task.claim", "task.succeed"}, fresh, "the redelivered item was claimed first")
	require.Equal(t, []string{"task.succeed"}, stale, "the hung job's report carried its claim")
	hung := k.Task(t, ids["hung"])
	require.Len(t, hung.Attempts, 1)
	require.Equal(t, "py-fresh", hung.Attempts[0].Executor)
	t.Logf("scenarios: %s", fmt.Sprint(ids))
}

// TestPythonJobCommandsCarryTheTrace runs executors/python/tests/live_trace.py
// against the service traced into an in-memory exporter: a client's
// commands carry the trace of its TRACEPARENT environment or of its
// traceparent argument; the work item carries it on, and every command of
// the job (its claim, heartbeats, checkpoint and report) carries the item's
// traceparent, so that the service's spans of them join the trace.
func TestPythonJobCommandsCarryTheTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the service and python3")
	}
	py := pythonSDK(t)
	tp, exp := servicetest.Tracing(t)
	s, member := pythonService(t, handlers.Config{Tracer: tp})
	commands := watchCommands(t, s.Conn)
	const (
		fromEnv  = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		explicit = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	)
	out := runPythonScript(t, py, "live_trace.py", "DWR_SERVER="+s.URL,
		"DWR_CREDS="+member("py-caller", domain.RoleClient), "DWR_EXECUTOR_CREDS="+member("py-trace", domain.RoleExecutor, "pyt"),
		"TRACEPARENT="+fromEnv, "TRACE_EXPLICIT="+explicit)
	require.Contains(t, out, "live trace: ok")
	ids := scenarioTasks(t, out)

	for name, parent := range map[string]string{"env": fromEnv, "explicit": explicit} {
		traceID := strings.Split(parent, "-")[1]
		sent := commands(ids[name])
		want := []string{"task.claim", "task.checkpoint", "task.succeed"}
		if name == "explicit" {
			want = []string{"task.claim", "task.heartbeat", "task.checkpoint", "task.succeed"}
		}
		names := commandNames(sent)
		for _, n := range want {
			require.Contains(t, names, n, "%s: %v", name, names)
		}
		for _, c := range sent {
			f := strings.Split(c.Traceparent, "-")
			require.Len(t, f, 4, "%s: %s carries a traceparent: %q", name, c.Name, c.Traceparent)
			require.Equal(t, traceID, f[1], "%s: %s carries the job's trace", name, c.Name)
		}
		// The service's spans of the job's commands are in the trace the
		// client's task.create began.
		var spans []string
		for _, sp := range exp.GetSpans() {
			if sp.SpanContext.TraceID().String() == traceID {
				spans = append(spans, sp.Name)
			}
		}
		for _, n := range append([]string{"dwr.command task.create", "dwr.dispatch pyt"}, prefixed("dwr.command ", want)...) {
			require.Contains(t, spans, n, "%s: spans of the trace: %v", name, spans)
		}
	}
}

func prefixed(p string, xs []string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = p + x
	}
	return out
}
