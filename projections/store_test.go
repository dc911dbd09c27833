package projections_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// cmd is a test command with its metadata.
type cmd struct {
	c  domain.Command
	id string
}

// decider decides commands on a domain.Overlay of a Store, as the
// service's writer does, and keeps the states they leave (final) for the
// views.
type decider struct {
	store *projections.Store
	now   time.Time
	final domain.Touched
	ws    string // the workspace commands are sent to: "w" when empty
}

func (d *decider) Decide(items []cmd) ([]eventstore.Event, []eventstore.CommandResult, []error) {
	o := domain.NewOverlay(d.store)
	errs := make([]error, len(items))
	var evs []eventstore.Event
	var res []eventstore.CommandResult
	seen := map[string]bool{}
	ws := cmp.Or(d.ws, "w")
	for i, it := range items {
		m := domain.Meta{CommandID: it.id, Workspace: ws, Actor: "test", Now: d.now}
		// A retry is answered with its first outcome, without an append.
		if _, done, err := d.store.Command(ws, m.Key()); err != nil || done || seen[it.id] {
			errs[i] = fmt.Errorf("answered without an append (%v)", err)
			continue
		}
		seen[it.id] = true
		withToken(o, it.c, d.now)
		out, err := o.Execute(it.c, m)
		if err != nil {
			errs[i] = err
			continue
		}
		if len(out.Changes) == 0 {
			errs[i] = errors.New("answered without an append: nothing changed")
			continue
		}
		for _, ch := range out.Changes {
			data, _ := json.Marshal(ch.Event)
			evs = append(evs, eventstore.Event{Type: ch.Event.EventType(), SchemaVersion: domain.SchemaVersion(ch.Event.EventType()), Workspace: ch.Workspace,
				AggregateType: ch.AggregateType, AggregateID: ch.AggregateID, Version: ch.Version,
				CommandID: it.id, Actor: "test", Time: d.now, Data: data})
		}
		reply, _ := json.Marshal(out.Reply)
		res = append(res, eventstore.CommandResult{Workspace: ws, CommandID: it.id, Actor: m.Actor, Reply: reply})
	}
	d.final = o.Touched()
	return evs, res, errs
}

// tokenOf is the token of attempt n of task id in these tests.
func tokenOf(id string, n int) string { return fmt.Sprintf("token-%s-%d", id, n) }

// withToken does for c what the service and an executor do: a claim gets
// the hash of the token of the attempt it would start (and, when it
// supersedes, a lease that has lapsed), a report its attempt's token.
func withToken(w domain.World, c domain.Command, now time.Time) {
	switch c := c.(type) {
	case *domain.ClaimTask:
		n := 1
		if t, _ := w.Task(c.TaskID); t != nil {
			n = len(t.Attempts) + 1
		}
		c.TokenHash, c.SupersedeAfter = domain.TokenHash(tokenOf(c.TaskID, n)), now
	case *domain.ReportSuccess:
		c.Token = tokenOf(c.TaskID, c.Attempt)
	case *domain.ReportFailure:
		c.Token = tokenOf(c.TaskID, c.Attempt)
	}
}

// harness drives commands one batch at a time through a committer on a
// memory log into a store. The store takes the decided states of a batch
// (ApplyFinal), as the writer's views do; byEvents, when set, applies the
// same records from their events (Apply), as a replica's views do.
type harness struct {
	t        require.TestingT
	log      *eventstore.MemoryLog
	store    *projections.Store
	byEvents *projections.Store
	d        *decider
}

