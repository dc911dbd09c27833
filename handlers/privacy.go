package handlers

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/schemas"
	"github.com/dwr-run/dwr/schemas/seal"
)

// privacy seals the payloads of commands before the writer decides them,
// and opens those of replies, with the data keys of the keyring: a
// workspace's, or a goal's own (schemas.Envelope.Privacy). A nil privacy
// (encryption off) does neither.
type privacy struct {
	keys *eventstore.Keyring

	mu     sync.Mutex
	epoch  int64                          // the day queueKeys holds the keys of
	queues map[string]*eventstore.DataKey // queue keys of the day by workspace/queue
}

// keyTimeout bounds reading or making a data key.
const keyTimeout = 10 * time.Second

// key returns the data key of scope in workspace ws, making it when create
// is set and there is none.
func (p *privacy) key(ws, scope string, create bool) (*eventstore.DataKey, error) {
	ctx, cancel := context.WithTimeout(context.Background(), keyTimeout)
	defer cancel()
	return p.keys.Key(ctx, ws, scope, create)
}

// goalScope returns the scope of the data key that seals goal g's
// payloads: its own when its envelope says privacy key goal, else that of
// the goal up its delegation tree that has one, else the workspace's.
func goalScope(w domain.World, g *domain.Goal) (string, error) {
	for depth := 0; g != nil && depth <= domain.MaxDelegationDepth; depth++ {
		if g.Envelope.OwnKey() {
			return eventstore.GoalScope(g.ID), nil
		}
		if g.Parent == nil || g.Parent.GoalID == "" {
			break
		}
		var err error
		if g, err = w.Goal(g.Parent.GoalID); err != nil {
			return "", err
		}
	}
	return eventstore.ScopeWorkspace, nil
}

// taskScope returns the scope of the data key that seals task id's
// payloads ("" when there is no such task: the command is refused).
func taskScope(w domain.World, id string) (string, error) {
	t, err := w.Task(id)
	if err != nil || t == nil {
		return "", err
	}
	if t.GoalID == "" {
		return eventstore.ScopeWorkspace, nil
	}
	g, err := w.Goal(t.GoalID)
	if err != nil {
		return "", err
	}
	return goalScope(w, g)
}

