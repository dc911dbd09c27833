package handlers

import (
	"cmp"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/handlers/embedded"
	"github.com/dwr-run/dwr/projections"
)

// EmbeddedConfig is how the embedded NATS server of `dwr serve` runs.
type EmbeddedConfig struct {
	// DataDir holds the server's streams, and the admin credential
	// (access.AdminCredsFile), made on the first start.
	DataDir string
	// Listen is the host:port clients connect to; "" for in-process
	// connections only.
	Listen string
	// TLS, when set, makes clients connect with TLS.
	TLS *embedded.TLSConfig
	// InsecureOpen lets connections without credentials in, as the
	// anonymous admin of every workspace.
	InsecureOpen bool
	// AtRestKey, when set, makes JetStream encrypt its files
	// (embedded.Config.AtRestKey).
	AtRestKey string
	// MaxStore is JetStream's store limit (embedded.Config.MaxStore); 0:
	// what it holds plus half the disk's free space.
	MaxStore int64
	// MaxPending is the server's max_pending (embedded.Config.MaxPending);
	// 0: 64 MiB.
	MaxPending int64
	// Limits bound what the clients hold of the server (ClientLimits).
	Limits ClientLimits
	// BenchFor is how long an identity past ClientLimits' per-identity
	// bounds is kept off the server: 0, DefaultBenchFor; negative, it is
	// only logged.
	BenchFor time.Duration
	// Logger receives the server's logs and what the boundary cannot
	// apply. Required.
	Logger *slog.Logger
}

// Boundary is the embedded server's trust boundary: the service's own
// identity (a fresh nkey each start, never written down), the admins, and
// whether anonymous clients are let in; and the server, whose users follow
// the members the views hold.
type Boundary struct {
	service      *access.ServiceIdentity
	admins       []access.Admin
	insecureOpen bool
	srv          *embedded.Server
	store        *projections.Store
	logger       *slog.Logger
	// users are the client account's users the server lets in now, by
	// nkey ("": the anonymous user of an open server); applying orders
	// their changes (ApplyMembers).
	users atomic.Pointer[map[string]access.Permissions]
	reuse access.Reuse // the users' permissions, by grants: ApplyMembers computes those that changed
	// homes are the workspaces of each user (access.AllWorkspaces for an
	// admin of all), as the guard counts what each workspace's identities
	// hold.
	homes    atomic.Pointer[map[string][]string]
	applying sync.Mutex
	// benched are the users kept off the server until a time, by nkey
	// (Bench).
	benchMu sync.Mutex
	benched map[string]time.Time
	// limits and benchFor are what the guard holds the clients to
	// (guardClients); warned is when it last warned of what it cannot
	// bench.
	limits   ClientLimits
	benchFor time.Duration
	warned   time.Time
	// behind are the identities the guard found past
	// MaxPendingPerIdentity at its last look, allBehind whether it found
	// the clients past MaxPending.
	behind    map[string]bool
	allBehind bool
}

// StartEmbedded starts the embedded NATS server closed: the service's
// account and the clients' account, the admin credential of the data
// directory (created on first start), and the members store holds (those
// the views have not caught up with yet come with Open, once they have).
// Its client port (Listen) opens with Open; in-process connections work
// at once. A data directory from before accounts has its streams moved into the
// service's account first. On error nothing is left running.
func StartEmbedded(cfg EmbeddedConfig, store *projections.Store) (*Boundary, error) {
	if moved, err := access.MigrateStore(cfg.DataDir); err != nil {
		return nil, err
	} else if moved {
		cfg.Logger.Info("dwr: moved the streams into the service's own NATS account (a data directory from before accounts)", "account", access.ServiceAccount)
	}
	path := filepath.Join(cfg.DataDir, access.AdminCredsFile)
	pub, created, err := access.EnsureCredential(path, "admin of every workspace, created by dwr serve")
	if err != nil {
		return nil, fmt.Errorf("the admin credential in %s: %v", cfg.DataDir, err)
	}
	if created {
		cfg.Logger.Info("dwr: created the admin credential; the CLI on this machine finds it in the data directory (or give --creds / DWR_CREDS)", "file", path)
	}
	id, err := access.NewServiceIdentity()
	if err != nil {
		return nil, err
	}
	b := &Boundary{service: id, insecureOpen: cfg.InsecureOpen, store: store, logger: cfg.Logger,
		admins: []access.Admin{{Name: access.AdminName, PublicKey: pub}}, limits: cfg.Limits.withDefaults(), benchFor: cfg.BenchFor}
	b.benchFor = cmp.Or(b.benchFor, DefaultBenchFor)
	// The client port stays closed until Open: until the views have caught
	// up, the members they hold may be behind the log's (a member added or
	// removed in the records a crash kept from the views), and a client
	// judged by them would be refused for good or let in wrongly.
	spec, err := b.spec()
	if err != nil {
		return nil, err
	}
	users, homes := spec.UsersReusing(&b.reuse), homesOf(spec.Identities)
	b.users.Store(&users)
	b.homes.Store(&homes)
	ecfg := embedded.Config{DataDir: cfg.DataDir, Listen: cfg.Listen, ListenLater: cfg.Listen != "", Logger: cfg.Logger, TLS: cfg.TLS,
		Accounts: access.AccountsConfig(spec), Users: b.user, AtRestKey: cfg.AtRestKey, MaxStore: cfg.MaxStore, MaxPending: cfg.MaxPending}
	if b.srv, err = embedded.Start(ecfg); err != nil {
		return nil, fmt.Errorf("embedded NATS: %v", err)
	}
	stop := make(chan struct{})
	go func() { b.srv.NATS().WaitForShutdown(); close(stop) }()
	go b.guardClients(stop)
	return b, nil
}

