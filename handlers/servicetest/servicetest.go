// Package servicetest runs the whole dwr service in-process for tests: a
// real embedded NATS server with JetStream on a directory, real Pebble
// views, and the handlers, stopped at the test's cleanup. The log is the
// JetStream stream on that server, or (Options.Log) an in-memory log for
// tests that do not test storage. It is the one way
// every package's tests start the service. Its Client (commands, queries,
// CreateTask, WaitState, WaitTask: executors/client's Client, with a
// testing.TB API) and Eventually are the one kit those tests talk to a
// service and wait with, on any connection: the service in-process, or `dwr
// serve` in another process. StartDev runs the service for runnable
// examples, which have no testing.TB; StartNATS starts a server without the
// service, for a test of what a client does while no service answers.
// Scrape and ScrapeHandler read a /metrics endpoint as Prometheus parses it
// (Metrics: values, histograms and label values by name).
//
// It is a test helper, never shipped, and the one handlers package that may
// import executors/client (.golangci.yml, rule servicetest): the service
// itself never imports executors.
package servicetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/handlers/embedded"
	"github.com/dwr-run/dwr/projections"
)

// Options adjust the service a test starts; the zero value is an in-process
// server with the default configuration, and the log key of the data
// directory (made on the first start), as dwr serve has it.
type Options struct {
	// Listen makes the NATS server accept TCP clients, e.g. "127.0.0.1:0".
	Listen string
	// Config is the service's configuration; its Logger defaults to Logger().
	Config handlers.Config
	// Clock, when set, is the service's time source (it replaces
	// Config.Clock), and moving it wakes the service's timers at once.
	Clock *Clock
	// Secure runs the service as `dwr serve` does: closed, with the
	// service's and the clients' NATS accounts, identities from the
	// connection (Config.Auth is set). Service.Admin is then an admin's
	// connection, and Service.Member adds identities. A data directory a
	// closed service wrote is always started closed.
	Secure bool
	// Log, when set, is the log the service writes (it replaces
	// Config.Log) instead of the JetStream stream DWR_LOG on the embedded
	// server: eventstore.NewMemoryLog() for a test that does not test
	// storage — the work items, the event feed, the lease and the token key
	// stay on the real server. A test that restarts the service on the same
	// directory gives the same Log again. A test of storage, fencing,
	// replicas or integrity leaves it nil.
	Log eventstore.Log
	// MaxPending, when set, is the NATS server's max_pending: the most
	// bytes it holds for one connection before it cuts it as a slow
	// consumer (nats-server's default 64 MiB).
	MaxPending int64
	// Limits bound what the clients hold of the embedded server (with
	// Secure; its guard benches for Config.BenchFor).
	Limits handlers.ClientLimits
}

// Clock is a clock a test moves by hand, so that it moves time instead of
// waiting for it. Given in Options.Clock it is the service's time source,
// and Advance and Set wake the timers of every running service on it at
// once, instead of at their next poll. It is safe for concurrent use; the
// same Clock may serve a service that is stopped and started again.
type Clock struct {
	mu   sync.Mutex
	now  time.Time
	svcs map[*handlers.Service]struct{}
}

// NewClock returns a clock standing at start.
func NewClock(start time.Time) *Clock {
	return &Clock{now: start, svcs: map[*handlers.Service]struct{}{}}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d and wakes the services' timers.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	c.wake()
}

// Set moves the clock to t and wakes the services' timers.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
	c.wake()
}

// WakeTimers wakes the timers of every running service on the clock without
// moving it, e.g. to have them look again after a test changed something
// else.
func (c *Clock) WakeTimers() { c.wake() }

func (c *Clock) wake() {
	c.mu.Lock()
	svcs := make([]*handlers.Service, 0, len(c.svcs))
	for s := range c.svcs {
		svcs = append(svcs, s)
	}
	c.mu.Unlock()
	for _, s := range svcs {
		s.WakeTimers()
	}
}

// attach makes moves of the clock wake svc's timers until detach is called.
func (c *Clock) attach(svc *handlers.Service) (detach func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.svcs[svc] = struct{}{}
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.svcs, svc)
	}
}

// Service is a running service.
type Service struct {
	Dir    string
	Server *embedded.Server
	Conn   *nats.Conn // the service's own in-process connection
	Store  *projections.Store
	Svc    *handlers.Service
	URL    string // the client URL when Options.Listen was set
	// Admin is, with Options.Secure, an in-process connection of an admin
	// of every workspace (its key is kept in Dir, so it survives a
	// restart on Dir); else the service's own connection, which an open
	// service serves as the anonymous admin.
	Admin *nats.Conn

	stop   func()
	ended  func(time.Duration) (error, bool)
	secure bool // behind dwr serve's trust boundary (Options.Secure)
}

