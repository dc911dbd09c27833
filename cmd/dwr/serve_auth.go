package main

import (
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/handlers/embedded"
	"github.com/dwr-run/dwr/projections"
)

// boundary is the embedded server's trust boundary: the service's own
// identity (a fresh nkey each start, never written down), the admins, and
// whether anonymous clients are let in; and the server whose users follow
// the members the views hold.
type boundary struct {
	service      *access.ServiceIdentity
	admins       []access.Admin
	insecureOpen bool
	srv          *embedded.Server
	store        *projections.Store
	logger       *slog.Logger
}

// spec returns the layout with the members the views hold (none when
// the store is nil).
func (b *boundary) spec() access.Spec {
	s := access.Spec{ServiceKeys: []string{b.service.PublicKey}, InsecureOpen: b.insecureOpen,
		Identities: access.IdentitiesOf(b.admins, nil)}
	if b.store == nil {
		return s
	}
	ws, err := b.store.ListWorkspaces()
	if err != nil {
		b.logger.Error("dwr: reading the workspaces' members", "err", err)
		return s
	}
	s.Identities = access.IdentitiesOf(b.admins, ws)
	return s
}

// connect opens the service's own in-process connection.
func (b *boundary) connect(name string) (*nats.Conn, error) {
	return b.srv.Connect(nats.Name(name), b.service.Option())
}

// reload gives the server's users the members the views hold now; it logs
// what it cannot apply.
func (b *boundary) reload() {
	if err := b.srv.Reload(access.ServerConfig(b.spec())); err != nil {
		b.logger.Error("dwr: could not apply the members to NATS; they take effect at the next start", "err", err)
	}
}

// auth returns whom the service serves behind the boundary: only identities
// the server authenticated (anyone as the anonymous admin with
// --insecure-open), the admins, and the server's users following every
// change of the members.
func (b *boundary) auth() handlers.AuthConfig {
	return handlers.AuthConfig{Required: !b.insecureOpen, InsecureOpen: b.insecureOpen, Admins: b.admins,
		OnMembersChanged: b.reload}
}

// startEmbedded starts the embedded NATS server closed: the service's
// account and the clients' account, the admin credential of the data
// directory (created on first start), and the members the views hold (those
// the views have not caught up with yet come once they have).
func startEmbedded(o serveOpts, store *projections.Store, logger *slog.Logger) (*embedded.Server, *boundary, error) {
	if moved, err := access.MigrateStore(o.data); err != nil {
		return nil, nil, fail(exitError, "%v", err)
	} else if moved {
		logger.Info("dwr: moved the streams into the service's own NATS account (a data directory from before accounts)", "account", access.ServiceAccount)
	}
	path, pub, created, err := ensureAdminCreds(o.data)
	if err != nil {
		return nil, nil, fail(exitError, "the admin credential in %s: %v", o.data, err)
	}
	if created {
		logger.Info("dwr: created the admin credential; the CLI on this machine finds it in the data directory (or give --creds / DWR_CREDS)", "file", path)
	}
	id, err := access.NewServiceIdentity()
	if err != nil {
		return nil, nil, err
	}
	b := &boundary{service: id, insecureOpen: o.insecureOpen, store: store, logger: logger,
		admins: []access.Admin{{Name: "admin", PublicKey: pub}}}
	cfg := embedded.Config{DataDir: o.data, Listen: o.listen, Logger: logger,
		Accounts: access.ServerConfig(b.spec())}
	if o.tlsCert != "" || o.tlsKey != "" || o.tlsCA != "" {
		cfg.TLS = &embedded.TLSConfig{CertFile: o.tlsCert, KeyFile: o.tlsKey, CAFile: o.tlsCA}
	}
	if b.srv, err = embedded.Start(cfg); err != nil {
		return nil, nil, fail(exitError, "embedded NATS: %v", err)
	}
	return b.srv, b, nil
}

// openOffline starts the embedded server of a stopped `dwr serve`'s data
// directory for maintenance, without a listener, and connects as the
// service.
func openOffline(data string, logger *slog.Logger) (*embedded.Server, *nats.Conn, error) {
	srv, nc, err := access.OpenStopped(data, logger)
	if err != nil {
		return nil, nil, fail(exitError, "open the log in %s: %v (is `dwr serve` still running on it?)", data, err)
	}
	return srv, nc, nil
}
