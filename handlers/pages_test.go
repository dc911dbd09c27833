package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// applied waits until the views have applied the record at seq, so that what
// the test reads next includes it.
func (b *bundle) applied(t *testing.T, seq uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.store.WaitFor(ctx, seq), "the views apply record %d", seq)
}

// listAll sends list query name with q, then again with after set to each
// reply's next until a reply has none, and returns the items of every page
// and the number of pages. Each reply must be ok.
func (b *bundle) listAll(t *testing.T, name string, q schemas.Query) ([]json.RawMessage, int) {
	t.Helper()
	var all []json.RawMessage
	for pages := 1; pages < 1000; pages++ {
		r := b.request(t, "dwr.q.default."+name, q, nil)
		require.True(t, r.OK, "%s page %d: %+v", name, pages, r.Error)
		var items []json.RawMessage
		require.NoError(t, json.Unmarshal(r.Result, &items))
		all = append(all, items...)
		if r.Next == "" {
			return all, pages
		}
		require.NotEmpty(t, items, "a page with a next holds items")
		q.After = r.Next
	}
	t.Fatalf("%s: paging does not end", name)
	return nil, 0
}

// ids returns the "id" (or, lacking one, the "name" or "ver") of each item.
func ids(t *testing.T, items []json.RawMessage) []string {
	t.Helper()
	out := make([]string, len(items))
	for i, it := range items {
		var v struct {
			ID   string `json:"id"`
			Name string `json:"name"`
			Ver  uint64 `json:"ver"`
		}
		require.NoError(t, json.Unmarshal(it, &v))
		switch {
		case v.ID != "" && v.Ver == 0:
			out[i] = v.ID
		case v.Name != "":
			out[i] = v.Name
		default:
			out[i] = fmt.Sprint(v.Ver)
		}
	}
	return out
}

// task.list answers a page of at most the default limit, with a next that
// continues after it, so that following next lists every task once, in
// order — across every state (the cursor names the state), by state and by
// goal — whatever the limit.
func TestTaskListPagesThroughEveryTask(t *testing.T) {
	b := setup(t)
	g, _ := b.mustCommand(t, "goal.create", map[string]any{"title": "many"})
	var specs []map[string]any
	const n = handlers.DefaultLimit + 20
	for i := range n {
		spec := map[string]any{"key": fmt.Sprintf("t%03d", i), "queue": "q"}
		if i%2 == 1 {
			spec["depends_on"] = []string{fmt.Sprintf("t%03d", i-1)}
		}
		specs = append(specs, spec)
	}
	plan, seq := b.mustCommand(t, "plan.submit", map[string]any{"goal_id": g.ID, "tasks": specs})
	require.Len(t, plan.Tasks, n)
	for _, pt := range plan.Tasks[:6:6] {
		if pt.Key[len(pt.Key)-1]%2 == 0 { // t000, t002, t004: ready, claimed
			_, seq = b.mustCommand(t, "task.claim", map[string]any{"task_id": pt.TaskID, "executor": "e"})
		}
	}
	b.applied(t, seq)
	want, err := b.store.ListTasks("default", projections.TaskFilter{})
	require.NoError(t, err)
	require.Len(t, want, n)
	wantIDs := make([]string, n)
	for i, tk := range want {
		wantIDs[i] = tk.ID
	}

	// No limit: the default, then the rest.
	r := b.request(t, "dwr.q.default.task.list", schemas.Query{}, minSeqHeader(seq))
	require.True(t, r.OK, "%+v", r.Error)
	var first []json.RawMessage
	require.NoError(t, json.Unmarshal(r.Result, &first))
	require.Len(t, first, handlers.DefaultLimit)
	require.Equal(t, "ready/"+ids(t, first)[handlers.DefaultLimit-1], r.Next, "every state: the cursor names the state")
	all, pages := b.listAll(t, "task.list", schemas.Query{})
	require.Equal(t, 2, pages)
	require.Equal(t, wantIDs, ids(t, all))

	for _, limit := range []int{1, 7, n} {
		all, _ := b.listAll(t, "task.list", schemas.Query{Limit: limit})
		require.Equal(t, wantIDs, ids(t, all), "limit %d", limit)
		for _, q := range []schemas.Query{{Limit: limit, State: domain.StatePending}, {Limit: limit, GoalID: g.ID}} {
			got, _ := b.listAll(t, "task.list", q)
			f := projections.TaskFilter{State: q.State, GoalID: q.GoalID}
			w, err := b.store.ListTasks("default", f)
			require.NoError(t, err)
			require.Len(t, got, len(w))
			for i := range w {
				require.Equal(t, w[i].ID, ids(t, got)[i])
			}
		}
	}

	// Limits and cursors outside the contract are refused, naming the field.
	for q, field := range map[*schemas.Query]string{
		{Limit: handlers.MaxLimit + 1}:   "/limit",
		{Limit: -1}:                      "/limit",
		{After: "nostate/" + wantIDs[0]}: "/after",
		{State: domain.StateReady, After: "ready/" + wantIDs[0]}: "/after",
	} {
		r := b.request(t, "dwr.q.default.task.list", *q, nil)
		require.False(t, r.OK, "%+v", *q)
		require.Equal(t, string(domain.CodeInvalid), r.Error.Code)
		require.Equal(t, field, r.Error.Fields[0].Pointer, r.Error.Message)
	}
}

