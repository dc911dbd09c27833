package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/embedded"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// bundle is what setup returns: a running service on a real embedded NATS
// server and a real Pebble store, and a client connection.
type bundle struct {
	dir   string
	srv   *embedded.Server
	nc    *nats.Conn // an admin's connection: the service is closed, as dwr serve runs it
	svcNC *nats.Conn // the service's own connection, for a look at its streams
	store *projections.Store
	svc   *handlers.Service
	stop  func()
	st    *servicetest.Service
	peers map[string]*peer    // members by name, made by peer
	c     *servicetest.Client // the kit's client on nc
}

// start starts the service, closed as dwr serve runs it, on data directory
// dir (a fresh one when empty), writing the JetStream log on the embedded
// server: for the tests of storage and restarts.
func start(t *testing.T, dir string) *bundle {
	t.Helper()
	return bundleOf(servicetest.Start(t, dir, servicetest.Options{Secure: true, Config: handlers.Config{WriterID: "test-writer"}}))
}

func bundleOf(st *servicetest.Service) *bundle {
	return &bundle{dir: st.Dir, srv: st.Server, nc: st.Admin, svcNC: st.Conn, store: st.Store, svc: st.Svc, stop: st.Stop, st: st,
		c: st.Client("default")}
}

// testLogger discards the service's logs unless DWR_TEST_LOG is set.
func testLogger() *slog.Logger { return servicetest.Logger() }

// setup starts the closed service on a fresh directory writing an
// in-memory log: the work items, the event feed and the lease are on the
// real embedded server, only the log is not. For the tests that do not test
// storage; a test that restarts the service or looks at the log's stream
// uses setupJetStream.
func setup(t *testing.T) *bundle {
	t.Helper()
	return bundleOf(servicetest.Start(t, "", servicetest.Options{Secure: true, Log: eventstore.NewMemoryLog(),
		Config: handlers.Config{WriterID: "test-writer"}}))
}

// setupJetStream is start on a fresh directory: the JetStream log.
func setupJetStream(t *testing.T) *bundle { return start(t, t.TempDir()) }

func (b *bundle) request(t *testing.T, subject string, body any, hdr nats.Header) schemas.Reply {
	t.Helper()
	return b.c.Request(t, subject, body, hdr)
}

// claimed holds the tokens the tests' claims returned, by task/attempt
// (task ids are unique: it outlives the restarts of a test's service).
var claimed sync.Map

// attemptCommands are the commands an attempt sends with its token.
var attemptCommands = map[string]bool{"task.checkpoint": true, "task.succeed": true, "task.fail": true,
	"task.wait": true, "task.request_approval": true, "task.heartbeat": true, "task.delegate": true}

