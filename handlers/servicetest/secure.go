package servicetest

import (
	"path/filepath"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/handlers/embedded"
	"github.com/dwr-run/dwr/schemas"
)

// reload gives the boundary's server the members the views hold now; a
// failure fails the test.
func reload(t testing.TB, bnd *handlers.Boundary) {
	if err := bnd.ApplyMembers(); err != nil {
		t.Errorf("servicetest: reload the NATS users: %v", err)
	}
}

// connect opens an in-process connection to srv as the user of key kp,
// with the inbox prefix its permissions allow. It writes as a client over
// TCP does, without waiting for the server to read (OtherClients): a
// member removed meanwhile is refused at its reconnection at once.
func connect(t testing.TB, srv *embedded.Server, kp nkeys.KeyPair, name string) *nats.Conn {
	t.Helper()
	pub, _ := kp.PublicKey()
	nc, err := nats.Connect("", nats.InProcessServer(srv.OtherClients()), nats.CustomReconnectDelay(embedded.InProcessReconnectDelay),
		nats.Name(name), nats.CustomInboxPrefix(schemas.InboxPrefix(pub)),
		nats.Nkey(pub, func(nonce []byte) ([]byte, error) { return kp.Sign(nonce) }))
	if err != nil {
		t.Fatalf("servicetest: connect as %s: %v", name, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// connectAdmin opens an in-process connection as the admin whose
// credential `dwr serve`'s boundary keeps in the data directory dir.
func connectAdmin(t testing.TB, srv *embedded.Server, dir string) *nats.Conn {
	t.Helper()
	opts, err := client.CredentialOptions(filepath.Join(dir, access.AdminCredsFile))
	if err != nil {
		t.Fatalf("servicetest: the admin credential: %v", err)
	}
	nc, err := srv.Connect(append(opts, nats.Name("admin"))...)
	if err != nil {
		t.Fatalf("servicetest: connect as the admin: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// AdminConn opens another in-process connection as the admin (with
// Options.Secure), closed at cleanup.
func (s *Service) AdminConn(t testing.TB) *nats.Conn {
	t.Helper()
	if !s.secure {
		t.Fatal("servicetest: AdminConn needs Options.Secure")
	}
	return connectAdmin(t, s.Server, s.Dir)
}

// Member adds name to workspace ws with role (and an executor's queues),
// through the admin, and returns a connection as that identity. It needs
// Options.Secure.
func (s *Service) Member(t testing.TB, ws, name string, role domain.Role, queues ...string) *nats.Conn {
	t.Helper()
	return connect(t, s.Server, s.MemberKey(t, ws, name, role, queues...), name)
}

// MemberKey adds name to workspace ws with role (and an executor's queues),
// through the admin, and returns its key pair, to connect as it. It needs
// Options.Secure.
func (s *Service) MemberKey(t testing.TB, ws, name string, role domain.Role, queues ...string) nkeys.KeyPair {
	t.Helper()
	if !s.secure {
		t.Fatal("servicetest: Member needs Options.Secure")
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	Must(t, s.Admin, ws, "member.add", domain.AddMember{Name: name, Role: role, PublicKey: pub, Queues: queues})
	return kp
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

// BytesTo returns the bytes the NATS server has sent so far to the
// connections named name (the service's own: "dwr-serve", "dwr-serve
// (queries)", "dwr-serve (lease)"), for a test of which connection carries
// what.
func (s *Service) BytesTo(t testing.TB, name string) int64 {
	t.Helper()
	cz, err := s.Server.NATS().Connz(&server.ConnzOptions{Limit: 4096})
	if err != nil {
		t.Fatalf("servicetest: the server's connections: %v", err)
	}
	var n int64
	for _, c := range cz.Conns {
		if c.Name == name {
			n += c.OutBytes
		}
	}
	return n
}
