package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// execEnv is a running `dwr serve` for the executor tests, with the helpers
// to start workers on it and to watch tasks.
type execEnv struct {
	t    *testing.T
	bin  string
	data string
	port int
	url  string
	logs *syncBuffer
	srv  *serverProc
	c    *client
	k    *servicetest.Client // the kit's client on c's connection
}

func newExecEnv(t *testing.T) *execEnv {
	t.Helper()
	e := &execEnv{t: t, bin: dwrBinary(t), data: filepath.Join(t.TempDir(), "data"), port: freePort(t), logs: logOnFailure(t, "dwr serve and worker output")}
	e.url = fmt.Sprintf("nats://127.0.0.1:%d", e.port)
	e.startServe()
	e.c = dial(t, e.url, "executor-test", 10*time.Second)
	e.k = servicetest.NewClient(e.c.nc, e.c.ws)
	return e
}

// adminCreds is the admin credential `dwr serve` made in its data directory.
func (e *execEnv) adminCreds() string { return filepath.Join(e.data, "admin.creds") }

// executorCreds adds an executor of queue (once) and returns its credential:
// workers run as executors, with only an executor's rights.
func (e *execEnv) executorCreds(label, queue string) string {
	e.t.Helper()
	name := label + "-" + queue
	path := filepath.Join(filepath.Dir(e.data), name+".creds")
	if _, err := os.Stat(path); err == nil {
		return path
	}
	e.cli("users", "add", name, "--role", "executor", "--queue", queue, "--out", path, "--force")
	return path
}

func (e *execEnv) startServe() {
	e.srv = startServer(e.t, e.bin, e.logs, "dwr serve", "serve", "--data", e.data, "--listen", fmt.Sprintf("127.0.0.1:%d", e.port), "--http", "")
	waitReady(e.t, e.srv, e.url, 30*time.Second)
}

// worker starts `dwr worker` on queue running script, with extra environment.
func (e *execEnv) worker(label, queue string, lease time.Duration, maxDeliver int, script string, env ...string) *serverProc {
	e.t.Helper()
	abs, err := filepath.Abs(filepath.Join("testdata", script))
	require.NoError(e.t, err)
	args := []string{"--server", e.url, "--creds", e.executorCreds(label, queue), "worker", "--queue", queue, "--lease", lease.String(),
		"--max-deliver", fmt.Sprint(maxDeliver), "--executor", label, "--", abs}
	return startProc(e.t, e, "worker "+label, e.bin, args, env)
}

func (e *execEnv) history(id string) []string {
	e.t.Helper()
	var evs []json.RawMessage
	require.NoError(e.t, e.c.query("events", schemas.Query{ID: id}, 0, &evs))
	types := make([]string, len(evs))
	for i, raw := range evs {
		var ev struct{ Type string }
		require.NoError(e.t, json.Unmarshal(raw, &ev))
		types[i] = ev.Type
	}
	return types
}

func count(xs []string, x string) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}

// effectAPI is an external API that deduplicates by operation key, as a
// payment provider would: every call is counted, the effect applied once per key.
type effectAPI struct {
	mu      sync.Mutex
	calls   map[string]int
	applied map[string]int
}