// goal.list, approval.list, member.list and events page the same way.
func TestListQueriesPage(t *testing.T) {
	b := setup(t)
	var goals []string
	for i := range 5 {
		g, _ := b.mustCommand(t, "goal.create", map[string]any{"title": fmt.Sprint("goal ", i)})
		goals = append(goals, g.ID)
	}
	var gated []string
	for i := range 5 {
		tk, _ := b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "q",
			"title": fmt.Sprint("gated ", i), "approval": map[string]any{"role": "ops"}}})
		gated = append(gated, tk.ID)
	}
	for _, id := range gated[1:3] {
		b.mustCommand(t, "task.cancel", map[string]any{"task_id": id})
	}
	for _, name := range []string{"carol", "alice", "bob"} {
		b.st.Member(t, "default", name, domain.RoleViewer)
	}
	worked, _ := b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "q"}})
	task := worked.ID
	b.mustCommand(t, "task.claim", map[string]any{"task_id": task, "executor": "e"})
	var seq uint64
	for i := range 4 {
		_, seq = b.mustCommand(t, "task.checkpoint", map[string]any{"task_id": task, "attempt": 1, "checkpoint": i})
	}
	b.applied(t, seq)

	for _, c := range []struct {
		name string
		q    schemas.Query
		want []string
	}{
		{"goal.list", schemas.Query{Limit: 2}, goals},
		{"approval.list", schemas.Query{Limit: 2}, []string{domain.ApprovalID(gated[0], 1), domain.ApprovalID(gated[3], 1), domain.ApprovalID(gated[4], 1)}},
		{"member.list", schemas.Query{Limit: 2}, []string{"alice", "bob", "carol"}},
	} {
		all, pages := b.listAll(t, c.name, c.q)
		require.Equal(t, c.want, ids(t, all), c.name)
		require.Equal(t, (len(c.want)+1)/2, pages, c.name)
	}

	// Every state: pending first, then withdrawn, the cursor naming the state.
	all, pages := b.listAll(t, "approval.list", schemas.Query{State: "all", Limit: 1})
	require.Len(t, all, 5)
	require.Equal(t, 5, pages)
	var states []string
	for _, it := range all {
		var a projections.ApprovalView
		require.NoError(t, json.Unmarshal(it, &a))
		states = append(states, a.State)
	}
	require.Equal(t, []string{"pending", "pending", "pending", "withdrawn", "withdrawn"}, states)

	// events: after a version, the cursor of the last event listed.
	hist, err := b.store.History(t.Context(), b.svc.Log(), domain.AggTask, task)
	require.NoError(t, err)
	all, _ = b.listAll(t, "events", schemas.Query{ID: task, Limit: 2})
	require.Len(t, all, len(hist))
	for i, e := range hist {
		require.JSONEq(t, string(e.Raw), string(all[i]))
	}
	r := b.request(t, "dwr.q.default.events", schemas.Query{ID: task, After: "two"}, nil)
	require.False(t, r.OK)
	require.Equal(t, "/after", r.Error.Fields[0].Pointer)

	// The events are read from the log: a page ends, with a next, once it
	// has read its share of log records (here one record, whose events it
	// takes: each of the task's commands was its own record).
	defer handlers.SetHistoryReadLimit(1)()
	all, pages = b.listAll(t, "events", schemas.Query{ID: task, Limit: 1000})
	require.Len(t, all, len(hist))
	for i, e := range hist {
		require.JSONEq(t, string(e.Raw), string(all[i]))
	}
	require.Equal(t, 6, pages, "a page for each record: the task's creation, its claim and four checkpoints")
}