// withToken returns body with the token of its attempt, as an executor
// sends it, when body is an attempt's command without one.
func withToken(name string, body any) any {
	m, ok := body.(map[string]any)
	if !ok || !attemptCommands[name] {
		return body
	}
	if _, has := m["token"]; has {
		return body
	}
	if _, lazy := m["claim"]; lazy { // the lazy claim: a report that starts its attempt carries no token
		return body
	}
	tok, _ := claimed.Load(fmt.Sprintf("%v/%v", m["task_id"], m["attempt"]))
	out := map[string]any{"token": tok}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// remember keeps the token a claim's reply carries.
func remember(name string, r schemas.Reply) {
	if name != "task.claim" || !r.OK {
		return
	}
	var rep domain.Reply
	if json.Unmarshal(r.Result, &rep) == nil && rep.Token != "" {
		claimed.Store(fmt.Sprintf("%s/%d", rep.ID, rep.Attempt), rep.Token)
	}
}

// command sends a command as an executor would: an attempt's command
// carries the token its claim returned unless body has one.
func (b *bundle) command(t *testing.T, name string, body any, cmdID string) schemas.Reply {
	h := nats.Header{}
	if cmdID != "" {
		h.Set(schemas.HeaderCommandID, cmdID)
	}
	r := b.request(t, "dwr.cmd.default."+name, withToken(name, body), h)
	remember(name, r)
	return r
}

func (b *bundle) mustCommand(t *testing.T, name string, body any) (domain.Reply, uint64) {
	t.Helper()
	r := b.command(t, name, body, "")
	require.True(t, r.OK, "%s: %+v", name, r.Error)
	var rep domain.Reply
	require.NoError(t, json.Unmarshal(r.Result, &rep))
	return rep, r.Seq
}

func (b *bundle) query(t *testing.T, name string, q schemas.Query, minSeq uint64, out any) {
	t.Helper()
	h := nats.Header{}
	if minSeq > 0 {
		h.Set(schemas.HeaderMinSeq, fmt.Sprint(minSeq))
	}
	r := b.request(t, "dwr.q.default."+name, q, h)
	require.True(t, r.OK, "%s: %+v", name, r.Error)
	require.NoError(t, json.Unmarshal(r.Result, out))
}

// get reads what the get query name answers for id (a task, a goal, an
// approval, ...), at whatever position of the log the views are.
func get[T any](t *testing.T, b *bundle, name, id string) T {
	t.Helper()
	var v T
	b.query(t, name, schemas.Query{ID: id}, 0, &v)
	return v
}

func (b *bundle) jetstream(t *testing.T) jetstream.JetStream {
	js, err := jetstream.New(b.svcNC)
	require.NoError(t, err)
	return js
}

// tryCommand sends a command and returns transport errors (no responders,
// timeouts) instead of failing the test.
func (b *bundle) tryCommand(name string, body any, cmdID string) (schemas.Reply, error) {
	m := nats.NewMsg("dwr.cmd.default." + name)
	m.Header.Set(schemas.HeaderCommandID, cmdID)
	m.Data, _ = json.Marshal(withToken(name, body))
	resp, err := b.nc.RequestMsg(m, 5*time.Second)
	if err != nil {
		return schemas.Reply{}, err
	}
	var r schemas.Reply
	err = json.Unmarshal(resp.Data, &r)
	remember(name, r)
	return r, err
}

func (b *bundle) lastSeq(t *testing.T) uint64 {
	seq, err := b.svc.Log().LastSeq(context.Background())
	require.NoError(t, err)
	return seq
}

func chain3(t *testing.T, b *bundle) (string, domain.Reply, uint64) {
	t.Helper()
	g, _ := b.mustCommand(t, "goal.create", map[string]any{"title": "ship it"})
	plan, seq := b.mustCommand(t, "plan.submit", map[string]any{"goal_id": g.ID, "tasks": []map[string]any{
		{"key": "a", "queue": "shell", "input": map[string]any{"n": 1}},
		{"key": "b", "queue": "shell", "depends_on": []string{"a"}},
		{"key": "c", "queue": "shell", "depends_on": []string{"b"}},
	}})
	return g.ID, plan, seq
}

func TestPlanRunsInDependencyOrder(t *testing.T) {
	b := setup(t)
	evs := make(chan *nats.Msg, 256)
	sub, err := b.nc.ChanSubscribe("dwr.ev.default.>", evs)
	require.NoError(t, err)
	defer sub.Unsubscribe()

	goalID, plan, seq := chain3(t, b)
	require.Len(t, plan.Tasks, 3)
	var tasks []domain.Task
	b.query(t, "task.list", schemas.Query{GoalID: goalID}, seq, &tasks)
	states := map[string]string{}
	for _, tk := range tasks {
		states[tk.Key] = tk.State
	}
	require.Equal(t, map[string]string{"a": "ready", "b": "pending", "c": "pending"}, states)

	for i, pt := range plan.Tasks {
		claim, _ := b.mustCommand(t, "task.claim", map[string]any{"task_id": pt.TaskID, "executor": "test"})
		require.Equal(t, 1, claim.Attempt)
		require.Equal(t, "op-"+pt.TaskID, claim.Task.Attempts[0].OperationKey)
		done, seq := b.mustCommand(t, "task.succeed", map[string]any{"task_id": pt.TaskID, "attempt": 1, "result": map[string]any{"i": i}})
		require.Equal(t, "accepted", done.State)
		if i+1 < len(plan.Tasks) {
			var next domain.Task
			b.query(t, "task.get", schemas.Query{ID: plan.Tasks[i+1].TaskID}, seq, &next)
			require.Equal(t, "ready", next.State, "the dependent is ready in the same commit")
		}
	}
	var gv projections.GoalView
	b.query(t, "goal.get", schemas.Query{ID: goalID}, b.lastSeq(t), &gv)
	require.Equal(t, domain.GoalStateAchieved, gv.State)
	require.Equal(t, map[string]int{"accepted": 3}, gv.Counts)

	var hist []json.RawMessage
	b.query(t, "events", schemas.Query{ID: plan.Tasks[2].TaskID}, 0, &hist)
	require.Len(t, hist, 5) // created, ready, attempt_started, attempt_succeeded, accepted
	for i, raw := range hist {
		var e struct {
			Ver  uint64 `json:"ver"`
			Type string `json:"type"`
		}
		require.NoError(t, json.Unmarshal(raw, &e))
		require.Equal(t, uint64(i+1), e.Ver)
	}

	// The feed carries every event; the goal's achievement is among them.
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m := <-evs:
			if m.Subject == "dwr.ev.default.goal."+goalID+".achieved" {
				return
			}
		case <-deadline:
			t.Fatal("goal.achieved never reached the feed")
		}
	}
}

