package servicetest

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/handlers/embedded"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// secure is a closed service's trust boundary, as `dwr serve` builds it.
type secure struct {
	service *access.ServiceIdentity
	admin   nkeys.KeyPair
	store   *projections.Store
	srv     *embedded.Server
	t       testing.TB
}

func newSecure(t testing.TB, dir string, store *projections.Store) *secure {
	t.Helper()
	id, err := access.NewServiceIdentity()
	if err != nil {
		t.Fatalf("servicetest: %v", err)
	}
	return &secure{service: id, admin: adminKey(t, dir), store: store, t: t}
}

// adminKey returns the admin key kept in dir, made on first use.
func adminKey(t testing.TB, dir string) nkeys.KeyPair {
	t.Helper()
	p := filepath.Join(dir, "test-admin.nk")
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			t.Fatalf("servicetest: %v", err)
		}
		seed, _ := kp.Seed()
		if err := os.WriteFile(p, seed, 0o600); err != nil {
			t.Fatalf("servicetest: %v", err)
		}
		return kp
	} else if err != nil {
		t.Fatalf("servicetest: %v", err)
	}
	kp, err := nkeys.FromSeed(b)
	if err != nil {
		t.Fatalf("servicetest: %v", err)
	}
	return kp
}

func (s *secure) admins() []access.Admin {
	pub, _ := s.admin.PublicKey()
	return []access.Admin{{Name: "admin", PublicKey: pub}}
}

func (s *secure) accounts() string {
	ws, err := s.store.ListWorkspaces()
	if err != nil {
		s.t.Errorf("servicetest: workspaces: %v", err)
	}
	return access.ServerConfig(access.Spec{ServiceKeys: []string{s.service.PublicKey},
		Identities: access.IdentitiesOf(s.admins(), ws)})
}

func (s *secure) reload() {
	if err := s.srv.Reload(s.accounts()); err != nil {
		s.t.Errorf("servicetest: reload the NATS users: %v", err)
	}
}

// connect opens an in-process connection as the user of key kp, with the
// inbox prefix its permissions allow.
func (s *secure) connect(t testing.TB, kp nkeys.KeyPair, name string) *nats.Conn {
	t.Helper()
	pub, _ := kp.PublicKey()
	nc, err := s.srv.Connect(nats.Name(name), nats.CustomInboxPrefix(schemas.InboxPrefix(pub)),
		nats.Nkey(pub, func(nonce []byte) ([]byte, error) { return kp.Sign(nonce) }))
	if err != nil {
		t.Fatalf("servicetest: connect as %s: %v", name, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Member adds name to workspace ws with role (and an executor's queues),
// through the admin, and returns a connection as that identity. It needs
// Options.Secure.
func (s *Service) Member(t testing.TB, ws, name string, role domain.Role, queues ...string) *nats.Conn {
	t.Helper()
	if s.sec == nil {
		t.Fatal("servicetest: Member needs Options.Secure")
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	Must(t, s.Admin, ws, "member.add", domain.AddMember{Name: name, Role: role, PublicKey: pub, Queues: queues})
	return s.sec.connect(t, kp, name)
}

// Connect opens a connection as the user of key kp (which need not be a
// member: the server refuses an unknown one). It needs Options.Secure.
func (s *Service) Connect(t testing.TB, kp nkeys.KeyPair, name string) (*nats.Conn, error) {
	t.Helper()
	pub, _ := kp.PublicKey()
	return s.Server.Connect(nats.Name(name), nats.CustomInboxPrefix(schemas.InboxPrefix(pub)),
		nats.Nkey(pub, func(nonce []byte) ([]byte, error) { return kp.Sign(nonce) }))
}

// OpenStopped starts the embedded NATS server of a stopped service's data
// directory, without a listener, and returns it with a connection as the
// service (in the service's account when the data is a closed service's),
// for a test that looks at, or damages, the streams. Both are closed at
// cleanup.
func OpenStopped(t testing.TB, dir string) (*embedded.Server, *nats.Conn) {
	t.Helper()
	srv, nc, err := access.OpenStopped(dir, Logger())
	if err != nil {
		t.Fatalf("servicetest: open the stopped service's NATS: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	t.Cleanup(nc.Close)
	return srv, nc
}