// A list whose items would make a reply larger than NATS carries answers
// the items that fit, under the connection's max payload, and a next for
// the rest (before, such a reply was never delivered: the client timed
// out).
func TestListRepliesStayUnderTheMaxPayload(t *testing.T) {
	b := setup(t)
	blob := strings.Repeat("x", 200<<10)
	const n = 7
	var created []string
	for i := range n {
		tk, _ := b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "q",
			"title": fmt.Sprint("big ", i), "input": map[string]any{"blob": blob}}})
		created = append(created, tk.ID)
	}
	max := int(b.nc.MaxPayload())
	var all []json.RawMessage
	q, pages := schemas.Query{State: domain.StateReady}, 0
	for {
		m := b.request(t, "dwr.q.default.task.list", q, nil)
		require.True(t, m.OK, "%+v", m.Error)
		raw, err := json.Marshal(m)
		require.NoError(t, err)
		require.Less(t, len(raw), max)
		var items []json.RawMessage
		require.NoError(t, json.Unmarshal(m.Result, &items))
		require.NotEmpty(t, items)
		all = append(all, items...)
		pages++
		if m.Next == "" {
			break
		}
		q.After = m.Next
	}
	require.Greater(t, pages, 1, "%d tasks of 200 KiB take more than one reply", n)
	require.Equal(t, created, ids(t, all))
}

// A single result larger than a reply can carry is refused with too_large
// and a message that says what to do instead; a list whose first item alone
// is too large says how to list past it.
func TestTooLargeResultsSayWhatToDo(t *testing.T) {
	b := bundleOf(servicetest.Start(t, "", servicetest.Options{Secure: true, Log: eventstore.NewMemoryLog(), Config: handlers.Config{MaxReplyBytes: 16 << 10}}))
	g, _ := b.mustCommand(t, "goal.create", map[string]any{"title": "one big task"})
	plan, _ := b.mustCommand(t, "plan.submit", map[string]any{"goal_id": g.ID, "tasks": []map[string]any{
		{"key": "big", "queue": "q", "input": map[string]any{"blob": strings.Repeat("x", 20<<10)}},
		{"key": "small", "queue": "q"}}})
	keys := map[string]string{}
	for _, pt := range plan.Tasks {
		keys[pt.Key] = pt.TaskID
	}
	bigID, smallID := keys["big"], keys["small"]
	wide, _ := b.mustCommand(t, "goal.create", map[string]any{"title": "a wide plan"})
	var specs []map[string]any
	for i := range 200 {
		specs = append(specs, map[string]any{"key": fmt.Sprintf("k%03d", i), "queue": "q"})
	}
	_, seq := b.mustCommand(t, "plan.submit", map[string]any{"goal_id": wide.ID, "tasks": specs})

	tooLarge := func(name string, q schemas.Query, says ...string) {
		t.Helper()
		r := b.request(t, "dwr.q.default."+name, q, minSeqHeader(seq))
		require.False(t, r.OK, name)
		require.Equal(t, string(domain.CodeTooLarge), r.Error.Code, name)
		for _, s := range says {
			require.Contains(t, r.Error.Message, s, name)
		}
	}
	tooLarge("task.get", schemas.Query{ID: bigID}, "task "+bigID, "the events query")
	tooLarge("goal.get", schemas.Query{ID: wide.ID}, "goal "+wide.ID, "task.list with goal_id "+wide.ID)
	tooLarge("events", schemas.Query{ID: bigID}, "max_payload")

	// Listing the first goal's tasks meets the big one alone: the refusal
	// names the cursor past it, and the listing goes on from there.
	var listed []string
	sawBig, q := false, schemas.Query{GoalID: g.ID}
	for range 10 {
		r := b.request(t, "dwr.q.default.task.list", q, nil)
		if !r.OK {
			require.Equal(t, string(domain.CodeTooLarge), r.Error.Code)
			require.Contains(t, r.Error.Message, "task "+bigID+" alone")
			require.Contains(t, r.Error.Message, fmt.Sprintf("list past it with after %q", bigID))
			sawBig, q.After = true, bigID
			continue
		}
		var items []json.RawMessage
		require.NoError(t, json.Unmarshal(r.Result, &items))
		listed = append(listed, ids(t, items)...)
		if r.Next == "" {
			break
		}
		q.After = r.Next
	}
	require.True(t, sawBig)
	require.Equal(t, []string{smallID}, listed)
}

