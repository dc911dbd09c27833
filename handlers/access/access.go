package access

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/schemas"
)

// The accounts and names of dwr's NATS layout.
const (
	// ServiceAccount holds the service's streams, KV buckets and JetStream
	// API, and the service's own user. No client user lives in it.
	ServiceAccount = "DWR"
	// ClientAccount holds every client, executor, approver and admin user.
	// It imports the wire contract's subjects from ServiceAccount, with
	// "share" on commands and queries so that the server stamps each
	// request with the identity it authenticated.
	ClientAccount = "DWR_CLIENTS"
	// JSAPIPrefix is where the client account reaches the only JetStream
	// API calls it is given: pulling from and reading its queues'
	// consumers. Executors use jetstream.NewWithAPIPrefix(nc, JSAPIPrefix).
	JSAPIPrefix = schemas.JetStreamAPIPrefix
	// AnonymousUser is the user that connections without credentials become
	// when the server is deliberately left open (Spec.InsecureOpen).
	AnonymousUser = "anonymous"
	// AdminName is the name the service's admins act under (a reserved
	// name: domain.ReservedName).
	AdminName = "admin"
	// AllWorkspaces in a Grant gives its role in every workspace.
	AllWorkspaces = "*"
)

// CommandReplyWindow is how long the NATS servers keep the way back for a
// command's reply across the accounts (the command export's
// response_threshold; nats-server's default is 2 minutes): a reply later
// than that is not delivered — the caller, whose tries wait 5 s (10 s for
// the CLI), has asked again by then, and a command sent again by its id gets
// its first outcome. Short, so that a command never answered (dropped past a
// flooded endpoint's bound) does not keep its mapping in the servers for
// minutes. The queries keep the default: artifact.put may take minutes.
const CommandReplyWindow = 30 * time.Second

// Grant gives an identity a role in one workspace (or AllWorkspaces).
type Grant struct {
	Workspace string
	Role      domain.Role
	// Queues are an executor's queues.
	Queues []string
}

// Identity is one NATS user of the client account — an nkey — and every
// role it holds.
type Identity struct {
	// Name is shown in the generated configuration, for people.
	Name string
	// PublicKey is the user's nkey ("U...").
	PublicKey string
	Grants    []Grant
}

// Spec is the whole NATS layout of a dwr deployment.
type Spec struct {
	// Prefix is the first token of dwr's subjects. Default "dwr".
	Prefix string
	// ServiceKeys are the nkeys of the service's own users (one per
	// replica, or one shared), in ServiceAccount.
	ServiceKeys []string
	// Identities are the users of ClientAccount.
	Identities []Identity
	// InsecureOpen lets connections without credentials in, as
	// AnonymousUser with the admin role in every workspace.
	InsecureOpen bool
	// MaxConnections bounds the client account's connections at once, and
	// MaxSubscriptions each of its connections' subscriptions (the
	// account's limits: the NATS server refuses a connection or a
	// subscription past them). 0: DefaultMaxClientConnections and
	// DefaultMaxSubscriptionsPerConnection; negative: none.
	MaxConnections, MaxSubscriptions int
}

// The client account's limits by default (Spec): a NATS server keeps every
// connection (~40 KB) and every subscription (~0.7 KB) of its clients in
// memory, without a bound of its own, and the embedded one runs in the
// service's process — one credential subscribing without end, or opening
// connections without end, took the service's memory with it.
const (
	DefaultMaxClientConnections          = 10_000
	DefaultMaxSubscriptionsPerConnection = 10_000
)

