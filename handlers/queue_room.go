package handlers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// The bounds on queues that no Config sets: JetStream's own default of
// consumers per stream, and a tenth of it for one workspace.
const (
	DefaultMaxQueues             = 1_000
	DefaultMaxQueuesPerWorkspace = 100
)

// queueRoom knows the queues that stand — each a durable consumer of the
// work stream, which the service makes for the first task given a queue
// and removes only when an admin deletes the queue — so that the writer can refuse a command that would
// open a queue past its workspace's bound or the service's
// (domain.QueueUse). Without it, one client naming a new queue per task
// took every consumer JetStream allows the stream (1,000 by default), and
// the tasks of any workspace's next queue then waited for ever.
type queueRoom struct {
	mu sync.Mutex
	// byWS holds, by workspace, its queues that stand, each with the log
	// sequence of the last record that gave an unfinished task the queue
	// since this writer took over (0: none yet): queue.delete is refused
	// when a record after its scan did.
	byWS  map[string]map[string]uint64
	all   int
	perWS int // 0: no bound of its own
	max   int
}

func newQueueRoom(cfg Config) *queueRoom {
	per := cfg.MaxQueuesPerWorkspace
	if per < 0 {
		per = 0
	}
	return &queueRoom{byWS: map[string]map[string]uint64{}, perWS: per, max: cfg.MaxQueues}
}

// use is domain.QueueCounter's answer for queue in ws.
func (r *queueRoom) use(ws, queue string) domain.QueueUse {
	r.mu.Lock()
	defer r.mu.Unlock()
	qs := r.byWS[ws]
	usedAt, stands := qs[queue]
	return domain.QueueUse{Stands: stands, InWorkspace: len(qs), InAll: r.all, PerWorkspace: r.perWS, All: r.max, UsedAt: usedAt}
}

// add counts queue of ws as standing.
func (r *queueRoom) add(ws, queue string) { r.given(ws, queue, 0) }

// given counts queue of ws as standing and, when seq is not 0, given to an
// unfinished task of the record at seq.
func (r *queueRoom) given(ws, queue string, seq uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	qs := r.byWS[ws]
	if qs == nil {
		qs = map[string]uint64{}
		r.byWS[ws] = qs
	}
	usedAt, ok := qs[queue]
	if !ok {
		r.all++
	}
	qs[queue] = max(usedAt, seq)
}

// remove no longer counts queue of ws (queue.delete).
func (r *queueRoom) remove(ws, queue string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.byWS[ws][queue]; ok {
		delete(r.byWS[ws], queue)
		r.all--
	}
}

// load counts the queues whose consumers stand on the work stream: a
// writer that takes over knows those its predecessors made.
func (r *queueRoom) load(ctx context.Context, js jetstream.JetStream, stream, prefix string) error {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	r.mu.Lock()
	clear(r.byWS)
	r.all = 0
	r.mu.Unlock()
	lister := s.ListConsumers(ctx)
	for info := range lister.Info() {
		if ws, queue, ok := queueOf(prefix, info.Config.FilterSubject); ok {
			r.add(ws, queue)
		}
	}
	return lister.Err()
}

// consumers returns the work stream's consumers, as a listing begun after
// it was called reads them (shared with the calls at the same time).
func (d *dispatcher) consumers() ([]*jetstream.ConsumerInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return d.lists.list(ctx, d.js, d.stream)
}

// queueList is queue.list's answer for workspace ws: its configured queues
// in their order, then those that stand on the work stream (its consumers'
// infos) without a configuration of their own (given to a task, never to
// queue.configure), with their consumers' settings, by name; each with what
// its consumer holds.
func (d *dispatcher) queueList(ws string, configured []schemas.QueueConfig, infos []*jetstream.ConsumerInfo) []schemas.Queue {
	out := make([]schemas.Queue, 0, len(configured))
	held := map[string]*jetstream.ConsumerInfo{}
	var more []schemas.Queue
	for _, info := range infos {
		c := info.Config
		w, queue, ok := queueOf(d.prefix, c.FilterSubject)
		if !ok || w != ws || c.Durable != access.Consumer(d.prefix, ws, queue) {
			continue
		}
		held[queue] = info
		if !slices.ContainsFunc(configured, func(q schemas.QueueConfig) bool { return q.Name == queue }) {
			more = append(more, withCounts(schemas.QueueConfig{Name: queue, LeaseMS: c.AckWait.Milliseconds(), MaxDeliver: c.MaxDeliver}, info))
		}
	}
	for _, q := range configured {
		out = append(out, withCounts(q, held[q.Name]))
	}
	slices.SortFunc(more, func(a, b schemas.Queue) int { return strings.Compare(a.Name, b.Name) })
	return append(out, more...)
}