// goal.list lists the goals of one state when asked (open, achieved,
// failed, cancelled), page by page; an unknown state is refused, naming the
// field. Goals are not kept by state, so a page reads a bounded number of
// goals of other states and may end with fewer than its limit and a cursor.
func TestGoalListFiltersByState(t *testing.T) {
	b := setup(t)
	var open, cancelled []string
	var seq uint64
	for i := range 9 {
		g, _ := b.mustCommand(t, "goal.create", map[string]any{"title": fmt.Sprintf("g%d", i)})
		if i%3 == 0 {
			_, seq = b.mustCommand(t, "goal.cancel", map[string]any{"goal_id": g.ID})
			cancelled = append(cancelled, g.ID)
		} else {
			open = append(open, g.ID)
		}
	}
	b.applied(t, seq)

	got, _ := b.listAll(t, "goal.list", schemas.Query{State: schemas.GoalStateCancelled, Limit: 2})
	require.Equal(t, cancelled, ids(t, got), "the cancelled goals, in order, page by page")
	got, _ = b.listAll(t, "goal.list", schemas.Query{State: schemas.GoalStateOpen, Limit: 4})
	require.Equal(t, open, ids(t, got))
	got, _ = b.listAll(t, "goal.list", schemas.Query{State: schemas.GoalStateAchieved})
	require.Empty(t, got)
	got, _ = b.listAll(t, "goal.list", schemas.Query{})
	require.Len(t, got, 9, "no filter: every goal")
	all := ids(t, got)

	// Newest first: the same goals backwards, page by page, with or
	// without a state.
	got, _ = b.listAll(t, "goal.list", schemas.Query{NewestFirst: true, Limit: 2})
	require.Equal(t, reversed(all), ids(t, got))
	got, _ = b.listAll(t, "goal.list", schemas.Query{NewestFirst: true, State: schemas.GoalStateCancelled, Limit: 1})
	require.Equal(t, reversed(cancelled), ids(t, got))
	r0 := b.request(t, "dwr.q.default.approval.list", schemas.Query{NewestFirst: true}, nil)
	require.False(t, r0.OK)
	require.Equal(t, [2]string{schemas.CodeInvalid, "/newest_first"}, [2]string{r0.Error.Code, r0.Error.Fields[0].Pointer})

	r := b.request(t, "dwr.q.default.goal.list", schemas.Query{State: "done"}, nil)
	require.False(t, r.OK)
	require.Equal(t, schemas.CodeInvalid, r.Error.Code)
	require.Equal(t, "/state", r.Error.Fields[0].Pointer)
	require.Contains(t, r.Error.Message, `state "done" is not one of [open achieved failed cancelled]`)

	// A filter sent to a query that does not take it is refused, not
	// ignored: the caller would get more than it asked for.
	for _, c := range []struct {
		query, field, msg string
		q                 schemas.Query
	}{
		{"approval.list", "/goal_id", "approval.list takes only state and role, not goal_id", schemas.Query{GoalID: "G"}},
		{"goal.list", "/role", "goal.list takes only state, schedule and labels, not role", schemas.Query{Role: "ops"}},
		{"ritual.list", "/state", "ritual.list takes no filter, not state", schemas.Query{State: "open"}},
		{"goal.list", "/queue", "goal.list takes only state, schedule and labels, not queue", schemas.Query{Queue: "q"}},
		{"approval.list", "/queue", "approval.list takes only state and role, not queue", schemas.Query{Queue: "q"}},
	} {
		r := b.request(t, "dwr.q.default."+c.query, c.q, nil)
		require.False(t, r.OK, c.query)
		require.Equal(t, schemas.CodeInvalid, r.Error.Code, c.query)
		require.Equal(t, c.field, r.Error.Fields[0].Pointer, c.query)
		require.Contains(t, r.Error.Message, c.msg)
	}

	// A page passes at most its scan limit of goals of other states: here
	// 2, so the first page of cancelled goals (the first goal is one) holds
	// it and stops at the next two open goals, and so on.
	defer handlers.SetListScanLimit(2)()
	pages := b.pages(t, "goal.list", schemas.Query{State: schemas.GoalStateCancelled})
	require.Equal(t, [][]string{{cancelled[0]}, {cancelled[1]}, {cancelled[2]}, {}}, pages,
		"each page stopped after two open goals; the last read the two after the last cancelled one")

	// Newest first, the pages stop the same way, from the other end.
	pages = b.pages(t, "goal.list", schemas.Query{State: schemas.GoalStateCancelled, NewestFirst: true})
	require.Equal(t, [][]string{{}, {cancelled[2]}, {cancelled[1]}, {cancelled[0]}}, pages,
		"from the newest: the first page stopped at the two open goals after the last cancelled one, each next after the two before a cancelled one")
}

