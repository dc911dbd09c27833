package embedded

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// readyTimeout bounds how long Start waits for the server to accept
// connections.
const readyTimeout = 10 * time.Second

// ErrNotSyncAlways is returned (wrapped) by Start when the running server's
// JetStream does not fsync every write before acknowledging it.
var ErrNotSyncAlways = errors.New("embedded: JetStream is not running with SyncAlways")

// Server is a running embedded NATS server. Its methods are safe for
// concurrent use.
type Server struct {
	cfg       Config
	ns        *server.Server
	logger    *slog.Logger
	logs      *slogAdapter
	listen    bool
	host      string
	closeOnce sync.Once
	// With Config.ListenLater: the port picked at start, and whether the
	// client listener waits for Listen (startListen runs it once).
	port        int
	later       bool
	startListen func() error
}

// Start starts a NATS server with JetStream as cfg describes, waits until it
// accepts connections and checks that JetStream fsyncs every write
// (ErrNotSyncAlways otherwise). It returns an error naming every problem of
// an invalid cfg, or the server's own fatal error (a port in use, a store
// that cannot be opened). On error nothing is left running.
func Start(cfg Config) (*Server, error) {
	o, err := buildOptions(cfg)
	if err != nil {
		return nil, err
	}
	port := 0
	if cfg.ListenLater {
		if port, err = probePort(o.nats.Host, o.nats.Port); err != nil {
			return nil, err
		}
		o.nats.Port, o.nats.DontListen = port, true
	}
	ns, err := server.NewServer(o.nats)
	if err != nil {
		return nil, fmt.Errorf("embedded: new server: %w", err)
	}
	logs := newSlogAdapter(o.logger, o.nats.ServerName)
	ns.SetLoggerV2(logs, logs.enabled(levelDebug), logs.enabled(levelTrace), false)

	if a, ok := o.nats.CustomClientAuthentication.(*authenticator); ok {
		a.ns.Store(ns)
	}
	s := &Server{cfg: cfg, ns: ns, logger: o.logger, logs: logs, listen: cfg.Listen != "", host: o.nats.Host, port: port, later: cfg.ListenLater}
	s.startListen = sync.OnceValue(s.acceptClients)
	ns.Start()
	if err := waitReady(ns, logs); err != nil {
		s.Shutdown()
		return nil, err
	}
	if err := checkDurability(ns.JetStreamConfig(), o); err != nil {
		s.Shutdown()
		return nil, err
	}
	return s, nil
}

// probePort checks that host:port is free to listen on now and returns the
// port (a free one when port is nats-server's random port), so that a
// server whose listener comes later reports a port in use at start.
func probePort(host string, port int) (int, error) {
	if port == server.RANDOM_PORT {
		port = 0
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return 0, fmt.Errorf("embedded: cannot listen for clients: %w", err)
	}
	port = l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("embedded: cannot listen for clients: %w", err)
	}
	return port, nil
}

// Listen opens the client port of a server started with
// Config.ListenLater and returns once it accepts connections (at once for
// any other server, and on any later call). It returns the server's error
// when the port cannot be opened.
func (s *Server) Listen() error {
	if !s.later {
		return nil
	}
	return s.startListen()
}

// acceptClients runs nats-server's accept loop on the port picked at start.
func (s *Server) acceptClients() error {
	listening := make(chan struct{})
	go s.ns.AcceptLoop(listening)
	<-listening
	if s.ns.Addr() == nil {
		if err := s.logs.fatalErr(); err != nil {
			return fmt.Errorf("embedded: cannot listen for clients: %w", err)
		}
		return fmt.Errorf("embedded: cannot listen for clients on %s", net.JoinHostPort(s.host, strconv.Itoa(s.port)))
	}
	return nil
}

// waitReady polls the server until it is ready for connections, for at most
// readyTimeout, and fails early if the server logged a fatal error.
func waitReady(ns *server.Server, logs *slogAdapter) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		if err := logs.fatalErr(); err != nil {
			return fmt.Errorf("embedded: server failed to start: %w", err)
		}
		if ns.ReadyForConnections(100 * time.Millisecond) {
			// A fatal error in a listener goroutine may come just before
			// the check succeeds on the listeners that did start.
			if err := logs.fatalErr(); err != nil {
				return fmt.Errorf("embedded: server failed to start: %w", err)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("embedded: server not ready for connections after %s", readyTimeout)
		}
	}
}