// Server returns the embedded server.
func (b *Boundary) Server() *embedded.Server { return b.srv }

// spec returns the layout with the members the views hold (none when
// the store is nil), or the error of reading them.
func (b *Boundary) spec() (access.Spec, error) {
	s := access.Spec{ServiceKeys: []string{b.service.PublicKey}, InsecureOpen: b.insecureOpen,
		Identities:     access.IdentitiesOf(b.admins, nil),
		MaxConnections: b.limits.MaxConnections, MaxSubscriptions: b.limits.MaxSubscriptionsPerConnection}
	if b.store == nil {
		return s, nil
	}
	ws, err := b.store.ListWorkspaces()
	if err != nil {
		return s, fmt.Errorf("reading the workspaces' members: %w", err)
	}
	s.Identities = access.IdentitiesOf(b.admins, ws)
	return s, nil
}

// Connect opens the service's own in-process connection, named name.
func (b *Boundary) Connect(name string) (*nats.Conn, error) {
	return b.srv.Connect(nats.Name(name), b.service.Option())
}

// user is how the server lets in a connection that proved it holds nkey
// (embedded.Users): the service's own key in the service's account, the
// members and admins the views held at the last ApplyMembers in the client
// account with their rights, and, on an open server, a connection without
// a key as the anonymous admin.
func (b *Boundary) user(nkey string) (embedded.User, bool) {
	if nkey != "" && nkey == b.service.PublicKey {
		return embedded.User{Account: access.ServiceAccount}, true
	}
	p, ok := (*b.users.Load())[nkey]
	if !ok || b.isBenched(nkey, time.Now()) {
		return embedded.User{}, false
	}
	u := embedded.User{Account: access.ClientAccount, Publish: p.Publish, Subscribe: p.Subscribe}
	if nkey == "" {
		u.Name = access.AnonymousUser
	}
	return u, true
}

// Reload gives the server's users the members the views hold now; it logs
// what it cannot apply.
func (b *Boundary) Reload() {
	if err := b.ApplyMembers(); err != nil {
		b.logger.Error("dwr: could not apply the members to NATS; they take effect at the next start", "err", err)
	}
}

// Open gives the server's users the members the views hold now and opens
// the client port (EmbeddedConfig.Listen): call it once the service is
// ready, its views caught up with the log. Until then only in-process
// connections are served. It returns the error of a port that cannot be
// opened.
func (b *Boundary) Open() error {
	b.Reload()
	return b.srv.Listen()
}

// ApplyMembers gives the server's users the members the views hold now:
// a new member connects at once, and the connections of a member removed,
// or whose rights changed, are closed (a client reconnects, and is judged
// again). No connection is judged again otherwise, so none is cut in its
// handshake.
func (b *Boundary) ApplyMembers() error {
	b.applying.Lock()
	defer b.applying.Unlock()
	spec, err := b.spec()
	if err != nil {
		return err
	}
	users := spec.UsersReusing(&b.reuse)
	homes := homesOf(spec.Identities)
	b.homes.Store(&homes)
	before := *b.users.Swap(&users)
	changed := map[string]bool{}
	for key, p := range before {
		if now, ok := users[key]; !ok || !slices.Equal(now.Publish, p.Publish) || !slices.Equal(now.Subscribe, p.Subscribe) {
			changed[key] = true
		}
	}
	if _, open := before[""]; open && changed[""] {
		changed[access.AnonymousUser] = true
	}
	if len(changed) > 0 {
		b.srv.Disconnect(func(user string) bool { return changed[user] })
	}
	return nil
}

// homesOf returns the workspaces of each identity, by its key.
func homesOf(ids []access.Identity) map[string][]string {
	homes := make(map[string][]string, len(ids))
	for _, id := range ids {
		for _, g := range id.Grants {
			homes[id.PublicKey] = append(homes[id.PublicKey], g.Workspace)
		}
	}
	return homes
}

// Auth returns whom the service serves behind the boundary: only identities
// the server authenticated (anyone as the anonymous admin with
// InsecureOpen), the admins, and the server's users following every change
// of the members.
func (b *Boundary) Auth() AuthConfig {
	return AuthConfig{Required: !b.insecureOpen, InsecureOpen: b.insecureOpen, Admins: b.admins,
		OnMembersChanged: b.Reload, Bench: b.Bench}
}

// Bench keeps the user nkey off the server for d: its connections are
// closed, and the server refuses it until d has passed (its clients'
// reconnections fail authorization meanwhile). The anonymous user of an
// open server and the service's own key are never benched.
func (b *Boundary) Bench(nkey string, d time.Duration) {
	b.bench(nkey, d, "flooding the service")
}

// bench is Bench, logging why.
func (b *Boundary) bench(nkey string, d time.Duration, why string, attrs ...any) {
	if nkey == "" || nkey == b.service.PublicKey || d <= 0 {
		return
	}
	b.benchMu.Lock()
	if b.benched == nil {
		b.benched = map[string]time.Time{}
	}
	b.benched[nkey] = time.Now().Add(d)
	b.benchMu.Unlock()
	closed := b.srv.Disconnect(func(user string) bool { return user == nkey })
	b.logger.Warn("dwr: an identity is kept off the NATS server for "+why, append([]any{"user", nkey, "for", d, "connections_closed", closed}, attrs...)...)
}

// isBenched reports whether nkey is kept off the server at now (Bench),
// forgetting a bench that is over.
func (b *Boundary) isBenched(nkey string, now time.Time) bool {
	b.benchMu.Lock()
	defer b.benchMu.Unlock()
	until, ok := b.benched[nkey]
	if ok && !now.Before(until) {
		delete(b.benched, nkey)
		return false
	}
	return ok
}