// limits returns the client account's limits block, or "" for none.
func (s Spec) limits() string {
	var parts []string
	for _, l := range []struct {
		name     string
		n, deflt int
	}{{"max_connections", s.MaxConnections, DefaultMaxClientConnections}, {"max_subscriptions", s.MaxSubscriptions, DefaultMaxSubscriptionsPerConnection}} {
		switch {
		case l.n == 0:
			parts = append(parts, fmt.Sprintf("%s: %d", l.name, l.deflt))
		case l.n > 0:
			parts = append(parts, fmt.Sprintf("%s: %d", l.name, l.n))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "limits: { " + strings.Join(parts, ", ") + " }"
}

func (s Spec) prefix() string {
	if s.Prefix == "" {
		return "dwr"
	}
	return s.Prefix
}

// WorkStream returns the name of the work stream for prefix.
func WorkStream(prefix string) string { return strings.ToUpper(prefix) + "_WORK" }

// Consumer returns the name of a queue's durable consumer on the work
// stream: one per workspace and queue, shared by the queue's workers.
func Consumer(prefix, workspace, queue string) string {
	return prefix + "-" + workspace + "-" + queue
}

// ConsumerInfoSubject returns the subject, in ServiceAccount, where the
// service itself answers the client account's requests for a work
// consumer's info (JSAPIPrefix.CONSUMER.INFO.<stream>.<consumer>, which the
// client account imports from it) — ending in the consumer's name. Not
// JetStream's own API: its info requests wait in one queue of the whole
// server, which drops every request waiting when one connection floods it
// past 10,000 (the service's and every other executor's with them); the
// service answers each caller under its per-caller limits and asks
// JetStream at most once at a time per consumer.
func ConsumerInfoSubject(prefix string) string {
	return prefix + ".jsapi.CONSUMER.INFO." + WorkStream(prefix) + ".*"
}

// MonitorSubjects are the NATS micro services' control subjects (PING,
// INFO, STATS): the service's admins reach its command and query services'
// there, as `nats micro stats dwr` does.
const MonitorSubjects = "$SRV.>"

// InboxPrefix returns the inbox prefix a user must connect with
// (nats.CustomInboxPrefix): the only replies it may subscribe to.
func InboxPrefix(publicKey string) string { return schemas.InboxPrefix(publicKey) }

// Permissions are the subjects a user may publish and subscribe to.
type Permissions struct {
	Publish   []string
	Subscribe []string
}

// PermissionsOf returns what an identity may publish and subscribe to: its
// own inbox, and per grant the command, query, feed and work subjects its
// role allows. Everything else is denied.
func PermissionsOf(prefix string, id Identity) Permissions {
	inbox := "_INBOX.>" // the anonymous user of an open server keeps nats' default inboxes
	if id.PublicKey != "" {
		inbox = InboxPrefix(id.PublicKey) + ".>"
	}
	p := Permissions{Subscribe: []string{inbox}}
	stream := WorkStream(prefix)
	for _, g := range id.Grants {
		ws := g.Workspace
		if ws == AllWorkspaces {
			ws = "*"
		}
		cmd := prefix + ".cmd." + ws + "."
		q := prefix + ".q." + ws + "."
		ev := prefix + ".ev." + ws + "."
		switch g.Role {
		case domain.RoleAdmin:
			p.Publish = append(p.Publish, cmd+">", q+">")
			p.Subscribe = append(p.Subscribe, ev+">")
			if g.Workspace == AllWorkspaces { // consumer names hold the workspace inside one token
				p.Publish = append(p.Publish, JSAPIPrefix+".CONSUMER.MSG.NEXT."+stream+".*",
					JSAPIPrefix+".CONSUMER.INFO."+stream+".*", "$JS.ACK."+stream+".>")
				// The micro services' monitoring (nats micro ls|info|stats):
				// it counts every workspace's requests and names their last
				// errors, so only the service's admins reach it.
				p.Publish = append(p.Publish, MonitorSubjects)
			}
		case domain.RoleClient, domain.RoleViewer:
			p.Publish = append(p.Publish, q+">")
			p.Subscribe = append(p.Subscribe, ev+">")
		case domain.RoleExecutor:
			p.Subscribe = append(p.Subscribe, ev+"task.>")
			if g.Workspace != AllWorkspaces {
				for _, queue := range g.Queues {
					c := Consumer(prefix, g.Workspace, queue)
					p.Publish = append(p.Publish, JSAPIPrefix+".CONSUMER.MSG.NEXT."+stream+"."+c,
						JSAPIPrefix+".CONSUMER.INFO."+stream+"."+c, "$JS.ACK."+stream+"."+c+".>")
				}
			}
		}
		if g.Role != domain.RoleAdmin {
			names := roleNames()[g.Role]
			for _, name := range names.commands {
				p.Publish = append(p.Publish, cmd+name)
			}
			for _, name := range names.queries {
				p.Publish = append(p.Publish, q+name)
			}
		}
	}
	sort.Strings(p.Publish)
	sort.Strings(p.Subscribe)
	p.Publish = slices.Compact(p.Publish)
	p.Subscribe = slices.Compact(p.Subscribe)
	return p
}

// roleNames returns, per role, the commands and the queries it may send by
// name (besides those every role may send to its own workspace's query
// subjects): read once, as every identity's permissions need them.
var roleNames = sync.OnceValue(func() map[domain.Role]struct{ commands, queries []string } {
	m := map[domain.Role]struct{ commands, queries []string }{}
	commands := domain.CommandNames()
	sort.Strings(commands)
	for _, r := range domain.Roles {
		var names struct{ commands, queries []string }
		for _, name := range commands {
			if domain.MayCommand(r, name) {
				names.commands = append(names.commands, name)
			}
		}
		names.queries = domain.QueryNames(r)
		m[r] = names
	}
	return m
})

// ServerConfig returns the nats-server configuration of the layout: the
// accounts, their exports and imports, and the users with their
// permissions. For a NATS cluster run by an operator it is the block to
// include in each server's configuration (the operator adds TLS, cluster
// and JetStream settings).
func ServerConfig(s Spec) string { return serverConfig(s, true) }

// AccountsConfig is ServerConfig without users: the accounts of the
// embedded server, which lets its users in by code (Spec.Users), so that a
// change of members needs no reload of the server.
func AccountsConfig(s Spec) string { return serverConfig(s, false) }

// Users returns the users of the client account — the identities but any
// that took a service key, and the anonymous user of an open server (key
// "") — with what each may publish and subscribe to.
func (s Spec) Users() map[string]Permissions { return s.UsersReusing(nil) }

// UsersReusing is Users, taking each identity's permissions from reuse
// when they were computed there for the same grants (reuse may be nil):
// a change of one member then computes the permissions of its identity
// alone. It returns the users, and the permissions to reuse next time.
func (s Spec) UsersReusing(reuse *Reuse) map[string]Permissions {
	users := map[string]Permissions{}
	next := map[string]Permissions{}
	var b strings.Builder
	for _, id := range s.clients() {
		b.Reset()
		b.WriteString(id.PublicKey)
		for _, g := range id.Grants {
			b.WriteString("\x00" + g.Workspace + "\x00" + string(g.Role))
			for _, q := range g.Queues {
				b.WriteString("\x01" + q)
			}
		}
		k := b.String()
		p, ok := reuse.get(k)
		if !ok {
			p = PermissionsOf(s.prefix(), id)
		}
		users[id.PublicKey], next[k] = p, p
	}
	if s.InsecureOpen {
		users[""] = s.anonymous()
	}
	if reuse != nil {
		reuse.byGrants = next
	}
	return users
}

// Reuse keeps the permissions Spec.UsersReusing computed, by identity and
// grants, for its next call. Its zero value is ready to use; it is not safe
// for concurrent use.
type Reuse struct{ byGrants map[string]Permissions }

func (r *Reuse) get(k string) (Permissions, bool) {
	if r == nil {
		return Permissions{}, false
	}
	p, ok := r.byGrants[k]
	return p, ok
}

// anonymous returns what the anonymous user of an open server may do: as
// an admin of every workspace.
func (s Spec) anonymous() Permissions {
	return PermissionsOf(s.prefix(), Identity{Grants: []Grant{{Workspace: AllWorkspaces, Role: domain.RoleAdmin}}})
}

// clients returns the identities of the client account, by key: a member
// may never take the service's own key (a workspace admin who added it
// would make every later configuration invalid — one nkey in two accounts —
// and so stop the server's users from following revocations).
func (s Spec) clients() []Identity {
	ids := slices.DeleteFunc(append([]Identity(nil), s.Identities...), func(id Identity) bool {
		return slices.Contains(s.ServiceKeys, id.PublicKey)
	})
	sort.Slice(ids, func(i, j int) bool { return ids[i].PublicKey < ids[j].PublicKey })
	return ids
}

func serverConfig(s Spec, users bool) string {
	p := s.prefix()
	stream := WorkStream(p)
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# dwr's accounts: generated; the service owns %s, clients reach it only through imports.\n", ServiceAccount)
	w("accounts {\n")
	w("  %s {\n", ServiceAccount)
	w("    jetstream: enabled\n")
	if users {
		w("    users: [\n")
		for _, k := range s.ServiceKeys {
			w("      { nkey: %s }\n", k)
		}
		w("    ]\n")
	}
	w("    exports: [\n")
	w("      { service: %s, response_threshold: %s, accounts: [%s] }\n", q(p+".cmd.>"), q(CommandReplyWindow.String()), ClientAccount)
	w("      { service: %s, accounts: [%s] }\n", q(p+".q.>"), ClientAccount)
	w("      { service: %s, response_type: stream, accounts: [%s] }\n", q("$JS.API.CONSUMER.MSG.NEXT."+stream+".*"), ClientAccount)
	w("      { service: %s, accounts: [%s] }\n", q(ConsumerInfoSubject(p)), ClientAccount)
	w("      { service: %s, accounts: [%s] }\n", q("$JS.ACK."+stream+".>"), ClientAccount)
	w("      { stream: %s, accounts: [%s] }\n", q(p+".ev.>"), ClientAccount)
	w("      { service: %s, response_type: stream, accounts: [%s] }\n", q(MonitorSubjects), ClientAccount)
	w("    ]\n")
	w("  }\n")
	w("  %s {\n", ClientAccount)
	if l := s.limits(); l != "" {
		w("    # per connection: subscriptions; in all: connections\n")
		w("    %s\n", l)
	}
	if users {
		w("    users: [\n")
		for _, id := range s.clients() {
			perm := PermissionsOf(p, id)
			if id.Name != "" {
				w("      # %s\n", id.Name)
			}
			w("      { nkey: %s, permissions: { publish: { allow: %s }, subscribe: { allow: %s } } }\n",
				id.PublicKey, list(perm.Publish), list(perm.Subscribe))
		}
		if s.InsecureOpen {
			w("      # --insecure-open: connections without credentials are admins of every workspace\n")
			perm := s.anonymous()
			w("      { user: %s, permissions: { publish: { allow: %s }, subscribe: { allow: %s } } }\n",
				AnonymousUser, list(perm.Publish), list(perm.Subscribe))
		}
		w("    ]\n")
	}
	w("    imports: [\n")
	w("      { service: { account: %s, subject: %s }, share: true }\n", ServiceAccount, q(p+".cmd.>"))
	w("      { service: { account: %s, subject: %s }, share: true }\n", ServiceAccount, q(p+".q.>"))
	w("      { service: { account: %s, subject: %s }, to: %s }\n", ServiceAccount,
		q("$JS.API.CONSUMER.MSG.NEXT."+stream+".*"), q(JSAPIPrefix+".CONSUMER.MSG.NEXT."+stream+".*"))
	w("      { service: { account: %s, subject: %s }, to: %s, share: true }\n", ServiceAccount,
		q(ConsumerInfoSubject(p)), q(JSAPIPrefix+".CONSUMER.INFO."+stream+".*"))
	w("      { service: { account: %s, subject: %s } }\n", ServiceAccount, q("$JS.ACK."+stream+".>"))
	w("      { stream: { account: %s, subject: %s } }\n", ServiceAccount, q(p+".ev.>"))
	w("      { service: { account: %s, subject: %s } }\n", ServiceAccount, q(MonitorSubjects))
	w("    ]\n")
	w("  }\n")
	w("}\n")
	if users && s.InsecureOpen {
		w("no_auth_user: %s\n", AnonymousUser)
	}
	return b.String()
}

func q(s string) string { return strconv.Quote(s) }

func list(ss []string) string {
	qs := make([]string, len(ss))
	for i, s := range ss {
		qs[i] = q(s)
	}
	return "[" + strings.Join(qs, ", ") + "]"
}

// Admin is an identity with the admin role in every workspace: the
// credential `dwr serve` creates on first start, or one an operator names.
type Admin struct {
	Name      string
	PublicKey string
}

// IdentitiesOf returns the client account's users: the admins, then every
// member of the workspaces grouped by key (one key may be a member of
// several workspaces).
func IdentitiesOf(admins []Admin, workspaces []*domain.Workspace) []Identity {
	byKey := map[string]*Identity{}
	var order []string
	add := func(name, key string, g Grant) {
		id, ok := byKey[key]
		if !ok {
			id = &Identity{Name: name, PublicKey: key}
			byKey[key] = id
			order = append(order, key)
		} else if !strings.Contains(id.Name, name) {
			id.Name += ", " + name
		}
		id.Grants = append(id.Grants, g)
	}
	for _, a := range admins {
		add(a.Name, a.PublicKey, Grant{Workspace: AllWorkspaces, Role: domain.RoleAdmin})
	}
	for _, w := range workspaces {
		for _, m := range w.Members {
			add(m.Name+"@"+w.Name, m.PublicKey, Grant{Workspace: w.Name, Role: m.Role, Queues: m.Queues})
		}
	}
	out := make([]Identity, 0, len(order))
	for _, k := range order {
		out = append(out, *byKey[k])
	}
	return out
}
