package projections

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"

	fastjson "github.com/go-json-experiment/json/v1"

	"github.com/cockroachdb/pebble/v2"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
)

// batchState is the aggregates one record touches, as the record leaves them.
type batchState struct {
	s          *Store
	decided    bool // the writer decided this record against this store
	workspaces map[string]*domain.Workspace
	goals      map[string]*domain.Goal
	tasks      map[string]*domain.Task
	rituals    map[string]*domain.Ritual
	schedules  map[string]*domain.Schedule
	// scheduleBefore are the schedules' states before the record, for
	// their timers.
	scheduleBefore map[string]*domain.Schedule
	// versions are the ritual versions the record defines.
	versions   []*domain.RitualVersion
	taskBefore map[string]*domain.Task // state before the record, for index moves
	sizes      map[string]int          // the bytes flush wrote for each goal and task (by key)
	goalBefore map[string]*domain.Goal // likewise, for the goals' timers
	tips       map[string]tip
	// counts are the counts of tasks by state of the goals whose tasks the
	// record moved, as flush wrote them.
	counts map[string]map[string]int
	// fresh: the event being applied is its aggregate's first (its tip
	// showed none), so there is no state to load.
	fresh bool
}

// cacheDone puts the goals and tasks the record touched, and their tips, in
// the cache while work goes on in them, and takes them out once they are
// done: a goal while it is open, a task until it has ended and is no longer
// in an open goal's plan (whether a goal is done is read from every task of
// its plan, each time one ends). Kept, the done ones would soon be most of
// the cache — memory that every garbage collection scans, and that raises
// the peak heap; a read brings one back. A new task's dependents are cached
// (those the record creates), and a new task joins the cached dependents of
// the tasks it depends on. The caller holds s.mu.
func (bs *batchState) cacheDone() {
	s := bs.s
	for id, g := range bs.goals {
		if before := bs.goalBefore[id]; before != nil && before.PlanVersion != g.PlanVersion {
			// Revised: the tasks that left the plan leave the cache.
			kept := make(map[string]bool, len(g.Plan))
			for _, pt := range g.Plan {
				kept[pt.TaskID] = true
			}
			for _, pt := range before.Plan {
				if !kept[pt.TaskID] {
					s.forget(domain.AggTask, pt.TaskID)
				}
			}
		}
		if g.State == domain.GoalStateOpen {
			k := string(key(pGoal, id))
			s.cacheSized(k, g, bs.sizes[k])
			continue
		}
		s.forget(domain.AggGoal, id)
		for _, pt := range g.Plan {
			s.forget(domain.AggTask, pt.TaskID)
		}
	}
	for id := range bs.tasks {
		if bs.taskBefore[id] == nil {
			// New: only the record's own new tasks can depend on it.
			s.cache[string(key(pDependents, id))] = []string(nil)
		}
	}
	for id, t := range bs.tasks {
		if bs.taskBefore[id] == nil {
			for _, d := range t.DependsOn {
				s.addDependent(d, id)
			}
		}
		if !domain.Terminal(t.State) || bs.planHolds(t.GoalID, id) {
			k := string(key(pTask, id))
			s.cacheSized(k, t, bs.sizes[k])
		} else {
			s.forget(domain.AggTask, id)
		}
	}
	for goalID, m := range bs.counts {
		k := string(key(pGoalCounts, goalID))
		if _, held := s.cache[string(key(pGoal, goalID))]; held {
			s.cache[k] = m // the next record clones it before counting
		} else {
			delete(s.cache, k)
		}
	}
	for k, t := range bs.tips {
		typ, id, _ := strings.Cut(k, "/")
		switch typ {
		case domain.AggGoal, domain.AggTask:
			if _, held := s.cache[string(aggKey(typ, id))]; !held {
				continue // forgotten with its aggregate
			}
		}
		s.cache[string(key(pTip, k))] = t
	}
}

// planHolds reports whether goal goalID is open and task taskID in its plan,
// as far as the record and the cache know (an ended goal leaves the cache).
func (bs *batchState) planHolds(goalID, taskID string) bool {
	if goalID == "" {
		return false
	}
	g, ok := bs.goals[goalID]
	if !ok {
		v, cached := bs.s.cache[string(key(pGoal, goalID))]
		if !cached {
			return false
		}
		g = v.(*domain.Goal)
	}
	return g != nil && g.State == domain.GoalStateOpen && slices.ContainsFunc(g.Plan, func(pt domain.PlanTask) bool { return pt.TaskID == taskID })
}

