package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	fastjson "github.com/go-json-experiment/json/v1"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// request is one command on its way through the writer.
type request struct {
	cmd  domain.Command
	meta domain.Meta
	done chan outcome // buffered 1; answered exactly once
	// trace is the span of the command's handling, when it is traced: the
	// commit's span and the work items it dispatches are its children.
	trace trace.SpanContext
	// size estimates the bytes the command adds to a record
	// (Service.estimateRecordBytes).
	size int
	// taken, when not nil, is called when the writer takes the command
	// into a batch (it may be called again).
	taken func()
}

// RecordBytes is the request's eventstore.Sized estimate.
func (r *request) RecordBytes() int { return r.size }

// outcome is a command's answer: its reply and the log sequence that holds
// it, or an error.
type outcome struct {
	Seq   uint64
	Reply json.RawMessage
	Err   error
	// Handed is, for a report whose commit handed its sender an attempt,
	// that attempt's work item, made from the states the writer decided
	// (handoff.go): never stored, and absent for an outcome read back from
	// the views (a retry's).
	Handed *schemas.WorkItem
}

// outcomeOf returns the outcome a commit record kept for a command: its
// reply, or the error it was refused with when its refusal was recorded (a
// decision on an approval that was not taken).
func outcomeOf(seq uint64, reply, refusal json.RawMessage) outcome {
	if len(refusal) > 0 {
		var we schemas.Error
		if err := json.Unmarshal(refusal, &we); err != nil {
			return outcome{Err: fmt.Errorf("handlers: a stored refusal does not decode: %w", err)}
		}
		return outcome{Seq: seq, Err: &we}
	}
	return outcome{Seq: seq, Reply: reply}
}

// answered marks an item of a batch that needs no append: a retry whose
// first outcome is known, or a repeat of an earlier item of the same batch.
type answered struct {
	out  *outcome
	same int // index of the earlier item in the batch, or -1
}

func (a *answered) Error() string { return "handlers: answered without an append" }

// writer decides batches of commands against the views and keeps them in step
// with the log: it is the eventstore.Decider of the group committer.
type writer struct {
	store *projections.Store
	// room, with the views, is what commands are decided against: the
	// queues that stand and their bounds (roomWorld); nil bounds none.
	// maxSchedules bounds a workspace's schedules; 0 or less: none.
	room         *queueRoom
	maxSchedules int
	// maxMembers bounds a workspace's members; 0 or less: none.
	maxMembers int
	clock      func() time.Time
	logger     *slog.Logger
	// dispatch runs once a record is committed, before the views apply it
	// (they are written while the items travel): the work items of the
	// tasks it left ready, with their states as the writer decided them.
	dispatch func(c *eventstore.Commit, seq uint64, states aggregates, traces commandTraces)
	// after runs once a committed record is applied to the views: the
	// event feed (whose readers find the views at least as far), the
	// timers' wake-up.
	after func(c *eventstore.Commit, seq uint64)
	// answered, when it holds a function (tests), runs once a record's
	// commands are answered, before the views apply it.
	answered *atomic.Pointer[func()]
	// broken is closed when a committed record could not be applied to the
	// views: the writer's state no longer follows the log, so it must stop.
	broken     chan struct{}
	brokenOnce sync.Once
	// decided is what the last Decide left for Committed: its events, and
	// the states they leave their aggregates in, which the views take
	// instead of applying the events again.
	decided struct {
		events []eventstore.Event
		final  domain.Touched
	}
	// finals counts the records the views take from the decided states.
	finals atomic.Int64
	// fullLogged is when a refusal for a full store was last logged (on
	// the committer's goroutine): once a minute at most.
	fullLogged time.Time
	// shareLogged is when a refusal for a workspace's share of the log
	// was last logged (logShare): once a minute at most.
	shareLogged time.Time
	// disk, when set, refuses new commands (ErrStorageFull) while the disk
	// holding the views has no room above its reserve, and counts what
	// each committed record takes of it.
	disk *diskGauge
	// seal, when set, seals the payloads of a command before it is
	// decided, against the state it is decided on (privacy.seal).
	seal func(w domain.World, ws string, cmd domain.Command) error
	// tracer makes the spans of a batch's traced commands; decideStart and
	// decideEnd are when the last Decide ran.
	tracer                 trace.Tracer
	decideStart, decideEnd time.Time
}

// commandTraces are the spans of a committed batch's traced commands, by
// workspace and command id (nil when none is traced).
type commandTraces map[string]trace.SpanContext

