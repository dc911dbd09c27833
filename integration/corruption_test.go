package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// corruptionBase is a stopped `dwr serve`'s data directory with some work
// in it, and what its clients were told.
type corruptionBase struct {
	data    string
	cmds    []*cmdResult // every acknowledged command, in order
	tasks   []string     // task ids, in the order they were created
	goals   []string
	lastSeq uint64
	state   string // the served state: goals, tasks and each acknowledged command's outcome
}

// buildCorruptionBase runs `dwr serve`, creates goals with small plans,
// claims and completes some tasks, and stops it gracefully.
func buildCorruptionBase(t *testing.T, bin string, logs *syncBuffer) *corruptionBase {
	t.Helper()
	b := &corruptionBase{data: filepath.Join(t.TempDir(), "base")}
	port := freePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	srv := startServer(t, bin, logs, "base", "serve", "--data", b.data, "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--http", "")
	waitReady(t, srv, url, 60*time.Second)
	c := dial(t, url, "corruption-base", 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n := 0
	do := func(name string, body any) *cmdResult {
		n++
		r := c.do(ctx, name, body, fmt.Sprintf("sc-%03d", n))
		require.Equal(t, acked, r.Outcome, "%s: %v", name, r.Err)
		b.cmds = append(b.cmds, r)
		return r
	}
	for g := range 4 {
		goal := do("goal.create", map[string]any{"title": fmt.Sprintf("storage goal %d", g)}).reply().ID
		b.goals = append(b.goals, goal)
		plan := do("plan.submit", map[string]any{"goal_id": goal, "tasks": []map[string]any{
			{"key": "a", "queue": "q", "input": map[string]any{"g": g}},
			{"key": "b", "queue": "q", "depends_on": []string{"a"}},
		}}).reply()
		for _, pt := range plan.Tasks {
			b.tasks = append(b.tasks, pt.TaskID)
		}
		if g%2 == 0 {
			claim := do("task.claim", map[string]any{"task_id": plan.Tasks[0].TaskID, "executor": "x"}).reply()
			do("task.succeed", map[string]any{"task_id": plan.Tasks[0].TaskID, "attempt": claim.Attempt, "token": claim.Token, "result": map[string]any{"ok": g}})
		}
	}
	b.lastSeq = b.cmds[len(b.cmds)-1].Seq
	b.state = servedState(t, c, b)
	require.NoError(t, srv.terminate(30*time.Second))
	return b
}

// servedState renders what the service serves of the base's work: every
// goal and task, and each acknowledged command's first outcome, as the views
// hold them.
func servedState(t *testing.T, c *client, b *corruptionBase) string {
	t.Helper()
	var out strings.Builder
	var goals, tasks json.RawMessage
	require.NoError(t, c.query("goal.list", schemas.Query{}, b.lastSeq, &goals))
	require.NoError(t, c.query("task.list", schemas.Query{}, b.lastSeq, &tasks))
	fmt.Fprintf(&out, "goals %s\ntasks %s\n", goals, tasks)
	for _, r := range b.cmds {
		var o projections.CommandOutcome
		if err := c.query("command.get", schemas.Query{ID: r.ID}, 0, &o); err != nil {
			fmt.Fprintf(&out, "%s: %v\n", r.ID, err)
			continue
		}
		fmt.Fprintf(&out, "%s: seq %d %s\n", r.ID, o.Seq, o.Reply)
	}
	return out.String()
}

// blockFile returns the largest block file of the log stream in data (the
// stream's directory is found by glob: the account directory may change).
func blockFile(t *testing.T, data string) string {
	t.Helper()
	blks, err := filepath.Glob(filepath.Join(data, "nats", "jetstream", "*", "streams", "DWR_LOG", "msgs", "*.blk"))
	require.NoError(t, err)
	require.NotEmpty(t, blks, "no block file of DWR_LOG under %s", data)
	slices.SortFunc(blks, func(a, b string) int { return int(fileSize(t, b) - fileSize(t, a)) })
	return blks[0]
}

func fileSize(t *testing.T, f string) int64 {
	st, err := os.Stat(f)
	require.NoError(t, err)
	return st.Size()
}

func flipAt(t *testing.T, file string, at func(b []byte) int) {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	i := at(b)
	require.True(t, i >= 0 && i < len(b), "offset %d of %d", i, len(b))
	b[i] ^= 0x01
	require.NoError(t, os.WriteFile(file, b, 0o600)) //nolint:gosec // a file of the test's own temp dir
}

// setMaxMsgs sets the log stream's MaxMsgs, as anyone with JetStream API
// access can.
func setMaxMsgs(t *testing.T, data string, n int64) {
	t.Helper()
	servicetest.OnStopped(t, data, func(ctx context.Context, js jetstream.JetStream) {
		s, err := js.Stream(ctx, "DWR_LOG")
		require.NoError(t, err)
		cfg := s.CachedInfo().Config
		cfg.MaxMsgs = n
		_, err = js.UpdateStream(ctx, cfg)
		require.NoError(t, err)
	})
}

// corruptionFault is one fault injected into a stopped service's data.
type corruptionFault struct {
	name    string
	views   bool // a fault of the views: the start must rebuild them and serve the same state
	inject  func(t *testing.T, b *corruptionBase, data string)
	restore func(t *testing.T, data string) // what the operator does before accepting, if anything
}

func corruptionFaults() []corruptionFault {
	return []corruptionFault{
		{name: "flip a byte in the middle of the log's block file", inject: func(t *testing.T, _ *corruptionBase, data string) {
			flipAt(t, blockFile(t, data), func(b []byte) int { return len(b) / 2 })
		}},
		{name: "flip a byte in the record of a task's first event", inject: func(t *testing.T, b *corruptionBase, data string) {
			task := b.tasks[len(b.tasks)/2]
			flipAt(t, blockFile(t, data), func(blk []byte) int {
				i := bytes.Index(blk, []byte(`"agg_id":"`+task+`","ver":1,`))
				require.GreaterOrEqual(t, i, 0, "task %s's first event is in the block", task)
				return i + len(`"agg_id":"`) + 5 // inside the task id
			})
		}},
		{name: "flip a byte in the last record", inject: func(t *testing.T, _ *corruptionBase, data string) {
			flipAt(t, blockFile(t, data), func(b []byte) int {
				i := bytes.LastIndex(b, []byte(`"mac":"`))
				require.Greater(t, i, 0)
				return i + 20 // inside the last record's MAC
			})
		}},
		{name: "truncate the log's block file", inject: func(t *testing.T, _ *corruptionBase, data string) {
			f := blockFile(t, data)
			require.NoError(t, os.Truncate(f, fileSize(t, f)*2/3))
		}},
		{name: "flip bytes in the views' tables", views: true, inject: func(t *testing.T, _ *corruptionBase, data string) {
			tables, err := filepath.Glob(filepath.Join(data, "views", "*.sst"))
			require.NoError(t, err)
			require.NotEmpty(t, tables, "the views were flushed when dwr serve stopped")
			for _, f := range tables {
				flipAt(t, f, func(b []byte) int { return len(b) / 2 })
				flipAt(t, f, func(b []byte) int { return len(b) / 3 })
			}
		}},
		{name: "delete the views", views: true, inject: func(t *testing.T, _ *corruptionBase, data string) {
			require.NoError(t, os.RemoveAll(filepath.Join(data, "views")))
		}},
		{name: "set MaxMsgs on the log stream", inject: func(t *testing.T, _ *corruptionBase, data string) {
			setMaxMsgs(t, data, 3)
		}, restore: func(t *testing.T, data string) { setMaxMsgs(t, data, -1) }},
		{name: "set MaxMsgs, then unlimited again", inject: func(t *testing.T, _ *corruptionBase, data string) {
			setMaxMsgs(t, data, 3)  // JetStream drops the oldest records at once
			setMaxMsgs(t, data, -1) // and the configuration looks as declared again
		}},
		{name: "publish a forged, well chained record on the log subject", inject: func(t *testing.T, _ *corruptionBase, data string) {
			forger, err := eventstore.NewLogKey(bytes.Repeat([]byte("f"), eventstore.LogKeySize))
			require.NoError(t, err)
			servicetest.OnStopped(t, data, func(ctx context.Context, js jetstream.JetStream) { servicetest.Forge(t, ctx, js, forger, "") })
		}},
		{name: "publish a copy of a genuine record on the log subject", inject: func(t *testing.T, _ *corruptionBase, data string) {
			servicetest.OnStopped(t, data, func(ctx context.Context, js jetstream.JetStream) {
				s, err := js.Stream(ctx, "DWR_LOG")
				require.NoError(t, err)
				m, err := s.GetMsg(ctx, 3)
				require.NoError(t, err)
				_, err = js.Publish(ctx, "dwr.log.0", m.Data)
				require.NoError(t, err)
			})
		}},
	}
}

// startOutcome is how a start on damaged data ended.
type startOutcome struct {
	ready  bool
	exit   int    // the exit code when it did not become ready
	output string // what it printed
	state  string // what it served, when ready
	lost   []string
}

// startOn starts `dwr serve args...` on data and waits until it is ready or
// exits. When ready it reads the served state and stops it.
func startOn(t *testing.T, bin string, b *corruptionBase, data, label string, args ...string) startOutcome {
	t.Helper()
	out := logOnFailure(t, label)
	port := freePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	p := startServer(t, bin, out, label, append([]string{"serve", "--data", data, "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--http", ""}, args...)...)
	creds.Store(url, credsOf([]string{"serve", "--data", data}))
	ready := pollReady(p, url, 60*time.Second)
	o := startOutcome{ready: ready}
	if ready {
		c := dial(t, url, label, 5*time.Second)
		o.state = servedState(t, c, b)
		c.nc.Close()
		require.NoError(t, p.terminate(30*time.Second))
	} else {
		var ee *exec.ExitError
		if errors.As(p.err, &ee) {
			o.exit = ee.ExitCode()
		}
	}
	o.output = out.String()
	for _, m := range regexp.MustCompile(`msg="handlers: acknowledged command lost" command=("[^"]*"|\S+)`).FindAllStringSubmatch(o.output, -1) {
		o.lost = append(o.lost, strings.Trim(m[1], `"`))
	}
	return o
}

// pollReady is waitReady for a start that may end: it reports whether the
// service became ready (false once the process exited).
func pollReady(p *serverProc, url string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		if p.exited() {
			return false
		}
		if c, err := dialQuick(url); err == nil {
			resp, err := c.Request("dwr.q.default.workspace.list", nil, 500*time.Millisecond)
			c.Close()
			var r schemas.Reply
			if err == nil && json.Unmarshal(resp.Data, &r) == nil && r.OK {
				return true
			}
		}
		<-tick.C
	}
	return false
}