// Apply applies the log record at seq, verified (see eventstore.LogVerifier),
// to the views, in one Pebble batch with the new checkpoint and the record's
// place in the log's chain (LogTip). A record at or below the checkpoint was
// applied already and is skipped, so feeding a record twice is harmless. It
// returns an error for a record that does not follow the last one applied
// in the log's chain, an error wrapping an *eventstore.ChainError when the
// record's aggregate histories do not verify (the views stop there rather
// than skip history), and an error for an event it cannot decode (an unknown type
// stops the views loudly).
func (s *Store) Apply(seq uint64, c *eventstore.Commit) error { return s.apply(seq, c, false, nil) }

// ApplyDecided applies a record that the writer decided against this very
// store and has just committed. It skips the lookups that the decision
// already made against the same state: that a new aggregate does not exist
// yet and that a command id was not applied before. Everything else is
// checked as Apply checks it.
func (s *Store) ApplyDecided(seq uint64, c *eventstore.Commit) error {
	return s.apply(seq, c, true, nil)
}

// ApplyFinal applies a record that the writer decided against this very
// store and has just committed, as ApplyDecided does, but writes the
// aggregates' rows from final, the states the writer's decision left the
// aggregates of the record's events in (domain.Overlay.Touched), instead of
// decoding the events and applying them again. The writer's overlay applies
// events in the form the log gives them back, so both give the same views
// byte for byte (a service's views equal the views rebuilt from its log).
// Each event is still checked against its aggregate's chain and kept in its
// history. It returns an error, and applies nothing, when final does not
// hold exactly the aggregates of the record's events, each at the version of
// its last event.
func (s *Store) ApplyFinal(seq uint64, c *eventstore.Commit, final domain.Touched) error {
	return s.apply(seq, c, true, &final)
}

func (s *Store) apply(seq uint64, c *eventstore.Commit, decided bool, final *domain.Touched) (err error) {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	defer s.recoverInto(&err)
	if s.db == nil {
		return ErrClosed
	}
	if seq <= s.Checkpoint() {
		return nil
	}
	last := s.LogTip()
	if c.N != last.N+1 || c.Hash == "" || (c.Format != eventstore.FormatLegacy && c.Prev != last.Hash) {
		return fmt.Errorf("projections: log record %d (n %d) does not follow the views' last record, %s: the views apply verified records only",
			seq, c.N, last)
	}
	b := s.db.NewBatch()
	defer func() { _ = b.Close() }()
	bs := &batchState{s: s, decided: decided, workspaces: map[string]*domain.Workspace{}, goals: map[string]*domain.Goal{},
		tasks: map[string]*domain.Task{}, rituals: map[string]*domain.Ritual{}, schedules: map[string]*domain.Schedule{},
		scheduleBefore: map[string]*domain.Schedule{}, taskBefore: map[string]*domain.Task{},
		goalBefore: map[string]*domain.Goal{}, tips: map[string]tip{}}
	if final != nil {
		if err := bs.final(b, seq, c, final); err != nil {
			return err
		}
	} else {
		for i := range c.Events {
			if err := bs.event(b, seq, i, &c.Events[i]); err != nil {
				return err
			}
		}
	}
	if err := bs.flush(b); err != nil {
		return err
	}
	for _, r := range c.Results {
		k := key(pCommand, r.Workspace, domain.CommandKey(r.Actor, r.CommandID))
		if !decided {
			var prev CommandOutcome
			if ok, err := s.get(k, &prev); err != nil {
				return err
			} else if ok {
				continue // the first outcome stands
			}
		}
		v, _ := fastjson.Marshal(CommandOutcome{Seq: seq, Reply: r.Reply, Error: r.Error, Body: r.Body})
		if err := b.Set(k, v, nil); err != nil {
			return err
		}
	}
	var cp [8]byte
	binary.BigEndian.PutUint64(cp[:], seq)
	if err := b.Set([]byte(pCheckpoint), cp[:], nil); err != nil {
		return err
	}
	next := last.Next(seq, c)
	nb, _ := fastjson.Marshal(next)
	if err := b.Set([]byte(pLogTip), nb, nil); err != nil {
		return err
	}
	if c.Accept != nil && c.Accept.AfterSeq+1 < seq {
		// The records between the accepted prefix and this record are not
		// part of the log: derived streams that read it raw skip them.
		k := binary.BigEndian.AppendUint64(key(pDiscarded, ""), c.Accept.AfterSeq+1)
		if err := b.Set(k, binary.BigEndian.AppendUint64(nil, seq-1), nil); err != nil {
			return err
		}
	}
	counted, err := s.countLogBytes(b, c)
	if err != nil {
		return err
	}
	// The keys go into the filter before they are visible: a reader that
	// finds the record applied finds its keys in the filter too.
	if err := s.keys.addBatch(b); err != nil {
		return fmt.Errorf("projections: record %d: read its batch: %w", seq, err)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("projections: commit record %d: %w", seq, s.damagedErr(err))
	}
	s.mu.Lock()
	s.gen++
	for id, w := range bs.workspaces {
		s.cache[string(key(pWorkspace, id))] = w
	}
	bs.cacheDone()
	for id, r := range bs.rituals {
		s.cache[string(key(pRitual, id))] = r
	}
	for id, x := range bs.schedules {
		s.cache[string(key(pSchedule, id))] = x
	}
	s.trimCache()
	s.logBytesApplied(counted)
	s.checkpoint, s.logTip = seq, next
	close(s.advanced)
	s.advanced = make(chan struct{})
	s.mu.Unlock()
	if f := s.applied.Load(); f != nil {
		(*f)(c)
	}
	return nil
}

