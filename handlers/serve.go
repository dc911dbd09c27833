package handlers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"

	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// ErrInvalidConfig is what Serve returns (wrapped) when the service's
// configuration is refused.
var ErrInvalidConfig = errors.New("handlers: invalid configuration")

// ServeConfig is how Serve runs one replica of the service, as `dwr serve`
// does; its flags set it.
type ServeConfig struct {
	// DataDir holds the views and this replica's writer id, and with the
	// embedded server its streams and admin credential; Serve makes it
	// when it is missing.
	DataDir string
	// NATS is the connection to an existing NATS server or cluster (Serve
	// closes it). When nil, Serve connects to External when its URL is
	// set (trying nodes that are not up yet until they are: the replica is
	// ready once they answer), else runs the embedded server, as Embedded
	// says (Serve sets its DataDir, InsecureOpen and Logger).
	NATS     *nats.Conn
	External ExternalNATS
	Embedded EmbeddedConfig
	// LogKeyFile is the file of the log key when Service.LogKey is nil: ""
	// for DataDir/LogKeyFile, made there on the first start (OpenLogKey).
	LogKeyFile string
	// MasterKeyFile is the file of the master key when Service.Encryption
	// is on and Service.MasterKey is nil: "" for DataDir/MasterKeyFile, made
	// there on the first start; MasterKeyEnv, when set, holds the key
	// itself (DWR_MASTER_KEY, standard base64) instead.
	MasterKeyFile, MasterKeyEnv string
	// MemoryLimit, when set, is the soft limit of the process's Go memory,
	// as GOMEMLIMIT writes it (ParseMemoryLimit; "off": none), which Serve
	// sets: the runtime collects garbage more often near it (a soft limit:
	// it is exceeded rather than fail, and the collector takes at most about
	// half the CPU).
	MemoryLimit string
	// AdminKeys are the nkeys (U...) of the admins of every workspace, on
	// an existing server; the embedded one has its admin credential.
	AdminKeys []string
	// InsecureOpen serves connections without credentials as admins of
	// every workspace.
	InsecureOpen bool
	// NATSMonitor are the monitoring URLs (http_port) of the nodes of the
	// NATS cluster: with NATS set, Serve starts only once every JetStream
	// node of the cluster is shown to fsync before it acknowledges
	// (CheckClusterSync), unless AcceptUnsyncedCluster.
	NATSMonitor []string
	// AcceptUnsyncedCluster lets Serve run on NATS without that check, or
	// when it fails: acknowledged commands may then be lost when nodes lose
	// power. Logged at every start.
	AcceptUnsyncedCluster bool
	// HealthListen, when set, is the host:port of an HTTP listener serving
	// the replica's health: GET /readyz (200 ready, 503 not, with the
	// reason) and GET /livez (see Service.HealthHandler).
	HealthListen string
	// HTTP is the host:port of the HTTP server (`--http`): the console at
	// /, GET /metrics, GET /healthz and GET /readyz (package web); "" for
	// none. An address that cannot be bound is a start error, unless
	// HTTPIsDefault.
	HTTP string
	// HTTPIsDefault says HTTP is the default address (web.DefaultAddr), not
	// one the operator gave: when it is taken (a second replica on one
	// machine), Serve logs a warning and runs without HTTP.
	HTTPIsDefault bool
	// NoMetrics leaves GET /metrics out of the HTTP server (`--metrics=false`).
	// Otherwise, with HTTP set and Service.Metrics nil, Serve gives the
	// service a registry of its own (NewMetricsRegistry) and serves it.
	NoMetrics bool
	// Console, when set, makes the web console's handler, given how to
	// reach the NATS server as its users; the HTTP server mounts it at /.
	// A handler that is an io.Closer is closed when Serve stops.
	Console func(ConsoleNATS) http.Handler
	// Service is the service's configuration; Serve sets its WriterID (the
	// data directory's, so that a restarted replica takes its own writer
	// lease again at once) and its Auth. Its Logger is required.
	Service Config
}