// seal seals the payloads cmd carries, in workspace ws, with the data key
// of their scope as w (the writer's state, its batch so far included)
// says. A command whose payloads belong to a scope that was shredded is
// refused (conflict), naming it.
func (p *privacy) seal(w domain.World, ws string, cmd domain.Command) error {
	var scope string
	var fields []*json.RawMessage
	var texts []*string // string fields: sealed as JSON strings, kept strings
	var err error
	steps := func(ms []domain.ModelStep) {
		for i := range ms {
			fields = append(fields, &ms[i].Parsed)
		}
	}
	specs := func(tasks []domain.TaskSpec) {
		for i := range tasks {
			gateDigest(&tasks[i])
			fields = append(fields, &tasks[i].Input)
		}
	}
	switch c := cmd.(type) {
	case *domain.ClaimTask:
		// Work whose payloads were shredded cannot run: its claim is
		// refused, saying so.
		if scope, err = taskScope(w, c.TaskID); err != nil || scope == "" {
			return err
		}
		if _, err := p.key(ws, scope, false); errors.Is(err, eventstore.ErrShredded) {
			return &domain.Error{Code: domain.CodeConflict, Field: "/task_id", Message: fmt.Sprintf("%s: its task %s cannot run", shreddedWhat(ws, scope), c.TaskID)}
		}
		return nil
	case *domain.CreateGoal:
		scope = eventstore.ScopeWorkspace
		if err = domain.DefaultPrivacy(w, ws, &c.Envelope); err == nil && c.Envelope.OwnKey() {
			scope = eventstore.GoalScope(c.GoalID)
		}
		specs(c.Tasks)
	case *domain.SubmitPlan:
		var g *domain.Goal
		if g, err = w.Goal(c.GoalID); err == nil && g != nil {
			scope, err = goalScope(w, g)
		}
		specs(c.Tasks)
	case *domain.CreateTask:
		scope = eventstore.ScopeWorkspace
		gateDigest(&c.Spec)
		fields = append(fields, &c.Spec.Input)
	case *domain.ReportSuccess:
		scope, err = taskScope(w, c.TaskID)
		fields = append(fields, &c.Result)
		steps(c.ModelSteps)
	case *domain.ReportFailure:
		scope, err = taskScope(w, c.TaskID)
		texts = append(texts, &c.Error.Message)
		steps(c.ModelSteps)
	case *domain.RequestApproval:
		// Approvers sign the digest of the action as sent: it is taken
		// before the action is sealed.
		if len(c.Action) > 0 && !schemas.IsSealed(c.Action) {
			canonical, cerr := schemas.CanonicalJSON(c.Action)
			if cerr != nil {
				return nil // refused by the domain, which says why
			}
			c.Action = canonical
			if c.ActionDigest, err = schemas.ActionDigest(canonical); err != nil {
				return nil
			}
		}
		scope, err = taskScope(w, c.TaskID)
		fields = append(fields, &c.Action, &c.Basis)
	case *domain.CreateSchedule:
		// The plan each slot's goal takes: its inputs are the workspace's
		// (every slot's goal shares them).
		var tasks []map[string]json.RawMessage
		if json.Unmarshal(c.Tasks, &tasks) != nil {
			return nil // refused by the domain, which says why
		}
		inputs := make([]json.RawMessage, len(tasks))
		for i, t := range tasks {
			inputs[i] = t["input"]
			fields = append(fields, &inputs[i])
		}
		scope = eventstore.ScopeWorkspace
		defer func() {
			for i, t := range tasks {
				if len(inputs[i]) > 0 {
					t["input"] = inputs[i]
				}
			}
			if b, err := json.Marshal(tasks); err == nil {
				c.Tasks = b
			}
		}()
	case *domain.DecideApproval:
		// The signature covers the approval, the response and the
		// digest: the comment may be sealed.
		if taskID, _, ok := domain.ParseApprovalID(c.ApprovalID); ok {
			scope, err = taskScope(w, taskID)
		}
		texts = append(texts, &c.Comment)
	case *domain.SaveCheckpoint:
		scope, err = taskScope(w, c.TaskID)
		fields = append(fields, &c.Checkpoint)
	case *domain.SendSignal:
		scope, err = taskScope(w, c.TaskID)
		fields = append(fields, &c.Payload)
	case *domain.RecordVerification:
		scope, err = taskScope(w, c.TaskID)
		fields = append(fields, &c.Evidence)
	case *domain.RunRitual:
		// Rendered here, so that the payloads the params put in the goal
		// are sealed (a rendering the domain would refuse is left to it).
		r, rerr := domain.RenderRitual(w, ws, c)
		if rerr != nil {
			return nil
		}
		c.Rendered = r
		scope = eventstore.ScopeWorkspace
		if err = domain.DefaultPrivacy(w, ws, &r.Goal.Envelope); err == nil && r.Goal.Envelope.OwnKey() {
			scope = eventstore.GoalScope(r.Goal.GoalID)
		}
		specs(r.Goal.Tasks)
	case *domain.DelegateTask:
		var g *domain.CreateGoal
		switch {
		case c.Goal != nil:
			g = c.Goal
		case c.Ritual != nil:
			r, rerr := domain.RenderRitual(w, ws, c.Ritual)
			if rerr != nil {
				return nil
			}
			c.Ritual.Rendered, g = r, r.Goal
		default:
			return nil
		}
		if g.Envelope.OwnKey() {
			scope = eventstore.GoalScope(g.GoalID)
		} else {
			scope, err = taskScope(w, c.TaskID)
		}
		specs(g.Tasks)
	default:
		return nil
	}
	if err != nil || scope == "" || (!carries(fields) && len(texts) == 0) {
		return err
	}
	if scope != eventstore.ScopeWorkspace {
		// A goal's own key is not made in a workspace that was shredded.
		if _, err := p.key(ws, eventstore.ScopeWorkspace, false); errors.Is(err, eventstore.ErrShredded) {
			return &domain.Error{Code: domain.CodeConflict, Message: shreddedMessage(ws, eventstore.ScopeWorkspace)}
		}
	}
	k, err := p.key(ws, scope, true)
	if errors.Is(err, eventstore.ErrShredded) {
		return &domain.Error{Code: domain.CodeConflict, Message: shreddedMessage(ws, scope)}
	}
	if err != nil {
		return fmt.Errorf("handlers: the data key of %s/%s: %w", ws, scope, err)
	}
	for _, f := range fields {
		*f = k.Seal(ws, scope, *f)
	}
	for _, s := range texts {
		if *s == "" {
			continue
		}
		b, err := json.Marshal(*s)
		if err != nil {
			return err
		}
		sealed := k.Seal(ws, scope, b)
		*s = string(sealed[1 : len(sealed)-1])
	}
	return nil
}

