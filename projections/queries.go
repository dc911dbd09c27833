package projections

import (
	"context"
	"encoding/binary"
	"time"

	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/schemas"
)

// WorkspacesExtending returns the names of the workspaces whose names begin
// with prefix (domain.WorkspaceLister).
func (s *Store) WorkspacesExtending(prefix string) ([]string, error) {
	var out []string
	lower := key(pWorkspace, "")
	err := s.scan(key(pWorkspace, prefix), func(k, _ []byte) error {
		out = append(out, string(k[len(lower):]))
		return nil
	})
	return out, err
}

// ListWorkspaces returns every workspace, by name.
//
// A workspace the cache holds is not decoded again (the NATS server's users
// are rebuilt from every workspace at each change of members: only the
// changed workspace is then read). The caller must not change them.
func (s *Store) ListWorkspaces() ([]*domain.Workspace, error) {
	var out []*domain.Workspace
	_, _, gen := s.cachedAt("") // before the scan's snapshot: what it reads is at least as new
	err := s.scan(key(pWorkspace, ""), func(k, v []byte) error {
		if c, ok := s.cached(string(k)); ok {
			out = append(out, c.(*domain.Workspace))
			return nil
		}
		var w domain.Workspace
		if err := json.Unmarshal(v, &w); err != nil {
			return err
		}
		s.remember(gen, string(k), &w, len(v))
		out = append(out, &w)
		return nil
	})
	return out, err
}

// GoalView is a goal with its plan graph (each node with its task's state)
// and the number of its tasks in each state.
type GoalView = schemas.GoalView

// PlanNode is one task of a goal's current plan.
type PlanNode = schemas.PlanNode

// ListGoals returns the goals of workspace ws, oldest first, at most limit
// (0 = all) after the goal id after.
func (s *Store) ListGoals(ws, after string, limit int) ([]*GoalView, error) {
	var out []*GoalView
	err := s.EachGoal(ws, after, func(g *GoalView) bool {
		out = append(out, g)
		return limit == 0 || len(out) < limit
	})
	return out, err
}

// EachGoal calls fn with the goals of workspace ws after the goal id after
// ("" for all), oldest first, until fn returns false. A goal's id is the
// cursor that continues the listing after it.
func (s *Store) EachGoal(ws, after string, fn func(*GoalView) bool) error {
	return s.eachGoal(ws, after, false, fn)
}

// EachGoalNewestFirst is EachGoal newest first: it calls fn with the goals
// of workspace ws before the goal id before ("" for all), the newest first.
// A goal's id is the cursor that continues the listing after it (with
// older goals).
func (s *Store) EachGoalNewestFirst(ws, before string, fn func(*GoalView) bool) error {
	return s.eachGoal(ws, before, true, fn)
}

// EachGoalLabeled is EachGoal, or EachGoalNewestFirst when newest, over
// the goals of workspace ws that hold label name with value, read through
// the index by label: cursor is the id of the goal to go on after (before,
// when newest).
func (s *Store) EachGoalLabeled(ws, name, value, cursor string, newest bool, fn func(*GoalView) bool) error {
	return s.eachGoalUnder(labelPrefix(pGoalLabel, ws, name, value), ws, cursor, newest, fn)
}

// EachTaskLabeled calls fn with the tasks of workspace ws that hold label
// name with value, read through the index by label, oldest first after the
// task id cursor (the newest first before it, when newest), until fn
// returns false. A task's id is the cursor that goes on after it.
func (s *Store) EachTaskLabeled(ws, name, value, cursor string, newest bool, fn func(*domain.Task) bool) error {
	if strings.Contains(cursor, "/") {
		return fmt.Errorf("%w: %q is not a task id", ErrCursor, cursor)
	}
	visit := func(id string) (bool, error) {
		t, err := s.Task(id)
		if err != nil || t == nil || t.Workspace != ws {
			return true, err
		}
		return fn(t), nil
	}
	p := labelPrefix(pTaskLabel, ws, name, value)
	if newest {
		return s.eachIDBefore(p, cursor, visit)
	}
	return s.eachID(p, cursor, visit)
}