func newHarness(t require.TestingT, store *projections.Store) *harness {
	h := &harness{t: t, log: eventstore.NewMemoryLog(), store: store}
	h.d = &decider{store: store, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	return h
}

// batch decides cmds against the store, appends their events as one record,
// chained on the store's tips, and applies it to the store.
func (h *harness) batch(cmds ...cmd) {
	evs, res, _ := h.d.Decide(cmds)
	if len(evs) == 0 && len(res) == 0 {
		return
	}
	rec := &eventstore.Commit{Kind: eventstore.KindEvents, Epoch: 1, Writer: "t", Time: h.d.now, Results: res}
	tx := eventstore.NewChainVerifierOver(h.store, 0).Begin()
	for i := range evs {
		evs[i].ID = ulid.Make().String()
		require.NoError(h.t, tx.Link(&evs[i]))
	}
	rec.Events = evs
	seq, dec := h.append(rec)
	require.NoError(h.t, h.store.ApplyFinal(seq, dec, h.d.final))
	if h.byEvents != nil {
		require.NoError(h.t, h.byEvents.Apply(seq, dec))
		require.True(h.t, bytes.Equal(dump(h.t, h.store), dump(h.t, h.byEvents)), "the views from the decided states differ from the views from the events, after record %d", seq)
		// So do the states the next decision reads (raw JSON byte for byte:
		// a result's digest is taken over it).
		for id := range h.d.final.Tasks {
			requireSameState(h.t, id, h.store.Task, h.byEvents.Task)
		}
		for id := range h.d.final.Goals {
			requireSameState(h.t, id, h.store.Goal, h.byEvents.Goal)
		}
		for id := range h.d.final.Workspaces {
			requireSameState(h.t, id, h.store.Workspace, h.byEvents.Workspace)
		}
	}
}

// succeed claims task id and reports its first attempt's success, each in
// a record of its own.
func (h *harness) succeed(id string) {
	h.batch(cmd{&domain.ClaimTask{ClaimBody: domain.ClaimBody{TaskID: id, Executor: "e"}}, "c-claim-" + id})
	h.batch(cmd{&domain.ReportSuccess{TaskID: id, Attempt: 1, Result: json.RawMessage(`{}`)}, "c-done-" + id})
}

// requireSameState requires the states that two stores' get returns for id
// to be deep-equal.
func requireSameState[S any](t require.TestingT, id string, get, want func(string) (*S, error)) {
	got, err := get(id)
	require.NoError(t, err)
	exp, err := want(id)
	require.NoError(t, err)
	require.Equal(t, exp, got, "%T %s", got, id)
}

// append chains rec on the store's last record, appends it and returns its
// sequence and the record as read back.
func (h *harness) append(rec *eventstore.Commit) (uint64, *eventstore.Commit) {
	tip := h.store.LogTip()
	rec.N, rec.Prev = tip.N+1, tip.Hash
	b, err := eventstore.EncodeCommit(rec, testKey)
	require.NoError(h.t, err)
	last, err := h.log.LastSeq(context.Background())
	require.NoError(h.t, err)
	seq, err := h.log.Append(context.Background(), b, last)
	require.NoError(h.t, err)
	dec, err := eventstore.DecodeCommit(b)
	require.NoError(h.t, err)
	return seq, dec
}

// testKey authenticates the records the tests write.
var testKey = func() *eventstore.LogKey {
	k, err := eventstore.NewLogKey(bytes.Repeat([]byte{3}, eventstore.LogKeySize))
	if err != nil {
		panic(err)
	}
	return k
}()

func dump(t require.TestingT, s *projections.Store) []byte {
	var b bytes.Buffer
	require.NoError(t, s.Dump(&b))
	return b.Bytes()
}

// setup returns a store in memory, closed when the test ends, and a harness
// on it in which workspace "w" exists.
func setup(t *testing.T) (*projections.Store, *harness) {
	s := openMem(t)
	t.Cleanup(func() { _ = s.Close() })
	return s, inWorkspace(t, s)
}

// inWorkspace returns a harness on s in which workspace "w" exists.
func inWorkspace(t require.TestingT, s *projections.Store) *harness {
	h := newHarness(t, s)
	h.batch(cmd{&domain.CreateWorkspace{Name: "w"}, "ws"})
	return h
}

func openMem(t require.TestingT) *projections.Store { return openOn(t, vfs.NewMem()) }

// openOn opens the views on fs, where they may have been before.
func openOn(t require.TestingT, fs vfs.FS) *projections.Store {
	s, err := projections.Open("views", projections.Options{FS: fs})
	require.NoError(t, err)
	return s
}

// genCommand draws a random command sequence over a few goals and tasks.
func genCommand(rt *rapid.T, h *harness, n int) cmd {
	id := fmt.Sprintf("c%d", n)
	if n > 0 && rapid.IntRange(0, 9).Draw(rt, "repeat") == 0 {
		id = fmt.Sprintf("c%d", rapid.IntRange(0, n-1).Draw(rt, "repeatOf")) // a retried command id
	}
	tasks, _ := h.store.ListTasks("w", projections.TaskFilter{})
	goals, _ := h.store.ListGoals("w", "", 0)
	pickTask := func() string {
		if len(tasks) == 0 {
			return "01ARZ3NDEKTSV4RRFFQ69G5FAV"
		}
		return tasks[rapid.IntRange(0, len(tasks)-1).Draw(rt, "task")].ID
	}
	switch k := rapid.IntRange(0, 7).Draw(rt, "kind"); {
	case k == 0 || len(goals) == 0:
		return cmd{&domain.CreateGoal{GoalID: domain.DeriveID(h.d.now, id+"goal"), Title: "g"}, id}
	case k == 1:
		nt := rapid.IntRange(1, 4).Draw(rt, "ntasks")
		specs := make([]domain.TaskSpec, nt)
		for i := range specs {
			specs[i] = domain.TaskSpec{Key: fmt.Sprintf("k%d", i), Queue: "q",
				Input: json.RawMessage(fmt.Sprintf(` { "n" : %d, "html": "<&>" } `, i)), DependsOn: []string{}}
			if i > 0 && rapid.Bool().Draw(rt, "dep") {
				specs[i].DependsOn = []string{fmt.Sprintf("k%d", rapid.IntRange(0, i-1).Draw(rt, "depOn"))}
			}
		}
		g := goals[rapid.IntRange(0, len(goals)-1).Draw(rt, "goal")]
		return cmd{&domain.SubmitPlan{GoalID: g.ID, Tasks: specs}, id}
	case k == 2 || k == 3:
		return cmd{&domain.ClaimTask{ClaimBody: domain.ClaimBody{TaskID: pickTask(), Executor: "e", Supersedes: rapid.IntRange(0, 2).Draw(rt, "sup")}}, id}
	case k == 4:
		return cmd{&domain.ReportSuccess{TaskID: pickTask(), Attempt: rapid.IntRange(1, 3).Draw(rt, "att"),
			Result: json.RawMessage(`{ "ok" : true }`)}, id}
	case k == 5:
		return cmd{&domain.ReportFailure{TaskID: pickTask(), Attempt: rapid.IntRange(1, 3).Draw(rt, "att"),
			Error: domain.ErrorInfo{Message: "boom"}, Retryable: rapid.Bool().Draw(rt, "retryable")}, id}
	case k == 6:
		return cmd{&domain.FireTimer{TaskID: pickTask(), Kind: domain.TimerBackoff}, id}
	default:
		return cmd{&domain.CancelTask{TaskID: pickTask()}, id}
	}
}

// requireCacheAgrees requires what s answers for every goal and task of
// workspace w — its state, its dependents, its chain's tip, from the cache
// or not — to be what Pebble holds.
func requireCacheAgrees(t require.TestingT, s *projections.Store) {
	tasks, err := s.ListTasks("w", projections.TaskFilter{})
	require.NoError(t, err)
	goals, err := s.ListGoals("w", "", 0)
	require.NoError(t, err)
	ids := make([]string, 0, len(tasks)+len(goals))
	for _, tk := range tasks {
		ids = append(ids, tk.ID)
	}
	for _, g := range goals {
		ids = append(ids, g.ID)
	}
	for _, id := range ids {
		task, goal, deps, v, hash, err := projections.Uncached(s, id)
		require.NoError(t, err)
		typ := domain.AggTask
		if goal != nil {
			typ = domain.AggGoal
		}
		gotTask, err := s.Task(id)
		require.NoError(t, err)
		gotGoal, err := s.Goal(id)
		require.NoError(t, err)
		gotDeps, err := s.Dependents(id)
		require.NoError(t, err)
		gv, gh, err := s.Tip(typ, id)
		require.NoError(t, err)
		require.Equal(t, []any{task, goal, deps, v, hash}, []any{gotTask, gotGoal, gotDeps, gv, gh},
			"%s %s: state, dependents, tip", typ, id)
	}
}

// TestRebuiltViewsEqualLiveViews runs random batches (several commands on
// one aggregate, retried command ids, refused commands) into views that take
// the decided states, as the writer's do, and checks after every record that
// they equal views applying the same records from their events, as a
// replica's do, and at the end that they equal views rebuilt from the log.
func TestRebuiltViewsEqualLiveViews(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		live := openMem(rt)
		defer live.Close()
		byEvents, err := projections.Open("by-events", projections.Options{FS: vfs.NewMem()})
		require.NoError(rt, err)
		defer byEvents.Close()
		h := newHarness(rt, live)
		h.byEvents = byEvents
		h.batch(cmd{&domain.CreateWorkspace{Name: "w"}, "ws"})
		steps := rapid.IntRange(1, 40).Draw(rt, "steps")
		for n := 0; n < steps; n++ {
			size := rapid.IntRange(1, 3).Draw(rt, "batch")
			var cmds []cmd
			for range size {
				cmds = append(cmds, genCommand(rt, h, n))
			}
			h.d.now = h.d.now.Add(time.Duration(rapid.IntRange(0, 5000).Draw(rt, "ms")) * time.Millisecond)
			h.batch(cmds...)
			requireCacheAgrees(rt, live)
			requireCacheAgrees(rt, byEvents)
		}
		rebuilt, err := projections.Rebuild(context.Background(), h.log, testKey, "rebuilt", projections.Options{FS: vfs.NewMem()}, nil)
		require.NoError(rt, err)
		defer rebuilt.Close()
		require.Equal(rt, live.Checkpoint(), rebuilt.Checkpoint())
		require.True(rt, bytes.Equal(dump(rt, live), dump(rt, rebuilt)), "rebuilt views differ from live ones")
	})
}

