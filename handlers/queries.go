package handlers

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/handlers/endpoints"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// MaxQueryBytes bounds a query's body.
const MaxQueryBytes = 64 << 10

// QueryNames lists the query endpoints (the last tokens of dwr.q.<ws>.<query>).
var QueryNames = []string{"workspace.list", "goal.get", "goal.list", "task.get", "task.list", "events", "command.get",
	"approval.list", "approval.get", "approver.list", "member.list", "queue.list", "ritual.get", "ritual.list", "schedule.get", "schedule.list", "feed", "queue.key"}

// startQueries serves the queries on a NATS connection of their own, made
// with the options of the service's: their replies — up to MaxReplyBytes
// each, a flood of them from one caller tens of MiB a second — then never
// queue ahead of the writer's appends, its lease's renewals and the
// commands' replies on one connection. (They did: a viewer keeping a
// thousand large listings in flight cost the writer its lease, and every
// caller's commands failed until it came back.) stop stops the endpoints
// and closes the connection.
func (s *Service) startQueries() (stop func(), err error) {
	nc, err := s.connectionOf("queries")
	if err != nil {
		return nil, err
	}
	// What queries read from JetStream (the feed) comes on it too.
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("handlers: the queries' JetStream: %w", err)
	}
	s.queriesJS.Store(&js)
	if s.artifacts != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := s.artifacts.readFrom(ctx, js); err != nil {
			s.cfg.Logger.Warn("handlers: the artifacts' chunks are read on the service's connection, not the queries'", "err", err)
		}
		cancel()
	}
	svc, err := endpoints.New(nc, endpoints.Config{Name: "dwr-query", Version: s.cfg.Version, QueueGroup: micro.DefaultQueueGroup,
		PendingLimit: endpointPending(s.cfg), Description: "dwr queries: served from the views by every replica"})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("handlers: query service: %w", err)
	}
	s.queriesEP.Store(svc)
	stop = func() { s.queriesEP.Store(nil); _ = svc.Stop(); nc.Close() }
	for _, name := range QueryNames {
		h := func(req micro.Request) {
			s.async(req, true, func(who sender) []byte { return s.handleQuery(name, req, who) })
		}
		if err := svc.Add("q_"+strings.ReplaceAll(name, ".", "_"), s.cfg.Prefix+".q.*."+name, h); err != nil {
			stop()
			return nil, fmt.Errorf("handlers: query endpoint %s: %w", name, err)
		}
	}
	for _, name := range ArtifactQueries {
		h := func(req micro.Request) {
			s.asyncRespond(req, true, func(who sender) ([]byte, micro.Headers) { return s.handleArtifact(name, req, who) })
		}
		if err := svc.Add("q_"+strings.ReplaceAll(name, ".", "_"), s.cfg.Prefix+".q.*."+name, h); err != nil {
			stop()
			return nil, fmt.Errorf("handlers: query endpoint %s: %w", name, err)
		}
	}
	return stop, nil
}

// connectionOf returns a NATS connection of the service's own for use,
// made with the options of the service's connection (so the same server,
// credentials and TLS).
func (s *Service) connectionOf(use string) (*nats.Conn, error) {
	opts := s.nc.Opts
	opts.Name += " (" + use + ")"
	nc, err := opts.Connect()
	if err != nil {
		return nil, fmt.Errorf("handlers: the %s' NATS connection: %w", use, err)
	}
	return nc, nil
}

// readJS is the JetStream context queries read with: on the queries'
// connection once it is up, so that a query's reads do not come in on the
// connection of the writer's appends.
func (s *Service) readJS() jetstream.JetStream {
	if js := s.queriesJS.Load(); js != nil {
		return *js
	}
	return s.js
}

