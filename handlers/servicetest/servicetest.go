// Package servicetest runs the whole dwr service in-process for tests: a
// real embedded NATS server with JetStream on a directory, real Pebble
// views, and the handlers, stopped at the test's cleanup. It is the one way
// every package's tests start the service.
package servicetest

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/embedded"
	"github.com/dwr-run/dwr/projections"
)

// Options adjust the service a test starts; the zero value is an in-process
// server with the default configuration.
type Options struct {
	// Listen makes the NATS server accept TCP clients, e.g. "127.0.0.1:0".
	Listen string
	// Config is the service's configuration; its Logger defaults to Logger().
	Config handlers.Config
}

// Service is a running service.
type Service struct {
	Dir    string
	Server *embedded.Server
	Conn   *nats.Conn // the service's own in-process connection
	Store  *projections.Store
	Svc    *handlers.Service
	URL    string // the client URL when Options.Listen was set

	stop func()
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
	if dir == "" {
		dir = t.TempDir()
	}
	if o.Config.Logger == nil {
		o.Config.Logger = Logger()
	}
	srv, err := embedded.Start(embedded.Config{DataDir: dir, Listen: o.Listen, Logger: o.Config.Logger})
	if err != nil {
		t.Fatalf("servicetest: embedded NATS: %v", err)
	}
	nc, err := srv.Connect()
	if err != nil {
		srv.Shutdown()
		t.Fatalf("servicetest: connect: %v", err)
	}
	store, err := projections.Open(filepath.Join(dir, "views"), projections.Options{})
	if err != nil {
		nc.Close()
		srv.Shutdown()
		t.Fatalf("servicetest: views: %v", err)
	}
	svc, err := handlers.New(nc, store, o.Config)
	if err != nil {
		t.Fatalf("servicetest: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	s := &Service{Dir: dir, Server: srv, Conn: nc, Store: store, Svc: svc, URL: srv.ClientURL()}
	var once sync.Once
	s.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("servicetest: the service stopped with an error: %v", err)
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
	case err := <-done:
		done <- err
		t.Fatalf("servicetest: the service stopped before it was ready: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("servicetest: the service was not ready within 30s")
	}
	return s
}

// Stop stops the service (it is also stopped at cleanup); its data stays in
// Dir for a restart.
func (s *Service) Stop() { s.stop() }