func TestCrashBeforeViewsSyncCatchesUp(t *testing.T) {
	fs := vfs.NewCrashableMem()
	s := openOn(t, fs)
	h := inWorkspace(t, s)
	goal := domain.DeriveID(h.d.now, "g")
	h.batch(cmd{&domain.CreateGoal{GoalID: goal, Title: "g"}, "c1"})
	require.NoError(t, s.Close()) // Close flushes: everything so far is on "disk"
	s = openOn(t, fs)
	h.store, h.d.store = s, s
	synced := s.Checkpoint()
	h.batch(cmd{&domain.SubmitPlan{GoalID: goal, Tasks: []domain.TaskSpec{{Key: "a", Queue: "q"}, {Key: "b", Queue: "q", DependsOn: []string{"a"}}}}, "c2"})
	require.Greater(t, s.Checkpoint(), synced)
	// Crash: everything not synced is lost, rows and checkpoint together.
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	require.NoError(t, s.Close())
	s2 := openOn(t, crashed)
	defer s2.Close()
	last, err := h.log.LastSeq(context.Background())
	require.NoError(t, err)
	require.Less(t, s2.Checkpoint(), last, "the unsynced record was lost with its rows")
	_, err = s2.CatchUp(context.Background(), h.log, testKey)
	require.NoError(t, err)
	rebuilt, err := projections.Rebuild(context.Background(), h.log, testKey, "rebuilt", projections.Options{FS: vfs.NewMem()}, nil)
	require.NoError(t, err)
	defer rebuilt.Close()
	require.Equal(t, dump(t, rebuilt), dump(t, s2))
	tasks, err := s2.ListTasks("w", projections.TaskFilter{GoalID: goal})
	require.NoError(t, err)
	require.Len(t, tasks, 2)
}