func (s *Service) handleQuery(name string, req micro.Request, who sender) []byte {
	ws := workspaceOf(req.Subject())
	if !domain.ValidName(ws) {
		return errResponse(&schemas.Error{Code: schemas.CodeInvalid, Message: fmt.Sprintf("workspace %q in the subject is not a valid name", ws)})
	}
	p, werr := s.authorize(who, ws, "q", name)
	if werr != nil {
		return errResponse(werr)
	}
	if f := s.onQuery.Load(); f != nil {
		(*f)(p.name, name)
	}
	var q schemas.Query
	if body := req.Data(); len(body) > 0 {
		if err := schemas.CheckBounds(body, MaxQueryBytes, 8); err != nil {
			return errResponse(toWire(err, s.cfg.Logger))
		}
		if werr := decodeStrict(body, &q, "query"); werr != nil {
			// Which field: query.json says, where the decoder did not.
			if err := schemas.Validate(schemas.PathQuery, body); err != nil {
				werr = toWire(err, s.cfg.Logger)
			}
			return errResponse(werr)
		}
	}
	min, err := minSeq(req.Headers())
	if err != nil {
		return errResponse(toWire(err, s.cfg.Logger))
	}
	if werr := s.checkMinSeq(min); werr != nil {
		return errResponse(werr)
	}
	// On the writer, a query reflects every command already answered — by
	// anyone, not only those its Dwr-Min-Seq names (the caller's own): the
	// writer answers a batch before it applies it to the views.
	min = max(min, s.answeredSeq())
	if min > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.MinSeqWait)
		err := s.store.WaitFor(ctx, min)
		cancel()
		if err != nil {
			return errResponse(&schemas.Error{Code: schemas.CodeUnavailable, Message: fmt.Sprintf(
				"the views have not reached log sequence %d yet (at %d): retry shortly", min, s.store.Checkpoint())})
		}
	}
	// What a query reads from JetStream it waits for before its turn to
	// read the views: a JetStream slow to answer would otherwise hold a
	// turn that every workspace's queries share.
	var pre prefetched
	if name == "queue.list" {
		if pre.consumers, err = s.dispatch.consumers(); err != nil {
			return errResponse(toWire(fmt.Errorf("handlers: the work stream's consumers: %w", err), s.cfg.Logger))
		}
	}
	// Reading the views takes the CPU: a caller's queries take turns with
	// the others' (its workspace's with the other workspaces'), and leave
	// the rest of it to the service's own work.
	leave, _ := s.reading.enter(context.Background(), ws, who.key(), 1) // never ends before its turn
	defer leave()
	seq := s.store.Checkpoint()
	res, next, err := s.query(name, ws, p, q, pre)
	if err != nil {
		return errResponse(toWire(err, s.cfg.Logger))
	}
	if s.privacy != nil {
		var werr *schemas.Error
		if res, werr = s.openReply(ws, res); werr != nil {
			return errResponse(werr)
		}
	}
	return pageResponse(seq, res, next)
}

// checkMinSeq refuses (invalid) a Dwr-Min-Seq beyond the log's end: no
// reply named that sequence, so waiting for the views to reach it could only
// time out. It costs nothing when the views already stand at seq. Above
// them, the writer compares with the last record it appended; another
// replica with the highest log end it has seen, and asks the log only when
// seq is beyond that too. When the log cannot be asked, the query waits as
// before.
func (s *Service) checkMinSeq(seq uint64) *schemas.Error {
	if seq <= s.store.Checkpoint() {
		return nil
	}
	end := s.answeredSeq()
	if end == 0 { // not the writer
		if seq <= s.logEnd.Load() {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.MinSeqWait)
		last, err := s.log.LastSeq(ctx)
		cancel()
		if err != nil {
			s.cfg.Logger.Warn("handlers: could not read the log's end for a query's "+schemas.HeaderMinSeq, "err", err)
			return nil
		}
		for {
			seen := s.logEnd.Load()
			if last <= seen || s.logEnd.CompareAndSwap(seen, last) {
				break
			}
		}
		end = last
	}
	if seq <= end {
		return nil
	}
	return &schemas.Error{Code: schemas.CodeInvalid, Message: fmt.Sprintf(
		"header %s names log sequence %d, beyond the log's end (%d): pass the seq of a reply you were given", schemas.HeaderMinSeq, seq, end)}
}

// listFilters are the filters each query takes (queue.key's queue names
// what it reads). A filter sent to a
// query that does not take it is refused rather than ignored: the caller
// would be answered more than it asked for.
var listFilters = map[string][]string{"task.list": {"state", "goal_id", "queue", "labels"}, "goal.list": {"state", "schedule", "labels"}, "approval.list": {"state", "role"},
	"queue.key": {"queue"}}