// Serve runs the service on cfg until ctx ends: it opens the views, starts
// the embedded server (or uses cfg.NATS, or connects to cfg.External), runs
// the service, and once it is ready gives the server the members the views
// hold. With the environment variable MemProfileEnv set it watches the
// process's memory meanwhile (WatchMemory), with CPUProfileEnv it profiles
// its CPU until it stops. It returns nil when ctx ends, an
// error wrapping ErrInvalidConfig when cfg is refused (before anything is
// made when its MemoryLimit is), one wrapping ErrUnreachable when
// cfg.External cannot be connected to, one wrapping eventstore.ErrIntegrity
// when the log fails verification, and others when something cannot be
// opened or started.
func Serve(ctx context.Context, cfg ServeConfig) error {
	started := time.Now()
	logger := cfg.Service.Logger
	if err := cfg.prepare(); err != nil {
		return err
	}
	if cfg.HTTP != "" && !cfg.NoMetrics && cfg.Service.Metrics == nil {
		cfg.Service.Metrics = NewMetricsRegistry()
	}
	face, err := startHTTP(&cfg, logger)
	if err != nil {
		return err
	}
	defer face.stop()
	if face == nil {
		cfg.Service.Metrics = nil // nobody could scrape them
	}
	nc := cfg.NATS
	if nc == nil && cfg.External.URL != "" {
		var err error
		if nc, err = cfg.External.Connect("dwr-serve", nats.RetryOnFailedConnect(true)); err != nil {
			return err
		}
	}
	if nc != nil {
		defer nc.Close()
	}
	if file := os.Getenv(MemProfileEnv); file != "" {
		wctx, cancel := context.WithCancel(ctx)
		watched := WatchMemory(wctx, file, logger)
		defer func() { cancel(); <-watched }()
	}
	if file := os.Getenv(CPUProfileEnv); file != "" {
		stop, err := StartCPUProfile(file)
		if err != nil {
			return fmt.Errorf("%s: %w", CPUProfileEnv, err)
		}
		defer stop()
	}
	// The schemas are compiled on first use (~50 ms): now, while the views
	// open and the server starts, rather than in the first command's time.
	go func() {
		if err := schemas.Compile(); err != nil {
			logger.Error("dwr: the embedded schemas do not compile: every command will be refused", "err", err)
		}
	}()
	id, err := writerID(cfg.DataDir)
	if err != nil {
		return fmt.Errorf("writer id in %s: %v", cfg.DataDir, err)
	}
	// The views first: the embedded server starts with the members they
	// hold, so that members reconnecting after a restart are let in.
	store, err := projections.Open(filepath.Join(cfg.DataDir, "views"), projections.Options{Logger: logger,
		OnDamaged: func(to string, cause error) {
			logger.Warn("the views are damaged: moved aside, they are rebuilt from the log", "moved_to", to, "err", cause)
		}})
	if err != nil {
		return fmt.Errorf("views: %v (is another dwr serve using %s?)", err, cfg.DataDir)
	}
	defer func() {
		if err := store.Close(); err != nil {
			logger.Error("closing the views", "err", err)
		}
	}()
	if cfg.InsecureOpen {
		logger.Warn("dwr: --insecure-open: anyone who reaches NATS is an admin of every workspace, without credentials; use it only for throwaway experiments")
	}
	auth, open, where := AuthConfig{Required: !cfg.InsecureOpen, InsecureOpen: cfg.InsecureOpen}, func() error { return nil }, ""
	consoleNATS := ConsoleNATS{URL: cfg.External.URL}
	if nc == nil {
		e := cfg.Embedded
		e.DataDir, e.InsecureOpen, e.Logger, e.BenchFor = cfg.DataDir, cfg.InsecureOpen, logger, cfg.Service.BenchFor
		bnd, err := StartEmbedded(e, store)
		if err != nil {
			return err
		}
		defer bnd.Server().Shutdown()
		if nc, err = bnd.Connect("dwr-serve"); err != nil {
			return fmt.Errorf("embedded NATS: %v", err)
		}
		defer nc.Close()
		if cfg.Service.FeedMaxBytes == 0 {
			limit := bnd.Server().StoreLimit()
			cfg.Service.FeedMaxBytes = FeedBytesFor(limit)
			if cfg.Service.FeedMaxBytes < DefaultFeedMaxBytes {
				logger.Info("dwr: the event feed is bounded to a quarter of JetStream's store limit (--feed-max-bytes to choose)",
					"feed_max_bytes", cfg.Service.FeedMaxBytes, "store_limit", limit)
			}
		}
		auth, open, where = bnd.Auth(), bnd.Open, bnd.Server().ClientURL()
		consoleNATS = ConsoleNATS{Options: []nats.Option{nats.InProcessServer(bnd.Server().OtherClients())}}
		if where == "" {
			where = "in-process only"
		}
	} else {
		for _, k := range cfg.AdminKeys {
			auth.Admins = append(auth.Admins, access.Admin{Name: access.AdminName, PublicKey: k})
		}
		if len(auth.Admins) == 0 && !cfg.InsecureOpen {
			logger.Warn("dwr: no --admin-key: nobody can create workspaces or add members; see dwr admin nats-config")
		}
		where = nc.ConnectedUrl()
		if consoleNATS.URL == "" {
			consoleNATS.URL = where
		}
		logConnection(nc, logger)
		if err := checkSync(ctx, cfg, logger); err != nil {
			return err
		}
	}
	svcCfg := cfg.Service
	svcCfg.WriterID, svcCfg.Auth = id, auth
	svc, err := New(nc, store, svcCfg)
	if err != nil {
		return classed{ErrInvalidConfig, err}
	}
	var console http.Handler
	if cfg.Console != nil {
		console = cfg.Console(consoleNATS)
		if c, ok := console.(io.Closer); ok {
			defer func() { _ = c.Close() }() // before the HTTP server stops: its streams end
		}
	}
	face.attach(svc, console)
	defer face.stop() // before the views close: no scrape reads them closed (stop again later does nothing)
	if cfg.HealthListen != "" {
		stop, err := serveHealth(cfg.HealthListen, svc, logger)
		if err != nil {
			return classed{ErrInvalidConfig, err}
		}
		defer stop()
	}
	errc := make(chan error, 1)
	go func() { errc <- svc.Run(ctx) }()
	select {
	case <-svc.Ready():
		// The members the views hold, now that they are caught up, and
		// then the client port.
		if err := open(); err != nil {
			return err
		}
		logger.Info("dwr ready", "nats", where, "data", cfg.DataDir, "log_seq", store.Checkpoint(),
			"ready_in", time.Since(started).Round(time.Millisecond))
	case err := <-errc:
		if err == nil { // stopped (a signal) before it was ready
			logger.Info("dwr stopped before it was ready")
		}
		return err
	}
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	logger.Info("dwr stopped")
	return nil
}