func TestBadInputIsRefusedAndAppendsNothing(t *testing.T) {
	b := setup(t)
	g, _ := b.mustCommand(t, "goal.create", map[string]any{"title": "g"})
	before := b.lastSeq(t)
	cases := []struct {
		name, cmd string
		body      any
		code      string
		pointer   string
	}{
		{"unknown dependency", "plan.submit", map[string]any{"goal_id": g.ID, "tasks": []map[string]any{
			{"key": "a", "queue": "q"}, {"key": "b", "queue": "q", "depends_on": []string{"zz"}}}}, "invalid", "/tasks/1/depends_on/0"},
		{"cycle", "plan.submit", map[string]any{"goal_id": g.ID, "tasks": []map[string]any{
			{"key": "a", "queue": "q", "depends_on": []string{"b"}}, {"key": "b", "queue": "q", "depends_on": []string{"a"}}}}, "invalid", ""},
		{"bad queue", "plan.submit", map[string]any{"goal_id": g.ID, "tasks": []map[string]any{{"key": "a", "queue": "Bad Queue"}}}, "invalid", "/tasks/0/queue"},
		{"unknown field", "goal.create", map[string]any{"title": "x", "colour": "red"}, "invalid", ""},
		{"missing title", "goal.create", map[string]any{}, "invalid", ""},
		{"malformed json", "goal.create", []byte(`{"title":`), "invalid", ""},
		{"too deep", "goal.create", bytes.Repeat([]byte("["), 100), "invalid", ""},
		{"too large", "goal.create", bytes.Repeat([]byte(" "), 600<<10), "too_large", ""},
		{"unknown goal", "plan.submit", map[string]any{"goal_id": "01ARZ3NDEKTSV4RRFFQ69G5FAV", "tasks": []map[string]any{{"key": "a", "queue": "q"}}}, "not_found", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := b.command(t, tc.cmd, tc.body, "")
			require.False(t, r.OK)
			require.Equal(t, tc.code, r.Error.Code, r.Error.Message)
			require.NotEmpty(t, r.Error.Message)
			if tc.pointer != "" {
				var ptrs []string
				for _, f := range r.Error.Fields {
					ptrs = append(ptrs, f.Pointer)
				}
				require.Contains(t, ptrs, tc.pointer, r.Error.Message)
			}
		})
	}
	require.Equal(t, before, b.lastSeq(t), "refused commands appended nothing")
}

func TestSameCommandIDAppliesOnce(t *testing.T) {
	b := setupJetStream(t)
	const id = "storm-1"
	var wg sync.WaitGroup
	replies := make([]schemas.Reply, 50)
	for i := range replies {
		wg.Go(func() { replies[i] = b.command(t, "goal.create", map[string]any{"title": "once"}, id) })
	}
	wg.Wait()
	for _, r := range replies {
		require.True(t, r.OK, "%+v", r.Error)
		require.JSONEq(t, string(replies[0].Result), string(r.Result))
		require.Equal(t, replies[0].Seq, r.Seq)
	}
	var goals []projections.GoalView
	b.query(t, "goal.list", schemas.Query{}, b.lastSeq(t), &goals)
	require.Len(t, goals, 1)

	// After a restart the first outcome is still the answer, and nothing is appended.
	dir := b.dir
	b.stop()
	b2 := start(t, dir)
	before := b2.lastSeq(t)
	r := b2.command(t, "goal.create", map[string]any{"title": "once"}, id)
	require.True(t, r.OK)
	require.JSONEq(t, string(replies[0].Result), string(r.Result))
	require.Equal(t, before, b2.lastSeq(t))
}