// checkFilters refuses the filters of q that query name does not take.
func checkFilters(name string, q schemas.Query) error {
	switch {
	case q.NewestFirst && name == "task.list" && q.State == "" && q.GoalID == "" && len(q.Labels) == 0:
		return &schemas.Error{Code: schemas.CodeInvalid, Message: "task.list lists the newest first within one state, one goal or labels: give state, goal_id or labels with newest_first",
			Fields: []schemas.FieldError{{Pointer: "/newest_first", Message: "needs state, goal_id or labels"}}}
	case q.Key != "" && name != "goal.get":
		return &schemas.Error{Code: schemas.CodeInvalid, Message: fmt.Sprintf("%s takes no key: a key reads a goal (goal.get); leave it out", name),
			Fields: []schemas.FieldError{{Pointer: "/key", Message: "not an option of " + name}}}
	case q.NewestFirst && name != "goal.list" && name != "task.list":
		return &schemas.Error{Code: schemas.CodeInvalid, Message: fmt.Sprintf("%s lists in one order only: newest_first is goal.list's and task.list's; leave it out", name),
			Fields: []schemas.FieldError{{Pointer: "/newest_first", Message: "not an option of " + name}}}
	}
	labels := ""
	if len(q.Labels) > 0 {
		labels = "given"
	}
	for _, f := range [...]struct{ field, value string }{{"state", q.State}, {"goal_id", q.GoalID}, {"role", q.Role}, {"queue", q.Queue}, {"schedule", q.Schedule}, {"labels", labels}} {
		if f.value == "" || slices.Contains(listFilters[name], f.field) {
			continue
		}
		takes := "no filter"
		if fs := listFilters[name]; len(fs) > 0 {
			takes = "only " + fs[len(fs)-1]
			if len(fs) > 1 {
				takes = "only " + strings.Join(fs[:len(fs)-1], ", ") + " and " + fs[len(fs)-1]
			}
		}
		return &schemas.Error{Code: schemas.CodeInvalid, Message: fmt.Sprintf("%s takes %s, not %s: leave it out", name, takes, f.field),
			Fields: []schemas.FieldError{{Pointer: "/" + f.field, Message: "not a filter of " + name}}}
	}
	return nil
}

// goalStates are the states goal.list filters by.
var goalStates = []string{schemas.GoalStateOpen, schemas.GoalStateAchieved, schemas.GoalStateFailed, schemas.GoalStateCancelled}

// maxStateScan bounds the goals of other states a goal.list page with a
// state filter reads, and the tasks of other queues a task.list page with a
// queue filter reads: such a page may hold fewer than its limit, even none,
// and a cursor.
const maxStateScan = 10_000

// stateScanOverride, when set, replaces maxStateScan (tests).
var stateScanOverride atomic.Int64

// passOver counts an item a filtered page reads but does not hold (the
// views keep no index by what the filter selects): at maxStateScan of them
// (or the tests' override) the page ends there, cursor its next. It
// reports whether to read on.
func (p *page) passOver(cursor string) bool {
	limit := int64(maxStateScan)
	if n := stateScanOverride.Load(); n > 0 {
		limit = n
	}
	if p.passed++; p.passed < limit {
		return true
	}
	p.next = cursor
	return false
}

// indexedLabel is the label a labels filter is read through, in the views'
// index by label: the first by name (the others are checked).
func indexedLabel(labels schemas.Labels) (name, value string) {
	name = slices.Min(slices.Collect(maps.Keys(labels)))
	return name, labels[name]
}

// hasLabels reports whether labels hold every label of want, each with its
// value (an empty value too: the label is there).
func hasLabels(labels, want schemas.Labels) bool {
	for k, v := range want {
		if have, ok := labels[k]; !ok || have != v {
			return false
		}
	}
	return true
}

// invalidQueueName refuses name at /queue: it is not a queue name.
func invalidQueueName(name string) *schemas.Error { return invalidName("queue", name) }

