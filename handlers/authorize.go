package handlers

import (
	"fmt"
	"time"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/schemas"
)

// AuthConfig says whom the service serves and as whom.
type AuthConfig struct {
	// Required makes every request carry the identity the NATS server
	// authenticated: the Nats-Request-Info header that nats-server stamps on
	// requests crossing from access.ClientAccount. A request without it is
	// refused (forbidden). When false — tests, and a NATS server without
	// dwr's accounts — a request without it is served as the anonymous
	// admin.
	Required bool
	// InsecureOpen serves access.AnonymousUser, the user that connections
	// without credentials become on an open server, as an admin of every
	// workspace.
	InsecureOpen bool
	// Admins have the admin role in every workspace.
	Admins []access.Admin
	// OnMembersChanged, when set, is called once the views hold a commit
	// that added or removed workspace members, so that the NATS server's
	// users can follow: before a member.add or member.remove is answered,
	// and after the writer applied such a commit (again; it must be cheap
	// when nothing changed). It runs on a goroutine of the writer's (never
	// on the one that commits) and on a request's, perhaps at once.
	OnMembersChanged func()
	// Bench, when set, keeps the NATS user user (an nkey) off the server
	// for d — its connections closed, new ones refused — because it floods
	// (Config.BenchFor). It runs on a goroutine of its own.
	Bench func(user string, d time.Duration)
}

// principal is who a request is served as.
type principal struct {
	name string
	role domain.Role
	// global: an admin of every workspace.
	global bool
	// authenticated: the NATS server vouched for the identity.
	authenticated bool
	member        *domain.Member
}

func forbidden(format string, args ...any) *schemas.Error {
	return &schemas.Error{Code: schemas.CodeForbidden, Message: fmt.Sprintf(format, args...)}
}

// authorize returns who sent req to workspace ws, or a forbidden error when
// that identity may not send the command (kind "cmd") or query (kind "q")
// named name there. Nothing is decoded from the body.
func (s *Service) authorize(who sender, ws, kind, name string) (principal, *schemas.Error) {
	a := s.cfg.Auth
	c := who.Caller
	if !who.known {
		if a.Required {
			return principal{}, forbidden("the request carries no identity: connect with a dwr credential (dwr --creds FILE, or DWR_CREDS)")
		}
		return principal{name: access.AnonymousUser, role: domain.RoleAdmin, global: true}, nil
	}
	if c.Account != access.ClientAccount {
		return principal{}, forbidden("requests from NATS account %q are not served: use a credential of account %s", c.Account, access.ClientAccount)
	}
	p := principal{authenticated: true}
	switch {
	case c.User == access.AnonymousUser && a.InsecureOpen:
		p.name, p.role, p.global = access.AnonymousUser, domain.RoleAdmin, true
	case s.admins[c.User] != "":
		p.name, p.role, p.global = s.admins[c.User], domain.RoleAdmin, true
	default:
		w, err := s.store.Workspace(ws)
		if err != nil {
			return principal{}, toWire(err, s.cfg.Logger)
		}
		var m *domain.Member
		if w != nil {
			m = w.MemberByKey(c.User)
		}
		if m == nil {
			return principal{}, forbidden("identity %s has no role in workspace %q: an admin adds it (dwr users add)", short(c.User), ws)
		}
		p.name, p.role, p.member = m.Name, m.Role, m
	}
	switch {
	case kind == "cmd" && name == "workspace.create":
		if !p.global {
			return principal{}, forbidden("%s may not create workspaces: only the service's admins may", p.name)
		}
	case kind == "cmd" && !domain.MayCommand(p.role, name):
		return principal{}, forbidden("%s (role %s in %q) may not send %s", p.name, p.role, ws, name)
	case kind == "q" && !domain.MayQuery(p.role, name):
		return principal{}, forbidden("%s (role %s in %q) may not query %s", p.name, p.role, ws, name)
	}
	return p, nil
}

// authorizeTask refuses an executor's command for a task that is not on one
// of its queues, as the views have it: an early refusal. The writer judges
// it again on the state it decides on (domain.Meta.Executor), which also
// holds a task the views do not have yet.
func (s *Service) authorizeTask(p principal, name string, cmd domain.Command) *schemas.Error {
	if p.member == nil || p.role != domain.RoleExecutor || !domain.ExecutorCommands[name] {
		return nil
	}
	taskID, q, ok := domain.ExecutorTarget(cmd)
	if !ok {
		return nil // not an executor's command: authorize refused it already
	}
	if taskID != "" {
		t, err := s.store.Task(taskID)
		if err != nil {
			return toWire(err, s.cfg.Logger)
		}
		if t == nil {
			return nil // not found here: the writer checks again on its state
		}
		q = domain.WorkQueue(t, cmd)
	}
	if q != "" && !p.member.MayWork(q) {
		return forbidden("%s may not work queue %q: its queues are %v", p.name, q, p.member.Queues)
	}
	return nil
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12] + "…"
	}
	return s
}

// changesMembers reports whether a commit adds or removes workspace members.
func changesMembers(c *eventstore.Commit) bool {
	for i := range c.Events {
		switch c.Events[i].Type {
		case "workspace.member_added", "workspace.member_removed":
			return true
		}
	}
	return false
}