// eachGoal is EachGoal, or EachGoalNewestFirst when newest.
func (s *Store) eachGoal(ws, cursor string, newest bool, fn func(*GoalView) bool) error {
	return s.eachGoalUnder(key(pGoalByWS, ws, ""), ws, cursor, newest, fn)
}

// eachGoalUnder is eachGoal over the goals whose ids end the keys with
// prefix p.
func (s *Store) eachGoalUnder(p []byte, ws, cursor string, newest bool, fn func(*GoalView) bool) error {
	if strings.Contains(cursor, "/") {
		return fmt.Errorf("%w: %q is not a goal id", ErrCursor, cursor)
	}
	visit := func(id string) (bool, error) {
		g, err := s.GoalView(ws, id)
		if err != nil || g == nil {
			return true, err
		}
		return fn(g), nil
	}
	if newest {
		return s.eachIDBefore(p, cursor, visit)
	}
	return s.eachID(p, cursor, visit)
}

// ErrCursor is returned (wrapped, with the cursor) when a listing is asked
// to continue after a cursor that no listing of its kind gives.
var ErrCursor = errors.New("projections: not a cursor of this listing")

// eachID calls fn with the last part of each key with prefix p whose last
// part sorts after after, in order, until fn returns false or an error.
func (s *Store) eachID(p []byte, after string, fn func(id string) (bool, error)) error {
	lower := p
	if after != "" {
		// The smallest key after p+after: ids never contain '/', so every
		// key above it names an id that sorts after after.
		lower = append(append(append([]byte(nil), p...), after...), 0)
	}
	return s.scanRange(lower, upperBound(p), idVisitor(p, fn))
}

// eachIDBefore is eachID backwards: it calls fn with the last part of each
// key with prefix p whose last part sorts before before ("" for all), the
// greatest first.
func (s *Store) eachIDBefore(p []byte, before string, fn func(id string) (bool, error)) error {
	upper := upperBound(p)
	if before != "" {
		upper = append(append([]byte(nil), p...), before...) // exclusive: before itself, and every id after it
	}
	return s.scanRangeReverse(p, upper, idVisitor(p, fn))
}

// idVisitor calls fn with a key's last part after prefix p, and stops the
// scan when fn returns false.
func idVisitor(p []byte, fn func(id string) (bool, error)) func(k, _ []byte) error {
	return func(k, _ []byte) error {
		more, err := fn(string(k[len(p):]))
		if err == nil && !more {
			return errStop
		}
		return err
	}
}

// GoalView returns goal id of workspace ws with its plan graph and counts, or
// nil when there is no such goal.
func (s *Store) GoalView(ws, id string) (*GoalView, error) {
	g, err := s.Goal(id)
	if err != nil || g == nil || g.Workspace != ws {
		return nil, err
	}
	v := &GoalView{Goal: g, Counts: map[string]int{}}
	if _, err := s.get(key(pGoalCounts, id), &v.Counts); err != nil {
		return nil, err
	}
	plan := make(map[string]*domain.Task, len(g.Plan)) // read once, for the nodes and the spend
	for _, pt := range g.Plan {
		t, err := s.Task(pt.TaskID)
		if err != nil {
			return nil, err
		}
		plan[pt.TaskID] = t
		n := PlanNode{PlanTask: pt}
		if t != nil {
			n.State = t.State
			for _, d := range t.Delegations {
				d.Tasks = nil
				n.Delegations = append(n.Delegations, d)
			}
		}
		v.Nodes = append(v.Nodes, n)
	}
	task := func(id string) (*domain.Task, error) {
		if t, ok := plan[id]; ok {
			return t, nil
		}
		return s.Task(id) // a retired task
	}
	if v.Spent, err = domain.GoalSpend(g, time.Now(), task, s.Goal); err != nil {
		return nil, err
	}
	return v, nil
}

// TaskFilter selects tasks; empty fields select all.
type TaskFilter struct {
	State  string
	GoalID string
	// After continues a listing after the task a cursor names (Cursor): a
	// task id, or "<state>/<task id>" when the listing is of every state.
	// A bare task id there lists the tasks after it in each state.
	After string
	// NewestFirst lists the newest tasks first (with a State or a GoalID
	// only): After is then the task before which to go on.
	NewestFirst bool
	Limit       int // 0 = all
}