// of returns the span of the command that produced event e.
func (t commandTraces) of(e *eventstore.Event) trace.SpanContext {
	if t == nil {
		return trace.SpanContext{}
	}
	return t[e.Workspace+"/"+e.CommandID]
}

func (w *writer) Decide(items []*request) ([]eventstore.Event, []eventstore.CommandResult, []error) {
	w.decideStart = time.Now()
	defer func() { w.decideEnd = time.Now() }()
	o := domain.NewOverlay(roomWorld{Store: w.store, room: w.room, maxSchedules: w.maxSchedules, maxMembers: w.maxMembers})
	errs := make([]error, len(items))
	var events []eventstore.Event
	var results []eventstore.CommandResult
	seen := map[string]int{}
	for _, it := range items {
		if it.taken != nil {
			it.taken()
		}
	}
	for i, it := range items {
		// The idempotency key names the sender too: the same id from another
		// identity is another command (domain.CommandKey).
		key := it.meta.Key()
		k := it.meta.Workspace + "/" + key
		if j, ok := seen[k]; ok {
			if other := items[j].meta.Body; otherBody(other, it.meta.Body) {
				errs[i] = reusedID(it.meta, other, 0)
				continue
			}
			errs[i] = &answered{same: j}
			continue
		}
		seen[k] = i
		if prev, ok, err := w.store.Command(it.meta.Workspace, key); err != nil {
			errs[i] = err
			continue
		} else if ok {
			if otherBody(prev.Body, it.meta.Body) {
				errs[i] = reusedID(it.meta, prev.Body, prev.Seq)
				continue
			}
			out := outcomeOf(prev.Seq, prev.Reply, prev.Error)
			errs[i] = &answered{out: &out, same: -1}
			continue
		}
		if w.disk != nil && !w.disk.hasRoom() {
			// A command sent again is answered above; a new one would
			// grow the log and the views on a disk with no room left.
			errs[i] = errDiskLow
			continue
		}
		if w.disk != nil && w.disk.lastRoom() {
			if err := w.logShare(it.meta.Workspace); err != nil {
				errs[i] = err
				continue
			}
		}
		if w.seal != nil {
			if err := w.seal(o, it.meta.Workspace, it.cmd); err != nil {
				errs[i] = err
				continue
			}
		}
		m := it.meta
		m.Now = w.clock().UTC().Round(0)
		// The overlay keeps the states the decision computed (the events in
		// the form the log gives them back), for the next items and the views.
		out, err := o.Execute(it.cmd, m)
		if err != nil {
			errs[i] = err
			continue
		}
		var reply, refusal []byte
		if r := out.Refusal; r != nil { // its message opens with the reason, e.g. "bad_signature: ..."
			refusal, err = json.Marshal(&schemas.Error{Code: string(r.Code), Message: r.Message,
				Fields: []schemas.FieldError{{Pointer: r.Field, Message: r.Message}}})
		} else {
			reply, err = fastjson.Marshal(out.Reply)
		}
		if err != nil {
			// The overlay holds this command: decide the rest of the batch
			// on a fresh one so nothing of it leaks.
			return w.redecideWithout(items, i, err)
		}
		if len(out.Changes) == 0 {
			errs[i] = &answered{out: &outcome{Seq: w.store.Checkpoint(), Reply: reply}, same: -1}
			continue
		}
		if events == nil { // most commands make a handful of events
			events = make([]eventstore.Event, 0, 6*len(items))
		}
		for _, c := range out.Changes {
			data, err := fastjson.Marshal(c.Event)
			if err != nil {
				return w.redecideWithout(items, i, err)
			}
			events = append(events, eventstore.Event{Type: c.Event.EventType(), SchemaVersion: domain.SchemaVersion(c.Event.EventType()), Workspace: c.Workspace,
				AggregateType: c.AggregateType, AggregateID: c.AggregateID, Version: c.Version,
				CommandID: m.CommandID, CorrelationID: m.CorrelationID, Actor: m.Actor, Time: m.Now, Data: data})
		}
		results = append(results, eventstore.CommandResult{Workspace: m.Workspace, CommandID: m.CommandID, Actor: m.Actor, Reply: reply, Error: refusal,
			Body: m.Body})
	}
	w.decided.events, w.decided.final = events, o.Touched()
	return events, results, errs
}

// recordBytes is about the size of c as stored: its events and replies.
func recordBytes(c *eventstore.Commit) int {
	n := 0
	for i := range c.Events {
		n += len(c.Events[i].Raw)
	}
	for _, r := range c.Results {
		n += len(r.Reply) + len(r.Error)
	}
	return n
}