// OnApplied has f called with every record once the views applied it (on
// the goroutine that applied it: f must be quick).
func (s *Store) OnApplied(f func(c *eventstore.Commit)) { s.applied.Store(&f) }

func (bs *batchState) tip(aggType, id string, version uint64) (tip, error) {
	k := aggType + "/" + id
	if t, ok := bs.tips[k]; ok {
		return t, nil
	}
	if bs.decided && version == 1 {
		return tip{}, nil // the writer found no such aggregate when it decided
	}
	return bs.s.tip(aggType, id)
}

// chain checks that e, the index-th event of log record seq, follows its
// aggregate's tip, moves the tip and adds e's place in the log to the
// aggregate's history.
func (bs *batchState) chain(b *pebble.Batch, seq uint64, index int, e *eventstore.Event) error {
	t, err := bs.tip(e.AggregateType, e.AggregateID, e.Version)
	if err != nil {
		return err
	}
	if err := eventstore.CheckNext(e, t.Version, t.Hash); err != nil {
		return fmt.Errorf("projections: log record %d: %w", seq, err)
	}
	h := e.Hash()
	bs.tips[e.AggregateType+"/"+e.AggregateID] = tip{Version: e.Version, Hash: h}
	ref, err := encodeRef(seq, index, h, e.Workspace)
	if err != nil {
		return fmt.Errorf("projections: log record %d: %w", seq, err)
	}
	return b.Set(historyKey(e.AggregateType, e.AggregateID, e.Version), ref, nil)
}