// ConsoleNATS is how the web console reaches the NATS server to connect
// as each person who signs in: the URL to dial ("" in-process) and options
// to dial with, before the person's own credential.
type ConsoleNATS struct {
	URL     string
	Options []nats.Option
}

// prepare applies cfg.MemoryLimit, makes the data directory, reads the log
// key into cfg.Service, and checks the external server's flags, in that
// order; the errors wrap ErrInvalidConfig.
func (cfg *ServeConfig) prepare() error {
	if cfg.MemoryLimit != "" {
		limit, err := ParseMemoryLimit(cfg.MemoryLimit)
		if err != nil {
			return classed{ErrInvalidConfig, fmt.Errorf("--memory-limit %v", err)}
		}
		debug.SetMemoryLimit(limit)
		cfg.Service.Logger.Debug("dwr: soft memory limit", "limit", cfg.MemoryLimit)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return classed{ErrInvalidConfig, fmt.Errorf("--data %s: %v", cfg.DataDir, err)}
	}
	if cfg.Service.LogKey == nil {
		key, retired, err := openLogKeyRing(cfg.LogKeyFile, cfg.DataDir, true, cfg.Service.Logger)
		if err != nil {
			return err
		}
		cfg.Service.LogKey, cfg.Service.RetiredLogKeys = key, retired
	}
	if cfg.Service.Encryption && cfg.Service.MasterKey == nil {
		key, err := OpenMasterKey(cfg.MasterKeyEnv, cfg.MasterKeyFile, cfg.DataDir, cfg.Service.Logger)
		if err != nil {
			return err
		}
		cfg.Service.MasterKey = key
	}
	if err := cfg.External.validate(); err != nil {
		return err
	}
	if cfg.NATS == nil && cfg.External.URL == "" && (len(cfg.NATSMonitor) > 0 || cfg.AcceptUnsyncedCluster) {
		return classed{ErrInvalidConfig, errors.New("--nats-monitor and --accept-unsynced-cluster apply to --nats (an external cluster); the embedded server always fsyncs")}
	}
	return nil
}

