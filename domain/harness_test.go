package domain

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/stretchr/testify/require"
)

// testingT is what the harness needs from *testing.T and *rapid.T.
type testingT interface {
	require.TestingT
	Helper()
	Logf(format string, args ...any)
}

// epoch is where every test clock starts: a fixed UTC time, so histories are
// deterministic and times compare with reflect.DeepEqual.
var epoch = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// entry is one committed change with what the log records beside it.
type entry struct {
	Change
	Recorded
}

// world is a committed world for tests: an Overlay over Empty{} that every
// accepted outcome is applied to, a fake clock that moves only when told, and
// the whole history in commit order.
type world struct {
	t     testingT
	ws    string
	actor string // who sends the commands: Meta.Actor
	authn bool   // Meta.Authenticated of the commands decided
	// queues, when not nil, makes the sender an executor of these queues
	// (Meta.Executor, Meta.Queues).
	queues  []string
	o       *Overlay
	now     time.Time
	seq     int
	history []entry
	// tokens are the tokens of the attempts the world's claims started, by
	// task/attempt, as the service would hand them to their claimers.
	tokens map[string]string
	// raw sends commands as they are: no token or supersede moment is
	// filled in for them (see fill).
	raw bool
}

// newWorld returns a world with nothing in it, deciding in workspace "acme".
func newWorld(t testingT) *world {
	return &world{t: t, ws: "acme", actor: "tester", o: NewOverlay(Empty{}), now: epoch, tokens: map[string]string{}}
}

// setup returns a world whose workspace exists.
func setup(t testingT) *world {
	t.Helper()
	w := newWorld(t)
	w.must(&CreateWorkspace{Name: w.ws})
	return w
}

// nextCommandID returns a fresh command id.
func (w *world) nextCommandID() string {
	w.seq++
	return fmt.Sprintf("cmd-%05d", w.seq)
}

// newID returns a fresh ULID for a goal or a task.
func (w *world) newID() string {
	w.seq++
	return DeriveID(w.now, fmt.Sprintf("id-%d", w.seq))
}

// newTask creates a standalone task, spec("") under a new id, and returns
// its id.
func (w *world) newTask() string {
	w.t.Helper()
	id := w.newID()
	w.must(&CreateTask{TaskID: id, Spec: spec("")})
	return id
}

// advance moves the clock forward by d.
func (w *world) advance(d time.Duration) { w.now = w.now.Add(d) }

// run decides cmd under a fresh command id; see runID.
func (w *world) run(cmd Command) (*Outcome, error) { return w.runID(w.nextCommandID(), cmd) }

// runID decides cmd under command id id at the current time and, unless it
// is refused, commits its changes: applies them to the overlay (which checks
// each version) and appends them to the history.
func (w *world) runID(id string, cmd Command) (*Outcome, error) {
	w.t.Helper()
	token, next := w.fill(id, cmd)
	m := Meta{CommandID: id, Workspace: w.ws, Actor: w.actor, Authenticated: w.authn, Now: w.now,
		Executor: w.queues != nil, Queues: w.queues}
	out, err := Execute(w.o, cmd, m)
	if err != nil {
		require.Nil(w.t, out, "a refused command has no outcome")
		return nil, err
	}
	r := Recorded{CommandID: id, Actor: m.Actor, Time: w.now}
	for _, c := range out.Changes {
		require.NoError(w.t, w.o.Apply(c, r), "committing %s", cmd.CommandName())
		w.history = append(w.history, entry{Change: c, Recorded: r})
		if s, ok := c.Event.(*AttemptStarted); ok {
			if t := map[bool]string{false: token, true: next}[s.Handed]; t != "" {
				w.tokens[fmt.Sprintf("%s/%d", c.AggregateID, s.Attempt)] = t
			}
		}
	}
	return out, nil
}