// checkDurability checks the configuration of the running JetStream against
// the options it was started with: SyncAlways on, the store under DataDir,
// the limits as set. A nil jsc means JetStream is not running.
//
// This reads Server.JetStreamConfig, the copy of the configuration that the
// running JetStream holds, rather than trusting the options we passed in.
func checkDurability(jsc *server.JetStreamConfig, o *options) error {
	if jsc == nil {
		return errors.New("embedded: JetStream is not enabled on the running server")
	}
	var errs []error
	if !jsc.SyncAlways {
		errs = append(errs, fmt.Errorf("%w (sync interval %s)", ErrNotSyncAlways, jsc.SyncInterval))
	}
	if want := filepath.Join(o.storeDir, server.JetStreamStoreDir); jsc.StoreDir != want {
		errs = append(errs, fmt.Errorf("embedded: JetStream stores in %q, want %q", jsc.StoreDir, want))
	}
	if jsc.MaxMemory != o.nats.JetStreamMaxMemory || jsc.MaxStore != o.nats.JetStreamMaxStore {
		errs = append(errs, fmt.Errorf("embedded: JetStream limits are memory %d, store %d; want %d, %d",
			jsc.MaxMemory, jsc.MaxStore, o.nats.JetStreamMaxMemory, o.nats.JetStreamMaxStore))
	}
	return errors.Join(errs...)
}

// Connect opens a client connection to the server in-process, without TCP,
// whether or not the server listens. A connection the server cuts (as a
// slow consumer, say) tries again at once, then after twice as long each
// time up to nats.go's default wait (InProcessReconnectDelay): the server
// is in this very process, so there is nothing to wait for, and nats.go's
// default first wait of 2 s left the service deaf to every caller that
// long. opts are applied after these. It returns the error of nats.Connect.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	all := append([]nats.Option{nats.InProcessServer(s.ns), nats.CustomReconnectDelay(InProcessReconnectDelay)}, opts...)
	nc, err := nats.Connect("", all...)
	if err != nil {
		return nil, fmt.Errorf("embedded: connect in-process: %w", err)
	}
	return nc, nil
}

// InProcessReconnectDelay is the wait before reconnection attempt n (from
// 1) of an in-process connection: 10 ms, doubling up to nats.go's default
// of 2 s. With nats.go's default 60 attempts, a connection gives up after
// about as long as with its default waits (two minutes).
func InProcessReconnectDelay(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	if n > 8 { // 10 ms << 8 > 2 s
		return nats.DefaultReconnectWait
	}
	return min(10*time.Millisecond<<(n-1), nats.DefaultReconnectWait)
}

// ClientURL returns the nats:// URL at which clients in other processes can
// connect, with the port actually chosen when Config.Listen asked for port
// 0 (known from the start with ListenLater, before Listen opens it), or ""
// when the server does not listen on TCP. A wildcard listen host
// (0.0.0.0, ::) is reported as the loopback address.
func (s *Server) ClientURL() string {
	if !s.listen {
		return ""
	}
	port := s.port
	if addr, ok := s.ns.Addr().(*net.TCPAddr); ok {
		port = addr.Port
	} else if !s.later {
		return ""
	}
	host := s.host
	if ip := net.ParseIP(strings.Trim(host, "[]")); ip != nil && ip.IsUnspecified() {
		if ip.To4() != nil {
			host = "127.0.0.1"
		} else {
			host = "::1"
		}
	}
	return "nats://" + net.JoinHostPort(host, strconv.Itoa(port))
}

// StoreLimit returns the JetStream store limit the server runs with
// (Config.MaxStore, or the one picked at start).
func (s *Server) StoreLimit() int64 {
	if jsc := s.ns.JetStreamConfig(); jsc != nil {
		return jsc.MaxStore
	}
	return 0
}

// NATS returns the underlying nats-server, for diagnostics and tests (for
// example JetStreamIsLeader or Varz). Do not shut it down directly.
func (s *Server) NATS() *server.Server { return s.ns }

// Shutdown stops the server and waits until it has stopped. Clients are
// disconnected; drain them first for a clean stop. It is safe to call more
// than once and from several goroutines.
func (s *Server) Shutdown() {
	s.closeOnce.Do(func() {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
	})
}

// SubjectMatches reports whether NATS subject subj matches filter, by the
// server's own rule ("*" one token, a last ">" one or more): code that is a
// NATS client matches subjects the way the server does without linking the
// server itself.
func SubjectMatches(subj, filter string) bool { return server.SubjectMatchesFilter(subj, filter) }