// pages lists query name from q page by page (at most 20 pages) and
// returns the ids of each page.
func (b *bundle) pages(t *testing.T, name string, q schemas.Query) [][]string {
	t.Helper()
	var pages [][]string
	for len(pages) < 20 {
		r := b.request(t, "dwr.q.default."+name, q, nil)
		require.True(t, r.OK, "%+v", r.Error)
		var items []json.RawMessage
		require.NoError(t, json.Unmarshal(r.Result, &items))
		pages = append(pages, ids(t, items))
		if r.Next == "" {
			break
		}
		q.After = r.Next
	}
	return pages
}

// reversed returns a copy of s, last first.
func reversed(s []string) []string {
	r := slices.Clone(s)
	slices.Reverse(r)
	return r
}

// task.list with a queue lists that queue's tasks only, with the other
// filters, page by page; a page passes at most its scan limit of other
// queues' tasks, then ends with a cursor that continues after them.
func TestTaskListFiltersByQueue(t *testing.T) {
	b := setup(t)
	g, _ := b.mustCommand(t, "goal.create", map[string]any{"title": "queues"})
	var specs []map[string]any
	for i := range 9 {
		queue := "mail"
		if i%3 == 0 {
			queue = "deploys"
		}
		specs = append(specs, map[string]any{"key": fmt.Sprintf("t%d", i), "queue": queue})
	}
	plan, _ := b.mustCommand(t, "plan.submit", map[string]any{"goal_id": g.ID, "tasks": specs})
	var deploys, mail []string
	for _, pt := range plan.Tasks {
		if pt.Key == "t0" || pt.Key == "t3" || pt.Key == "t6" {
			deploys = append(deploys, pt.TaskID)
		} else {
			mail = append(mail, pt.TaskID)
		}
	}
	cancelled := deploys[1]
	_, seq := b.mustCommand(t, "task.cancel", map[string]any{"task_id": cancelled})
	b.applied(t, seq)
	slices.Sort(deploys)
	slices.Sort(mail)

	got, _ := b.listAll(t, "task.list", schemas.Query{Queue: "deploys", Limit: 2})
	require.ElementsMatch(t, deploys, ids(t, got), "every deploys task, and none of mail's")
	got, _ = b.listAll(t, "task.list", schemas.Query{Queue: "mail", GoalID: g.ID})
	require.Equal(t, mail, ids(t, got), "with the goal's filter, in id order")
	got, _ = b.listAll(t, "task.list", schemas.Query{Queue: "deploys", State: domain.StateCancelled})
	require.Equal(t, []string{cancelled}, ids(t, got), "with the state's filter")
	got, _ = b.listAll(t, "task.list", schemas.Query{Queue: "nothing"})
	require.Empty(t, got)
	got, _ = b.listAll(t, "task.list", schemas.Query{Queue: "mail", GoalID: g.ID, NewestFirst: true, Limit: 2})
	require.Equal(t, reversed(mail), ids(t, got), "the newest first, page by page")
	r := b.request(t, "dwr.q.default.task.list", schemas.Query{Queue: "mail", NewestFirst: true}, nil)
	require.False(t, r.OK)
	require.Equal(t, [2]string{schemas.CodeInvalid, "/newest_first"}, [2]string{r.Error.Code, r.Error.Fields[0].Pointer})
	require.Contains(t, r.Error.Message, "give state, goal_id or labels with newest_first")

	r = b.request(t, "dwr.q.default.task.list", schemas.Query{Queue: "no such/queue"}, nil)
	require.False(t, r.OK)
	require.Equal(t, [2]string{schemas.CodeInvalid, "/queue"}, [2]string{r.Error.Code, r.Error.Fields[0].Pointer})
	require.Contains(t, r.Error.Message, `queue "no such/queue" is not a queue name`)

	// A page passes at most 2 tasks of other queues: the pages of the
	// goal's deploys tasks (ids in order; a deploys task every third)
	// each stop after two of mail's, and still hold every deploys task.
	defer handlers.SetListScanLimit(2)()
	pages := b.pages(t, "task.list", schemas.Query{Queue: "deploys", GoalID: g.ID})
	var all []string
	for _, p := range pages {
		all = append(all, p...)
	}
	require.Equal(t, deploys, all, "every deploys task once, across the pages")
	require.Greater(t, len(pages), 2, "the scan limit ended pages early: %v", pages)
}