func TestApplyIsIdempotentAndDetectsBrokenChains(t *testing.T) {
	s, h := setup(t)
	goal := domain.DeriveID(h.d.now, "g")
	h.batch(cmd{&domain.CreateGoal{GoalID: goal, Title: "g"}, "c1"})
	before := dump(t, s)
	// Feeding a record again changes nothing.
	require.NoError(t, h.log.Read(context.Background(), 1, func(seq uint64, rec []byte) error {
		c, err := eventstore.DecodeCommit(rec)
		require.NoError(t, err)
		return s.Apply(seq, c)
	}))
	require.Equal(t, before, dump(t, s))

	// A record whose event skips a version is refused, and nothing of it lands.
	bad := &eventstore.Commit{Kind: eventstore.KindEvents, Epoch: 1, Writer: "t", Time: h.d.now, Events: []eventstore.Event{{
		ID: ulid.Make().String(), Type: "goal.cancelled", SchemaVersion: 1, Workspace: "w", AggregateType: "goal",
		AggregateID: goal, Version: 3, CommandID: "x", Time: h.d.now, Data: json.RawMessage(`{}`)}}}
	seq, dec := h.append(bad)
	var ce *eventstore.ChainError
	err := s.Apply(seq, dec)
	require.ErrorAs(t, err, &ce)
	require.Equal(t, eventstore.ChainGap, ce.Problem)
	require.ErrorContains(t, err, fmt.Sprintf("projections: log record %d: eventstore: goal/%s v3: version gap: want v2", seq, goal))
	require.Equal(t, before, dump(t, s))

	// So is a record that does not follow the last one in the log's chain.
	ok := &eventstore.Commit{Kind: eventstore.KindEpoch, Epoch: 2, Writer: "t", Time: h.d.now}
	seq, dec = h.append(ok)
	dec.Prev = "elsewhere"
	require.ErrorContains(t, s.Apply(seq, dec), "does not follow the views' last record")
	require.Equal(t, before, dump(t, s))
}

func TestOldEventsAreUpcastWhenRead(t *testing.T) {
	s, h := setup(t)
	// appendOld appends one event of schema version 1 as an older dwr stored
	// it, chained to the task's event before it, and applies it.
	task := domain.DeriveID(h.d.now, "t")
	appendOld := func(version uint64, typ string, data string) {
		hist, err := s.History(context.Background(), h.log, "task", task)
		require.NoError(t, err)
		e := eventstore.Event{ID: ulid.Make().String(), Type: typ, SchemaVersion: 1, Workspace: "w", AggregateType: "task",
			AggregateID: task, Version: version, CommandID: fmt.Sprint("old-", version), Time: h.d.now, Data: json.RawMessage(data)}
		if len(hist) > 0 {
			e.PrevHash = hist[len(hist)-1].Hash()
		}
		seq, dec := h.append(&eventstore.Commit{Kind: eventstore.KindEvents, Epoch: 1, Writer: "old", Time: h.d.now,
			Events: []eventstore.Event{e}})
		require.NoError(t, s.Apply(seq, dec))
	}
	// A task.created created waiting, with no wait_kind (and no wait_until:
	// an approval gate).
	appendOld(1, "task.created", `{"spec":{"queue":"q","approval":{"role":"lead"}},"state":"waiting"}`)

	got, err := s.Task(task)
	require.NoError(t, err)
	require.Equal(t, domain.StateWaiting, got.State)
	require.Equal(t, domain.WaitApproval, got.Wait.Kind, "upcast from v1: no wait_until means an approval")
	hist, err := s.History(context.Background(), h.log, "task", task)
	require.NoError(t, err)
	require.Equal(t, 1, hist[0].SchemaVersion, "the stored event is never rewritten")

	// An unsigned gate decision of schema version 1, then the task.ready it
	// led to.
	appendOld(2, "task.approval_decided", `{"response":"approve","reason":"fine by me"}`)
	appendOld(3, "task.ready", `{"reason":"approved"}`)
	got, err = s.Task(task)
	require.NoError(t, err)
	require.Equal(t, domain.StateReady, got.State)
	require.True(t, got.Approved, "upcast from v1: an approve passed the gate")

	// And the domain decides on it as on a new one.
	h.batch(cmd{&domain.ClaimTask{ClaimBody: domain.ClaimBody{TaskID: task, Executor: "e"}}, "claim-1"})
	got, err = s.Task(task)
	require.NoError(t, err)
	require.Equal(t, domain.StateRunning, got.State)
}

