package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/micro"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// MaxQueryBytes bounds a query's body.
const MaxQueryBytes = 64 << 10

// Query is the body of every query; each query reads the fields it needs.
type Query struct {
	ID        string `json:"id,omitempty"`
	Aggregate string `json:"aggregate,omitempty"` // for events: workspace | goal | task
	State     string `json:"state,omitempty"`
	GoalID    string `json:"goal_id,omitempty"`
	Role      string `json:"role,omitempty"` // for approval.list
	After     string `json:"after,omitempty"`
	Limit     int    `json:"limit,omitempty"`
}

// QueryNames lists the query endpoints (the last tokens of dwr.q.<ws>.<query>).
var QueryNames = []string{"workspace.list", "goal.get", "goal.list", "task.get", "task.list", "events", "command.get",
	"approval.list", "approval.get", "approver.list", "member.list", "queue.list"}

func (s *Service) startQueries() (micro.Service, error) {
	svc, err := micro.AddService(s.nc, micro.Config{Name: "dwr-query", Version: s.cfg.Version,
		Description: "dwr queries: served from the views by every replica"})
	if err != nil {
		return nil, fmt.Errorf("handlers: query service: %w", err)
	}
	for _, name := range QueryNames {
		h := func(req micro.Request) { s.async(req, true, func() []byte { return s.handleQuery(name, req) }) }
		if err := svc.AddEndpoint("q_"+strings.ReplaceAll(name, ".", "_"), micro.HandlerFunc(h),
			micro.WithEndpointSubject(s.cfg.Prefix+".q.*."+name)); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("handlers: query endpoint %s: %w", name, err)
		}
	}
	return svc, nil
}

func (s *Service) handleQuery(name string, req micro.Request) []byte {
	ws := workspaceOf(req.Subject())
	if !domain.ValidName(ws) {
		return errResponse(&WireError{Code: string(domain.CodeInvalid), Message: fmt.Sprintf("workspace %q in the subject is not a valid name", ws)})
	}
	p, werr := s.authorize(req.Headers(), ws, "q", name)
	if werr != nil {
		return errResponse(werr)
	}
	if f := s.onQuery.Load(); f != nil {
		(*f)(p.name, name)
	}
	var q Query
	if body := req.Data(); len(body) > 0 {
		if err := schemas.CheckBounds(body, MaxQueryBytes, 8); err != nil {
			return errResponse(toWire(err, s.cfg.Logger))
		}
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&q); err != nil {
			return errResponse(&WireError{Code: string(domain.CodeInvalid), Message: "the query does not decode: " + err.Error()})
		}
	}
	min, err := minSeq(req.Headers())
	if err != nil {
		return errResponse(toWire(err, s.cfg.Logger))
	}
	if werr := s.checkMinSeq(min); werr != nil {
		return errResponse(werr)
	}
	if min == 0 {
		// On the writer, a query reflects every command already answered:
		// the writer answers a batch before it applies it to the views.
		min = s.answeredSeq()
	}
	if min > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.MinSeqWait)
		err := s.store.WaitFor(ctx, min)
		cancel()
		if err != nil {
			return errResponse(&WireError{Code: string(domain.CodeUnavailable), Message: fmt.Sprintf(
				"the views have not reached log sequence %d yet (at %d): retry shortly", min, s.store.Checkpoint())})
		}
	}
	seq := s.store.Checkpoint()
	res, err := s.query(name, ws, p.name, q)
	if err != nil {
		return errResponse(toWire(err, s.cfg.Logger))
	}
	return okResponse(seq, res)
}

// checkMinSeq refuses (invalid) a Dwr-Min-Seq beyond the log's end: no
// reply named that sequence, so waiting for the views to reach it could only
// time out. It costs nothing when the views already stand at seq. Above
// them, the writer compares with the last record it appended; another
// replica with the highest log end it has seen, and asks the log only when
// seq is beyond that too. When the log cannot be asked, the query waits as
// before.
func (s *Service) checkMinSeq(seq uint64) *WireError {
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
			s.cfg.Logger.Warn("handlers: could not read the log's end for a query's "+HeaderMinSeq, "err", err)
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
	return &WireError{Code: string(domain.CodeInvalid), Message: fmt.Sprintf(
		"header %s names log sequence %d, beyond the log's end (%d): pass the seq of a reply you were given", HeaderMinSeq, seq, end)}
}