// final takes the states the record's events leave their aggregates in from
// the writer's decision, with the states before the record that flush moves
// index entries from, after checking each event against its chain and that
// the states are exactly those of the record's aggregates, each at the
// version of its last event.
func (bs *batchState) final(b *pebble.Batch, seq uint64, c *eventstore.Commit, final *domain.Touched) error {
	last := map[string]uint64{} // kind/id -> the version of its last event in the record
	for i := range c.Events {
		e := &c.Events[i]
		if err := bs.chain(b, seq, i, e); err != nil {
			return err
		}
		if err := bs.ritualVersion(e, nil); err != nil {
			return fmt.Errorf("projections: record %d: %w", seq, err)
		}
		k := e.AggregateType + "/" + e.AggregateID
		if _, seen := last[k]; !seen && e.Version > 1 {
			// Not new: flush moves its index entries from its state before.
			var err error
			switch e.AggregateType {
			case domain.AggGoal:
				bs.goalBefore[e.AggregateID], err = bs.s.Goal(e.AggregateID)
			case domain.AggTask:
				bs.taskBefore[e.AggregateID], err = bs.s.Task(e.AggregateID)
			case domain.AggSchedule:
				bs.scheduleBefore[e.AggregateID], err = bs.s.Schedule(e.AggregateID)
			}
			if err != nil {
				return err
			}
		}
		last[k] = e.Version
	}
	if n := len(final.Workspaces) + len(final.Goals) + len(final.Tasks) + len(final.Rituals) + len(final.Schedules); n != len(last) {
		return fmt.Errorf("projections: log record %d: the writer decided %d aggregates, the record's events touch %d", seq, n, len(last))
	}
	if err := takeFinal(seq, domain.AggWorkspace, final.Workspaces, bs.workspaces, last, func(w *domain.Workspace) uint64 { return w.Version }); err != nil {
		return err
	}
	if err := takeFinal(seq, domain.AggGoal, final.Goals, bs.goals, last, func(g *domain.Goal) uint64 { return g.Version }); err != nil {
		return err
	}
	if err := takeFinal(seq, domain.AggRitual, final.Rituals, bs.rituals, last, func(r *domain.Ritual) uint64 { return r.Version }); err != nil {
		return err
	}
	if err := takeFinal(seq, domain.AggSchedule, final.Schedules, bs.schedules, last, func(x *domain.Schedule) uint64 { return x.Version }); err != nil {
		return err
	}
	return takeFinal(seq, domain.AggTask, final.Tasks, bs.tasks, last, func(t *domain.Task) uint64 { return t.Version })
}

// ritualVersion keeps, for flush, the ritual version e defines when it is
// a ritual.defined; ev is e's data decoded, or nil to decode it here.
func (bs *batchState) ritualVersion(e *eventstore.Event, ev domain.Event) error {
	if e.Type != "ritual.defined" {
		return nil
	}
	if ev == nil {
		var err error
		if ev, err = domain.DecodeEvent(e.Type, e.Data); err != nil {
			return err
		}
	}
	rd, ok := ev.(*domain.RitualDefined)
	if !ok {
		return fmt.Errorf("projections: a ritual.defined event decoded as %T", ev)
	}
	r := domain.Recorded{CommandID: e.CommandID, Actor: e.Actor, Time: e.Time}
	bs.versions = append(bs.versions, domain.NewRitualVersion(e.Workspace, rd, r))
	return nil
}

// takeFinal keeps the decided states of one kind of aggregate in into,
// checking that each is at the version of its last event in the record.
func takeFinal[S any](seq uint64, kind string, states, into map[string]*S, last map[string]uint64, versionOf func(*S) uint64) error {
	for id, st := range states {
		v, ok := last[kind+"/"+id]
		if !ok || st == nil || versionOf(st) != v {
			return fmt.Errorf("projections: log record %d: the writer's state of %s %s does not follow the record's events", seq, kind, id)
		}
		into[id] = st
	}
	return nil
}

func (bs *batchState) event(b *pebble.Batch, seq uint64, index int, e *eventstore.Event) error {
	if err := bs.chain(b, seq, index, e); err != nil {
		return err
	}
	data := e.Data
	if up := bs.s.opts.Upcasters; up != nil {
		cp := *e
		if err := up.Upcast(&cp); err != nil {
			return fmt.Errorf("projections: record %d: %w", seq, err)
		}
		data = cp.Data
	}
	ev, err := domain.DecodeEvent(e.Type, data)
	if err != nil {
		return fmt.Errorf("projections: record %d: %w", seq, err)
	}
	r := domain.Recorded{CommandID: e.CommandID, Actor: e.Actor, Time: e.Time}
	bs.fresh = e.Version == 1 // the tip showed the aggregate has no events: nothing to load
	// The version was checked against the tip above: Apply takes the next.
	if _, err := domain.Apply(bs, e.AggregateType, e.AggregateID, e.Workspace, 0, ev, r); err != nil {
		return fmt.Errorf("projections: record %d: %w", seq, err)
	}
	return bs.ritualVersion(e, ev)
}

