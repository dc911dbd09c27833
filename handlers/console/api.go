package console

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/schemas"
)

// Bounds of what one page of the console reads.
const (
	// MaxListed bounds the goals, approvals and tasks a list page reads.
	MaxListed = 500
	// MaxHistory bounds the events of a task's history the timeline reads.
	MaxHistory = 2000
)

// apiError is the body of every error the console answers.
type apiError struct {
	Error struct {
		Code    string               `json:"code"`
		Message string               `json:"message"`
		Fields  []schemas.FieldError `json:"fields,omitempty"`
	} `json:"error"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	var e apiError
	e.Error.Code, e.Error.Message = code, msg
	writeJSON(w, status, e)
}

// writeClientError answers the error of a query or command: the service's
// refusal with its code and message (a viewer's cancel is the service's
// "forbidden"), or why no answer came.
func writeClientError(w http.ResponseWriter, err error) {
	status, code := http.StatusBadGateway, "unavailable"
	for _, c := range []struct {
		err    error
		status int
	}{
		{client.ErrInvalid, http.StatusBadRequest}, {client.ErrNotFound, http.StatusNotFound},
		{client.ErrConflict, http.StatusConflict}, {client.ErrForbidden, http.StatusForbidden},
		{client.ErrTooLarge, http.StatusRequestEntityTooLarge}, {client.ErrUnavailable, http.StatusServiceUnavailable},
		{client.ErrInternal, http.StatusInternalServerError},
	} {
		if errors.Is(err, c.err) {
			status, code = c.status, c.err.(*schemas.Error).Code
			break
		}
	}
	var e apiError
	e.Error.Code, e.Error.Message = code, err.Error()
	var se *schemas.Error
	if errors.As(err, &se) {
		e.Error.Message, e.Error.Fields = se.Message, se.Fields
	}
	if errors.Is(err, context.DeadlineExceeded) {
		status = http.StatusGatewayTimeout
	}
	writeJSON(w, status, e)
}

// readJSON decodes the request's body into v: at most MaxRequestBytes,
// checked before decoding, and nothing but one JSON object. It answers the
// error itself and returns false when it cannot.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	b, err := io.ReadAll(io.LimitReader(r.Body, MaxRequestBytes+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid", "the body cannot be read: "+err.Error())
		return false
	}
	if len(b) > MaxRequestBytes {
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the body is more than %d bytes", MaxRequestBytes))
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "invalid", "the body is not the JSON object expected: "+err.Error())
		return false
	}
	return true
}

// goals is GET /api/goals?schedule=S&label=NAME=VALUE...: the newest
// goals (MaxListed), newest first, of schedule S if given, holding every
// label given (label is repeatable).
func (c *Console) goals(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	labels, ok := labelParams(w, q)
	if !ok {
		return
	}
	ctx, cancel := requestCtx(r)
	defer cancel()
	f := client.GoalFilter{Schedule: q.Get("schedule"), Labels: labels}
	if out, ok := firstListed(w, s.cl.GoalsWhere(ctx, f, client.Limit(100), client.NewestFirst())); ok {
		writeJSON(w, http.StatusOK, out) // the newest MaxListed, newest first
	}
}

// labelParams reads the label filters of a listing (GET /api/goals, GET
// /api/tasks), its repeated label parameter, with labelFilter. It answers
// one that cannot be read itself (400 invalid, at /labels, naming it) and
// returns false.
func labelParams(w http.ResponseWriter, q url.Values) (schemas.Labels, bool) {
	labels, msg := labelFilter(q["label"])
	if msg != "" {
		var e apiError
		e.Error.Code, e.Error.Message = schemas.CodeInvalid, msg
		e.Error.Fields = []schemas.FieldError{{Pointer: "/labels", Message: msg}}
		writeJSON(w, http.StatusBadRequest, e)
		return nil, false
	}
	return labels, true
}

// labelFilter reads label filters, each NAME=VALUE (the value may be
// empty, and may hold '='), into the labels a goal or a task listed must
// hold; or says why one cannot be read. The names and values are the
// service's to check.
func labelFilter(filters []string) (schemas.Labels, string) {
	if len(filters) == 0 {
		return nil, ""
	}
	labels := schemas.Labels{}
	for _, f := range filters {
		name, value, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Sprintf("label filter %q is not NAME=VALUE: write it as label=customer=acme (an empty value as label=urgent=)", f)
		}
		if v, twice := labels[name]; twice && v != value {
			return nil, fmt.Sprintf("label %q is filtered by two values, %q and %q: a goal or a task holds one; give one of them", name, v, value)
		}
		labels[name] = value
	}
	return labels, ""
}

func (c *Console) goal(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := requestCtx(r)
	defer cancel()
	g, err := s.cl.Goal(ctx, r.PathValue("id"))
	answer(w, g, err)
}

// goalByKey is GET /api/goal-by-key/{key}: the goal made last with the key
// (goal.create's key), open or ended, as GET /api/goals/{id} answers it; no
// goal with the key is 404.
func (c *Console) goalByKey(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := requestCtx(r)
	defer cancel()
	g, err := s.cl.GoalByKey(ctx, r.PathValue("key"))
	answer(w, g, err)
}

// planRevision is one version of a goal's plan, as its goal.plan_committed
// event has it: the tasks, what the revision kept, replaced (cancelled and
// made anew), added and removed, and who committed it when.
type planRevision struct {
	Version  int                `json:"version"`
	Time     time.Time          `json:"time"`
	Actor    string             `json:"actor,omitempty"`
	Tasks    []schemas.PlanTask `json:"tasks"`
	Kept     []string           `json:"kept,omitempty"`
	Replaced []string           `json:"replaced,omitempty"`
	Added    []string           `json:"added,omitempty"`
	Removed  []string           `json:"removed,omitempty"`
}

// plans is GET /api/goals/{id}/plans: every version of the goal's plan,
// oldest first, from the goal's history (at most MaxHistory of its events
// read).
func (c *Console) plans(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := requestCtx(r)
	defer cancel()
	out := []planRevision{}
	n := 0
	for e, err := range s.cl.History(ctx, client.AggGoal, r.PathValue("id"), 0) {
		if err != nil {
			writeClientError(w, err)
			return
		}
		if n++; n > MaxHistory {
			break
		}
		if e.Type != "goal.plan_committed" {
			continue
		}
		p := planRevision{Time: e.Time, Actor: e.Actor}
		if err := json.Unmarshal(e.Data, &p); err != nil {
			writeError(w, http.StatusBadGateway, "internal", "a plan revision could not be read: "+err.Error())
			return
		}
		out = append(out, p)
	}
	writeJSON(w, http.StatusOK, out)
}

// reasonRequest is the body of a cancel.
type reasonRequest struct {
	Reason string `json:"reason"`
}

// cancelGoal is POST /api/goals/{id}/cancel: it cancels the goal, giving
// the body's reason.
func (c *Console) cancelGoal(w http.ResponseWriter, r *http.Request, s *session) {
	withReason(w, r, s.cl.CancelGoal)
}

// labelsRequest is the body of POST /api/goals/{id}/labels.
type labelsRequest struct {
	Set    schemas.Labels `json:"set,omitempty"`
	Remove []string       `json:"remove,omitempty"`
}

// labelGoal is POST /api/goals/{id}/labels: it sets the body's set labels
// on the goal and removes those its remove names (goal.label); a change
// that changes nothing answers duplicate.
func (c *Console) labelGoal(w http.ResponseWriter, r *http.Request, s *session) {
	relabel(w, r, s.cl.LabelGoal)
}

// relabel reads a labels request and sends it with send (LabelGoal,
// LabelTask) for the path's id.
func relabel(w http.ResponseWriter, r *http.Request,
	send func(ctx context.Context, id string, set schemas.Labels, remove []string, opts ...client.CallOption) (*client.Result, error)) {
	posted(w, r, func(ctx context.Context, id string, req *labelsRequest) (*client.Result, error) {
		return send(ctx, id, req.Set, req.Remove)
	})
}

// posted reads the JSON body of a POST about {id} into a Req, sends what
// send makes of it, and answers with its result.
func posted[Req any](w http.ResponseWriter, r *http.Request, send func(ctx context.Context, id string, req *Req) (*client.Result, error)) {
	var req Req
	if !readJSON(w, r, &req) {
		return
	}
	ctx, cancel := requestCtx(r)
	defer cancel()
	res, err := send(ctx, r.PathValue("id"), &req)
	answer(w, res, err)
}

// priorityRequest is the body of POST /api/goals/{id}/priority.
type priorityRequest struct {
	Priority int `json:"priority"`
}

// prioritizeGoal is POST /api/goals/{id}/priority: it sets the goal's
// priority, 1 (first) to 5 (last), to the body's (goal.prioritize); the
// same priority again answers duplicate.
func (c *Console) prioritizeGoal(w http.ResponseWriter, r *http.Request, s *session) {
	posted(w, r, func(ctx context.Context, id string, req *priorityRequest) (*client.Result, error) {
		return s.cl.PrioritizeGoal(ctx, id, req.Priority)
	})
}

// labelTask is POST /api/tasks/{id}/labels: labelGoal's, for a task
// (task.label).
func (c *Console) labelTask(w http.ResponseWriter, r *http.Request, s *session) {
	relabel(w, r, s.cl.LabelTask)
}

// cancelTask is POST /api/tasks/{id}/cancel: it cancels the task, giving
// the body's reason.
func (c *Console) cancelTask(w http.ResponseWriter, r *http.Request, s *session) {
	withReason(w, r, s.cl.CancelTask)
}

// retryTask is POST /api/tasks/{id}/retry: a failed or rejected task's new
// attempt (task.retry), with the body's reason.
func (c *Console) retryTask(w http.ResponseWriter, r *http.Request, s *session) {
	withReason(w, r, s.cl.RetryTask)
}

// queue is GET /api/queues/{name}: the queue's settings and counts
// (queue.list's entry), or only its name when it has none.
func (c *Console) queue(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := requestCtx(r)
	defer cancel()
	out := &schemas.Queue{QueueConfig: schemas.QueueConfig{Name: r.PathValue("name")}}
	for q, err := range s.cl.Queues(ctx) {
		if err != nil {
			writeClientError(w, err)
			return
		}
		if q.Name == out.Name {
			out = q
			break
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// pauseQueue is POST /api/queues/{name}/pause: the queue hands out no job
// until it is resumed (queue.pause).
func (c *Console) pauseQueue(w http.ResponseWriter, r *http.Request, s *session) {
	onNamed(w, r, s.cl.PauseQueue)
}

// resumeQueue is POST /api/queues/{name}/resume: the paused queue hands out
// its jobs again (queue.resume).
func (c *Console) resumeQueue(w http.ResponseWriter, r *http.Request, s *session) {
	onNamed(w, r, s.cl.ResumeQueue)
}

// onNamed sends the command do about the queue or schedule the path names,
// and answers its result.
func onNamed(w http.ResponseWriter, r *http.Request, do func(ctx context.Context, name string, opts ...client.CallOption) (*client.Result, error)) {
	ctx, cancel := requestCtx(r)
	defer cancel()
	res, err := do(ctx, r.PathValue("name"))
	answer(w, res, err)
}

// schedules is GET /api/schedules: the workspace's schedules, by name (the
// first MaxListed).
func (c *Console) schedules(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := requestCtx(r)
	defer cancel()
	if out, ok := firstListed(w, s.cl.Schedules(ctx, client.Limit(100))); ok {
		writeJSON(w, http.StatusOK, out)
	}
}

// pauseSchedule is POST /api/schedules/{name}/pause: the schedule fires no
// slot until it is resumed (schedule.pause).
func (c *Console) pauseSchedule(w http.ResponseWriter, r *http.Request, s *session) {
	onNamed(w, r, s.cl.PauseSchedule)
}

// resumeSchedule is POST /api/schedules/{name}/resume: the schedule fires
// again from its next slot after now (schedule.resume).
func (c *Console) resumeSchedule(w http.ResponseWriter, r *http.Request, s *session) {
	onNamed(w, r, s.cl.ResumeSchedule)
}

// queueTasks is GET /api/queues/{name}/tasks?state=S: the queue's tasks in
// state S (the newest MaxListed, newest first), or in every state (the
// first MaxListed, by state).
func (c *Console) queueTasks(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := requestCtx(r)
	defer cancel()
	f := client.TaskFilter{Queue: r.PathValue("name"), State: r.URL.Query().Get("state")}
	opts := []client.CallOption{client.Limit(100)}
	if f.State != "" {
		opts = append(opts, client.NewestFirst()) // the latest of a state: what an operator looks for
	}
	if out, ok := firstListed(w, s.cl.Tasks(ctx, f, opts...)); ok {
		writeJSON(w, http.StatusOK, out)
	}
}

// taskRow is one task of GET /api/tasks: what the tasks page shows of it.
type taskRow struct {
	ID        string         `json:"id"`
	Key       string         `json:"key,omitempty"`
	Title     string         `json:"title,omitempty"`
	State     string         `json:"state"`
	Queue     string         `json:"queue"`
	GoalID    string         `json:"goal_id,omitempty"`
	Labels    schemas.Labels `json:"labels,omitempty"`
	Reason    string         `json:"reason,omitempty"`
	UpdatedAt time.Time      `json:"updated_at"`
}

// tasks is GET /api/tasks?label=NAME=VALUE...&state=S: the tasks holding
// every label given (label is repeatable, read as GET /api/goals reads it)
// and in state S if given, the newest MaxListed, newest first. With
// neither, the first MaxListed by id: task.list lists the newest first only
// within a state, a goal or labels.
func (c *Console) tasks(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	labels, ok := labelParams(w, q)
	if !ok {
		return
	}
	ctx, cancel := requestCtx(r)
	defer cancel()
	f := client.TaskFilter{State: q.Get("state"), Labels: labels}
	opts := []client.CallOption{client.Limit(100)}
	if f.State != "" || len(f.Labels) > 0 {
		opts = append(opts, client.NewestFirst())
	}
	ts, ok := firstListed(w, s.cl.Tasks(ctx, f, opts...))
	if !ok {
		return
	}
	out := make([]taskRow, 0, len(ts))
	for _, t := range ts {
		out = append(out, taskRow{ID: t.ID, Key: t.Key, Title: t.Spec.Title, State: t.State, Queue: t.Spec.Queue, GoalID: t.GoalID,
			Labels: t.Labels, Reason: t.Reason, UpdatedAt: t.UpdatedAt})
	}
	writeJSON(w, http.StatusOK, out)
}

// firstListed returns the first MaxListed items of a listing, or answers
// its error on w and returns false.
func firstListed[T any](w http.ResponseWriter, items iter.Seq2[*T, error]) ([]*T, bool) {
	out := []*T{}
	for v, err := range items {
		if err != nil {
			writeClientError(w, err)
			return nil, false
		}
		if out = append(out, v); len(out) >= MaxListed {
			break
		}
	}
	return out, true
}

// answer writes v, what a client call returned, or its error err.
func answer(w http.ResponseWriter, v any, err error) {
	if err != nil {
		writeClientError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// withReason reads a reason from r's body, calls do with the id r names
// ({id}) and that reason, and answers with its result.
func withReason(w http.ResponseWriter, r *http.Request, do func(ctx context.Context, id, reason string, opts ...client.CallOption) (*client.Result, error)) {
	posted(w, r, func(ctx context.Context, id string, req *reasonRequest) (*client.Result, error) {
		return do(ctx, id, req.Reason)
	})
}

// historyEvent is one event of a task's history as the timeline shows it.
type historyEvent struct {
	schemas.Event
	// Hash is the SHA-256 of the event as stored: the next event's prev.
	Hash string `json:"hash"`
}

// chain is what the console found checking a history's hash chain.
type chain struct {
	Verified bool   `json:"verified"`
	Events   int    `json:"events"`
	Head     string `json:"head,omitempty"` // the hash of the last event read
	Problem  string `json:"problem,omitempty"`
	// Truncated is set when the history is longer than the console reads.
	Truncated bool `json:"truncated,omitempty"`
	// Withheld says why the history is not shown (an approver may read a
	// task but not its events).
	Withheld string `json:"withheld,omitempty"`
}

// timeline is GET /api/tasks/{id}: the task, its history and its chain.
type timeline struct {
	Task    *schemas.Task  `json:"task"`
	History []historyEvent `json:"history"`
	Chain   chain          `json:"chain"`
}

func (c *Console) task(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := requestCtx(r)
	defer cancel()
	id := r.PathValue("id")
	t, err := s.cl.Task(ctx, id)
	if err != nil {
		writeClientError(w, err)
		return
	}
	out := timeline{Task: t, History: []historyEvent{}}
	var raws []json.RawMessage
	for raw, err := range client.List[json.RawMessage](ctx, s.cl, "events", schemas.Query{ID: id, Aggregate: "task"}, client.Limit(500)) {
		if errors.Is(err, client.ErrForbidden) {
			out.Chain.Withheld = "this identity may not read histories: " + err.Error()
			writeJSON(w, http.StatusOK, out)
			return
		}
		if err != nil {
			writeClientError(w, err)
			return
		}
		if len(raws) >= MaxHistory {
			out.Chain.Truncated = true
			break
		}
		raws = append(raws, *raw)
	}
	out.Chain = verifyChain(raws, &out.History, out.Chain.Truncated)
	writeJSON(w, http.StatusOK, out)
}

// verifyChain checks that raws, an aggregate's events from its first on,
// form its hash chain: versions 1, 2, 3... and each event's prev the
// SHA-256 of the one before as stored (empty for the first). It appends
// each event to hist.
func verifyChain(raws []json.RawMessage, hist *[]historyEvent, truncated bool) chain {
	ch := chain{Verified: true, Events: len(raws), Truncated: truncated}
	prev := ""
	for i, raw := range raws {
		var e schemas.Event
		if err := json.Unmarshal(raw, &e); err != nil {
			return chain{Events: len(raws), Problem: fmt.Sprintf("event %d does not decode: %v", i+1, err)}
		}
		sum := sha256.Sum256(raw)
		hash := hex.EncodeToString(sum[:])
		*hist = append(*hist, historyEvent{Event: e, Hash: hash})
		switch {
		case e.Version != uint64(i+1):
			ch.Verified, ch.Problem = false, fmt.Sprintf("event %d has version %d: the chain has a gap", i+1, e.Version)
		case e.PrevHash != prev:
			ch.Verified, ch.Problem = false, fmt.Sprintf("version %d names prev %s, but version %d hashes to %s", e.Version, e.PrevHash, e.Version-1, prev)
		}
		if !ch.Verified {
			return ch
		}
		prev = hash
	}
	ch.Head = prev
	return ch
}

func (c *Console) approvals(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := requestCtx(r)
	defer cancel()
	state := r.URL.Query().Get("state")
	if out, ok := firstListed(w, s.cl.Approvals(ctx, client.ApprovalFilter{State: state}, client.Limit(100))); ok {
		writeJSON(w, http.StatusOK, out)
	}
}

// approvalPage is GET /api/approvals/{id}: the approval, with its action
// as the exact text the service holds, which the page digests before it
// signs (a JSON parse would lose how its numbers are written).
type approvalPage struct {
	Approval   *schemas.ApprovalView `json:"approval"`
	ActionText string                `json:"action_text"`
	// DigestOK says whether the action digests to the digest named, as the
	// console computes it; the page computes it again itself.
	DigestOK bool `json:"digest_ok"`
}

func (c *Console) approval(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := requestCtx(r)
	defer cancel()
	a, err := s.cl.Approval(ctx, r.PathValue("id"))
	if err != nil {
		writeClientError(w, err)
		return
	}
	d, err := schemas.ActionDigest(a.Action)
	writeJSON(w, http.StatusOK, approvalPage{Approval: a, ActionText: string(a.Action), DigestOK: err == nil && d == a.ActionDigest})
}

// decideRequest is the body of POST /api/approvals/{id}/decide: what the
// person signed in the browser, and the signature. The private key never
// reaches the console.
type decideRequest struct {
	Approver     string `json:"approver"`
	Response     string `json:"response"`
	ActionDigest string `json:"action_digest"`
	Comment      string `json:"comment,omitempty"`
	Signature    string `json:"signature"`
}

func (c *Console) decide(w http.ResponseWriter, r *http.Request, s *session) {
	posted(w, r, func(ctx context.Context, id string, req *decideRequest) (*client.Result, error) {
		return s.cl.DecideApproval(ctx, schemas.DecideApproval{ApprovalID: id, Approver: req.Approver,
			Response: req.Response, ActionDigest: req.ActionDigest, Comment: req.Comment, Signature: req.Signature})
	})
}

// queueRow is one queue of GET /api/queues.
type queueRow struct {
	Name       string `json:"name"`
	LeaseMS    int64  `json:"lease_ms,omitempty"`
	MaxDeliver int    `json:"max_deliver,omitempty"`
	MaxRunning int    `json:"max_running,omitempty"` // 0: no limit
	// RateLimit items handed out in any RatePeriodMS at most; 0: no limit.
	RateLimit    int   `json:"rate_limit,omitempty"`
	RatePeriodMS int64 `json:"rate_period_ms,omitempty"`
	// Order is "priority" when the queue hands out its items by their
	// tasks' priority, then as they became ready; "": as they became
	// ready (fifo).
	Order  string `json:"order,omitempty"`
	Paused bool   `json:"paused,omitempty"`
	// Polling and LastDelivered are the queue's consumer's: its executors'
	// pulls waiting for an item, and when it last delivered one.
	Polling       int        `json:"polling"`
	LastDelivered *time.Time `json:"last_delivered,omitempty"`
	Ready         int        `json:"ready"`
	Running       int        `json:"running"`
	Waiting       int        `json:"waiting"`
	Quarantined   int        `json:"quarantined"`
	// Truncated is set when a state had more tasks than the console counts.
	Truncated bool `json:"truncated,omitempty"`
}

// quarantinedReason is the reason of a task failed because its work item
// was delivered the most times its queue allows (domain.ReasonQuarantined).
const quarantinedReason = "quarantined"

func (c *Console) queues(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := requestCtx(r)
	defer cancel()
	rows := map[string]*queueRow{}
	row := func(name string) *queueRow {
		if rows[name] == nil {
			rows[name] = &queueRow{Name: name}
		}
		return rows[name]
	}
	for q, err := range s.cl.Queues(ctx) {
		if err != nil {
			writeClientError(w, err)
			return
		}
		x := row(q.Name)
		x.LeaseMS, x.MaxDeliver, x.MaxRunning, x.Paused = q.LeaseMS, q.MaxDeliver, q.MaxRunning, q.Paused
		x.RateLimit, x.RatePeriodMS, x.Order = q.RateLimit, q.RatePeriodMS, q.Order
		x.Polling, x.LastDelivered = q.WaitingPulls, q.LastDelivered
	}
	truncated := false
	for _, state := range []string{schemas.StateReady, schemas.StateRunning, schemas.StateWaiting, schemas.StateFailed} {
		n := 0
		for t, err := range s.cl.Tasks(ctx, client.TaskFilter{State: state}, client.Limit(1000)) {
			if err != nil {
				writeClientError(w, err)
				return
			}
			if n++; n > 10*MaxListed {
				truncated = true
				break
			}
			switch {
			case state == schemas.StateReady:
				row(t.Spec.Queue).Ready++
			case state == schemas.StateRunning:
				row(t.Spec.Queue).Running++
			case state == schemas.StateWaiting:
				row(t.Spec.Queue).Waiting++
			case t.Reason == quarantinedReason:
				row(t.Spec.Queue).Quarantined++
			}
		}
	}
	out := make([]*queueRow, 0, len(rows))
	for _, x := range rows {
		x.Truncated = truncated
		out = append(out, x)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	writeJSON(w, http.StatusOK, out)
}

// errorsIsInvalid reports whether err is the service's "invalid".
func errorsIsInvalid(err error) bool { return errors.Is(err, client.ErrInvalid) }
