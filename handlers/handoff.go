package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	fastjson "github.com/go-json-experiment/json/v1"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// The handoff (schemas.Handoff). A report that asks for it may start,
// in its own commit, the next attempt of a task it left ready on the
// reporter's queue (domain: tx.handoff); its reply then hands the reporter
// that attempt's token and work item. No work item goes through the work
// stream for it — no publish, no pull, no acknowledgement, and no other
// worker sees it — so the writer itself keeps the attempt's lease: it
// knows the handed attempts that run (handed), and fires an attempt_lease
// timer for one that was not heard from (claim, heartbeat, checkpoint)
// for its queue's lease and the grace, which abandons it (lease_lost) and
// leaves the task ready, published as a work item again.

// withHandoff returns a report's outcome's reply with the handed
// attempt's token and work item added, when the reply names an attempt
// handed with token. The item is the one the writer made from the states
// it decided (outcome.Handed); a retry's outcome, read back from the
// views, has none, and its item is read from the views once they hold the
// record. When the attempt no longer runs there, the reply hands nothing
// (an attempt the reporter was not told of is abandoned at its lease's end
// like any other).
func (s *Service) withHandoff(ctx context.Context, o outcome, token string) json.RawMessage {
	if token == "" || !bytes.Contains(o.Reply, []byte(`"next":`)) {
		return o.Reply
	}
	var cr schemas.CommandResult
	if err := fastjson.Unmarshal(o.Reply, &cr); err != nil || cr.Next == nil || cr.Next.TokenHash != domain.TokenHash(token) {
		return o.Reply
	}
	cr.Next.Token, cr.Next.Item = token, o.Handed
	if cr.Next.Item == nil {
		if err := s.store.WaitFor(ctx, o.Seq); err == nil {
			cr.Next.Item = handedItemOf(cr.Next, o.Seq, s.store)
		}
	}
	if cr.Next.Item == nil {
		cr.Next = nil
	}
	out, err := fastjson.Marshal(&cr)
	if err != nil {
		return o.Reply
	}
	if cr.Next != nil {
		s.metrics.handedOff()
	}
	return out
}

// handedItem returns the work item of the attempt a committed report cmd
// handed its sender, as its reply names it, from the states the record
// (seq) left: nil for any other command or reply.
func handedItem(cmd domain.Command, reply json.RawMessage, seq uint64, states aggregates) *schemas.WorkItem {
	if r, ok := domain.Report(cmd); !ok || !r.Next || !bytes.Contains(reply, []byte(`"next":`)) {
		return nil
	}
	var cr struct {
		Next *schemas.Handoff `json:"next"`
	}
	if err := fastjson.Unmarshal(reply, &cr); err != nil || cr.Next == nil {
		return nil
	}
	return handedItemOf(cr.Next, seq, states)
}

// handedItemOf returns the work item of handed attempt h, its task as
// states hold it at seq, or nil when the attempt no longer runs there.
func handedItemOf(h *schemas.Handoff, seq uint64, states aggregates) *schemas.WorkItem {
	t, err := states.Task(h.TaskID)
	if err != nil || t == nil {
		return nil
	}
	r := t.Running()
	if r == nil || r.N != h.Attempt || r.TokenHash != h.TokenHash {
		return nil
	}
	it := workItemOf(t, states, seq)
	it.Attempt = r.N
	return &it
}

// handed is the writer's memory of the handed attempts that may still
// run, so that it can keep their leases; a new writer finds them in the
// views (load). It knows each one's start and, once looked up, its queue,
// so that the sweep reads a task only when its attempt's lease may have
// lapsed: with many long jobs running, a sweep costs no reads.
type handed struct {
	mu sync.Mutex
	m  map[string]handedAttempt // by task
}

type handedAttempt struct {
	n         int
	ws, queue string // queue: "" until the sweep has read the task once
	started   time.Time
}

func newHanded() *handed { return &handed{m: map[string]handedAttempt{}} }

// attemptEnding are the task events after which a task's attempt no
// longer runs (the sweep's read finds any other end).
var attemptEnding = map[string]bool{"task.attempt_succeeded": true, "task.attempt_failed": true, "task.attempt_abandoned": true,
	"task.waiting": true, "task.delegated": true, "task.cancelled": true, "task.failed": true, "task.rejected": true, "task.accepted": true}