// gateDigest gives the approval gate of s, if it has one, the digest of
// its action — the task's input — as sent, before the input is sealed: the
// digest the gate's approvers sign (they read the input opened). An input
// that is not valid JSON is left to the domain, which refuses it.
func gateDigest(s *domain.TaskSpec) {
	if s.Approval == nil || len(s.Input) == 0 || schemas.IsSealed(s.Input) {
		return
	}
	canonical, err := schemas.CanonicalJSON(s.Input)
	if err != nil {
		return
	}
	digest, err := schemas.ActionDigest(canonical)
	if err != nil {
		return
	}
	a := *s.Approval
	a.ActionDigest = digest
	s.Approval = &a
}

// carries reports whether a field holds a payload.
func carries(fields []*json.RawMessage) bool {
	for _, f := range fields {
		if len(*f) > 0 {
			return true
		}
	}
	return false
}

func shreddedMessage(ws, scope string) string {
	return shreddedWhat(ws, scope) + ": it takes no new payloads"
}

// shreddedWhat says whose data was shredded.
func shreddedWhat(ws, scope string) string {
	if scope == eventstore.ScopeWorkspace {
		return "the data of workspace " + ws + " was shredded"
	}
	return fmt.Sprintf("the data of goal %s was shredded (workspace %s)", scope[len("g."):], ws)
}

// open returns b, a reply's result in workspace ws, with its sealed
// payloads opened (those of a shredded scope read "[shredded]").
func (p *privacy) open(ws string, b []byte) ([]byte, error) {
	if p == nil {
		return b, nil
	}
	return eventstore.OpenAll(b, ws, func(ws, scope string) (*eventstore.DataKey, error) {
		return p.key(ws, scope, false)
	})
}

// shred destroys the data keys a goal.shred or workspace.shred decided:
// the goal's own, or every key of the workspace.
func (p *privacy) shred(ctx context.Context, ws string, cmd domain.Command) error {
	switch c := cmd.(type) {
	case *domain.ShredGoal:
		return p.keys.Shred(ctx, ws, eventstore.GoalScope(c.GoalID))
	case *domain.ShredWorkspace:
		return p.keys.ShredWorkspace(ctx, ws)
	}
	return nil
}

// forget drops from memory the keys a committed record shredded: another
// replica destroyed them.
func (p *privacy) forget(c *eventstore.Commit) {
	for i := range c.Events {
		switch e := c.Events[i]; e.Type {
		case "goal.shredded":
			p.keys.Forget(e.Workspace, eventstore.GoalScope(e.AggregateID))
		case "workspace.shredded":
			p.keys.ForgetWorkspace(e.Workspace)
		}
	}
}