// A task remembers only its recent command ids (a long-running job's
// checkpoints would otherwise grow it without end); a command sent again
// long after is still answered as it was the first time, and changes
// nothing: the service answers it from its stored outcome.
func TestAnOldCommandSentAgainIsStillADuplicate(t *testing.T) {
	b := setup(t)
	task, _ := b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "q", "timeout": "1h"}})
	b.mustCommand(t, "task.claim", map[string]any{"task_id": task.ID, "executor": "w"})
	checkpoint := func(n int) map[string]any {
		return map[string]any{"task_id": task.ID, "attempt": 1, "checkpoint": map[string]any{"step": n}}
	}
	first := b.command(t, "task.checkpoint", checkpoint(1), "ckpt-1")
	require.True(t, first.OK, "%+v", first.Error)
	for n := 2; n <= 400; n++ {
		r := b.command(t, "task.checkpoint", checkpoint(n), fmt.Sprintf("ckpt-%d", n))
		require.True(t, r.OK, "%+v", r.Error)
	}
	last := b.lastSeq(t)
	var got schemas.Task
	b.query(t, "task.get", schemas.Query{ID: task.ID}, last, &got)
	require.LessOrEqual(t, len(got.Commands), 256, "the task remembers its recent command ids only")
	remembers := func(id string) bool {
		return slices.ContainsFunc(got.Commands, func(k string) bool { return strings.HasSuffix(k, ":"+id) || k == id })
	}
	require.True(t, remembers("ckpt-400"), "the latest command id is remembered: %v", got.Commands[len(got.Commands)-1])
	require.False(t, remembers("ckpt-1"))

	again := b.command(t, "task.checkpoint", checkpoint(1), "ckpt-1")
	require.True(t, again.OK, "%+v", again.Error)
	require.Equal(t, first.Seq, again.Seq, "answered with the first outcome")
	require.JSONEq(t, string(first.Result), string(again.Result))
	require.Equal(t, last, b.lastSeq(t), "nothing is appended")
	b.query(t, "task.get", schemas.Query{ID: task.ID}, 0, &got)
	require.JSONEq(t, `{"step":400}`, string(got.Checkpoint), "the old checkpoint is not applied again")
	other := b.command(t, "task.checkpoint", checkpoint(2), "ckpt-1")
	require.False(t, other.OK, "the id of another command is refused")
}

func TestRestartKeepsStateAndRebuildEqualsLive(t *testing.T) {
	b := setupJetStream(t)
	goalID, plan, _ := chain3(t, b)
	b.mustCommand(t, "task.claim", map[string]any{"task_id": plan.Tasks[0].TaskID, "executor": "x"})
	b.mustCommand(t, "task.fail", map[string]any{"task_id": plan.Tasks[0].TaskID, "attempt": 1,
		"error": map[string]any{"message": "flaky"}, "retryable": true})
	dir := b.dir
	b.stop()

	b2 := start(t, dir)
	var gv projections.GoalView
	b2.query(t, "goal.get", schemas.Query{ID: goalID}, 0, &gv)
	require.Equal(t, map[string]int{"backoff": 1, "pending": 2}, gv.Counts)

	b2.requireRebuildEqual(t)
}

// The writer's views, which take the states its decisions computed, equal
// the views rebuilt from its log byte for byte after concurrent chains
// (batches of several commands), raw JSON sent with spaces and HTML
// characters, a retried command and a refused one.
func TestLiveViewsEqualViewsRebuiltFromTheLog(t *testing.T) {
	b := setupJetStream(t)
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			_, plan, _ := chain3(t, b)
			a := plan.Tasks[0].TaskID
			claim, _ := b.mustCommand(t, "task.claim", map[string]any{"task_id": a, "executor": "x"})
			tok, _ := claimed.Load(fmt.Sprintf("%s/%d", a, claim.Attempt))
			body := fmt.Sprintf(`{ "task_id" : %q, "attempt": %d, "token": %q, "result" : { "text" : "a <b> & c",  "n": [1, 2] } }`, a, claim.Attempt, tok)
			r := b.command(t, "task.succeed", []byte(body), "succeed-"+a)
			require.True(t, r.OK, "%+v", r.Error)
			again := b.command(t, "task.succeed", []byte(body), "succeed-"+a)
			require.Equal(t, r.Result, again.Result, "a retry gets the first outcome")
		})
	}
	wg.Wait()
	r := b.command(t, "task.claim", map[string]any{"task_id": "01JWTD0Q80H4QX4FR84G98PBSK", "executor": "x"}, "")
	require.False(t, r.OK, "a claim of a task that does not exist is refused")
	seq := b.lastSeq(t)
	require.NoError(t, b.store.WaitFor(t.Context(), seq))
	b.requireRebuildEqual(t)
}