// Cursor returns the cursor that continues the listing f selects after
// task t: t's id, or for a listing of every state "<state>/<id>" (that
// listing is ordered by state, then id).
func (f TaskFilter) Cursor(t *domain.Task) string {
	if f.GoalID == "" && f.State == "" {
		return t.State + "/" + t.ID
	}
	return t.ID
}

// ListTasks returns the tasks of workspace ws that f selects, ordered by
// state and id (by id alone when f names a state or a goal).
func (s *Store) ListTasks(ws string, f TaskFilter) ([]*domain.Task, error) {
	var out []*domain.Task
	err := s.EachTask(ws, f, func(t *domain.Task) bool {
		out = append(out, t)
		return f.Limit == 0 || len(out) < f.Limit
	})
	return out, err
}

// EachTask calls fn with the tasks of workspace ws that f selects (its
// Limit aside), in ListTasks's order, until fn returns false. It returns an
// error wrapping ErrCursor when f.After is not a cursor of the listing.
func (s *Store) EachTask(ws string, f TaskFilter, fn func(*domain.Task) bool) error {
	more := true
	visit := func(id string) (bool, error) {
		t, err := s.Task(id)
		if err != nil {
			return false, err
		}
		if t == nil || t.Workspace != ws || (f.State != "" && t.State != f.State) {
			return true, nil
		}
		more = fn(t)
		return more, nil
	}
	switch {
	case f.GoalID != "" || f.State != "":
		if strings.Contains(f.After, "/") {
			return fmt.Errorf("%w: %q is not a task id", ErrCursor, f.After)
		}
		p := key(pTaskByWS, ws, f.State, "")
		if f.GoalID != "" {
			p = key(pTaskByGoal, f.GoalID, "")
		}
		if f.NewestFirst {
			return s.eachIDBefore(p, f.After, visit)
		}
		return s.eachID(p, f.After, visit)
	case f.NewestFirst:
		return fmt.Errorf("%w: the newest first is a listing of one state or one goal", ErrCursor)
	}
	from, after, ok := strings.Cut(f.After, "/")
	if !ok { // none, or a bare id: after it in each state
		from, after = "", f.After
	} else if !slices.Contains(domain.TaskStates, from) {
		return fmt.Errorf("%w: %q names no task state", ErrCursor, f.After)
	}
	for _, st := range domain.TaskStates {
		if from != "" && st != from {
			continue // a state the cursor has passed
		}
		if err := s.eachID(key(pTaskByWS, ws, st, ""), after, visit); err != nil || !more {
			return err
		}
		if from != "" {
			from, after = "", "" // the states after the cursor's, whole
		}
	}
	return nil
}

// History returns the events of one aggregate, oldest first, each read
// from records (the log) and verified as the next of its aggregate's
// chain; see EachEvent.
func (s *Store) History(ctx context.Context, records Records, aggType, id string) ([]eventstore.Event, error) {
	var out []eventstore.Event
	err := s.EachEvent(ctx, records, aggType, id, 0, func(e eventstore.Event) bool {
		out = append(out, e)
		return true
	})
	return out, err
}