// afterPrivacy does what a committed command leaves to privacy: a shred
// destroys its keys (again, for a retry: a shred cut short by a crash
// completes), and the reply, which may carry the task (a claim's), is
// opened for its sender.
func (s *Service) afterPrivacy(ctx context.Context, ws string, cmd domain.Command, o *outcome) *schemas.Error {
	if err := s.privacy.shred(ctx, ws, cmd); err != nil {
		s.cfg.Logger.Error("handlers: a shred is recorded but its keys are not destroyed yet", "workspace", ws, "err", err)
		return &schemas.Error{Code: schemas.CodeUnavailable, Message: "the shred is recorded, but its data keys could not be destroyed yet: retry with the same command id"}
	}
	var werr *schemas.Error
	o.Reply, werr = s.openReply(ws, o.Reply)
	return werr
}

// openReply returns the reply of a command or query, whose result it
// opens first.
func (s *Service) openReply(ws string, result json.RawMessage) (json.RawMessage, *schemas.Error) {
	out, err := s.privacy.open(ws, result)
	if err != nil {
		return nil, toWire(err, s.cfg.Logger)
	}
	return out, nil
}

// SweepRetention shreds the payloads of the goals that ended longer ago
// than their workspace's retention (schemas.Workspace.RetainEnded): each
// such goal with its own data key, not shredded yet, is shredded as
// goal.shred would (reason retention), by the writer. It returns the goals
// it shredded. It does nothing unless this service is the writer with
// encryption on.
func (s *Service) SweepRetention(ctx context.Context) ([]string, error) {
	if s.privacy == nil || !s.holdsLease() {
		return nil, nil
	}
	wss, err := s.store.ListWorkspaces()
	if err != nil {
		return nil, err
	}
	now := s.cfg.Clock()
	var shredded []string
	for _, w := range wss {
		if w.RetainEnded <= 0 || w.Shredded {
			continue
		}
		var due []string
		err := s.store.EachGoal(w.Name, "", func(g *schemas.GoalView) bool {
			if g.State != schemas.GoalStateOpen && !g.Shredded && g.Envelope.OwnKey() && now.Sub(g.UpdatedAt) >= w.RetainEnded.D() {
				due = append(due, g.ID)
			}
			return true
		})
		if err != nil {
			return shredded, err
		}
		for _, id := range due {
			cmd := &domain.ShredGoal{GoalID: id, Reason: "retention: ended more than " + w.RetainEnded.D().String() + " ago"}
			o := s.execute(ctx, cmd, domain.Meta{Workspace: w.Name, CommandID: "retention." + id, Actor: actorRetention})
			if o.Err != nil {
				return shredded, fmt.Errorf("handlers: retention of goal %s: %w", id, o.Err)
			}
			if err := s.privacy.shred(ctx, w.Name, cmd); err != nil {
				return shredded, err
			}
			// The reply leaves before the views apply the record: the next
			// sweep must find the goal shredded, not shred it again.
			if err := s.store.WaitFor(ctx, o.Seq); err != nil {
				return shredded, err
			}
			shredded = append(shredded, id)
			s.cfg.Logger.Info("handlers: shredded the payloads of a goal past its workspace's retention", "workspace", w.Name, "goal", id)
		}
	}
	return shredded, nil
}

// Work items an executor opens itself. An execute item carries its task and
// its dependencies' results, a verify item the input and the result it
// judges, their payloads sealed with the workspace's key; without more, an
// executor had to read the task again with task.get (one query per item,
// and one per dependency) to run it, and a verifier to judge it. The dispatcher
// seals them again, as it publishes the item, with the queue's key of the
// day (seal.QueueKey: derived from the workspace's key, never stored), and
// the queue's executors read that key with the queue.key query and open the
// item themselves. Payloads sealed with a goal's own key stay as they are
// (a goal that can be shredded alone is read with task.get), and so does
// everything once the workspace's key is shredded.

// maxQueueKeyAhead is how many days after today a queue key may be asked
// for: a day, for clocks that disagree around midnight.
const maxQueueKeyAhead = 1

