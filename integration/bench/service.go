package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/handlers/embedded"
	"github.com/dwr-run/dwr/projections"
)

// service is the whole dwr service in-process on a fresh embedded
// server, for the benchmarks: closed as `dwr serve` runs it, or open.
type service struct {
	srv *embedded.Server
	svc *handlers.Service
	dir string
	// dial opens a connection to the service's NATS server: in-process, or
	// over TCP to a deployed service (another process).
	dial func(opts ...nats.Option) (*nats.Conn, error)
	// url is the NATS URL a deployed service is reached at by processes
	// other than the benchmark's ("" in-process).
	url string
	// admin is the admin's client of a closed service (nil when open): it
	// adds the benchmark's participants as members.
	admin *client.Client
	// tracer makes the spans of the service and its workers when
	// observability is on; nil (no spans) otherwise.
	tracer trace.TracerProvider
	close  func()
}

// setup is how a benchmark's service runs: open (no accounts, no
// credentials) or closed, plain (payloads stored as sent) or encrypted, as
// dwr serve runs by default, and with observability (ObservabilityOn) or
// without; and, for the chain benchmark, the SDK of its workers (WorkerGo,
// ...).
type setup struct {
	open, plain, observe bool
	workers              string
	// limits, when set, holds the service's bytes in flight per caller and
	// its bench of flooders (the flood benchmark's).
	limits *handlers.Config
}

