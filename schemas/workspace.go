package schemas

import (
	"slices"
	"time"
)

// Role is what a member of a workspace may do there
// (common.json#/$defs/Role): admin, client, executor, approver or viewer.
type Role string

// RoleAdmin may send every command and query of its workspace, including
// registering approvers and adding or removing members (domain.Roles lists
// the others).
const RoleAdmin Role = "admin"

// QueueConfig is a queue's settings, which its work items' consumer follows:
// how long an executor holds a work item before it is delivered again, and
// how many times it is delivered before it is quarantined (queue.list).
type QueueConfig struct {
	Name       string `json:"name"`
	LeaseMS    int64  `json:"lease_ms"`
	MaxDeliver int    `json:"max_deliver"`
	// MaxRunning is how many of the queue's jobs may run at once, across
	// all its executors (its consumer's MaxAckPending); 0: no limit.
	MaxRunning int `json:"max_running,omitempty"`
	// RateLimit is how many of the queue's work items its consumer hands
	// out first in any RatePeriodMS milliseconds, across all its executors
	// (an item handed out again, after a lease ran out, is not counted);
	// 0: no limit.
	RateLimit    int   `json:"rate_limit,omitempty"`
	RatePeriodMS int64 `json:"rate_period_ms,omitempty"`
	// Order is QueueOrderPriority when the queue hands out its items by
	// their tasks' priority (TaskSpec.Priority), then as they became
	// ready; "": as they became ready (QueueOrderFIFO).
	Order string `json:"order,omitempty"`
	// Paused is true from a queue.pause to the next queue.resume: the
	// queue's consumer hands out no job, and no report hands its sender
	// the queue's next task; jobs already handed out run on.
	Paused bool `json:"paused,omitempty"`
	// DefaultSettings is true when no queue.configure has set the lease and
	// deliveries (the queue was paused first): the defaults are in effect,
	// and an executor's queue.configure with if_unset still sets them.
	DefaultSettings bool `json:"default_settings,omitempty"`
}

// Queue is an entry of queue.list: a queue's settings, and what its
// consumer holds as the listing read it.
type Queue struct {
	QueueConfig
	// Pending is how many of its work items wait to be delivered (ready
	// tasks, those of a paused queue among them); InFlight how many are
	// delivered and not acknowledged yet (jobs running, or delivered to an
	// executor that stopped, until their lease runs out).
	Pending  uint64 `json:"pending"`
	InFlight int    `json:"in_flight"`
	// WaitingPulls is how many pulls of its executors wait for an item:
	// executors polling with room to run more. Items pending while none is
	// in flight and no pull waits mean that no executor takes the queue.
	WaitingPulls int `json:"waiting_pulls"`
	// LastDelivered is when an item of the queue was last delivered, if
	// ever since its consumer was made.
	LastDelivered *time.Time `json:"last_delivered,omitempty"`
}