func TestTimersFollowTheTasksState(t *testing.T) {
	s, h := setup(t)
	task := domain.DeriveID(h.d.now, "t")
	h.batch(cmd{&domain.CreateTask{TaskID: task, Spec: domain.TaskSpec{Queue: "q", Timeout: domain.Duration(time.Minute),
		Retry: &domain.RetryPolicy{InitialBackoff: domain.Duration(10 * time.Second)}}}, "c1"})
	h.batch(cmd{&domain.ClaimTask{ClaimBody: domain.ClaimBody{TaskID: task, Executor: "e"}}, "c2"})

	// A running attempt with a timeout waits for its deadline.
	next, ok, err := s.NextTimer()
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, projections.Timer{Due: h.d.now.Add(time.Minute), Workspace: "w", TaskID: task, Kind: domain.TimerAttempt, Attempt: 1}, next)
	due, err := s.DueTimers(h.d.now.Add(time.Minute-time.Nanosecond), 10, 10, "")
	require.NoError(t, err)
	require.Empty(t, due.Timers, "never early")

	// A failure replaces it with the end of the backoff.
	h.batch(cmd{&domain.ReportFailure{TaskID: task, Attempt: 1, Error: domain.ErrorInfo{Message: "x"}, Retryable: true}, "c3"})
	due, err = s.DueTimers(h.d.now.Add(10*time.Second), 10, 10, "")
	require.NoError(t, err)
	require.Len(t, due.Timers, 1)
	require.False(t, due.More)
	fire := due.Timers[0]
	require.Equal(t, domain.TimerBackoff, fire.Kind)
	require.Equal(t, h.d.now.Add(10*time.Second), fire.Due)

	// Firing it readies the task: no timer is left.
	h.d.now = h.d.now.Add(10 * time.Second)
	h.batch(cmd{&domain.FireTimer{TaskID: task, Kind: fire.Kind, Due: fire.Due}, fire.CommandID()})
	_, ok, err = s.NextTimer()
	require.NoError(t, err)
	require.False(t, ok)
	got, err := s.Task(task)
	require.NoError(t, err)
	require.Equal(t, domain.StateReady, got.State)
}

// goalWithPlan creates a goal and submits the plan of specs, and returns the
// goal's id and its plan's task ids, in the specs' order.
func (h *harness) goalWithPlan(specs ...domain.TaskSpec) (string, []string) {
	gid := domain.DeriveID(h.d.now, "goal")
	h.batch(cmd{&domain.CreateGoal{GoalID: gid, Title: "g"}, "c-goal"})
	h.batch(cmd{&domain.SubmitPlan{GoalID: gid, Tasks: specs}, "c-plan"})
	g, err := h.store.Goal(gid)
	require.NoError(h.t, err)
	ids := make([]string, len(g.Plan))
	for i, pt := range g.Plan {
		ids[i] = pt.TaskID
	}
	return gid, ids
}

// spec is a task of queue q with key k, depending on the tasks keyed deps.
func spec(k string, deps ...string) domain.TaskSpec {
	return domain.TaskSpec{Key: k, Queue: "q", DependsOn: append([]string{}, deps...)}
}

// A goal, task or command the views never held is answered absent without
// asking Pebble (the writer looks up every new command id and every id it
// creates); those they hold are always found, also after a reopen, when
// the filter is filled from the views' keys.
// goalWithATask creates a goal with a plan of one task through h, and
// returns the goal's id and the task as s lists it.
func goalWithATask(t *testing.T, s *projections.Store, h *harness) (string, []*domain.Task) {
	t.Helper()
	gid, _ := h.goalWithPlan(spec("a"))
	tasks, err := s.ListTasks("w", projections.TaskFilter{})
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	return gid, tasks
}