// Workspace returns the workspace as the record has left it so far (the
// batch is a domain.States).
func (bs *batchState) Workspace(id string) (*domain.Workspace, error) {
	if w, ok := bs.workspaces[id]; ok || bs.fresh {
		return w, nil
	}
	return bs.s.Workspace(id)
}

// Goal returns the goal as the record has left it so far.
func (bs *batchState) Goal(id string) (*domain.Goal, error) {
	if g, ok := bs.goals[id]; ok || bs.fresh {
		return g, nil
	}
	g, err := bs.s.Goal(id)
	if err == nil {
		bs.goalBefore[id] = g
	}
	return g, err
}

// Task returns the task as the record has left it so far.
func (bs *batchState) Task(id string) (*domain.Task, error) {
	if t, ok := bs.tasks[id]; ok {
		return t, nil
	}
	if bs.fresh {
		bs.taskBefore[id] = nil
		return nil, nil
	}
	t, err := bs.s.Task(id)
	if err == nil {
		bs.taskBefore[id] = t
	}
	return t, err
}

// Ritual returns the ritual as the record has left it so far.
func (bs *batchState) Ritual(id string) (*domain.Ritual, error) {
	if r, ok := bs.rituals[id]; ok || bs.fresh {
		return r, nil
	}
	return bs.s.Ritual(id)
}

// Schedule returns the schedule as the record has left it so far.
func (bs *batchState) Schedule(id string) (*domain.Schedule, error) {
	if x, ok := bs.schedules[id]; ok || bs.fresh {
		return x, nil
	}
	x, err := bs.s.Schedule(id)
	if err == nil {
		bs.scheduleBefore[id] = x
	}
	return x, err
}

// SetSchedule keeps the schedule's new state.
func (bs *batchState) SetSchedule(id string, x *domain.Schedule) { bs.schedules[id] = x }

// SetRitual keeps the ritual's new state.
func (bs *batchState) SetRitual(id string, r *domain.Ritual) { bs.rituals[id] = r }

// SetWorkspace keeps the workspace's new state.
func (bs *batchState) SetWorkspace(id string, w *domain.Workspace) { bs.workspaces[id] = w }

// SetGoal keeps the goal's new state.
func (bs *batchState) SetGoal(id string, g *domain.Goal) { bs.goals[id] = g }

// SetTask keeps the task's new state.
func (bs *batchState) SetTask(id string, t *domain.Task) { bs.tasks[id] = t }