// Workspace is the state of a workspace aggregate, as workspace.list
// answers it: its name, description and version, with its approvers,
// members and configured queues.
type Workspace struct {
	Name        string    `json:"id"`
	Description string    `json:"description,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	Version     uint64    `json:"version"`
	// Commands are the keys of the commands applied to the workspace (for
	// idempotency).
	Commands  []string   `json:"commands,omitempty"`
	Approvers []Approver `json:"approvers,omitempty"`
	// Members are the identities with a role in the workspace.
	Members []Member `json:"members,omitempty"`
	// Queues are the queues whose lease and deliveries were configured.
	Queues []QueueConfig `json:"queues,omitempty"`
	// Shredded is set once workspace.shred destroyed the workspace's data
	// keys: its payloads read as "[shredded]", and it takes no new ones.
	Shredded bool `json:"shredded,omitempty"`
	// RetainEnded, when set (workspace.configure), is how long the
	// payloads of an ended goal are kept: the service then shreds the
	// goal's own key. Goals created meanwhile get their own keys unless
	// their envelope names the workspace's.
	RetainEnded Duration `json:"retain_ended,omitempty"`
}

// Clone returns a copy of w.
func (w *Workspace) Clone() *Workspace {
	c := *w
	c.Commands = slices.Clone(w.Commands)
	c.Approvers = slices.Clone(w.Approvers)
	c.Members = cloneEach(w.Members, func(m *Member) { m.Queues = slices.Clone(m.Queues) })
	c.Queues = slices.Clone(w.Queues)
	return &c
}

// HasCommand reports whether the command with idempotency key key
// (domain's Meta.Key) was already applied to the workspace.
func (w *Workspace) HasCommand(key string) bool { return key != "" && slices.Contains(w.Commands, key) }

// Approver returns the registered approver name, or nil.
func (w *Workspace) Approver(name string) *Approver {
	return find(w.Approvers, func(a *Approver) bool { return a.Name == name })
}

// Member returns the member named name, or nil.
func (w *Workspace) Member(name string) *Member {
	return find(w.Members, func(m *Member) bool { return m.Name == name })
}

// MemberByKey returns the member whose NATS user key is pub, or nil.
func (w *Workspace) MemberByKey(pub string) *Member {
	return find(w.Members, func(m *Member) bool { return m.PublicKey == pub })
}

// Queue returns the settings of queue name, or nil when it was never
// configured.
func (w *Workspace) Queue(name string) *QueueConfig {
	return find(w.Queues, func(q *QueueConfig) bool { return q.Name == name })
}

// cloneEach returns a copy of xs (nil for nil) whose every element deepen
// has made its own copy of what it shares.
func cloneEach[T any](xs []T, deepen func(*T)) []T {
	if xs == nil {
		return nil
	}
	c := make([]T, len(xs))
	for i, x := range xs {
		deepen(&x)
		c[i] = x
	}
	return c
}

// cloneValue returns a pointer to a copy of what p points to, or nil for
// nil.
func cloneValue[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}

// find returns the first element of xs that match accepts, in place (a
// pointer into xs), or nil.
func find[T any](xs []T, match func(*T) bool) *T {
	for i := range xs {
		if match(&xs[i]) {
			return &xs[i]
		}
	}
	return nil
}

// Member is an identity with a role in a workspace, as member.list answers
// it: the NATS user (an nkey) that connects, the role that says what it may
// send, and for an executor the queues it may work.
type Member struct {
	// Name names the member in the workspace, and is the actor of the
	// events its commands cause.
	Name string `json:"name"`
	// Role is what the member may do.
	Role Role `json:"role"`
	// PublicKey is the member's NATS user nkey ("U..."), the identity the
	// NATS server authenticates.
	PublicKey string `json:"public_key"`
	// Queues are the queues an executor may take work from and report on.
	Queues []string `json:"queues,omitempty"`
	// AddedAt is when the member was added, or last replaced by a
	// member.add of the same name.
	AddedAt time.Time `json:"added_at"`
}

// MayWork reports whether the member may work tasks of queue q.
func (m *Member) MayWork(q string) bool {
	return m.Role == RoleAdmin || slices.Contains(m.Queues, q)
}

// Approver is a person registered in a workspace to decide approvals, with
// the role that authorizes them and their Ed25519 public key, as
// approver.list answers it; the key may expire, and the approver may be
// revoked.
type Approver struct {
	Name         string     `json:"name"`
	Role         string     `json:"role"`
	PublicKey    string     `json:"public_key"` // standard base64 of the 32-byte key
	KeyID        string     `json:"key_id"`
	RegisteredAt time.Time  `json:"registered_at"`
	ExpiresAt    *time.Time `json:"expires_at,omitempty"` // from then on the key decides nothing
	RevokedAt    *time.Time `json:"revoked_at,omitempty"` // set while the approver is revoked
}

// Active reports whether the approver may decide at now: not revoked, and
// its key not expired.
func (a *Approver) Active(now time.Time) bool {
	return a.RevokedAt == nil && (a.ExpiresAt == nil || now.Before(*a.ExpiresAt))
}

// The orders a queue hands out its items in (QueueConfig.Order).
const (
	QueueOrderFIFO     = "fifo"
	QueueOrderPriority = "priority"
)

// Task priorities (TaskSpec.Priority): 1 is handed out first in a queue
// whose order is priority, 5 last; a task that gives none has
// DefaultPriority.
const (
	MinPriority     = 1
	MaxPriority     = 5
	DefaultPriority = 3
)

// What a goal.create with a key does while an open goal holds the key
// (CreateGoal.IfOpen).
const (
	GoalIfOpenRefuse = "refuse"
	GoalIfOpenUse    = "use"
)