// invalidName refuses name at /<what>: it is not a name of a what (a
// queue, a schedule).
func invalidName(what, name string) *schemas.Error {
	return &schemas.Error{Code: schemas.CodeInvalid, Message: fmt.Sprintf("%s %q is not a %s name", what, name, what),
		Fields: []schemas.FieldError{{Pointer: "/" + what, Message: "want a " + what + " name: 1-63 lower-case letters, digits, '_' or '-'"}}}
}

// unknownState is the refusal of a list query's state filter, state, that
// is not one of oneOf (as the message lists them); field says so at /state.
func unknownState(state, oneOf, field string) error {
	return &schemas.Error{Code: schemas.CodeInvalid, Message: fmt.Sprintf("state %q is not one of %s", state, oneOf),
		Fields: []schemas.FieldError{{Pointer: "/state", Message: field}}}
}

// prefetched is what a query read from JetStream before its turn to read
// the views: for queue.list, the work stream's consumers.
type prefetched struct {
	consumers []*jetstream.ConsumerInfo
}

// query answers query name in workspace ws for actor, the identity that
// asks, with what it read before (pre): the result, and for a list query
// the cursor of the next page when more follow. No result is larger than a
// reply can carry.
func (s *Service) query(name, ws string, p principal, q schemas.Query, pre prefetched) (json.RawMessage, string, error) {
	actor := p.name
	if q.Limit < 0 || q.Limit > MaxLimit {
		msg := fmt.Sprintf("must be between 0 (%d) and %d", DefaultLimit, MaxLimit)
		return nil, "", &schemas.Error{Code: schemas.CodeInvalid, Message: "limit " + msg,
			Fields: []schemas.FieldError{{Pointer: "/limit", Message: msg}}}
	}
	limit := cmp.Or(q.Limit, DefaultLimit)
	if err := checkFilters(name, q); err != nil {
		return nil, "", err
	}
	budget := s.replyBudget()
	so := &signOffs{store: s.store, ws: ws} // a pending approval's sign-offs, as they count now
	notFound := func(what string) error {
		return &schemas.Error{Code: schemas.CodeNotFound, Message: fmt.Sprintf("%s %q not found in workspace %q", what, q.ID, ws)}
	}
	switch name {
	case "workspace.list":
		if !p.global {
			// A member sees its own workspace, never another's (its
			// members, approvers, queues and command keys).
			w, err := s.store.Workspace(ws)
			wss := []*domain.Workspace{}
			if w != nil {
				wss = append(wss, w)
			}
			return one(wss, err, budget, tooLargeReply(budget))
		}
		wss, err := s.store.ListWorkspaces()
		return one(nonNil(wss), err, budget, tooLargeReply(budget))
	case "goal.get":
		if q.Key != "" {
			// The goal made last with the key.
			if q.ID != "" {
				return nil, "", &schemas.Error{Code: schemas.CodeInvalid, Message: "goal.get reads a goal by its id or by its key: give one",
					Fields: []schemas.FieldError{{Pointer: "/key", Message: "not with id"}}}
			}
			if err := domain.CheckGoalKey(q.Key, ""); err != nil {
				return nil, "", err
			}
			id, err := s.store.GoalByKey(ws, q.Key)
			if err != nil {
				return nil, "", err
			}
			if id == "" {
				return nil, "", &schemas.Error{Code: schemas.CodeNotFound, Message: fmt.Sprintf("no goal of workspace %q was made with key %q", ws, q.Key)}
			}
			q.ID = id
		}
		g, err := s.store.GoalView(ws, q.ID)
		if err == nil && g == nil {
			return nil, "", notFound("goal")
		}
		return one(g, err, budget, func(size int) string {
			return fmt.Sprintf("goal %s with its plan is %d bytes, more than a reply can carry (%d): list its tasks page by page (task.list with goal_id %s)",
				q.ID, size, budget, q.ID)
		})
	case "goal.list":
		if q.State != "" && !slices.Contains(goalStates, q.State) {
			return nil, "", unknownState(q.State, fmt.Sprint(goalStates), "unknown state")
		}
		if q.Schedule != "" && !domain.ValidName(q.Schedule) {
			return nil, "", invalidName("schedule", q.Schedule)
		}
		if err := domain.CheckLabels("/labels", q.Labels); err != nil {
			return nil, "", err
		}
		pg := newPage("goal", "list its tasks page by page (task.list with its goal_id)", limit, budget)
		each := s.store.EachGoal
		if q.NewestFirst {
			each = s.store.EachGoalNewestFirst
		}
		if len(q.Labels) > 0 {
			// Through the index of one label; the others are checked.
			name, value := indexedLabel(q.Labels)
			each = func(ws, cursor string, fn func(*projections.GoalView) bool) error {
				return s.store.EachGoalLabeled(ws, name, value, cursor, q.NewestFirst, fn)
			}
		}
		err := each(ws, q.After, func(g *projections.GoalView) bool {
			if (q.State == "" || g.State == q.State) && (q.Schedule == "" || g.Schedule != nil && g.Schedule.Name == q.Schedule) && hasLabels(g.Labels, q.Labels) {
				return pg.add(g, g.ID, g.ID)
			}
			return pg.passOver(g.ID) // goals are not kept by state or schedule, nor by more than one label
		})
		return pg.result(err)
	case "queue.key":
		res, err := s.queueKeyQuery(ws, p, q)
		return res, "", err
	case "task.get":
		t, err := s.store.Task(q.ID)
		if err == nil && (t == nil || t.Workspace != ws) {
			return nil, "", notFound("task")
		}
		if err != nil {
			return nil, "", err
		}
		if t = so.task(t); so.err != nil {
			return nil, "", so.err
		}
		// A task whose history is too large leaves out its oldest payloads,
		// naming them in omitted.
		f, b, err := schemas.FitTask(t, budget)
		if err == nil && len(b) <= budget {
			return b, "", nil
		}
		return one(f, err, budget, func(size int) string {
			return fmt.Sprintf("task %s is %d bytes even without its earlier attempts' results, more than a reply can carry (%d): read it through its events (the events query with id %s, page by page)",
				q.ID, size, budget, q.ID)
		})
	case "task.list":
		if q.State != "" && !validState(q.State) {
			return nil, "", unknownState(q.State, fmt.Sprint(domain.TaskStates), "unknown state")
		}
		if q.Queue != "" && !domain.ValidName(q.Queue) {
			return nil, "", invalidQueueName(q.Queue)
		}
		if err := domain.CheckLabels("/labels", q.Labels); err != nil {
			return nil, "", err
		}
		f := projections.TaskFilter{State: q.State, GoalID: q.GoalID, After: q.After, NewestFirst: q.NewestFirst}
		pg := newPage("task", "read it through its events (the events query with its id, page by page)", limit, budget)
		if len(q.Labels) > 0 {
			// Through the index of one label, by task id; the other
			// filters are checked.
			name, value := indexedLabel(q.Labels)
			err := s.store.EachTaskLabeled(ws, name, value, q.After, q.NewestFirst, func(t *domain.Task) bool {
				if (q.State == "" || t.State == q.State) && (q.GoalID == "" || t.GoalID == q.GoalID) && (q.Queue == "" || t.Spec.Queue == q.Queue) &&
					hasLabels(t.Labels, q.Labels) {
					return pg.add(so.task(t), t.ID, t.ID)
				}
				return pg.passOver(t.ID)
			})
			return pg.result(cmp.Or(err, so.err))
		}
		err := s.store.EachTask(ws, f, func(t *domain.Task) bool {
			if q.Queue != "" && t.Spec.Queue != q.Queue {
				return pg.passOver(f.Cursor(t)) // tasks are not kept by queue
			}
			return pg.add(so.task(t), t.ID, f.Cursor(t))
		})
		return pg.result(cmp.Or(err, so.err))
	case "events":
		return s.history(ws, q, newPage("event", "raise the NATS server's max_payload", limit, budget))
	case "feed":
		return s.feedPage(ws, q, newPage("event", "raise the NATS server's max_payload", limit, budget))
	case "approval.list":
		if q.State != "" && q.State != "all" && !slices.Contains(projections.ApprovalStates, q.State) {
			return nil, "", unknownState(q.State, fmt.Sprint(projections.ApprovalStates)+" or all", "unknown approval state")
		}
		f := projections.ApprovalFilter{State: q.State, Role: q.Role, After: q.After}
		pg := newPage("approval", "read its task through its events (the events query, page by page)", limit, budget)
		err := s.store.EachApproval(ws, f, func(a *projections.ApprovalView) bool {
			so.approval(a)
			return pg.add(a, a.ID, f.Cursor(a))
		})
		return pg.result(cmp.Or(err, so.err))
	case "approval.get":
		a, err := s.store.Approval(ws, q.ID)
		if err == nil && a == nil {
			return nil, "", notFound("approval")
		}
		if err == nil {
			so.approval(a)
			err = so.err
		}
		return one(a, err, budget, tooLargeReply(budget))
	case "approver.list":
		w, err := s.workspace(ws)
		if err != nil {
			return nil, "", err
		}
		return one(nonNil(w.Approvers), nil, budget, tooLargeReply(budget))
	case "member.list":
		// A member's public key is public: it is what NATS authenticates,
		// never a secret.
		w, err := s.workspace(ws)
		if err != nil {
			return nil, "", err
		}
		return s.members(w, q, newPage("member", "raise the NATS server's max_payload", limit, budget))
	case "queue.list":
		// The queues configured, then those that stand (given to a task)
		// with the settings of their consumers, by name.
		w, err := s.workspace(ws)
		if err != nil {
			return nil, "", err
		}
		return one(s.dispatch.queueList(ws, w.Queues, pre.consumers), nil, budget, tooLargeReply(budget))
	case "ritual.get":
		return s.ritual(ws, q, budget)
	case "ritual.list":
		pg := newPage("ritual", "get it alone (ritual.get)", limit, budget)
		err := s.store.EachRitual(ws, q.After, func(r *domain.Ritual) bool { return pg.add(r, r.Name, r.Name) })
		return pg.result(err)
	case "schedule.get":
		x, err := s.store.Schedule(domain.ScheduleID(ws, q.ID))
		if err == nil && (x == nil || x.Deleted || !domain.ValidName(q.ID)) {
			return nil, "", &schemas.Error{Code: schemas.CodeNotFound, Message: fmt.Sprintf("schedule %q not found in workspace %q", q.ID, ws)}
		}
		return one(x, err, budget, tooLargeReply(budget))
	case "schedule.list":
		pg := newPage("schedule", "get it alone (schedule.get)", limit, budget)
		err := s.store.EachSchedule(ws, q.After, func(x *domain.Schedule) bool { return pg.add(x, x.Name, x.Name) })
		return pg.result(err)
	case "command.get":
		// A command id is the sender's own: another identity's command under
		// the same id is not found (domain.CommandKey).
		o, ok, err := s.store.Command(ws, domain.CommandKey(actor, q.ID))
		if err == nil && !ok {
			return nil, "", notFound("command")
		}
		return one(o, err, budget, tooLargeReply(budget))
	}
	return nil, "", &schemas.Error{Code: schemas.CodeNotFound, Message: "unknown query " + name}
}