func newEffectAPI(t *testing.T) (*effectAPI, string) {
	a := &effectAPI{calls: map[string]int{}, applied: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.Query().Get("key")
		a.mu.Lock()
		a.calls[key]++
		if a.calls[key] == 1 {
			a.applied[key]++
		}
		a.mu.Unlock()
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(srv.Close)
	return a, srv.URL
}

func (a *effectAPI) snapshot() (calls, applied map[string]int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ap := map[string]int{}, map[string]int{}
	for k, v := range a.calls {
		c[k] = v
	}
	for k, v := range a.applied {
		ap[k] = v
	}
	return c, ap
}

// (a) A worker killed mid-task: after its lease another worker runs attempt 2,
// handed the last checkpoint, and the task is accepted once.
func TestExecutorKilledMidTaskIsTakenOver(t *testing.T) {
	e := newExecEnv(t)
	lease := 2 * time.Second
	w1 := e.worker("w1", "steps", lease, 5, "resumable.sh", "HANG_SECONDS=600")
	id := e.k.CreateTask(t, map[string]any{"queue": "steps", "input": map[string]any{"n": 1}})
	e.k.WaitTask(t, id, 20*time.Second, "attempt 1 running with its checkpoint saved", func(t domain.Task) bool {
		return t.State == domain.StateRunning && len(t.Checkpoint) > 0
	})
	killed := time.Now()
	w1.kill9(t)
	e.worker("w2", "steps", lease, 5, "resumable.sh", "HANG_SECONDS=600")
	done := e.k.WaitTask(t, id, 30*time.Second, "accepted", func(t domain.Task) bool { return t.State == domain.StateAccepted })
	require.Len(t, done.Attempts, 2)
	require.Equal(t, domain.AttemptStateAbandoned, done.Attempts[0].State)
	require.Equal(t, domain.AttemptStateSucceeded, done.Attempts[1].State)
	require.Equal(t, "w2", done.Attempts[1].Executor)
	var res struct {
		Attempt     int             `json:"attempt"`
		ResumedFrom json.RawMessage `json:"resumed_from"`
	}
	require.NoError(t, json.Unmarshal(done.Attempts[1].Result, &res))
	require.JSONEq(t, `{"step":1,"by_attempt":1}`, string(res.ResumedFrom), "attempt 2 was handed attempt 1's checkpoint")
	require.Equal(t, 1, count(e.history(id), "task.accepted"))
	t.Logf("executor kill: attempt 2 started %s after the kill (lease %s)", done.Attempts[1].StartedAt.Sub(killed).Round(time.Millisecond), lease)
}

// A worker killed by kill -9 takes its command with it (Linux's
// parent-death signal): the command cannot go on beside the attempt another
// worker starts after the lease.
func TestKilledWorkersCommandDiesWithIt(t *testing.T) {
	e := newExecEnv(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	w := e.worker("w1", "orphans", 30*time.Second, 5, "orphan.sh", "PID_FILE="+pidFile)
	e.k.CreateTask(t, map[string]any{"queue": "orphans"})
	var pid int
	require.True(t, servicetest.Within(20*time.Second, func() bool {
		b, err := os.ReadFile(pidFile) //nolint:gosec // the test's own file
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}), "the command started and wrote its pid")
	require.True(t, processAlive(pid), "the command runs")
	w.kill9(t)
	require.True(t, servicetest.Within(10*time.Second, func() bool { return !processAlive(pid) }),
		"the command (pid %d) outlived its worker", pid)
}

// processAlive reports whether process pid exists and is not a zombie.
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

// (b) A worker stopped past its lease: attempt 2 completes elsewhere; when the
// stopped one resumes, its report is refused, and the external API saw the
// operation key's effect applied once.
func TestZombieExecutorIsFencedOff(t *testing.T) {
	e := newExecEnv(t)
	api, apiURL := newEffectAPI(t)
	lease := 2 * time.Second
	zombie := e.worker("zombie", "pay", lease, 5, "resumable.sh", "EFFECT_URL="+apiURL, "HANG_SECONDS=4")
	id := e.k.CreateTask(t, map[string]any{"queue": "pay"})
	key := domain.OperationKey(id)
	e.k.WaitTask(t, id, 20*time.Second, "attempt 1 made its call", func(domain.Task) bool {
		calls, _ := api.snapshot()
		return calls[key] == 1
	})
	zombie.signal(syscall.SIGSTOP)
	e.worker("healthy", "pay", lease, 5, "resumable.sh", "EFFECT_URL="+apiURL)
	done := e.k.WaitTask(t, id, 30*time.Second, "accepted by attempt 2", func(t domain.Task) bool { return t.State == domain.StateAccepted })
	require.Equal(t, "healthy", done.Attempts[len(done.Attempts)-1].Executor)
	before := e.history(id)

	zombie.signal(syscall.SIGCONT)
	// The zombie's job finishes and reports for attempt 1: it must be refused.
	refusal := "task=" + id + " attempt=1 outcome=refused"
	require.True(t, servicetest.Within(20*time.Second, func() bool { return strings.Contains(e.logs.String(), refusal) }),
		"the zombie's report for attempt 1 was refused")
	after := e.k.Task(t, id)
	require.Equal(t, domain.StateAccepted, after.State)
	// The zombie was stopped right after its call: with its attempt claimed
	// (its checkpoint or its first heartbeat moment came first), which the
	// healthy worker's attempt 2 superseded; or before it claimed at all
	// (the lazy claim), when the healthy worker claimed attempt 1 itself
	// and the zombie's report, carrying its claim, found attempt 1 taken.
	for _, a := range after.Attempts {
		if a.Executor == "zombie" {
			require.Equal(t, domain.AttemptStateAbandoned, a.State, "the zombie's attempt stays abandoned")
		}
	}
	succeeded := 0
	for _, a := range after.Attempts {
		if a.State == domain.AttemptStateSucceeded {
			succeeded++
			require.Equal(t, "healthy", a.Executor)
		}
	}
	require.Equal(t, 1, succeeded, "one attempt succeeded: the healthy worker's")
	require.Equal(t, before, e.history(id), "the stale report appended nothing")
	calls, applied := api.snapshot()
	require.Equal(t, 1, applied[key], "the effect was applied once for its operation key")
	t.Logf("zombie: calls=%d applied=%d for %s", calls[key], applied[key], key)
}

// (c) Retries with backoff ride out a kill -9 of dwr serve: the backoff timer
// fires after the restart, never early, and the task is accepted once.
func TestRetriesWithBackoffSurviveAServerCrash(t *testing.T) {
	e := newExecEnv(t)
	e.worker("w", "flaky", 5*time.Second, 5, "flaky.sh", "SUCCEED_ON=3")
	backoff := 3 * time.Second
	id := e.k.CreateTask(t, map[string]any{"queue": "flaky",
		"retry": map[string]any{"max_attempts": 3, "initial_backoff": backoff.String(), "multiplier": 1}})
	e.k.WaitTask(t, id, 20*time.Second, "attempt 1 failed, in backoff", func(t domain.Task) bool { return t.State == domain.StateBackoff })
	e.srv.kill9(t)
	e.startServe()
	done := e.k.WaitTask(t, id, 40*time.Second, "accepted", func(t domain.Task) bool { return t.State == domain.StateAccepted })
	require.Len(t, done.Attempts, 3)
	for i := 1; i < len(done.Attempts); i++ {
		prev, next := done.Attempts[i-1], done.Attempts[i]
		require.NotNil(t, prev.EndedAt)
		require.False(t, next.StartedAt.Before(prev.EndedAt.Add(backoff)), "attempt %d started %s after attempt %d ended: before its backoff", next.N, next.StartedAt.Sub(*prev.EndedAt), prev.N)
	}
	require.Equal(t, 1, count(e.history(id), "task.accepted"))
}

// (d) Cancelling a running task reaches its process within a second or so;
// the worker carries on with other work.
func TestCancelReachesTheRunningAttempt(t *testing.T) {
	e := newExecEnv(t)
	stopped := filepath.Join(t.TempDir(), "stopped")
	e.worker("w", "slow", 10*time.Second, 5, "slow.sh", "STOPPED_FILE="+stopped)
	id := e.k.CreateTask(t, map[string]any{"queue": "slow"})
	e.k.WaitTask(t, id, 20*time.Second, "running", func(t domain.Task) bool { return t.State == domain.StateRunning })
	start := time.Now()
	out, err := exec.Command(e.bin, "--server", e.url, "--creds", e.adminCreds(), "task", "cancel", id, "--reason", "no longer needed").CombinedOutput()
	require.NoError(t, err, string(out))
	require.True(t, servicetest.Within(10*time.Second, func() bool {
		b, _ := os.ReadFile(stopped)
		return strings.Contains(string(b), id)
	}), "the running command was not stopped")
	reached := time.Since(start)
	t.Logf("cancel reached the running command in %s", reached.Round(time.Millisecond))
	require.Less(t, reached, 3*time.Second)
	got := e.k.Task(t, id)
	require.Equal(t, domain.StateCancelled, got.State)
	require.Equal(t, domain.AttemptStateCancelled, got.Attempts[0].State)
	next := e.k.CreateTask(t, map[string]any{"queue": "slow", "input": "fast"})
	e.k.WaitTask(t, next, 20*time.Second, "the next task accepted", func(t domain.Task) bool { return t.State == domain.StateAccepted })
}

// (e) A poison work item (its executor crashes every time) is quarantined,
// its task fails with the reason, and the queue keeps flowing.
func TestPoisonJobIsQuarantined(t *testing.T) {
	e := newExecEnv(t)
	// A supervisor restarts the worker whenever the poison kills it.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	restarts := 0
	wg.Go(func() {
		for ctx.Err() == nil {
			w := e.worker(fmt.Sprintf("w%d", restarts), "risky", time.Second, 2, "poison.sh")
			select {
			case <-w.done:
				restarts++
			case <-ctx.Done():
				return
			}
		}
	})
	bad := e.k.CreateTask(t, map[string]any{"queue": "risky", "input": "poison"})
	failed := e.k.WaitTask(t, bad, 60*time.Second, "quarantined", func(t domain.Task) bool { return t.State == domain.StateFailed })
	require.Equal(t, domain.ReasonQuarantined, failed.Reason)
	require.NotNil(t, failed.Error)
	t.Logf("poison: quarantined after %d worker crashes: %s", restarts, failed.Error.Message)
	good := e.k.CreateTask(t, map[string]any{"queue": "risky", "input": "fine"})
	e.k.WaitTask(t, good, 30*time.Second, "the next task accepted", func(t domain.Task) bool { return t.State == domain.StateAccepted })
}