// TestStorageCorruption is RELIABILITY.md's storage corruption test: one
// fault per case in a stopped service's data (bytes flipped or cut in the
// log's block file, a record's first event, the last record, the views'
// tables, the views deleted, the log stream's retention changed, forged and
// copied records published on the log subject). Each start must refuse
// naming the damage, or (views) rebuild and serve exactly the acknowledged
// state; nothing may be served that lost an acknowledged command silently.
// A refused start is then run with --accept-verified-prefix: it must serve
// every acknowledged command or name it as lost.
func TestStorageCorruption(t *testing.T) {
	bin := dwrBinary(t)
	logs := logOnFailure(t, "base dwr serve output")
	base := buildCorruptionBase(t, bin, logs)
	var injected, detected, silent, unnamed int
	for _, f := range corruptionFaults() {
		t.Run(f.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			require.NoError(t, os.CopyFS(data, os.DirFS(base.data)))
			f.inject(t, base, data)
			injected++
			o := startOn(t, bin, base, data, "start after: "+f.name)
			switch {
			case f.views && o.ready && o.state == base.state &&
				(strings.Contains(o.output, "views are damaged") || strings.Contains(o.output, "views are empty")):
				detected++
				t.Logf("detected: the views were rebuilt and serve the acknowledged state")
			case !f.views && !o.ready && o.exit == exitDamagedCode && namesDamage(o.output):
				detected++
				t.Logf("detected: %s", firstLine(o.output, "dwr: "))
			case o.ready && o.state != base.state:
				silent++
				t.Errorf("SILENT LOSS: the service started and serves another state:\n%s", diffLines(base.state, o.state))
			default:
				t.Errorf("not detected as required (ready=%v exit=%d):\n%s", o.ready, o.exit, o.output)
			}
			if f.views || o.ready {
				return
			}
			// dwr admin verify names it too, and changes nothing.
			vout, verr := exec.Command(bin, "admin", "verify", "--data", data).CombinedOutput()
			var ee *exec.ExitError
			require.ErrorAs(t, verr, &ee, "dwr admin verify fails:\n%s", vout)
			require.Equal(t, exitDamagedCode, ee.ExitCode(), "%s", vout)
			require.Regexp(t, `result\s+FAILED`, string(vout))
			if f.restore != nil {
				// The operator restores the stream's configuration (dwr never
				// does): what the change cost stays detected.
				f.restore(t, data)
				o = startOn(t, bin, base, data, "start after restoring: "+f.name)
				if o.ready {
					require.Equal(t, base.state, o.state, "SILENT LOSS after restoring the configuration")
					return // nothing was lost
				}
				require.Equal(t, exitDamagedCode, o.exit, o.output)
				require.True(t, namesDamage(o.output), o.output)
			}
			// The operator accepts the verified prefix: every acknowledged
			// command is served or named as lost.
			a := startOn(t, bin, base, data, "accept after: "+f.name, "--accept-verified-prefix")
			require.True(t, a.ready, "a start accepting the verified prefix serves:\n%s", a.output)
			n := unnamedLosses(base, a)
			unnamed += n
			require.Zero(t, n, "acknowledged commands neither served nor named lost")
			t.Logf("accepted the verified prefix: %d of %d acknowledged commands named lost", len(a.lost), len(base.cmds))
			again := startOn(t, bin, base, data, "restart after accepting: "+f.name)
			require.True(t, again.ready, "after the acceptance the log verifies:\n%s", again.output)
			require.Equal(t, a.state, again.state)
		})
	}
	fmt.Printf("storage corruption: detected %d / injected %d, silent loss %d, unnamed losses after accepting %d\n",
		detected, injected, silent, unnamed)
	require.Zero(t, silent, "silent loss")
	require.Equal(t, injected, detected, "every fault detected")
}