func TestNewIDsAreAnsweredWithoutPebble(t *testing.T) {
	fs := vfs.NewMem()
	s := openOn(t, fs)
	h := inWorkspace(t, s)
	gid, tasks := goalWithATask(t, s, h)
	held := func(s *projections.Store) {
		g, err := s.Goal(gid)
		require.NoError(t, err)
		require.NotNil(t, g)
		tk, err := s.Task(tasks[0].ID)
		require.NoError(t, err)
		require.NotNil(t, tk)
		for _, id := range []string{"c-goal", "c-plan", "ws"} {
			_, ok, err := s.Command("w", (domain.Meta{CommandID: id, Workspace: "w", Actor: "test"}).Key())
			require.NoError(t, err)
			require.True(t, ok, "command %s", id)
		}
	}
	absent := func(s *projections.Store) {
		before := projections.PebbleGets(s)
		for i := range 1000 {
			id := domain.DeriveID(h.d.now, fmt.Sprintf("new-%d", i))
			g, err := s.Goal(id)
			require.NoError(t, err)
			require.Nil(t, g)
			tk, err := s.Task(id)
			require.NoError(t, err)
			require.Nil(t, tk)
			_, ok, err := s.Command("w", (domain.Meta{CommandID: id, Workspace: "w", Actor: "test"}).Key())
			require.NoError(t, err)
			require.False(t, ok)
		}
		require.Zero(t, projections.PebbleGets(s)-before, "lookups of ids never held reached Pebble")
	}
	held(s)
	absent(s)
	require.NoError(t, s.Close())

	s = openOn(t, fs)
	defer s.Close()
	before := projections.PebbleGets(s)
	held(s) // nothing cached after the reopen: found through the filter, in Pebble
	require.Positive(t, projections.PebbleGets(s)-before)
	absent(s)
}

// The cache keeps the goals and tasks work goes on in, not those that ended:
// an open goal and its pending task are read without Pebble; once the goal
// is cancelled (its task with it), the first read of each reaches Pebble and
// finds it as it ended, and the read puts it back in the cache.
func TestEndedAggregatesLeaveTheCache(t *testing.T) {
	s, h := setup(t)
	gid, tasks := goalWithATask(t, s, h)
	read := func() (*domain.Goal, *domain.Task, int64) {
		before := projections.PebbleGets(s)
		g, err := s.Goal(gid)
		require.NoError(t, err)
		tk, err := s.Task(tasks[0].ID)
		require.NoError(t, err)
		return g, tk, projections.PebbleGets(s) - before
	}
	g, tk, gets := read()
	require.Zero(t, gets, "an open goal and its task are cached")
	require.Equal(t, domain.GoalStateOpen, g.State)
	require.False(t, domain.Terminal(tk.State))

	h.batch(cmd{&domain.CancelGoal{GoalID: gid, Reason: "enough"}, "c-cancel"})
	g, tk, gets = read()
	require.Equal(t, int64(2), gets, "the ended goal and task left the cache")
	require.Equal(t, domain.GoalStateCancelled, g.State)
	require.Equal(t, domain.StateCancelled, tk.State)
	_, _, gets = read()
	require.Zero(t, gets, "a read puts them back")
}

// A state read from Pebble while a record that changes it is applied is not
// cached: the reader gets the state as it read it, and the next read the
// state the record left. (Before, a query that read a task just before the
// writer's record was applied could put the older state back in the cache,
// where the writer's next decision would read it.)
func TestAReadRacingARecordDoesNotCacheTheOlderState(t *testing.T) {
	fs := vfs.NewMem()
	s := openOn(t, fs)
	h := inWorkspace(t, s)
	gid, tasks := goalWithATask(t, s, h)
	require.NoError(t, s.Close())
	s = openOn(t, fs) // nothing cached
	t.Cleanup(func() { _ = s.Close() })
	h.store, h.d.store = s, s

	var once sync.Once
	projections.SetAfterRead(s, func() {
		once.Do(func() {
			projections.SetAfterRead(s, nil)
			h.batch(cmd{&domain.CancelGoal{GoalID: gid, Reason: "enough"}, "c-cancel"})
		})
	})
	read, err := s.Task(tasks[0].ID) // the cancel is applied between its read and its caching
	require.NoError(t, err)
	require.False(t, domain.Terminal(read.State), "the read returns the task as it read it, before the cancel")

	now, err := s.Task(tasks[0].ID)
	require.NoError(t, err)
	require.Equal(t, domain.StateCancelled, now.State, "the task as the cancel left it, not the older state the racing read saw")
}