// otherBody reports whether a command id's first command, first, and a
// command sent again under it, again, differ (both named: the service's
// own commands, and those of records made before bodies were, are not).
func otherBody(first, again string) bool { return first != "" && again != "" && first != again }

// reusedID refuses a command sent under the id of another command, first
// (committed at seq; 0 when it is in the same batch).
func reusedID(m domain.Meta, first string, seq uint64) error {
	name, _, _ := strings.Cut(first, ":")
	where := "in the same batch"
	if seq > 0 {
		where = fmt.Sprintf("at log sequence %d", seq)
	}
	return &domain.Error{Code: domain.CodeConflict, Message: fmt.Sprintf(
		"command id %s was used before for another command (%s, %s): a command id names one command; send this one under a new id",
		m.CommandID, name, where)}
}

// redecideWithout decides the batch again with item bad refused up front.
// It is only reached on internal errors.
func (w *writer) redecideWithout(items []*request, bad int, err error) ([]eventstore.Event, []eventstore.CommandResult, []error) {
	rest := make([]*request, 0, len(items)-1)
	idx := make([]int, 0, len(items)-1)
	for i, it := range items {
		if i != bad {
			rest = append(rest, it)
			idx = append(idx, i)
		}
	}
	ev, res, errs := w.Decide(rest)
	all := make([]error, len(items))
	all[bad] = err
	for k, i := range idx {
		if a, ok := errs[k].(*answered); ok && a.same >= 0 {
			errs[k] = &answered{out: a.out, same: idx[a.same]}
		}
		all[i] = errs[k]
	}
	return ev, res, all
}

// Committed answers the batch — a committed record is durable, so its
// commands are answered at once — and then applies the record to the views
// before the next batch is decided. A query that names the record's sequence
// (Dwr-Min-Seq) waits for that.
func (w *writer) Committed(items []*request, c *eventstore.Commit, seq uint64, itemErrs []error, err error) {
	results := map[string]eventstore.CommandResult{}
	if c != nil {
		for _, r := range c.Results {
			results[r.Workspace+"/"+domain.CommandKey(r.Actor, r.CommandID)] = r
		}
	}
	decided := w.decided
	w.decided.events, w.decided.final = nil, domain.Touched{}
	// The record holds the very events the last Decide made: the views
	// take the states that decision computed, and the work items (also
	// those handed in replies) are made from them.
	fromFinal := err == nil && c != nil && len(c.Events) > 0 && len(decided.events) == len(c.Events) && &decided.events[0] == &c.Events[0]
	var states aggregates
	if fromFinal {
		states = decidedStates{decided.final, w.store}
	}
	if err == nil && c != nil && w.disk != nil {
		w.disk.spend(recordDiskCost(recordBytes(c)))
	}
	if errors.Is(err, eventstore.ErrStorageFull) && time.Since(w.fullLogged) > time.Minute {
		w.fullLogged = time.Now()
		w.logger.Error("handlers: the log's storage is full: commands are refused until room is made (free disk space, or raise dwr serve --max-store, then restart)", "err", err)
	}
	outs := make([]outcome, len(items))
	for i, it := range items {
		var ie error
		if itemErrs != nil {
			ie = itemErrs[i]
		}
		var a *answered
		switch {
		case errors.As(ie, &a) && a.out != nil:
			outs[i] = *a.out
		case errors.As(ie, &a):
			outs[i] = outs[a.same]
		case ie != nil:
			outs[i] = outcome{Err: ie}
		case err != nil:
			outs[i] = outcome{Err: err}
		default:
			r := results[it.meta.Workspace+"/"+it.meta.Key()]
			outs[i] = outcomeOf(seq, r.Reply, r.Error)
			if states != nil {
				outs[i].Handed = handedItem(it.cmd, outs[i].Reply, seq, states)
			}
		}
		it.done <- outs[i]
	}
	traces := w.traceCommit(items, seq, err)
	if err != nil || seq == 0 {
		return
	}
	if w.answered != nil {
		if f := w.answered.Load(); f != nil {
			(*f)()
		}
	}
	var aerr error
	if fromFinal {
		// The work items leave first.
		w.finals.Add(1)
		if w.dispatch != nil {
			w.dispatch(c, seq, states, traces)
		}
		aerr = w.store.ApplyFinal(seq, c, decided.final)
	} else {
		aerr = w.store.ApplyDecided(seq, c)
		if aerr == nil && w.dispatch != nil {
			w.dispatch(c, seq, w.store, traces)
		}
	}
	if aerr != nil {
		w.logger.Error("handlers: views could not apply a committed record; the writer stops", "seq", seq, "err", aerr)
		w.brokenOnce.Do(func() { close(w.broken) })
		return
	}
	if w.after != nil {
		w.after(c, seq)
	}
}

