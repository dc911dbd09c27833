package servicetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/embedded"
	"github.com/dwr-run/dwr/projections"
)

// Dev is the dwr service run in-process and open (as `dwr serve
// --insecure-open` runs it: anonymous clients are admins) on a temporary
// directory, for runnable examples, which have no testing.TB: tests use
// Start.
type Dev struct {
	// Server is the embedded NATS server.
	Server *embedded.Server
	// Conn is the service's own connection, which an open service serves
	// as the anonymous admin.
	Conn *nats.Conn

	undo []func() error // what Stop undoes, in reverse
}

// StartDev starts the service on a new temporary directory and waits until
// it is ready. It returns an error when the service cannot start, after
// stopping whatever it started.
func StartDev() (*Dev, error) {
	d := &Dev{}
	if err := d.start(); err != nil {
		return nil, errors.Join(fmt.Errorf("servicetest: %w", err), d.Stop())
	}
	return d, nil
}

func (d *Dev) start() error {
	dir, err := os.MkdirTemp("", "dwr-dev-")
	if err != nil {
		return err
	}
	d.undo = append(d.undo, func() error { return os.RemoveAll(dir) })
	d.Server, err = embedded.Start(embedded.Config{DataDir: dir, Logger: Logger()})
	if err != nil {
		return err
	}
	d.undo = append(d.undo, func() error { d.Server.Shutdown(); return nil })
	d.Conn, err = d.Server.Connect()
	if err != nil {
		return err
	}
	d.undo = append(d.undo, func() error { d.Conn.Close(); return nil })
	store, err := projections.Open(filepath.Join(dir, "views"), projections.Options{})
	if err != nil {
		return err
	}
	d.undo = append(d.undo, store.Close)
	key, _, err := handlers.LoadLogKey(filepath.Join(dir, handlers.LogKeyFile), true)
	if err != nil {
		return err
	}
	svc, err := handlers.New(d.Conn, store, handlers.Config{Logger: Logger(), LogKey: key})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	d.undo = append(d.undo, func() error { cancel(); return <-done })
	select {
	case <-svc.Ready():
		return nil
	case err := <-done:
		done <- nil // reported here, not again by Stop
		if err == nil {
			return errors.New("the service stopped before it was ready")
		}
		return fmt.Errorf("the service stopped before it was ready: %w", err)
	case <-time.After(30 * time.Second):
		return errors.New("the service was not ready within 30s")
	}
}

// Connect opens another connection to the service, as a process of its own
// (an executor, a caller) has. The caller closes it.
func (d *Dev) Connect() (*nats.Conn, error) { return d.Server.Connect() }

// Stop stops the service and removes its directory; it returns what failed.
// It is safe to call more than once.
func (d *Dev) Stop() error {
	var errs []error
	for i := len(d.undo) - 1; i >= 0; i-- {
		errs = append(errs, d.undo[i]())
	}
	d.undo = nil
	return errors.Join(errs...)
}