// writerID returns this data directory's stable writer id, so that a
// restarted server re-takes its own writer lease at once.
func writerID(data string) (string, error) {
	p := filepath.Join(data, "writer-id")
	if b, err := os.ReadFile(p); err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	id := ulid.Make().String()
	return id, os.WriteFile(p, []byte(id+"\n"), 0o600)
}

// classed is an error that callers branch on by its class (errors.Is(err,
// class)), with the message of err.
type classed struct{ class, err error }

func (e classed) Error() string        { return e.err.Error() }
func (e classed) Is(target error) bool { return target == e.class }
func (e classed) Unwrap() error        { return e.err }

// logConnection logs the changes of nc's state, once each: a replica cut
// off from its NATS node says so (and that it is trying the others), and
// says again when it is back.
func logConnection(nc *nats.Conn, logger *slog.Logger) {
	nc.SetDisconnectErrHandler(func(nc *nats.Conn, err error) {
		logger.Warn("dwr: NATS connection lost; reconnecting to the cluster's nodes (not ready meanwhile)", "err", err)
	})
	nc.SetReconnectHandler(func(nc *nats.Conn) {
		logger.Info("dwr: NATS connection back", "server", nc.ConnectedUrlRedacted())
	})
	nc.SetClosedHandler(func(*nats.Conn) { logger.Info("dwr: NATS connection closed") })
}

// serveHealth serves svc's health on addr until stop is called.
func serveHealth(addr string, svc *Service, logger *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("health listener: %w", err)
	}
	srv := &http.Server{Handler: svc.HealthHandler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("dwr: health listener stopped", "err", err)
		}
	}()
	logger.Info("dwr: health on http://" + ln.Addr().String() + "/readyz")
	return func() { _ = srv.Close() }, nil
}

// checkSync refuses a cluster that does not fsync acknowledged writes, or
// cannot be shown to, unless the operator accepted that.
func checkSync(ctx context.Context, cfg ServeConfig, logger *slog.Logger) error {
	const risk = "acknowledged commands can be lost when NATS nodes lose power (set jetstream { sync_interval: always } on every node)"
	if len(cfg.NATSMonitor) == 0 {
		if cfg.AcceptUnsyncedCluster {
			logger.Warn("dwr: --accept-unsynced-cluster: whether the NATS cluster fsyncs acknowledged writes is not checked; " + risk)
			return nil
		}
		return classed{ErrInvalidConfig, fmt.Errorf("%w: cannot tell whether the NATS cluster fsyncs acknowledged writes: "+
			"give every node's monitoring URL (http_port) with --nats-monitor, or run with --accept-unsynced-cluster (%s)", ErrUnsyncedCluster, risk)}
	}
	// Nodes that do not answer yet, or whose JetStream has not started yet
	// (started with dwr), are asked again for a minute; a node that answers
	// without sync_always is refused at once.
	var err error
	for deadline, logged := time.Now().Add(time.Minute), false; ; {
		var retryable bool
		retryable, err = checkClusterSync(ctx, cfg.NATSMonitor)
		if err == nil || !retryable || time.Now().After(deadline) {
			break
		}
		if !logged {
			logger.Warn("dwr: waiting for the NATS nodes' monitoring endpoints, to check that they fsync", "err", err)
			logged = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	switch {
	case err == nil:
		logger.Info("dwr: every JetStream node of the cluster fsyncs before it acknowledges", "checked", len(cfg.NATSMonitor))
		return nil
	case cfg.AcceptUnsyncedCluster:
		logger.Warn("dwr: --accept-unsynced-cluster: "+risk, "err", err)
		return nil
	}
	return classed{ErrInvalidConfig, fmt.Errorf("%w (or run with --accept-unsynced-cluster: %s)", err, risk)}
}