// ritual answers ritual.get: version q.Version (the latest for 0) of the
// ritual named q.ID.
func (s *Service) ritual(ws string, q schemas.Query, budget int) (json.RawMessage, string, error) {
	id := domain.RitualID(ws, q.ID)
	r, err := s.store.Ritual(id)
	if err != nil {
		return nil, "", err
	}
	if r == nil || !domain.ValidName(q.ID) {
		return nil, "", &schemas.Error{Code: schemas.CodeNotFound, Message: fmt.Sprintf("ritual %q not found in workspace %q", q.ID, ws)}
	}
	version := cmp.Or(q.Version, r.Version)
	v, err := s.store.RitualVersion(id, version)
	if err == nil && v == nil {
		return nil, "", &schemas.Error{Code: schemas.CodeNotFound, Message: fmt.Sprintf("ritual %q has no version %d: its versions are 1 to %d", q.ID, version, r.Version),
			Fields: []schemas.FieldError{{Pointer: "/version", Message: "no such version"}}}
	}
	return one(v, err, budget, tooLargeReply(budget))
}

// members lists the members of w by name, after the name q.After.
func (s *Service) members(w *domain.Workspace, q schemas.Query, pg *page) (json.RawMessage, string, error) {
	ms := slices.Clone(w.Members)
	slices.SortFunc(ms, func(a, b domain.Member) int { return strings.Compare(a.Name, b.Name) })
	for i := range ms {
		if m := &ms[i]; m.Name > q.After && !pg.add(m, m.Name, m.Name) {
			break
		}
	}
	return pg.result(nil)
}