// flush writes the final state of every aggregate the record touched, moves
// index entries, and adjusts goal counts.
func (bs *batchState) flush(b *pebble.Batch) error {
	counts := map[string]map[string]int{}
	bs.counts = counts
	count := func(goalID, state string, d int) error {
		if goalID == "" {
			return nil
		}
		m, ok := counts[goalID]
		if !ok {
			if v, cached := bs.s.cached(string(key(pGoalCounts, goalID))); cached {
				m = maps.Clone(v.(map[string]int)) // the cached map is never changed
			} else {
				m = map[string]int{}
				if _, err := bs.s.get(key(pGoalCounts, goalID), &m); err != nil {
					return err
				}
			}
			counts[goalID] = m
		}
		m[state] += d
		if m[state] == 0 {
			delete(m, state)
		}
		return nil
	}
	for id, w := range bs.workspaces {
		if err := setJSON(b, key(pWorkspace, id), w); err != nil {
			return err
		}
	}
	for id, r := range bs.rituals {
		if err := setJSON(b, key(pRitual, id), r); err != nil {
			return err
		}
	}
	for id, x := range bs.schedules {
		if err := setJSON(b, key(pSchedule, id), x); err != nil {
			return err
		}
		if err := replaceTimers(b, scheduleTimersOf(bs.scheduleBefore[id]), scheduleTimersOf(x)); err != nil {
			return err
		}
	}
	for _, v := range bs.versions {
		if err := setJSON(b, ritualVersionKey(domain.RitualID(v.Workspace, v.Name), v.Version), v); err != nil {
			return err
		}
	}
	if bs.sizes == nil {
		bs.sizes = make(map[string]int, len(bs.goals)+len(bs.tasks))
	}
	var keyed map[string]string // the goals that took their key here (made, or reopened), by its key's row
	for id, g := range bs.goals {
		if err := bs.setSized(b, key(pGoal, id), g); err != nil {
			return err
		}
		before := bs.goalBefore[id]
		if g.Key != "" && g.State == domain.GoalStateOpen && (before == nil || before.State != domain.GoalStateOpen) {
			if k := string(key(pGoalKey, g.Workspace, g.Key)); id > keyed[k] {
				if keyed == nil {
					keyed = map[string]string{}
				}
				keyed[k] = id
			}
		}
		if err := b.Set(key(pGoalByWS, g.Workspace, id), nil, nil); err != nil {
			return err
		}
		var was domain.Labels
		if before := bs.goalBefore[id]; before != nil {
			was = before.Labels
		}
		if err := relabel(b, pGoalLabel, g.Workspace, id, was, g.Labels); err != nil {
			return err
		}
		if err := replaceTimers(b, goalTimersOf(bs.goalBefore[id]), goalTimersOf(g)); err != nil {
			return err
		}
	}
	for k, id := range keyed {
		if err := setJSON(b, []byte(k), id); err != nil {
			return err
		}
	}
	for id, t := range bs.tasks {
		if err := bs.setSized(b, key(pTask, id), t); err != nil {
			return err
		}
		before := bs.taskBefore[id]
		if err := moveTimers(b, before, t); err != nil {
			return err
		}
		var was domain.Labels
		if before != nil {
			was = before.Labels
		}
		if err := relabel(b, pTaskLabel, t.Workspace, id, was, t.Labels); err != nil {
			return err
		}
		if err := moveApprovals(b, before, t); err != nil {
			return err
		}
		if before == nil {
			if err := b.Set(key(pTaskByWS, t.Workspace, t.State, id), nil, nil); err != nil {
				return err
			}
			if t.GoalID != "" {
				if err := b.Set(key(pTaskByGoal, t.GoalID, id), nil, nil); err != nil {
					return err
				}
			}
			for _, d := range t.DependsOn {
				if err := b.Set(key(pDependents, d, id), nil, nil); err != nil {
					return err
				}
			}
			if err := count(t.GoalID, t.State, 1); err != nil {
				return err
			}
			continue
		}
		if before.State != t.State {
			if err := b.Delete(key(pTaskByWS, t.Workspace, before.State, id), nil); err != nil {
				return err
			}
			if err := b.Set(key(pTaskByWS, t.Workspace, t.State, id), nil, nil); err != nil {
				return err
			}
			if err := count(t.GoalID, before.State, -1); err != nil {
				return err
			}
			if err := count(t.GoalID, t.State, 1); err != nil {
				return err
			}
		}
	}
	for goalID, m := range counts {
		if err := setJSON(b, key(pGoalCounts, goalID), m); err != nil {
			return err
		}
	}
	return nil
}

// setSized is setJSON that notes the bytes written, for the cache's bound.
func (bs *batchState) setSized(b *pebble.Batch, k []byte, v any) error {
	n, err := setJSONSized(b, k, v)
	bs.sizes[string(k)] = n
	return err
}

func setJSON(b *pebble.Batch, k []byte, v any) error {
	_, err := setJSONSized(b, k, v)
	return err
}

// setJSONSized sets k to v encoded and returns the encoding's length.
func setJSONSized(b *pebble.Batch, k []byte, v any) (int, error) {
	buf, err := fastjson.Marshal(v)
	if err != nil {
		return 0, err
	}
	return len(buf), b.Set(k, buf, nil)
}

// relabel moves the entries of aggregate id of workspace ws in the index
// by label under pre (pGoalLabel, pTaskLabel) from its labels before (was)
// to its labels now.
func relabel(b *pebble.Batch, pre, ws, id string, was, now domain.Labels) error {
	for k, v := range was {
		if n, ok := now[k]; ok && n == v {
			continue
		}
		if err := b.Delete(append(labelPrefix(pre, ws, k, v), id...), nil); err != nil {
			return err
		}
	}
	for k, v := range now {
		if old, ok := was[k]; ok && old == v {
			continue
		}
		if err := b.Set(append(labelPrefix(pre, ws, k, v), id...), nil, nil); err != nil {
			return err
		}
	}
	return nil
}