// requireRebuildEqual requires that views rebuilt from b's log equal b's live
// views byte for byte, at the same checkpoint: once the live views hold the
// log's last record (a command is answered before its record is applied).
// A record appended meanwhile (a timer the service fires: a retry's backoff
// ending) makes it compare again.
func (b *bundle) requireRebuildEqual(t *testing.T) {
	t.Helper()
	for try := 1; ; try++ {
		seq := b.lastSeq(t)
		require.NoError(t, b.store.WaitFor(t.Context(), seq))
		var live bytes.Buffer
		require.NoError(t, b.store.Dump(&live))
		rebuilt, err := projections.Rebuild(context.Background(), b.svc.Log(), b.svc.LogKey(), filepath.Join(t.TempDir(), "rebuilt"), projections.Options{}, nil)
		require.NoError(t, err)
		var fresh bytes.Buffer
		require.NoError(t, rebuilt.Dump(&fresh))
		at := rebuilt.Checkpoint()
		require.NoError(t, rebuilt.Close())
		if at != seq && try < 5 {
			continue // the log moved on while the views were dumped
		}
		require.Equal(t, seq, at)
		require.True(t, bytes.Equal(live.Bytes(), fresh.Bytes()), "rebuilt views equal the live ones byte for byte")
		return
	}
}

// The service writes the Log it is given: a command lands in the in-memory
// log, the service reads it back through the same interface (a query
// waiting for its sequence), and no JetStream log stream is made.
func TestTheServiceWritesTheLogItIsGiven(t *testing.T) {
	l := eventstore.NewMemoryLog()
	b := bundleOf(servicetest.Start(t, "", servicetest.Options{Secure: true, Log: l}))
	rep, seq := b.mustCommand(t, "goal.create", map[string]any{"title": "in memory"})
	last, err := l.LastSeq(context.Background())
	require.NoError(t, err)
	require.Equal(t, last, seq)
	require.Same(t, l, b.svc.Log())
	var g domain.Goal
	b.query(t, "goal.get", schemas.Query{ID: rep.ID}, seq, &g)
	require.Equal(t, "in memory", g.Title)
	_, err = b.jetstream(t).Stream(context.Background(), "DWR_LOG")
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound)
	_, err = b.jetstream(t).Stream(context.Background(), "DWR_WORK")
	require.NoError(t, err, "the derived streams are JetStream's")
}

func TestInternalCommandsHaveNoEndpoint(t *testing.T) {
	b := setup(t)
	task, _ := b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "q"}})
	for name, body := range map[string]any{
		"timer.fire":      map[string]any{"task_id": task.ID, "kind": "backoff", "due": time.Now().UTC().Format(time.RFC3339)},
		"task.quarantine": map[string]any{"task_id": task.ID},
	} {
		_, err := b.tryCommand(name, body, "internal-"+name)
		require.ErrorIs(t, err, nats.ErrNoResponders, "%s must not be open to clients", name)
	}
}

// commandAs sends a command as the member actor under command id cmdID.
func (b *bundle) commandAs(t *testing.T, actor, name string, body any, cmdID string) schemas.Reply {
	t.Helper()
	return b.peer(t, actor).send(t, name, body, cmdID)
}

func TestACommandIDBelongsToItsSender(t *testing.T) {
	b := setup(t)
	// Alice uses an id first; Bob's command under the same id is his own:
	// decided, not answered with Alice's outcome, and it does not block her
	// retry either.
	a := b.commandAs(t, "alice", "goal.create", map[string]any{"title": "alice's"}, "shared-id")
	require.True(t, a.OK, "%+v", a.Error)
	bob := b.commandAs(t, "bob", "goal.create", map[string]any{"title": "bob's"}, "shared-id")
	require.True(t, bob.OK, "%+v", bob.Error)
	var ra, rb domain.Reply
	require.NoError(t, json.Unmarshal(a.Result, &ra))
	require.NoError(t, json.Unmarshal(bob.Result, &rb))
	require.NotEqual(t, ra.ID, rb.ID, "bob's goal is a goal of its own")
	require.False(t, rb.Duplicate)
	again := b.commandAs(t, "alice", "goal.create", map[string]any{"title": "alice's"}, "shared-id")
	require.JSONEq(t, string(a.Result), string(again.Result), "alice's retry is answered with her first outcome")
	require.Equal(t, a.Seq, again.Seq)

	// command.get answers each sender with their own command.
	for who, want := range map[string]string{"alice": ra.ID, "bob": rb.ID} {
		r := b.peer(t, who).request(t, "dwr.q.default.command.get", schemas.Query{ID: "shared-id"})
		require.True(t, r.OK, "%+v", r.Error)
		var o projections.CommandOutcome
		require.NoError(t, json.Unmarshal(r.Result, &o))
		var rep domain.Reply
		require.NoError(t, json.Unmarshal(o.Reply, &rep))
		require.Equal(t, want, rep.ID, who)
	}
	r := b.peer(t, "carol").request(t, "dwr.q.default.command.get", schemas.Query{ID: "shared-id"})
	require.False(t, r.OK)
	require.Equal(t, string(domain.CodeNotFound), r.Error.Code)
}