// add remembers the handed attempts a committed record started, and
// forgets those it ended.
func (h *handed) add(c *eventstore.Commit) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range c.Events {
		e := &c.Events[i]
		switch {
		case e.Type == "task.attempt_started":
			delete(h.m, e.AggregateID)
			if !bytes.Contains(e.Data, []byte(`"handed":true`)) {
				continue
			}
			var ev domain.AttemptStarted
			if err := fastjson.Unmarshal(e.Data, &ev); err == nil && ev.Handed {
				h.m[e.AggregateID] = handedAttempt{n: ev.Attempt, ws: e.Workspace, started: e.Time}
			}
		case attemptEnding[e.Type]:
			delete(h.m, e.AggregateID)
		}
	}
}

// load remembers the handed attempts running in the views.
func (h *handed) load(store *projections.Store) error {
	wss, err := store.ListWorkspaces()
	if err != nil {
		return err
	}
	for _, ws := range wss {
		err := store.EachTask(ws.Name, projections.TaskFilter{State: domain.StateRunning}, func(t *domain.Task) bool {
			if r := t.Running(); r != nil && r.Handed {
				h.mu.Lock()
				h.m[t.ID] = handedAttempt{n: r.N, ws: t.Workspace, queue: t.Spec.Queue, started: r.StartedAt}
				h.mu.Unlock()
			}
			return true
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// list returns the attempts remembered.
func (h *handed) list() map[string]handedAttempt {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.m)
}

// set replaces what is remembered of task's attempt, unless the attempt
// changed meanwhile; forget forgets it.
func (h *handed) set(task string, a handedAttempt) {
	h.mu.Lock()
	if cur, ok := h.m[task]; ok && cur.n == a.n {
		h.m[task] = a
	}
	h.mu.Unlock()
}

func (h *handed) forget(task string, n int) {
	h.mu.Lock()
	if cur, ok := h.m[task]; ok && cur.n == n {
		delete(h.m, task)
	}
	h.mu.Unlock()
}

// handedSweep is how often the writer looks for handed attempts whose
// lease has lapsed.
const handedSweep = 250 * time.Millisecond

// keepHandedLeases abandons, while this replica is the writer, each handed
// attempt not heard from for its queue's lease and the grace: an
// attempt_lease timer, decided once (its command id names the attempt), as
// the redelivery of a work item would lead a claim to supersede it. It
// reads an attempt's task once for its queue, and again only when the
// lease may have lapsed, to confirm that the attempt still runs.
func (s *Service) keepHandedLeases(ctx context.Context, h *handed, alive *liveness) {
	t := time.NewTicker(handedSweep)
	defer t.Stop()
	running := func(id string, a handedAttempt) (*domain.Task, *domain.Attempt) {
		task, err := s.store.Task(id)
		if err != nil || task == nil {
			if err == nil {
				h.forget(id, a.n)
			}
			return nil, nil
		}
		r := task.Running()
		if r == nil || r.N != a.n || !r.Handed {
			h.forget(id, a.n)
			return nil, nil
		}
		return task, r
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for id, a := range h.list() {
			if a.queue == "" {
				task, r := running(id, a)
				if r == nil {
					continue
				}
				a.queue, a.started = task.Spec.Queue, r.StartedAt
				h.set(id, a)
			}
			lease, err := s.queueLease(ctx, a.ws, a.queue)
			if err != nil {
				continue
			}
			due := alive.lastAlive(id, a.n, a.started).Add(lease + s.cfg.LeaseGrace)
			if s.cfg.Clock().Before(due) {
				continue
			}
			if _, r := running(id, a); r == nil {
				continue
			}
			o := s.execute(ctx, &domain.FireTimer{TaskID: id, Kind: domain.TimerLease, Attempt: a.n, Due: due},
				domain.Meta{Workspace: a.ws, CommandID: fmt.Sprintf("timer.%s.%s.%d", domain.TimerLease, id, a.n), Actor: actorTimer})
			if o.Err != nil {
				if ctx.Err() == nil && !errors.Is(o.Err, eventstore.ErrStorageFull) { // a full disk is logged once, where it is watched
					s.cfg.Logger.Warn("handlers: abandoning a handed attempt past its lease failed; will retry", "task", id, "attempt", a.n, "err", o.Err)
				}
				continue
			}
			s.cfg.Logger.Info("handlers: a handed attempt's lease lapsed; the task is ready again", "task", id, "attempt", a.n)
			s.metrics.timerFired(domain.TimerLease, due, s.cfg.Clock())
			h.forget(id, a.n)
		}
	}
}