// resealItem returns b, the encoded work item of queue in workspace ws,
// with the payloads the workspace's key sealed sealed again with the
// queue's key of day now; b as it is when it has none, or when they cannot
// be (the executor then reads the task with task.get, as before).
func (p *privacy) resealItem(ws, queue string, now time.Time, b []byte) []byte {
	if p == nil || !bytes.Contains(b, []byte(schemas.SealedPrefix+eventstore.ScopeWorkspace+":")) {
		return b
	}
	k, err := p.key(ws, eventstore.ScopeWorkspace, false)
	if err != nil {
		return b
	}
	epoch := seal.QueueEpoch(now)
	qk, err := p.dayKey(k, ws, queue, epoch)
	if err != nil {
		return b
	}
	out, err := seal.Reseal(b, ws, eventstore.ScopeWorkspace, k, qk, seal.QueueScope(epoch))
	if err != nil {
		return b
	}
	return out
}

// dayKey returns queue's key of epoch, derived from k (the workspace's key),
// from memory when it was derived before that day: only the keys of one day
// are kept.
func (p *privacy) dayKey(k *eventstore.DataKey, ws, queue string, epoch int64) (*eventstore.DataKey, error) {
	id := ws + "/" + queue
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.epoch != epoch || p.queues == nil {
		p.epoch, p.queues = epoch, map[string]*eventstore.DataKey{}
	}
	if qk := p.queues[id]; qk != nil {
		return qk, nil
	}
	qk, err := eventstore.NewDataKey(k.QueueKey(ws, queue, epoch))
	if err == nil {
		p.queues[id] = qk
	}
	return qk, err
}

// queueKeyQuery answers queue.key: the key the executors of q.Queue open
// the items sealed on day q.Epoch with. Only those executors (and admins)
// get it: an executor of another queue is refused.
func (s *Service) queueKeyQuery(ws string, p principal, q schemas.Query) (json.RawMessage, error) {
	if !domain.ValidName(q.Queue) {
		return nil, invalidQueueName(q.Queue)
	}
	today := seal.QueueEpoch(s.cfg.Clock())
	if q.Epoch < 0 || q.Epoch > today+maxQueueKeyAhead {
		return nil, &schemas.Error{Code: schemas.CodeInvalid, Message: fmt.Sprintf("epoch %d is no day an item can be sealed on: 0 to %d (tomorrow, UTC)", q.Epoch, today+maxQueueKeyAhead),
			Fields: []schemas.FieldError{{Pointer: "/epoch", Message: fmt.Sprintf("between 0 and %d", today+maxQueueKeyAhead)}}}
	}
	if p.role != domain.RoleAdmin && (p.member == nil || !p.member.MayWork(q.Queue)) {
		return nil, forbidden("%s may not read the key of queue %q: only its executors may", p.name, q.Queue)
	}
	if s.privacy == nil {
		return nil, &schemas.Error{Code: schemas.CodeNotFound, Message: "the service does not seal payloads (encryption is off): work items carry them as sent"}
	}
	k, err := s.privacy.key(ws, eventstore.ScopeWorkspace, false)
	switch {
	case errors.Is(err, eventstore.ErrShredded):
		return nil, &schemas.Error{Code: schemas.CodeConflict, Message: shreddedMessage(ws, eventstore.ScopeWorkspace) + ": no queue key is made from it"}
	case errors.Is(err, eventstore.ErrNoKey):
		return nil, &schemas.Error{Code: schemas.CodeNotFound, Message: fmt.Sprintf("workspace %q has sealed nothing yet: its items carry no sealed payload", ws)}
	case err != nil:
		return nil, err
	}
	raw := k.QueueKey(ws, q.Queue, q.Epoch)
	return json.Marshal(schemas.QueueKey{Queue: q.Queue, Epoch: q.Epoch, Key: base64.RawURLEncoding.EncodeToString(raw)})
}