// fill does for cmd what the service and an SDK do, unless the world is
// raw or the test set the field itself: a claim gets the hash of a token
// made for it (returned, to be kept for the attempt it starts) and, when it
// supersedes, the moment its lease lapsed — now; an attempt's command gets
// the token of its attempt; a report that asks for the handoff gets the
// hash of a token made for the attempt it may be handed (nextToken).
func (w *world) fill(id string, cmd Command) (claimToken, nextToken string) {
	if w.raw {
		return "", ""
	}
	next := func(ask bool, hash *string) {
		if ask && *hash == "" {
			nextToken = "next-token-of-" + id
			*hash = TokenHash(nextToken)
		}
	}
	tok := func(p *string, task string, n int) {
		if *p == "" {
			*p = w.token(task, n)
		}
	}
	// report fills a report (task.succeed or task.fail), whose token is at
	// token: the token of its attempt, or when it claims the task too (a lazy
	// claim) its claim's token hash; the handoff's as for next.
	report := func(token *string) {
		r, _ := Report(cmd)
		if r.Claim == nil {
			tok(token, r.TaskID, r.Attempt)
		} else {
			claimToken = w.fillClaim(id, r.TaskID, r.Claim)
		}
		next(r.Next, r.NextTokenHash)
	}
	switch c := cmd.(type) {
	case *ClaimTask:
		if c.TokenHash == "" {
			claimToken = "token-of-" + id + "-for-" + c.TaskID
			c.TokenHash = TokenHash(claimToken)
		}
		if c.Supersedes > 0 && c.SupersedeAfter.IsZero() {
			c.SupersedeAfter = w.now
		}
	case *SaveCheckpoint:
		tok(&c.Token, c.TaskID, c.Attempt)
	case *ReportSuccess:
		report(&c.Token)
	case *ReportFailure:
		report(&c.Token)
	case *WaitTask:
		tok(&c.Token, c.TaskID, c.Attempt)
	case *DelegateTask:
		tok(&c.Token, c.TaskID, c.Attempt)
	case *RequestApproval:
		tok(&c.Token, c.TaskID, c.Attempt)
	case *Heartbeat:
		tok(&c.Token, c.TaskID, c.Attempt)
	}
	return claimToken, nextToken
}

// fillClaim gives the claim a report carries (the lazy claim) the hash of
// a token made for it, as the service does, unless the test set one; it
// returns the token.
func (w *world) fillClaim(id, taskID string, cl *ReportClaim) string {
	if cl.TokenHash != "" {
		return ""
	}
	token := "token-of-" + id + "-for-" + taskID
	cl.TokenHash = TokenHash(token)
	return token
}

// token returns the token the world's claim of attempt n of task id was
// handed, or "" when none of its claims started that attempt.
func (w *world) token(id string, n int) string { return w.tokens[fmt.Sprintf("%s/%d", id, n)] }

// must decides and commits cmd, failing the test if it is refused.
func (w *world) must(cmd Command) *Outcome {
	w.t.Helper()
	out, err := w.run(cmd)
	require.NoError(w.t, err, "%s %+v", cmd.CommandName(), cmd)
	require.Nil(w.t, out.Refusal, "%s %+v was refused", cmd.CommandName(), cmd)
	return out
}

// recorded decides cmd, requires it to be refused for reason with code and
// the refusal to be recorded as the one change, a task.approval_refused of
// the task; nothing else may change.
func (w *world) recorded(cmd Command, code Code, reason string) *Error {
	w.t.Helper()
	out, err := w.run(cmd)
	require.NoError(w.t, err)
	require.NotNil(w.t, out.Refusal, "%s %+v should be refused", cmd.CommandName(), cmd)
	require.Equal(w.t, code, out.Refusal.Code, "refusal: %v", out.Refusal)
	require.Len(w.t, out.Changes, 1, "a refusal records one event and changes nothing else")
	ev, ok := out.Changes[0].Event.(*ApprovalRefused)
	require.True(w.t, ok, "recorded %T", out.Changes[0].Event)
	require.Equal(w.t, reason, ev.Reason, "refusal: %v", out.Refusal)
	return out.Refusal
}