// A task that ended stays in the cache while its goal is open — each task
// that ends has the writer read every task of the plan, to see whether the
// goal is done — and leaves it, with the rest of the plan, when the goal
// ends. A new task's dependents are cached (each is read when the task
// ends), a task that a revised plan adds joins them, and views that open
// read them from Pebble once.
func TestAnOpenGoalsTasksStayInTheCache(t *testing.T) {
	fs := vfs.NewMem()
	s := openOn(t, fs)
	h := inWorkspace(t, s)
	gid, plan := h.goalWithPlan(spec("a"), spec("b", "a"))
	a, b := plan[0], plan[1]
	gets := func(f func()) int64 {
		before := projections.PebbleGets(s)
		f()
		return projections.PebbleGets(s) - before
	}
	task := func(id string) *domain.Task {
		tk, err := s.Task(id)
		require.NoError(t, err)
		return tk
	}
	dependents := func(id string) []string {
		d, err := s.Dependents(id)
		require.NoError(t, err)
		return d
	}

	require.Zero(t, gets(func() {
		require.Equal(t, []string{b}, dependents(a))
		require.Empty(t, dependents(b))
	}), "the plan's tasks' dependents are cached")

	h.succeed(a)
	require.Zero(t, gets(func() {
		require.Equal(t, domain.StateAccepted, task(a).State)
		require.Equal(t, domain.StateReady, task(b).State)
	}), "a ended, but its goal is open: both tasks are cached")

	h.batch(cmd{&domain.SubmitPlan{GoalID: gid, Tasks: []domain.TaskSpec{
		{Key: "a", Queue: "q", DependsOn: []string{}}, {Key: "b", Queue: "q", DependsOn: []string{"a"}},
		{Key: "c", Queue: "q", DependsOn: []string{"a"}}}}, "c-revise"})
	g, err := s.Goal(gid)
	require.NoError(t, err)
	require.Len(t, g.Plan, 3)
	c := g.Plan[2].TaskID
	want := []string{b, c}
	slices.Sort(want)
	require.Zero(t, gets(func() { require.Equal(t, want, dependents(a)) }), "the revision's new task joined a's cached dependents")

	for _, id := range []string{b, c} {
		h.succeed(id)
	}
	require.Equal(t, int64(4), gets(func() {
		g, err = s.Goal(gid)
		require.NoError(t, err)
		require.Equal(t, domain.GoalStateAchieved, g.State)
		for _, id := range []string{a, b, c} {
			require.Equal(t, domain.StateAccepted, task(id).State)
		}
	}), "the goal achieved, it and its plan's tasks left the cache")

	require.NoError(t, s.Close())
	s = openOn(t, fs)
	defer s.Close()
	require.Equal(t, int64(1), gets(func() { require.Equal(t, want, dependents(a)) }), "opened views scan Pebble for them")
	require.Zero(t, gets(func() { require.Equal(t, want, dependents(a)) }), "and cache them")
}

// The tip of an aggregate's chain, which the writer's next event of it
// carries, is its last event's version and hash, read from its history
// once the cache is gone (the views keep no row of their own for it).
func TestTheTipIsTheHistorysLastEvent(t *testing.T) {
	fs := vfs.NewMem()
	s := openOn(t, fs)
	h := inWorkspace(t, s)
	gid, tasks := goalWithATask(t, s, h)
	h.batch(cmd{&domain.CancelGoal{GoalID: gid, Reason: "enough"}, "c-cancel"})
	require.NoError(t, s.Close())
	s = openOn(t, fs)
	defer s.Close()
	require.NotContains(t, string(dump(t, s)), "\"a/", "no tip rows")
	for _, agg := range [][2]string{{domain.AggWorkspace, "w"}, {domain.AggGoal, gid}, {domain.AggTask, tasks[0].ID}} {
		var last eventstore.Event
		require.NoError(t, s.EachEvent(context.Background(), h.log, agg[0], agg[1], 0, func(e eventstore.Event) bool { last = e; return true }))
		require.Positive(t, last.Version)
		v, hash, err := s.Tip(agg[0], agg[1])
		require.NoError(t, err)
		require.Equal(t, last.Version, v, "%s %s", agg[0], agg[1])
		require.Equal(t, last.Hash(), hash, "%s %s", agg[0], agg[1])
	}
	v, hash, err := s.Tip(domain.AggTask, domain.DeriveID(h.d.now, "never"))
	require.NoError(t, err)
	require.Zero(t, v)
	require.Empty(t, hash)
	h.store, h.d.store = s, s
	h.batch(cmd{&domain.ConfigureWorkspace{RetainEnded: schemas.Duration(time.Hour)}, "c-configure"}) // linked on the tip read
	w, err := s.Workspace("w")
	require.NoError(t, err)
	require.Equal(t, schemas.Duration(time.Hour), w.RetainEnded)
}

// A task that ended leaves the cache when a revision takes it out of its
// open goal's plan: no decision reads it again.
func TestATaskARevisionRemovesLeavesTheCache(t *testing.T) {
	s, h := setup(t)
	gid, plan := h.goalWithPlan(spec("a"), spec("x"))
	a := plan[0]
	h.succeed(a)
	read := func() int64 {
		before := projections.PebbleGets(s)
		tk, err := s.Task(a)
		require.NoError(t, err)
		require.Equal(t, domain.StateAccepted, tk.State)
		return projections.PebbleGets(s) - before
	}
	require.Zero(t, read(), "a ended in its open goal's plan: cached")

	h.batch(cmd{&domain.SubmitPlan{GoalID: gid, Tasks: []domain.TaskSpec{{Key: "x", Queue: "q", DependsOn: []string{}}}}, "c-revise"})
	g, err := s.Goal(gid)
	require.NoError(t, err)
	require.Equal(t, domain.GoalStateOpen, g.State)
	require.Len(t, g.Plan, 1)
	require.Equal(t, int64(1), read(), "the revision took a out of the plan, and the cache")
}