// startService starts the service in dir and waits until it is ready.
// Closed (open false), it is `dwr serve`'s default: the embedded server
// started by handlers.StartEmbedded with the service's and the clients' accounts, the
// service on its own identity, identities required, and the admin
// credential made in dir. Open, it is an embedded server without accounts,
// where every connection shares one account and the service serves each
// request as the anonymous admin: how the benchmarks ran before accounts.
func startService(ctx context.Context, dir string, s setup, progress io.Writer) (_ *service, err error) {
	open := s.open
	var cleanups []func()
	cleanup := func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	logger := slog.New(slog.NewTextHandler(progress, &slog.HandlerOptions{Level: slog.LevelError}))
	// The views first, as dwr serve opens them: a closed server starts with
	// the members they hold.
	store, err := projections.Open(filepath.Join(dir, "views"), projections.Options{Logger: logger})
	if err != nil {
		return nil, err
	}
	cleanups = append(cleanups, func() { _ = store.Close() })
	key, _, err := handlers.LoadLogKey(filepath.Join(dir, handlers.LogKeyFile), true)
	if err != nil {
		return nil, err
	}
	bs := &service{dir: dir}
	bs.dial = func(opts ...nats.Option) (*nats.Conn, error) { return bs.srv.Connect(opts...) }
	var snc *nats.Conn
	var bnd *handlers.Boundary
	cfg := handlers.Config{WriterID: "bench", LogKey: key, Logger: logger}
	if l := s.limits; l != nil {
		cfg.MaxBytesInFlightPerCaller, cfg.BenchFor = l.MaxBytesInFlightPerCaller, l.BenchFor
	}
	if !s.plain {
		// Encrypted, as dwr serve runs by default.
		if cfg.MasterKey, err = handlers.OpenMasterKey("", "", dir, nil); err != nil {
			return nil, err
		}
		cfg.Encryption = true
	}
	if s.observe {
		cfg.Metrics = handlers.NewMetricsRegistry()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
		cleanups = append(cleanups, func() { _ = tp.Shutdown(context.Background()) })
		cfg.Tracer, bs.tracer = tp, tp
	}
	if open {
		if bs.srv, err = startServer(dir, progress); err != nil {
			return nil, err
		}
		cleanups = append(cleanups, bs.srv.Shutdown)
		snc, err = bs.srv.Connect(nats.Name("dwr-bench-service"))
	} else {
		if bnd, err = handlers.StartEmbedded(handlers.EmbeddedConfig{DataDir: dir, Logger: logger}, store); err != nil {
			return nil, err
		}
		bs.srv = bnd.Server()
		cleanups = append(cleanups, bs.srv.Shutdown)
		cfg.Auth = bnd.Auth()
		snc, err = bnd.Connect("dwr-bench-service")
	}
	if err != nil {
		return nil, err
	}
	cleanups = append(cleanups, snc.Close)
	if bs.svc, err = handlers.New(snc, store, cfg); err != nil {
		return nil, err
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- bs.svc.Run(sctx) }()
	cleanups = append(cleanups, func() {
		stop()
		if err := <-done; err != nil {
			_, _ = fmt.Fprintf(progress, "bench: the service stopped with an error: %v\n", err)
		}
	})
	select {
	case <-bs.svc.Ready():
	case err := <-done:
		done <- nil // for the deferred wait
		return nil, fmt.Errorf("service stopped before it was ready: %w", err)
	case <-time.After(30 * time.Second):
		return nil, errors.New("service not ready after 30s")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if s.observe {
		stopScrapes := scrapeEvery(bs.svc.Metrics(), ScrapeEvery)
		cleanups = append(cleanups, stopScrapes)
	}
	if bnd != nil {
		if err := bnd.Open(); err != nil { // as dwr serve does once the views are caught up
			return nil, err
		}
		anc, err := bs.connectCreds("dwr-bench-admin", filepath.Join(dir, access.AdminCredsFile))
		if err != nil {
			return nil, fmt.Errorf("connect as the admin: %w", err)
		}
		cleanups = append(cleanups, anc.Close)
		bs.admin = newClient(anc)
	}
	bs.close = cleanup
	return bs, nil
}

// connectCreds opens a connection with a credential file, as the SDK and
// the CLI connect: its nkey and inbox prefix.
func (bs *service) connectCreds(name, file string, opts ...nats.Option) (*nats.Conn, error) {
	creds, err := executors.Credentials(file)
	if err != nil {
		return nil, err
	}
	return bs.dial(append(append([]nats.Option{nats.Name(name)}, creds...), opts...)...)
}

// requestTimeout bounds a benchmark client's request.
const requestTimeout = 30 * time.Second

// newClient returns a client of the benchmark's service on nc, in the
// default workspace: each request is sent once and waited for up to
// requestTimeout, so that a failure counts as one.
func newClient(nc *nats.Conn) *client.Client {
	return client.New(nc, client.NoRetry(), client.Timeout(requestTimeout))
}

// join opens a connection for one participant of a benchmark. On a closed
// service, the admin first adds it to the default workspace (member) and it
// connects with the credential written; on an open one it connects as
// anyone.
func (bs *service) join(ctx context.Context, name string, role domain.Role, queues ...string) (*nats.Conn, error) {
	file, err := bs.member(ctx, name, role, queues...)
	if err != nil {
		return nil, err
	}
	if file == "" {
		return bs.dial(nats.Name(name))
	}
	return bs.connectCreds(name, file)
}

// member adds participant name to a closed service's default workspace as
// a member with role (and an executor's queues), as `dwr users add` does
// (access.AddUser), and returns its credential file, written in the
// service's directory; on an open service it returns "" (anyone connects
// as anyone).
func (bs *service) member(ctx context.Context, name string, role domain.Role, queues ...string) (string, error) {
	if bs.admin == nil {
		return "", nil
	}
	file := filepath.Join(bs.dir, name+".creds")
	if _, _, err := access.AddUser(bs.admin.Workspace(), domain.AddMember{Name: name, Role: role, Queues: queues}, file, true,
		func(m domain.AddMember) error {
			_, err := bs.admin.Command(ctx, "member.add", m)
			return err
		}); err != nil {
		return "", fmt.Errorf("add %s as a member: %w", name, err)
	}
	return file, nil
}

// joinClients returns n clients of client-role members named prefix-0,
// prefix-1, ..., each on a connection of its own, and a function that
// closes the connections.
func (bs *service) joinClients(ctx context.Context, prefix string, n int) ([]*client.Client, func(), error) {
	conns := make([]*nats.Conn, 0, n)
	clients := make([]*client.Client, 0, n)
	closeAll := func() {
		for _, nc := range conns {
			nc.Close()
		}
	}
	for i := range n {
		nc, err := bs.join(ctx, fmt.Sprintf("%s-%d", prefix, i), domain.RoleClient)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		conns = append(conns, nc)
		clients = append(clients, newClient(nc))
	}
	return clients, closeAll, nil
}

// scrapeEvery serves GET /metrics of h every interval, as Prometheus
// scrapes it, discarding the answer, until stop is called.
func scrapeEvery(h http.Handler, interval time.Duration) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(interval)
		defer t.Stop()
		req, _ := http.NewRequest(http.MethodGet, "/metrics", nil)
		for {
			select {
			case <-done:
				return
			case <-t.C:
				h.ServeHTTP(&discard{header: http.Header{}}, req)
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// discard is a ResponseWriter that keeps nothing.
type discard struct{ header http.Header }

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}