// withCounts is queue q with what its consumer (nil: none read) held.
func withCounts(q schemas.QueueConfig, info *jetstream.ConsumerInfo) schemas.Queue {
	x := schemas.Queue{QueueConfig: q}
	if info != nil {
		x.Pending, x.InFlight, x.WaitingPulls = info.NumPending, max(info.NumAckPending, 0), max(info.NumWaiting, 0)
		x.LastDelivered = info.Delivered.Last
	}
	return x
}

// roomWorld is the writer's views with the queues that stand and the
// bounds on a workspace's schedules and members: the World its commands are
// decided against. Without a room it bounds no queue, without maxSchedules
// no schedule, without maxMembers no member.
type roomWorld struct {
	*projections.Store
	room         *queueRoom
	maxSchedules int
	maxMembers   int
}

// DefaultMaxMembersPerWorkspace is Config.MaxMembersPerWorkspace's default.
const DefaultMaxMembersPerWorkspace = 1000

// MaxMembers implements domain.MemberBound.
func (w roomWorld) MaxMembers() int { return max(w.maxMembers, 0) }

// DefaultMaxSchedulesPerWorkspace is Config.MaxSchedulesPerWorkspace's
// default.
const DefaultMaxSchedulesPerWorkspace = 100

// ScheduleCount implements domain.ScheduleCounter: the schedules of ws the
// views hold (a schedule.create reads at most the bound of them).
func (w roomWorld) ScheduleCount(ws string) (n, most int, err error) {
	if w.maxSchedules <= 0 {
		return 0, 0, nil
	}
	err = w.EachSchedule(ws, "", func(*domain.Schedule) bool {
		n++
		return n <= w.maxSchedules
	})
	return n, w.maxSchedules, err
}

// QueueUse implements domain.QueueCounter.
func (w roomWorld) QueueUse(ws, queue string) (domain.QueueUse, error) {
	if w.room == nil {
		return domain.QueueUse{}, nil
	}
	return w.room.use(ws, queue), nil
}

// roomForSchedule refuses schedule.create c, before the writer, when the
// views — once they hold what the writer answered — hold as many schedules
// of its workspace as it may have and c would
// make one more: so that a flood of them past the bound costs the writer
// nothing (the writer decides the others exactly, the batch's own counted
// in). A command the views have seen, or a schedule that stands, is left
// to the writer, which answers its first outcome, or the same again.
func (s *Service) roomForSchedule(ctx context.Context, c *domain.CreateSchedule, m domain.Meta) error {
	most := s.cfg.MaxSchedulesPerWorkspace
	if most <= 0 || !domain.ValidName(c.Name) {
		return nil
	}
	// The views first take what the writer answered: a schedule deleted
	// just before is read as deleted.
	if err := s.store.WaitFor(ctx, s.answeredSeq()); err != nil {
		return err
	}
	if _, seen, err := s.store.Command(m.Workspace, m.Key()); err != nil || seen {
		return err
	}
	if x, err := s.store.Schedule(domain.ScheduleID(m.Workspace, c.Name)); err != nil || (x != nil && !x.Deleted) {
		return err
	}
	n, _, err := roomWorld{Store: s.store, maxSchedules: most}.ScheduleCount(m.Workspace)
	if err != nil || n < most {
		return err
	}
	return domain.NoRoomForSchedule(m.Workspace, n)
}

// queueInUse refuses queue.delete c while a task of its workspace that has
// not ended is given its queue, as its own or its verifier's. It reads the
// views off the writer's goroutine, and sets c.ScannedAt to the sequence
// they held before: the writer refuses the command when a later record gave
// a task the queue (domain.QueueUse's UsedAt).
//
// A command sent again under its id is left to the writer, which answers
// its first outcome.
func (s *Service) queueInUse(ctx context.Context, c *domain.DeleteQueue, m domain.Meta) *schemas.Error {
	ws := m.Workspace
	// The views first take what the writer committed (a task cancelled
	// just before is read as cancelled).
	if err := s.store.WaitFor(ctx, s.answeredSeq()); err != nil {
		return toWire(err, s.cfg.Logger)
	}
	c.ScannedAt = s.store.Checkpoint()
	if _, seen, err := s.store.Command(ws, m.Key()); err != nil || seen {
		return nil
	}
	var found *domain.Task
	for _, st := range domain.TaskStates {
		if domain.Terminal(st) {
			continue
		}
		err := s.store.EachTask(ws, projections.TaskFilter{State: st}, func(t *domain.Task) bool {
			if t.Spec.Queue == c.Queue || (t.Spec.Verification != nil && t.Spec.Verification.Queue == c.Queue) {
				found = t
			}
			return found == nil
		})
		if err != nil {
			return toWire(err, s.cfg.Logger)
		}
		if found != nil {
			return &schemas.Error{Code: schemas.CodeConflict, Message: fmt.Sprintf(
				"task %s (%s) is given queue %q: a queue is deleted only while no task that has not ended is given it (cancel the task, or let it end)",
				found.ID, found.State, c.Queue), Fields: []schemas.FieldError{{Pointer: "/queue", Message: "is given to task " + found.ID}}}
		}
	}
	return nil
}