// workspace returns workspace ws from the views, or not_found.
func (s *Service) workspace(ws string) (*domain.Workspace, error) {
	w, err := s.store.Workspace(ws)
	if err != nil {
		return nil, err
	}
	if w == nil {
		return nil, &schemas.Error{Code: schemas.CodeNotFound, Message: fmt.Sprintf("workspace %q not found", ws)}
	}
	return w, nil
}

// nonNil returns v, or an empty list for nil: a list query answers [],
// never null.
func nonNil[T any](v []T) []T {
	if v == nil {
		v = []T{}
	}
	return v
}

func validState(s string) bool {
	for _, st := range domain.TaskStates {
		if st == s {
			return true
		}
	}
	return false
}

// historyReadBytes bounds the log records a page of an aggregate's events
// reads (its events are in them): a page that reached it ends, with a next.
// historyReadOverride, when set, replaces it (tests).
const historyReadBytes = 4 << 20

var historyReadOverride atomic.Int64

// historyReadWait bounds the time a page of events waits for the log.
const historyReadWait = 10 * time.Second

// countedRecords reads log records, counting their bytes (a listing reads
// several at once).
type countedRecords struct {
	records projections.Records
	read    atomic.Int64
}

func (c *countedRecords) Record(ctx context.Context, seq uint64) ([]byte, error) {
	rec, err := c.records.Record(ctx, seq)
	c.read.Add(int64(len(rec)))
	return rec, err
}