// EachEvent calls fn with the events of one aggregate after version after
// (0 for all), oldest first, until fn returns false. The views hold each
// event's place in the log and its hash: the event is read from records
// (the log), and must hash as the views recorded; each is verified as the
// next event of the aggregate's chain (eventstore.CheckNext: the next
// version, carrying the previous event's hash) — the first against the
// event at version after, which a listing before this one checked. An
// event's version is the cursor that continues the listing after it. It
// returns an error wrapping an *eventstore.ChainError for a history that
// does not verify: fn sees nothing after the break.
func (s *Store) EachEvent(ctx context.Context, records Records, aggType, id string, after uint64, fn func(eventstore.Event) bool) error {
	var last uint64 // the version and hash of the event before e
	lastHash, skip := "", after > 0
	lower := key(pHistory, aggType, id, "")
	upper := upperBound(lower)
	if after > 0 {
		lower = historyKey(aggType, id, after)
	}
	r := &resolver{ctx: ctx, records: records, recent: map[uint64]*eventstore.Commit{}}
	type row struct {
		version uint64
		ref     eventRef
	}
	var rows []row // taken, not yet listed
	stopped := false
	list := func() error {
		refs := make([]eventRef, len(rows))
		for i, rw := range rows {
			refs[i] = rw.ref
		}
		r.prefetch(refs)
		for _, rw := range rows {
			version, ref := rw.version, rw.ref
			raw, err := r.event(ref)
			if err != nil {
				return err
			}
			e := eventstore.Event{Raw: raw}
			if e.Hash() != ref.hash {
				return &eventstore.ChainError{AggregateType: aggType, AggregateID: id, Version: version,
					Problem: eventstore.ChainNotRecorded}
			}
			if err := json.Unmarshal(raw, &e); err != nil {
				return err
			}
			e.Raw = raw
			if e.AggregateType != aggType || e.AggregateID != id || e.Version != version {
				return &eventstore.ChainError{AggregateType: aggType, AggregateID: id, Version: version,
					Problem: eventstore.ChainNotRecorded}
			}
			if err := eventstore.CheckNext(&e, last, lastHash); err != nil {
				return err
			}
			last, lastHash = e.Version, ref.hash
			if !fn(e) {
				stopped = true
				return errStop
			}
		}
		rows = rows[:0]
		return nil
	}
	err := s.scanRange(lower, upper, func(k, v []byte) error {
		ref, err := decodeRef(v)
		if err != nil {
			return err
		}
		version := binary.BigEndian.Uint64(k[len(k)-8:])
		if skip {
			skip = false
			if version != after { // the cursor's event is gone
				return &eventstore.ChainError{AggregateType: aggType, AggregateID: id, Version: version, WantVersion: after,
					Problem: eventstore.ChainGap}
			}
			last, lastHash = version, ref.hash
			return nil
		}
		if rows = append(rows, row{version, ref}); len(rows) == prefetchRows {
			return list()
		}
		return nil
	})
	if err == nil && !stopped && len(rows) > 0 {
		if err = list(); errors.Is(err, errStop) {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("projections: history of %s %s: %w", aggType, id, err)
	}
	return nil
}

// HistoryWorkspace returns the workspace of the aggregate whose events the
// views keep, and false when they keep none.
func (s *Store) HistoryWorkspace(aggType, id string) (string, bool, error) {
	var ws string
	found := false
	err := s.scan(key(pHistory, aggType, id, ""), func(_, v []byte) error {
		ref, err := decodeRef(v)
		if err != nil {
			return fmt.Errorf("projections: history of %s %s: %w", aggType, id, err)
		}
		ws, found = ref.workspace, true
		return errStop
	})
	return ws, found, err
}

// EachRitual calls fn with the rituals of workspace ws whose names sort
// after after ("" for all), by name, until fn returns false. A ritual's
// name is the cursor that continues the listing after it.
func (s *Store) EachRitual(ws, after string, fn func(*domain.Ritual) bool) error {
	if after != "" && !domain.ValidName(after) {
		return fmt.Errorf("%w: %q is not a ritual's name", ErrCursor, after)
	}
	return s.eachID([]byte(pRitual+"/"+domain.RitualID(ws, "")), after, func(name string) (bool, error) {
		r, err := s.Ritual(domain.RitualID(ws, name))
		if err != nil || r == nil {
			return true, err
		}
		return fn(r), nil
	})
}

// EachSchedule calls fn with the schedules of workspace ws (deleted ones
// left out) whose names sort after after ("" for all), by name, until fn
// returns false. A schedule's name is the cursor that continues the
// listing after it.
func (s *Store) EachSchedule(ws, after string, fn func(*domain.Schedule) bool) error {
	if after != "" && !domain.ValidName(after) {
		return fmt.Errorf("%w: %q is not a schedule's name", ErrCursor, after)
	}
	return s.eachID([]byte(pSchedule+"/"+domain.ScheduleID(ws, "")), after, func(name string) (bool, error) {
		x, err := s.Schedule(domain.ScheduleID(ws, name))
		if err != nil || x == nil || x.Deleted {
			return true, err
		}
		return fn(x), nil
	})
}