// refused decides cmd, requires it to be refused with code, and requires
// that nothing was committed. It returns the refusal.
func (w *world) refused(cmd Command, code Code) *Error {
	w.t.Helper()
	before, snap := len(w.history), w.snapshot()
	_, err := w.run(cmd)
	require.Error(w.t, err, "%s %+v should be refused", cmd.CommandName(), cmd)
	require.Equal(w.t, snap, w.snapshot(), "deciding changed the world it was decided against")
	var de *Error
	require.True(w.t, errors.As(err, &de), "refusal %v is not a *domain.Error", err)
	require.Equal(w.t, code, de.Code, "refusal: %v", err)
	require.Len(w.t, w.history, before, "a refused command committed changes")
	return de
}

// duplicate decides cmd under command id id and requires an outcome with no
// changes that is marked Duplicate.
func (w *world) duplicate(id string, cmd Command) *Outcome {
	w.t.Helper()
	before := len(w.history)
	out, err := w.runID(id, cmd)
	require.NoError(w.t, err)
	require.Empty(w.t, out.Changes, "a duplicate appended changes")
	require.True(w.t, out.Reply.Duplicate, "reply should be marked duplicate")
	require.Len(w.t, w.history, before)
	return out
}

func (w *world) task(id string) *Task { w.t.Helper(); return present(w.t, w.o.Task, "task", id) }

func (w *world) goal(id string) *Goal { w.t.Helper(); return present(w.t, w.o.Goal, "goal", id) }

// present returns the aggregate (a kind) id as get reads it, and requires
// that it is there.
func present[S any](t testingT, get func(string) (*S, error), kind, id string) *S {
	t.Helper()
	s, err := get(id)
	require.NoError(t, err)
	require.NotNil(t, s, "%s %s", kind, id)
	return s
}

func (w *world) state(taskID string) string { w.t.Helper(); return w.task(taskID).State }

// createGoal creates an open goal and returns its id.
func (w *world) createGoal(env Envelope) string {
	w.t.Helper()
	id := w.newID()
	w.must(&CreateGoal{GoalID: id, Title: "goal " + id, Envelope: env})
	return id
}

// plan submits specs as goalID's next plan and returns the task id of each key.
func (w *world) plan(goalID string, specs ...TaskSpec) (map[string]string, *Outcome) {
	w.t.Helper()
	out := w.must(&SubmitPlan{GoalID: goalID, Tasks: specs})
	ids := map[string]string{}
	for _, pt := range out.Reply.Tasks {
		ids[pt.Key] = pt.TaskID
	}
	require.Len(w.t, ids, len(specs))
	return ids, out
}

// claim claims a ready task and returns the attempt it started.
func (w *world) claim(taskID string) int {
	w.t.Helper()
	out := w.must(&ClaimTask{ClaimBody: ClaimBody{TaskID: taskID, Executor: "exec-1", ExecutorVersion: "1.0"}})
	require.Equal(w.t, StateRunning, out.Reply.State)
	return out.Reply.Attempt
}

func (w *world) succeed(taskID string, attempt int) *Outcome {
	w.t.Helper()
	return w.must(&ReportSuccess{TaskID: taskID, Attempt: attempt, Result: json.RawMessage(`{"ok":true}`)})
}

func (w *world) fail(taskID string, attempt int, retryable bool) *Outcome {
	w.t.Helper()
	return w.must(&ReportFailure{TaskID: taskID, Attempt: attempt, Retryable: retryable,
		Error: ErrorInfo{Code: "boom", Message: "it broke"}})
}

func (w *world) verify(taskID string, attempt int, outcome string) *Outcome {
	w.t.Helper()
	return w.must(verification(taskID, attempt, outcome))
}

func verification(taskID string, attempt int, outcome string) *RecordVerification {
	return &RecordVerification{TaskID: taskID, Verdict: Verdict{Attempt: attempt, Outcome: outcome, Verifier: "checker",
		VerifierVersion: "2", ResultDigest: ResultDigest(json.RawMessage(`{"ok":true}`)), // what succeed reports
		Evidence: json.RawMessage(`{"checked":"` + outcome + `"}`)}}
}

// events returns the event types the outcome appends to aggregate id, in order.
func events(out *Outcome, id string) []string {
	var s []string
	for _, c := range out.Changes {
		if c.AggregateID == id {
			s = append(s, c.Event.EventType())
		}
	}
	return s
}

