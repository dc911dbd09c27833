package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/embedded"
)

// natsFlags adds the flags of an existing NATS server or cluster to cmd.
func natsFlags(cmd *cobra.Command, x *handlers.ExternalNATS) {
	f := cmd.Flags()
	f.StringVar(&x.URL, "nats", os.Getenv("DWR_NATS"), "use this existing NATS server or cluster (comma-separated URLs) instead of the embedded one (env DWR_NATS)")
	f.StringVar(&x.Creds, "nats-creds", "", "NATS credentials file")
	f.StringVar(&x.User, "nats-user", "", "NATS user")
	f.StringVar(&x.Password, "nats-password", os.Getenv("DWR_NATS_PASSWORD"), "NATS password (env DWR_NATS_PASSWORD)")
	f.StringVar(&x.Token, "nats-token", os.Getenv("DWR_NATS_TOKEN"), "NATS token (env DWR_NATS_TOKEN)")
}

type serveOpts struct {
	data, listen, logLevel string
	replicas               int
	nats                   handlers.ExternalNATS
	insecureOpen           bool
	tlsCert, tlsKey, tlsCA string
	adminKeys              []string
	logKeyFile             string
	acceptPrefix           bool
	trustBelow             bool
	perCaller              int
	healthListen           string
	natsMonitor            []string
	acceptUnsynced         bool
	memoryLimit            string
}

func serveCmd() *cobra.Command {
	var o serveOpts
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "run the dwr service (embedded NATS + JetStream + Pebble by default)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return serve(ctx, o, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.data, "data", envOr("DWR_DATA", "dwr-data"), "directory for the log (embedded mode) and the views (env DWR_DATA)")
	f.StringVar(&o.listen, "listen", envOr("DWR_LISTEN", "127.0.0.1:4222"), "host:port the embedded NATS server accepts clients on (env DWR_LISTEN)")
	f.IntVar(&o.replicas, "replicas", 1, "replicas of the log and the lease (3 on a NATS cluster)")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.BoolVar(&o.insecureOpen, "insecure-open", false, "let clients connect without credentials, as admins of every workspace: for throwaway experiments only")
	f.StringVar(&o.tlsCert, "tls-cert", os.Getenv("DWR_TLS_CERT"), "server certificate (PEM): clients must connect with TLS (env DWR_TLS_CERT)")
	f.StringVar(&o.tlsKey, "tls-key", os.Getenv("DWR_TLS_KEY"), "server key (PEM) (env DWR_TLS_KEY)")
	f.StringVar(&o.tlsCA, "tls-ca", os.Getenv("DWR_TLS_CA"), "CA (PEM) of client certificates: mutual TLS (env DWR_TLS_CA)")
	f.StringSliceVar(&o.adminKeys, "admin-key", nil, "with --nats: the nkey (U...) of an admin of every workspace (repeatable; see dwr admin nats-config)")
	f.BoolVar(&o.acceptPrefix, "accept-verified-prefix", false, "if the log fails verification, accept its verified prefix: print the acknowledged commands lost after it, rebuild the views from it and go on after it (see the README)")
	f.BoolVar(&o.trustBelow, "trust-below-checkpoint", false, "on start, do not read the log below the views' checkpoint to check its chain (faster on a very long log; damage there is then found by `dwr admin verify`)")
	f.IntVar(&o.perCaller, "max-in-flight-per-caller", 0, fmt.Sprintf(
		"requests one identity may have in flight at once; more are refused (unavailable) (0: %d)", handlers.DefaultMaxInFlightPerCaller))
	f.StringSliceVar(&o.natsMonitor, "nats-monitor", envList("DWR_NATS_MONITOR"),
		"with --nats: the monitoring URLs (http_port, http://host:8222) of every node of the cluster, to check that each fsyncs acknowledged writes before serving (env DWR_NATS_MONITOR, comma-separated)")
	f.BoolVar(&o.acceptUnsynced, "accept-unsynced-cluster", false,
		"with --nats: serve without showing that the cluster fsyncs acknowledged writes (acknowledged commands can be lost on power loss; logged at every start)")
	f.StringVar(&o.healthListen, "health-listen", os.Getenv("DWR_HEALTH_LISTEN"),
		"host:port of an HTTP listener for the replica's health: GET /readyz (200 ready, 503 not) and /livez (env DWR_HEALTH_LISTEN; default none)")
	f.StringVar(&o.memoryLimit, "memory-limit", memoryLimitFlag(),
		"soft limit of the service's Go memory, as GOMEMLIMIT: garbage is collected more often near it (more CPU, less memory); off: none (env DWR_MEMORY_LIMIT, else GOMEMLIMIT)")
	natsFlags(cmd, &o.nats)
	logKeyFlag(cmd, &o.logKeyFile)
	return cmd
}

// embedded returns the configuration of the embedded NATS server.
func (o serveOpts) embedded() handlers.EmbeddedConfig {
	cfg := handlers.EmbeddedConfig{Listen: o.listen}
	if o.tlsCert != "" || o.tlsKey != "" || o.tlsCA != "" {
		cfg.TLS = &embedded.TLSConfig{CertFile: o.tlsCert, KeyFile: o.tlsKey, CAFile: o.tlsCA}
	}
	return cfg
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fail(exitInvalid, "--log-level %q: use debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

func serve(ctx context.Context, o serveOpts, stderr io.Writer) error {
	logger, err := newLogger(stderr, o.logLevel)
	if err != nil {
		return err
	}
	err = handlers.Serve(ctx, handlers.ServeConfig{DataDir: o.data, External: o.nats, Embedded: o.embedded(), LogKeyFile: o.logKeyFile,
		MemoryLimit: o.memoryLimit, AdminKeys: o.adminKeys, InsecureOpen: o.insecureOpen, HealthListen: o.healthListen,
		NATSMonitor: o.natsMonitor, AcceptUnsyncedCluster: o.acceptUnsynced,
		Service: handlers.Config{Replicas: o.replicas, Logger: logger, AcceptVerifiedPrefix: o.acceptPrefix,
			TrustBelowCheckpoint: o.trustBelow, MaxInFlightPerCaller: o.perCaller}})
	if errors.Is(err, eventstore.ErrIntegrity) && !errors.Is(err, handlers.ErrInvalidConfig) {
		return fail(exitDamaged, "%v\nnothing is served from a log that fails verification: restore the log (or its stream's configuration) "+
			"from a replica or a backup, or accept its verified prefix with --accept-verified-prefix (the commands after it are lost); "+
			"`dwr admin verify` shows the damage", err)
	}
	return handlersError(err)
}

// handlersError returns an error of handlers with the exit code of its
// class: bad input, NATS out of reach, or another failure.
func handlersError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, handlers.ErrInvalidConfig) || errors.Is(err, handlers.ErrNoLog):
		return fail(exitInvalid, "%v", err)
	case errors.Is(err, handlers.ErrUnreachable):
		return fail(exitUnavailable, "%v", err)
	}
	return fail(exitError, "%v", err)
}

// logKeyFlag adds --log-key-file, the log key's file, to cmd.
func logKeyFlag(cmd *cobra.Command, file *string) {
	cmd.Flags().StringVar(file, "log-key-file", os.Getenv("DWR_LOG_KEY_FILE"),
		"the secret that authenticates the log's records (env DWR_LOG_KEY_FILE; default DATA/log.key, made on the first start); every replica of one log must be given the same key")
}

// envList returns the comma-separated values of environment variable name.
func envList(name string) []string {
	v := os.Getenv(name)
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}