// query answers query name in workspace ws for actor, the identity that
// asks.
func (s *Service) query(name, ws, actor string, q Query) (any, error) {
	if q.Limit < 0 || q.Limit > 10_000 {
		return nil, &WireError{Code: string(domain.CodeInvalid), Message: "limit must be between 0 and 10000",
			Fields: []FieldError{{Pointer: "/limit", Message: "must be between 0 and 10000"}}}
	}
	notFound := func(what string) error {
		return &WireError{Code: string(domain.CodeNotFound), Message: fmt.Sprintf("%s %q not found in workspace %q", what, q.ID, ws)}
	}
	switch name {
	case "workspace.list":
		return nonNil(s.store.ListWorkspaces())
	case "goal.get":
		g, err := s.store.GoalView(ws, q.ID)
		if err == nil && g == nil {
			return nil, notFound("goal")
		}
		return g, err
	case "goal.list":
		return nonNil(s.store.ListGoals(ws, q.After, q.Limit))
	case "task.get":
		t, err := s.store.Task(q.ID)
		if err == nil && (t == nil || t.Workspace != ws) {
			return nil, notFound("task")
		}
		return t, err
	case "task.list":
		if q.State != "" && !validState(q.State) {
			return nil, &WireError{Code: string(domain.CodeInvalid), Message: fmt.Sprintf("state %q is not one of %v", q.State, domain.TaskStates),
				Fields: []FieldError{{Pointer: "/state", Message: "unknown state"}}}
		}
		return nonNil(s.store.ListTasks(ws, projections.TaskFilter{State: q.State, GoalID: q.GoalID, After: q.After, Limit: q.Limit}))
	case "events":
		return s.history(ws, q)
	case "approval.list":
		if q.State != "" && q.State != "all" && !slices.Contains(projections.ApprovalStates, q.State) {
			return nil, &WireError{Code: string(domain.CodeInvalid), Message: fmt.Sprintf("state %q is not one of %v or all", q.State, projections.ApprovalStates),
				Fields: []FieldError{{Pointer: "/state", Message: "unknown approval state"}}}
		}
		return nonNil(s.store.ListApprovals(ws, projections.ApprovalFilter{State: q.State, Role: q.Role, After: q.After, Limit: q.Limit}))
	case "approval.get":
		a, err := s.store.Approval(ws, q.ID)
		if err == nil && a == nil {
			return nil, notFound("approval")
		}
		return a, err
	case "approver.list":
		w, err := s.workspace(ws)
		if err != nil {
			return nil, err
		}
		return nonNil(w.Approvers, nil)
	case "member.list":
		// A member's public key is public: it is what NATS authenticates,
		// never a secret.
		w, err := s.workspace(ws)
		if err != nil {
			return nil, err
		}
		return nonNil(w.Members, nil)
	case "queue.list":
		w, err := s.workspace(ws)
		if err != nil {
			return nil, err
		}
		return nonNil(w.Queues, nil)
	case "command.get":
		// A command id is the sender's own: another identity's command under
		// the same id is not found (domain.CommandKey).
		o, ok, err := s.store.Command(ws, domain.CommandKey(actor, q.ID))
		if err == nil && !ok {
			return nil, notFound("command")
		}
		return o, err
	}
	return nil, &WireError{Code: string(domain.CodeNotFound), Message: "unknown query " + name}
}

// workspace returns workspace ws from the views, or not_found.
func (s *Service) workspace(ws string) (*domain.Workspace, error) {
	w, err := s.store.Workspace(ws)
	if err != nil {
		return nil, err
	}
	if w == nil {
		return nil, &WireError{Code: string(domain.CodeNotFound), Message: fmt.Sprintf("workspace %q not found", ws)}
	}
	return w, nil
}

func nonNil[T any](v []T, err error) ([]T, error) {
	if v == nil {
		v = []T{}
	}
	return v, err
}

func validState(s string) bool {
	for _, st := range domain.TaskStates {
		if st == s {
			return true
		}
	}
	return false
}

// history returns an aggregate's events; with no aggregate type given it
// looks the id up as a task, then a goal, then a workspace.
func (s *Service) history(ws string, q Query) ([]json.RawMessage, error) {
	types := []string{domain.AggTask, domain.AggGoal, domain.AggWorkspace}
	if q.Aggregate != "" {
		types = []string{q.Aggregate}
	}
	for _, typ := range types {
		evs, err := s.store.History(typ, q.ID)
		if err != nil {
			return nil, err
		}
		if len(evs) == 0 || evs[0].Workspace != ws {
			continue
		}
		out := make([]json.RawMessage, len(evs))
		for i, e := range evs {
			out[i] = e.Raw
		}
		return out, nil
	}
	return nil, &WireError{Code: string(domain.CodeNotFound), Message: fmt.Sprintf("no aggregate %q in workspace %q", q.ID, ws)}
}