// eventOf returns the single event of type E that out appends to aggregate id.
func eventOf[E Event](t testingT, out *Outcome, id string) E {
	t.Helper()
	var found []E
	for _, c := range out.Changes {
		if e, ok := c.Event.(E); ok && c.AggregateID == id {
			found = append(found, e)
		}
	}
	require.Len(t, found, 1, "events %T of %s", *new(E), id)
	return found[0]
}

// spec returns a plain task spec on queue "work".
func spec(key string, deps ...string) TaskSpec {
	return TaskSpec{Key: key, Title: "task " + key, Queue: "work", DependsOn: deps}
}

// lastEvent returns the last event of type E (a pointer, such as
// *ScheduleSkipped) among out's changes, or nil.
func lastEvent[E Event](out *Outcome) E {
	var found E
	for _, c := range out.Changes {
		if ev, ok := c.Event.(E); ok {
			found = ev
		}
	}
	return found
}

// chain returns the plan a -> b -> c.
func chain() []TaskSpec { return []TaskSpec{spec("a"), spec("b", "a"), spec("c", "b")} }

// aggregates returns the ids of every aggregate of type typ in the history,
// in the order they were created.
func (w *world) aggregates(typ string) []string {
	var ids []string
	for _, e := range w.history {
		if e.AggregateType == typ && e.Version == 1 {
			ids = append(ids, e.AggregateID)
		}
	}
	return ids
}

// replayed is the state a history replays to.
type replayed struct {
	workspaces map[string]*Workspace
	goals      map[string]*Goal
	tasks      map[string]*Task
	rituals    map[string]*Ritual
	schedules  map[string]*Schedule
}

// replay folds history into state with the Apply functions alone, from
// nothing, checking that each aggregate's versions run 1, 2, 3, ...
func replay(history []entry) (*replayed, error) {
	r := &replayed{workspaces: map[string]*Workspace{}, goals: map[string]*Goal{}, tasks: map[string]*Task{}, rituals: map[string]*Ritual{}, schedules: map[string]*Schedule{}}
	versions := map[string]uint64{}
	for i, e := range history {
		if err := r.apply(versions, e); err != nil {
			return nil, fmt.Errorf("history[%d]: %w", i, err)
		}
	}
	return r, nil
}

// apply folds one entry of a history into r with the Apply functions alone,
// its event encoded and decoded as the log gives it back (so a world that
// equals its replay decides into the states the views replay to), checking that its version follows the aggregate's in versions, which it
// advances.
func (r *replayed) apply(versions map[string]uint64, e entry) error {
	k := e.AggregateType + "/" + e.AggregateID
	if e.Version != versions[k]+1 {
		return fmt.Errorf("%s version %d follows %d", k, e.Version, versions[k])
	}
	versions[k] = e.Version
	// Replayed as the log gives it back: encoded and decoded again.
	data, err := json.Marshal(e.Event)
	if err != nil {
		return err
	}
	ev, err := DecodeEvent(e.Event.EventType(), data)
	if err != nil {
		return err
	}
	switch e.AggregateType {
	case AggWorkspace:
		r.workspaces[e.AggregateID], err = ApplyWorkspace(r.workspaces[e.AggregateID], e.AggregateID, ev, e.Recorded)
	case AggGoal:
		r.goals[e.AggregateID], err = ApplyGoal(r.goals[e.AggregateID], e.AggregateID, e.Workspace, ev, e.Recorded)
	case AggTask:
		r.tasks[e.AggregateID], err = ApplyTask(r.tasks[e.AggregateID], e.AggregateID, e.Workspace, ev, e.Recorded)
	case AggRitual:
		r.rituals[e.AggregateID], err = ApplyRitual(r.rituals[e.AggregateID], e.AggregateID, e.Workspace, ev, e.Recorded)
	case AggSchedule:
		r.schedules[e.AggregateID], err = ApplySchedule(r.schedules[e.AggregateID], e.AggregateID, e.Workspace, ev, e.Recorded)
	default:
		err = fmt.Errorf("unknown aggregate type %q", e.AggregateType)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", e.Event.EventType(), err)
	}
	return nil
}