// aggregates reads the states a committed record left its aggregates in.
type aggregates interface {
	Task(id string) (*domain.Task, error)
	Goal(id string) (*domain.Goal, error)
	Workspace(id string) (*domain.Workspace, error)
}

// decidedStates are the states the writer decided for a record, before the
// views hold them: the aggregates it touched from the decision, the others
// from the views (which hold every earlier record).
type decidedStates struct {
	final domain.Touched
	views *projections.Store
}

func (d decidedStates) Task(id string) (*domain.Task, error) {
	if t, ok := d.final.Tasks[id]; ok {
		return t, nil
	}
	return d.views.Task(id)
}

func (d decidedStates) Goal(id string) (*domain.Goal, error) {
	if g, ok := d.final.Goals[id]; ok {
		return g, nil
	}
	return d.views.Goal(id)
}

func (d decidedStates) Workspace(id string) (*domain.Workspace, error) {
	if w, ok := d.final.Workspaces[id]; ok {
		return w, nil
	}
	return d.views.Workspace(id)
}

// Replay applies a record appended by an earlier writer to the views.
func (w *writer) Replay(seq uint64, c *eventstore.Commit) error { return w.store.Apply(seq, c) }

// submit hands a request to the committer and waits for its outcome.
func submit(ctx context.Context, c *eventstore.Committer[*request], cmd domain.Command, m domain.Meta, size int, taken func()) outcome {
	r := &request{cmd: cmd, meta: m, done: make(chan outcome, 1), trace: trace.SpanContextFromContext(ctx), size: size, taken: taken}
	if err := c.Submit(ctx, r); err != nil {
		return outcome{Err: err}
	}
	select {
	case o := <-r.done:
		return o
	case <-ctx.Done():
		return outcome{Err: fmt.Errorf("%w: %w", eventstore.ErrUnknownOutcome, ctx.Err())}
	}
}

// traceCommit records, for each traced command of a committed batch, a span
// "dwr.commit" (a child of the command's) from the batch's decision to its
// commit, with an event when the decision was made, and returns the
// commands' spans for the dispatch of the work items.
func (w *writer) traceCommit(items []*request, seq uint64, err error) commandTraces {
	var traces commandTraces
	for _, it := range items {
		if !it.trace.IsValid() || w.tracer == nil {
			continue
		}
		if traces == nil {
			traces = commandTraces{}
		}
		traces[it.meta.Workspace+"/"+it.meta.CommandID] = it.trace
		ctx := trace.ContextWithRemoteSpanContext(context.Background(), it.trace)
		_, span := w.tracer.Start(ctx, "dwr.commit", trace.WithTimestamp(w.decideStart),
			trace.WithAttributes(attribute.Int("dwr.batch_size", len(items)), attribute.Int64("dwr.log_seq", int64(seq)))) //nolint:gosec // a log sequence is far below 2^63
		span.AddEvent("decided", trace.WithTimestamp(w.decideEnd))
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
	return traces
}

// logShare refuses a new command of workspace ws while the disk is in its
// last room (diskGauge.lastRoom) if ws holds more than a quarter of the
// log's bytes that several workspaces hold: the workspace that grew the log
// most stops first, and the others keep going until the reserve, while an
// operator makes room. A deployment of one workspace is not held back.
func (w *writer) logShare(ws string) error {
	mine, all, _ := w.store.LogBytes(ws)
	if mine == all || mine <= all/logShareOf {
		return nil
	}
	if time.Since(w.shareLogged) > time.Minute {
		w.shareLogged = time.Now()
		w.logger.Warn("handlers: the disk is near its reserve of free space: the commands of a workspace holding more than its share of the log are refused before the others' (free disk space; dwr serve --min-free-disk sets the reserve)",
			"workspace", ws, "workspace_log_bytes", mine, "log_bytes", all)
	}
	// It wraps ErrStorageFull: the timers' firings refused so are retried
	// quietly, as on a full disk.
	return fmt.Errorf("%w: %w", eventstore.ErrStorageFull, &schemas.Error{Code: schemas.CodeUnavailable, Message: fmt.Sprintf(
		"the disk holding the log is near its reserve of free space, and workspace %q holds %d of the log's %d bytes, more than a 1/%d share: "+
			"its new commands are refused before the other workspaces' until an operator makes room (dwr serve --min-free-disk sets the reserve); retry with the same command id then",
		ws, mine, all, logShareOf)})
}

// logShareOf is the share of the log's bytes (1/logShareOf) past which a
// workspace's commands are refused in the disk's last room.
const logShareOf = 4