// Logger discards the service's logs unless the environment variable
// DWR_TEST_LOG is set, when they go to stderr at debug level.
func Logger() *slog.Logger {
	if os.Getenv("DWR_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// Start starts the service on data directory dir (a fresh t.TempDir() when
// empty) and waits until it is ready; it fails the test if it cannot.
func Start(t testing.TB, dir string, o Options) *Service {
	t.Helper()
	s, err := TryStart(t, dir, o)
	if err != nil {
		t.Fatalf("servicetest: %v", err)
	}
	return s
}

// StartNATS starts an embedded NATS server with JetStream on a fresh
// directory, and no service: for a test of what a client does while no
// service answers. It returns the server and a connection to it, both
// closed at the test's cleanup, and fails the test if it cannot.
func StartNATS(t testing.TB) (*embedded.Server, *nats.Conn) {
	t.Helper()
	srv, err := embedded.Start(embedded.Config{DataDir: t.TempDir(), Logger: Logger()})
	if err != nil {
		t.Fatalf("servicetest: embedded NATS: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatalf("servicetest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return srv, nc
}

// TryStart is Start for a test that expects the start to fail: it returns
// the error the service stopped with before it was ready (everything it
// started is stopped again), or the ready service.
func TryStart(t testing.TB, dir string, o Options) (*Service, error) {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	if o.Config.Logger == nil {
		o.Config.Logger = Logger()
	}
	if o.Clock != nil {
		o.Config.Clock = o.Clock.Now
	}
	if o.Log != nil {
		o.Config.Log = o.Log
	}
	if o.Config.LogKey == nil {
		key, _, err := handlers.LoadLogKey(filepath.Join(dir, handlers.LogKeyFile), true)
		if err != nil {
			return nil, err
		}
		o.Config.LogKey = key
	}
	if o.Secure {
		if _, err := access.MigrateStore(dir); err != nil { // as dwr serve does
			return nil, err
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "nats", "jetstream", access.ServiceAccount)); err == nil {
		o.Secure = true // a closed service's data: its streams live in the service's account
	}
	// The views first: a closed server starts with the members they hold.
	logger := o.Config.Logger
	store, err := projections.Open(filepath.Join(dir, "views"), projections.Options{
		OnDamaged: func(to string, cause error) {
			logger.Warn("servicetest: the views are damaged: moved aside, they are rebuilt from the log", "moved_to", to, "err", cause)
		}})
	if err != nil {
		return nil, fmt.Errorf("views: %w", err)
	}
	// A closed service runs behind the boundary `dwr serve` builds; an open
	// one on a bare server.
	var bnd *handlers.Boundary
	var srv *embedded.Server
	var nc *nats.Conn
	if o.Secure {
		if bnd, err = handlers.StartEmbedded(handlers.EmbeddedConfig{DataDir: dir, Listen: o.Listen, Logger: logger, MaxPending: o.MaxPending,
			Limits: o.Limits, BenchFor: o.Config.BenchFor}, store); err != nil {
			_ = store.Close()
			return nil, err
		}
		srv = bnd.Server()
		o.Config.Auth = bnd.Auth()
		o.Config.Auth.OnMembersChanged = func() { reload(t, bnd) }
		nc, err = bnd.Connect("dwr-serve")
	} else {
		if srv, err = embedded.Start(embedded.Config{DataDir: dir, Listen: o.Listen, Logger: logger, MaxPending: o.MaxPending}); err != nil {
			_ = store.Close()
			return nil, fmt.Errorf("embedded NATS: %w", err)
		}
		nc, err = srv.Connect()
	}
	if err != nil {
		_ = store.Close()
		srv.Shutdown()
		return nil, fmt.Errorf("connect: %w", err)
	}
	svc, err := handlers.New(nc, store, o.Config)
	if err != nil {
		nc.Close()
		_ = store.Close()
		srv.Shutdown()
		return nil, err
	}
	detach := func() {}
	if o.Clock != nil {
		detach = o.Clock.attach(svc)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	s := &Service{Dir: dir, Server: srv, Conn: nc, Store: store, Svc: svc, URL: srv.ClientURL(), Admin: nc, secure: bnd != nil}
	var once sync.Once
	var runErr error // the error Run returned before the service was stopped
	s.ended = func(d time.Duration) (error, bool) {
		select {
		case err := <-done:
			runErr = fmt.Errorf("stopped by itself: %w", err)
			done <- nil
			return err, true
		case <-time.After(d):
			return nil, false
		}
	}
	s.stop = func() {
		once.Do(func() {
			detach()
			cancel()
			if err := <-done; err != nil && runErr == nil {
				t.Errorf("servicetest: the service stopped with an error: %v", err)
			}
			if s.Admin != nc {
				s.Admin.Close()
			}
			nc.Close()
			if err := store.Close(); err != nil {
				t.Errorf("servicetest: close the views: %v", err)
			}
			srv.Shutdown()
		})
	}
	t.Cleanup(s.stop)
	select {
	case <-svc.Ready():
		if bnd != nil {
			if err := bnd.Open(); err != nil { // the members the views hold once caught up, then the port
				s.stop()
				return nil, err
			}
			s.Admin = connectAdmin(t, srv, dir)
		}
		return s, nil
	case err := <-done:
		runErr = fmt.Errorf("the service stopped before it was ready: %w", err)
		if err == nil {
			runErr = errors.New("the service stopped before it was ready")
		}
		done <- nil
		s.stop()
		return nil, runErr
	case <-time.After(30 * time.Second):
		s.stop()
		return nil, errors.New("the service was not ready within 30s")
	}
}

// WaitEnded waits up to d for the service to stop by itself (as it does on
// damage) and returns the error it stopped with; it fails the test if it
// still runs after d. The error is then expected: cleanup does not report it.
func (s *Service) WaitEnded(t testing.TB, d time.Duration) error {
	t.Helper()
	err, ok := s.ended(d)
	if !ok {
		t.Fatalf("servicetest: the service still runs after %s", d)
	}
	return err
}

// Stop stops the service (it is also stopped at cleanup); its data stays in
// Dir for a restart.
func (s *Service) Stop() { s.stop() }

// Must sends command name with body to workspace ws on nc and fails the test
// unless it is acknowledged; it returns the reply's result. It is
// NewClient(nc, ws).Command.
func Must(t testing.TB, nc *nats.Conn, ws, name string, body any) json.RawMessage {
	t.Helper()
	return NewClient(nc, ws).Command(t, name, body)
}