// requireReplays checks that the history replays, from nothing, to states
// deep-equal to the committed world's.
func (w *world) requireReplays() {
	w.t.Helper()
	r, err := replay(w.history)
	require.NoError(w.t, err)
	w.requireSameAs(r, reflect.DeepEqual)
}

// requireReplaysFromWire checks the same after every event went through its
// wire form (json.Marshal, DecodeEvent). States are compared by their JSON,
// because the wire does not keep the difference between an empty and a nil
// slice.
func (w *world) requireReplaysFromWire() {
	w.t.Helper()
	wire := make([]entry, len(w.history))
	for i, e := range w.history {
		b, err := json.Marshal(e.Event)
		require.NoError(w.t, err)
		ev, err := DecodeEvent(e.Event.EventType(), b)
		require.NoError(w.t, err, "decode %s %s", e.Event.EventType(), b)
		wire[i] = e
		wire[i].Event = ev
	}
	r, err := replay(wire)
	require.NoError(w.t, err)
	w.requireSameAs(r, func(a, b any) bool {
		ja, erra := json.Marshal(a)
		jb, errb := json.Marshal(b)
		return erra == nil && errb == nil && string(ja) == string(jb)
	})
}

func (w *world) requireSameAs(r *replayed, equal func(a, b any) bool) {
	w.t.Helper()
	for _, id := range w.aggregates(AggWorkspace) {
		got, err := w.o.Workspace(id)
		require.NoError(w.t, err)
		require.True(w.t, equal(r.workspaces[id], got), "workspace %s:\nreplayed  %+v\ncommitted %+v", id, r.workspaces[id], got)
	}
	for _, id := range w.aggregates(AggGoal) {
		require.True(w.t, equal(r.goals[id], w.goal(id)), "goal %s:\nreplayed  %+v\ncommitted %+v", id, r.goals[id], w.goal(id))
	}
	for _, id := range w.aggregates(AggTask) {
		require.True(w.t, equal(r.tasks[id], w.task(id)), "task %s:\nreplayed  %+v\ncommitted %+v", id, r.tasks[id], w.task(id))
	}
	for _, id := range w.aggregates(AggRitual) {
		got := present(w.t, w.o.Ritual, "ritual", id)
		require.True(w.t, equal(r.rituals[id], got), "ritual %s:\nreplayed  %+v\ncommitted %+v", id, r.rituals[id], got)
	}
	require.Len(w.t, r.rituals, len(w.aggregates(AggRitual)))
	for _, id := range w.aggregates(AggSchedule) {
		got := present(w.t, w.o.Schedule, "schedule", id)
		require.True(w.t, equal(r.schedules[id], got), "schedule %s:\nreplayed  %+v\ncommitted %+v", id, r.schedules[id], got)
	}
	require.Len(w.t, r.schedules, len(w.aggregates(AggSchedule)))
	require.Len(w.t, r.workspaces, len(w.aggregates(AggWorkspace)))
	require.Len(w.t, r.goals, len(w.aggregates(AggGoal)))
	require.Len(w.t, r.tasks, len(w.aggregates(AggTask)))
}

// snapshot returns the JSON of every aggregate, to show that deciding a
// command did not modify the world it was decided against.
func (w *world) snapshot() string {
	w.t.Helper()
	var all []any
	for _, id := range w.aggregates(AggWorkspace) {
		ws, _ := w.o.Workspace(id)
		all = append(all, ws)
	}
	for _, id := range w.aggregates(AggGoal) {
		all = append(all, w.goal(id))
	}
	for _, id := range w.aggregates(AggTask) {
		all = append(all, w.task(id))
	}
	for _, id := range w.aggregates(AggRitual) {
		r, _ := w.o.Ritual(id)
		all = append(all, r)
	}
	for _, id := range w.aggregates(AggSchedule) {
		x, _ := w.o.Schedule(id)
		all = append(all, x)
	}
	b, err := json.Marshal(all)
	require.NoError(w.t, err)
	return string(b)
}

// historyOf returns the events of aggregate id in the history, in order.
func (w *world) historyOf(id string) []Event {
	var es []Event
	for _, e := range w.history {
		if e.AggregateID == id {
			es = append(es, e.Event)
		}
	}
	return es
}
