package domain

import "time"

// Member is an identity with a role in a workspace: the NATS user (an nkey)
// that connects, the role that says what it may send, and for an executor
// the queues it may work.
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
	// AddedAt is when the member was added.
	AddedAt time.Time `json:"added_at"`
}

// MayWork reports whether the member may work tasks of queue q.
func (m *Member) MayWork(q string) bool {
	if m.Role == RoleAdmin {
		return true
	}
	for _, x := range m.Queues {
		if x == q {
			return true
		}
	}
	return false
}

// Member returns the member named name, or nil.
func (w *Workspace) Member(name string) *Member {
	for i := range w.Members {
		if w.Members[i].Name == name {
			return &w.Members[i]
		}
	}
	return nil
}

// MemberByKey returns the member whose NATS user key is pub, or nil.
func (w *Workspace) MemberByKey(pub string) *Member {
	for i := range w.Members {
		if w.Members[i].PublicKey == pub {
			return &w.Members[i]
		}
	}
	return nil
}