// history lists an aggregate's events after the version q.After; with no
// aggregate type given it looks the id up as a task, then a goal, then a
// workspace, then a ritual, then a schedule (by its name, or its id
// <ws>:<name>).
func (s *Service) history(ws string, q schemas.Query, pg *page) (json.RawMessage, string, error) {
	var after uint64
	if q.After != "" {
		v, err := strconv.ParseUint(q.After, 10, 64)
		if err != nil {
			return nil, "", &schemas.Error{Code: schemas.CodeInvalid, Message: "after must be an event's version, as a reply's next gives it",
				Fields: []schemas.FieldError{{Pointer: "/after", Message: "not an event's version"}}}
		}
		after = v
	}
	types := []string{domain.AggTask, domain.AggGoal, domain.AggWorkspace, domain.AggRitual, domain.AggSchedule}
	if q.Aggregate != "" {
		types = []string{q.Aggregate}
	}
	for _, typ := range types {
		id := q.ID
		if (typ == domain.AggRitual || typ == domain.AggSchedule) && domain.ValidName(id) {
			id = domain.RitualID(ws, id) // a schedule's id is made the same way (domain.ScheduleID)
		}
		w, ok, err := s.store.HistoryWorkspace(typ, id)
		if err != nil {
			return nil, "", err
		}
		if !ok || w != ws {
			continue
		}
		// The events are read from the log: a page ends once it has read
		// historyReadBytes of records (and the few it read ahead, whose
		// events before the stop it takes).
		ctx, cancel := context.WithTimeout(context.Background(), historyReadWait)
		records, budget := &countedRecords{records: s.log}, historyReadBytes
		if n := historyReadOverride.Load(); n > 0 {
			budget = int(n)
		}
		err = s.store.EachEvent(ctx, records, typ, id, after, func(e eventstore.Event) bool {
			if records.read.Load() > int64(budget) && pg.n > 0 {
				pg.next = pg.last
				return false
			}
			v := strconv.FormatUint(e.Version, 10)
			return pg.addRaw(e.Raw, fmt.Sprintf("%s of %s %s", v, typ, id), v)
		})
		cancel()
		return pg.result(err)
	}
	return nil, "", &schemas.Error{Code: schemas.CodeNotFound, Message: fmt.Sprintf("no aggregate %q in workspace %q", q.ID, ws)}
}