// exitDamagedCode is dwr's exit code for a log that fails verification.
const exitDamagedCode = 6

func namesDamage(out string) bool {
	return strings.Contains(out, "log damaged") || strings.Contains(out, "stream DWR_LOG is not configured")
}

// unnamedLosses counts the acknowledged commands that a start accepting the
// verified prefix neither serves with their first outcome nor names lost.
func unnamedLosses(b *corruptionBase, a startOutcome) int {
	served := map[string]string{}
	for _, line := range strings.Split(a.state, "\n") {
		if id, rest, ok := strings.Cut(line, ": "); ok && strings.HasPrefix(id, "sc-") {
			served[id] = rest
		}
	}
	want := map[string]string{}
	for _, line := range strings.Split(b.state, "\n") {
		if id, rest, ok := strings.Cut(line, ": "); ok && strings.HasPrefix(id, "sc-") {
			want[id] = rest
		}
	}
	n := 0
	for _, r := range b.cmds {
		if served[r.ID] == want[r.ID] || slices.Contains(a.lost, eventstore.CommandName("default", r.Actor, r.ID)) {
			continue
		}
		n++
	}
	return n
}

func firstLine(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

func diffLines(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out []string
	for i := range max(len(al), len(bl)) {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			out = append(out, fmt.Sprintf("- %.200s\n+ %.200s", x, y))
		}
	}
	return strings.Join(out, "\n")
}

// dialQuick connects to url once, without retrying.
// dialQuick connects once to url, as the admin of the service behind it.
func dialQuick(url string) (*nats.Conn, error) {
	var opts []nats.Option
	if v, ok := creds.Load(url); ok && v.(string) != "" {
		o, err := executors.Credentials(v.(string))
		if err != nil {
			return nil, err
		}
		opts = o
	}
	return nats.Connect(url, append(opts, nats.Timeout(500*time.Millisecond), nats.NoReconnect())...)
}