// Work on an open goal whose states are cached reads nothing from Pebble:
// deciding and applying a claim and a report take the tasks, the goal, the
// dependents, the chain tips and the goal's counts from the cache.
func TestWorkOnACachedGoalReadsNothingFromPebble(t *testing.T) {
	s, h := setup(t)
	gid, plan := h.goalWithPlan(spec("a"), spec("b", "a"))
	h.succeed(plan[0]) // the goal's counts are read once, and cached
	before := projections.PebbleGets(s)
	h.succeed(plan[1])
	require.Zero(t, projections.PebbleGets(s)-before)
	g, err := s.Goal(gid)
	require.NoError(t, err)
	require.Equal(t, domain.GoalStateAchieved, g.State)
	v, err := s.GoalView("w", gid)
	require.NoError(t, err)
	require.Equal(t, map[string]int{domain.StateAccepted: 2}, v.Counts)
}

// The cache holds at most Options.CacheBytes of goals and tasks: a plan of
// tasks with large inputs, all open, does not stay decoded in memory —
// reading them back reaches Pebble — and every task reads back whole.
func TestTheCacheIsBoundedInBytes(t *testing.T) {
	s, err := projections.Open("views", projections.Options{FS: vfs.NewMem(), CacheBytes: 256 << 10})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	h := inWorkspace(t, s)
	input := json.RawMessage(`{"blob":"` + strings.Repeat("x", 40<<10) + `"}`)
	var specs []domain.TaskSpec
	for i := range 20 {
		sp := spec(fmt.Sprintf("t%d", i))
		sp.Input = input
		specs = append(specs, sp)
	}
	_, ids := h.goalWithPlan(specs...)
	require.LessOrEqual(t, projections.CachedBytes(s), 256<<10, "the cache holds no more than its bound")

	before := projections.PebbleGets(s)
	for _, id := range ids {
		tk, err := s.Task(id)
		require.NoError(t, err)
		require.JSONEq(t, string(input), string(tk.Spec.Input))
	}
	require.Positive(t, projections.PebbleGets(s)-before, "800 KiB of open tasks were not all kept in a cache of 256 KiB")
	require.LessOrEqual(t, projections.CachedBytes(s), 256<<10)
}

// Closing the views waits for the reads under way — Pebble must not be
// closed under an open iterator: a service that stopped while a listing
// still ran closed them under it — and turns new reads away.
func TestCloseWaitsForTheReadsUnderWay(t *testing.T) {
	fs := vfs.NewMem()
	s := openOn(t, fs)
	h := inWorkspace(t, s)
	h.goalWithPlan(spec("a"))
	h.goalWithPlan(spec("b"))
	require.NoError(t, s.Close())
	s = openOn(t, fs) // nothing cached: the listing reads each goal from Pebble

	inside, release := make(chan struct{}), make(chan struct{})
	listed := make(chan error, 1)
	go func() {
		n := 0
		listed <- s.EachGoal("w", "", func(*projections.GoalView) bool {
			if n++; n == 1 {
				close(inside)
				<-release
			}
			return true
		})
	}()
	<-inside
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	require.Eventually(t, func() bool { return projections.Closing(s) }, 10*time.Second, time.Millisecond)
	select {
	case err := <-closed:
		t.Fatalf("Close returned while a listing's iterator was open: %v", err)
	default:
	}
	_, err := s.ListGoals("w", "", 0)
	require.ErrorIs(t, err, projections.ErrClosed, "a read that starts once Close has begun")

	close(release)
	require.NoError(t, <-closed, "closed once the listing ended, with no iterator left open")
	if err := <-listed; err != nil {
		require.ErrorIs(t, err, projections.ErrClosed, "the listing's reads after Close began")
	}
	_, err = s.ListGoals("w", "", 0)
	require.ErrorIs(t, err, projections.ErrClosed)
}

// ListWorkspaces reads each workspace as the views hold it now, from the
// cache when it holds one (the NATS server's users are rebuilt from every
// workspace at each change of members): a workspace changed since the last
// listing is read as changed.
func TestListWorkspacesFollowsEveryChange(t *testing.T) {
	s, h := setup(t)
	members := func(name string) []string {
		t.Helper()
		wss, err := s.ListWorkspaces()
		require.NoError(t, err)
		for _, w := range wss {
			if w.Name == name {
				var out []string
				for _, m := range w.Members {
					out = append(out, m.Name)
				}
				return out
			}
		}
		t.Fatalf("workspace %s not listed", name)
		return nil
	}
	require.Empty(t, members("w"))
	h.batch(cmd{&domain.AddMember{Name: "a", Role: domain.RoleViewer, PublicKey: "UA7MKXBLY6WJ5644NDJL7IFP4GV56SLO2464EHTM3LXWGVVLUA5ASOHH"}, "add-a"})
	require.Equal(t, []string{"a"}, members("w"))
	_, err := s.Workspace("w") // read (and cached) between two listings
	require.NoError(t, err)
	h.batch(cmd{&domain.AddMember{Name: "b", Role: domain.RoleViewer, PublicKey: "UAFX6JXN64DJ77OVSWCEW4QPAYNB6MQXY747VU67A2D5SZONOHUY4TJK"}, "add-b"})
	require.Equal(t, []string{"a", "b"}, members("w"))
	h.batch(cmd{&domain.RemoveMember{Name: "a"}, "remove-a"})
	require.Equal(t, []string{"b"}, members("w"))
}
