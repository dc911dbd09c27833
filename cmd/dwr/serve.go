package main

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/handlers/console"
	"github.com/dwr-run/dwr/handlers/embedded"
	"github.com/dwr-run/dwr/handlers/web"
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

func serveCmd() *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "run the dwr service (embedded NATS + JetStream + Pebble by default)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	o.flags(cmd)
	return cmd
}

// serveOptions are dwr serve's flags.
type serveOptions struct {
	cfg                       handlers.ServeConfig
	tls                       embedded.TLSConfig
	logLevel, atRestKey, otlp string
	maxStore, minFreeDisk     string
	consoleHosts              []string
	metricsOn                 bool
}

// run runs the service as the flags say, until it is stopped.
func (o *serveOptions) run(cmd *cobra.Command) error {
	logger, err := newLogger(cmd.ErrOrStderr(), o.logLevel)
	if err != nil {
		return err
	}
	o.cfg.Service.Logger = logger
	o.cfg.NoMetrics = !o.metricsOn
	_, httpFromEnv := os.LookupEnv("DWR_HTTP")
	o.cfg.HTTPIsDefault = !cmd.Flags().Changed("http") && !httpFromEnv
	if o.tls != (embedded.TLSConfig{}) {
		o.cfg.Embedded.TLS = &o.tls
	}
	if o.maxStore != "" {
		if o.cfg.External.URL != "" {
			return fail(exitInvalid, "--max-store is for the embedded server: with --nats, set max_file_store on your NATS servers")
		}
		n, err := handlers.ParseSize(o.maxStore)
		if err != nil {
			return fail(exitInvalid, "--max-store %v", err)
		}
		o.cfg.Embedded.MaxStore = n
	}
	switch o.minFreeDisk {
	case "":
	case "off":
		o.cfg.Service.MinFreeDisk = -1
	default:
		n, err := handlers.ParseSize(o.minFreeDisk)
		if err != nil {
			return fail(exitInvalid, "--min-free-disk %v, or off", err)
		}
		o.cfg.Service.MinFreeDisk = n
	}
	if o.atRestKey != "" {
		if o.cfg.External.URL != "" {
			return fail(exitInvalid, "--at-rest-key-file is for the embedded server: with --nats, configure encryption at rest on your NATS servers (jetstream { cipher: chachapoly, key: ... })")
		}
		b, err := os.ReadFile(o.atRestKey) //nolint:gosec // the operator's key file
		if err != nil || len(strings.TrimSpace(string(b))) < 16 {
			return fail(exitInvalid, "--at-rest-key-file %s: need a file holding a key of at least 16 characters (e.g. head -c 32 /dev/urandom | base64 > FILE)", o.atRestKey)
		}
		o.cfg.Embedded.AtRestKey = strings.TrimSpace(string(b))
	}
	if err := consoleHandler(&o.cfg, o.consoleHosts, logger); err != nil {
		return err
	}
	ctx, stop := untilStopped(cmd)
	defer stop()
	tp, shutdown, err := tracerProvider(ctx, o.otlp, "dwr-serve")
	if err != nil {
		return err
	}
	defer shutdown()
	o.cfg.Service.Tracer = tp
	return serveError(handlers.Serve(ctx, o.cfg))
}

// flags registers dwr serve's flags on cmd.
func (o *serveOptions) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.cfg.DataDir, "data", envOr("DWR_DATA", "dwr-data"), "directory for the log (embedded mode) and the views (env DWR_DATA)")
	f.StringVar(&o.cfg.Embedded.Listen, "listen", envOr("DWR_LISTEN", "127.0.0.1:4222"), "host:port the embedded NATS server accepts clients on (env DWR_LISTEN)")
	f.IntVar(&o.cfg.Service.Replicas, "replicas", 1, "replicas of the log and the lease (3 on a NATS cluster)")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	otlpFlag(f, &o.otlp)
	f.BoolVar(&o.cfg.InsecureOpen, "insecure-open", false, "let clients connect without credentials, as admins of every workspace: for throwaway experiments only")
	f.StringVar(&o.tls.CertFile, "tls-cert", os.Getenv("DWR_TLS_CERT"), "server certificate (PEM): clients must connect with TLS (env DWR_TLS_CERT)")
	f.StringVar(&o.tls.KeyFile, "tls-key", os.Getenv("DWR_TLS_KEY"), "server key (PEM) (env DWR_TLS_KEY)")
	f.StringVar(&o.tls.CAFile, "tls-ca", os.Getenv("DWR_TLS_CA"), "CA (PEM) of client certificates: mutual TLS (env DWR_TLS_CA)")
	f.StringSliceVar(&o.cfg.AdminKeys, "admin-key", nil, "with --nats: the nkey (U...) of an admin of every workspace (repeatable; see dwr admin nats-config)")
	f.BoolVar(&o.cfg.Service.AcceptVerifiedPrefix, "accept-verified-prefix", false, "if the log fails verification, accept its verified prefix: print the acknowledged commands lost after it, rebuild the views from it and go on after it (see the README)")
	f.BoolVar(&o.cfg.Service.TrustBelowCheckpoint, "trust-below-checkpoint", false, "on start, do not read the log below the views' checkpoint to check its chain (faster on a very long log; damage there is then found by `dwr admin verify`)")
	f.Int64Var(&o.cfg.Service.FeedMaxBytes, "feed-max-bytes", 0,
		"bound of the event feed's stream (DWR_EVENTS): its oldest events are dropped past it (-1: none; 0: 1 GiB, or with the embedded server a quarter of its store limit when that is less)")
	f.StringVar(&o.minFreeDisk, "min-free-disk", os.Getenv("DWR_MIN_FREE_DISK"),
		"free space kept on the disk of --data: below it new commands are refused (unavailable) until room is made, e.g. 2GiB; off: none (env DWR_MIN_FREE_DISK; default: a twentieth of the disk, between 64 MiB and 1 GiB)")
	f.StringVar(&o.maxStore, "max-store", os.Getenv("DWR_MAX_STORE"),
		"the embedded server's JetStream store limit, e.g. 50GiB: past it commands are refused (unavailable) before the disk fills (env DWR_MAX_STORE; default: what it holds plus half the disk's free space, at start)")
	f.Int64Var(&o.cfg.Service.ArtifactMaxBytes, "artifact-max-bytes", handlers.DefaultArtifactMaxBytes,
		"the largest artifact a put may store")
	f.DurationVar(&o.cfg.Service.ArtifactRetention, "artifact-retention", handlers.DefaultArtifactRetention,
		"how long the artifacts a task made and no task names are kept once its goal ended (-1s: forever)")
	sizeFlag(f, &o.cfg.Service.MaxArtifactBytesPerWorkspace, "max-artifact-bytes-per-workspace", handlers.DefaultMaxArtifactBytesPerWorkspace,
		"the bytes of one workspace's artifacts: a put past them is refused (too_large) (off: none)")
	f.Int64Var(&o.cfg.Service.ArtifactStoreMaxBytes, "artifacts-max-bytes", 0,
		"bound of the artifact store (the object store dwr-artifacts): past it, puts are refused (0: none)")
	f.IntVar(&o.cfg.Service.MaxQueues, "max-queues", handlers.DefaultMaxQueues,
		"the most queues of the whole service (each a consumer of the work stream): a task given a new queue past it is refused")
	f.IntVar(&o.cfg.Service.MaxQueuesPerWorkspace, "max-queues-per-workspace", handlers.DefaultMaxQueuesPerWorkspace,
		"the most queues of one workspace: a task given a new queue past it is refused (-1: only --max-queues)")
	f.IntVar(&o.cfg.Service.MaxSchedulesPerWorkspace, "max-schedules-per-workspace", handlers.DefaultMaxSchedulesPerWorkspace,
		"the most schedules of one workspace (each fires on the service's timers): a schedule.create past it is refused (-1: none)")
	f.IntVar(&o.cfg.Service.MaxMembersPerWorkspace, "max-members-per-workspace", handlers.DefaultMaxMembersPerWorkspace,
		"the most members of one workspace (each a user of the NATS server): a member.add of a new member past it is refused (-1: none)")
	f.IntVar(&o.cfg.Service.MaxInFlightPerCaller, "max-in-flight-per-caller", 0, fmt.Sprintf(
		"requests one identity may have in flight at once; more are refused (unavailable) (0: %d)", handlers.DefaultMaxInFlightPerCaller))
	f.DurationVar(&o.cfg.Service.BenchFor, "bench-flooders", handlers.DefaultBenchFor,
		"how long an identity that floods (sends in one second 8x its bytes or 64x its requests in flight, or is refused 16x its requests in flight) is refused, and kept off the embedded NATS server (-1s: never)")
	l := &o.cfg.Embedded.Limits
	f.IntVar(&l.MaxConnections, "max-client-connections", access.DefaultMaxClientConnections,
		"the embedded server: the clients' connections at once; more are refused (-1: none)")
	f.IntVar(&l.MaxSubscriptionsPerConnection, "max-subscriptions-per-connection", access.DefaultMaxSubscriptionsPerConnection,
		"the embedded server: one client connection's subscriptions; more are refused (-1: none)")
	f.IntVar(&l.MaxConnectionsPerIdentity, "max-connections-per-identity", handlers.DefaultMaxConnectionsPerIdentity,
		"the embedded server: one identity's connections at once; past them it is benched for --bench-flooders (-1: none)")
	f.IntVar(&l.MaxConnectionsPerWorkspace, "max-connections-per-workspace", 0,
		"the embedded server: the connections one workspace's identities hold together; past them its largest holders are benched for --bench-flooders (0: half of --max-client-connections; -1: none)")
	f.IntVar(&l.MaxSubscriptions, "max-client-subscriptions", handlers.DefaultMaxClientSubscriptions,
		"the embedded server: the clients' subscriptions in all; past them the identity holding the most is benched for --bench-flooders (-1: none)")
	sizeFlag(f, &l.MaxPending, "max-client-pending", handlers.DefaultMaxClientPending,
		"the embedded server: the bytes it may hold for all the clients' connections, sent and not yet read; past them at two looks in a row the largest holders are benched, by workspace (off: none)")
	sizeFlag(f, &l.MaxPendingPerIdentity, "max-pending-per-identity", handlers.DefaultMaxPendingPerIdentity,
		"the embedded server: the bytes it may hold for one identity's connections, sent and not yet read by them; past them at two looks in a row the identity is benched for --bench-flooders (off: none)")
	f.StringSliceVar(&o.cfg.NATSMonitor, "nats-monitor", envList("DWR_NATS_MONITOR"),
		"with --nats: the monitoring URLs (http_port, http://host:8222) of every node of the cluster, to check that each fsyncs acknowledged writes before serving (env DWR_NATS_MONITOR, comma-separated)")
	f.BoolVar(&o.cfg.AcceptUnsyncedCluster, "accept-unsynced-cluster", false,
		"with --nats: serve without showing that the cluster fsyncs acknowledged writes (acknowledged commands can be lost on power loss; logged at every start)")
	f.StringVar(&o.cfg.HealthListen, "health-listen", os.Getenv("DWR_HEALTH_LISTEN"),
		"host:port of an HTTP listener for the replica's health: GET /readyz (200 ready, 503 not) and /livez (env DWR_HEALTH_LISTEN; default none)")
	f.StringVar(&o.cfg.HTTP, "http", httpDefault(),
		"host:port of the HTTP server: the web console, GET /metrics (Prometheus), /healthz and /readyz; \"\" for none (env DWR_HTTP). "+
			"Unauthenticated apart from the console's sign-in: keep it on loopback or a private network")
	f.BoolVar(&o.metricsOn, "metrics", envOr("DWR_METRICS", "on") != "off",
		"serve GET /metrics (Prometheus) on --http: --metrics=false turns it off (env DWR_METRICS=off)")
	f.StringVar(&o.cfg.MemoryLimit, "memory-limit", handlers.MemoryLimitFromEnv(),
		"soft limit of the service's Go memory, as GOMEMLIMIT: garbage is collected more often near it (more CPU, less memory); off: none (env DWR_MEMORY_LIMIT, else GOMEMLIMIT)")
	f.BoolVar(&o.cfg.Service.Encryption, "encryption", envOr("DWR_ENCRYPTION", "on") != "off",
		"seal the payloads of commands (inputs, results, checkpoints, signals, evidence) with a data key of their workspace or goal before they are stored: --encryption=false stores them in plaintext (env DWR_ENCRYPTION=off)")
	f.StringVar(&o.cfg.MasterKeyFile, "master-key-file", os.Getenv("DWR_MASTER_KEY_FILE"),
		"the key that wraps the data keys (env DWR_MASTER_KEY_FILE, or the key itself in DWR_MASTER_KEY; default DATA/master.key, made on the first start); every replica must be given the same key, and it must be backed up apart from the data")
	o.cfg.MasterKeyEnv = os.Getenv("DWR_MASTER_KEY")
	f.StringVar(&o.atRestKey, "at-rest-key-file", os.Getenv("DWR_AT_REST_KEY_FILE"),
		"encrypt the embedded server's files with JetStream's own encryption at rest (ChaCha20-Poly1305), with the key in this file: give it from the first start on, and to dwr admin too (env DWR_AT_REST_KEY_FILE)")
	f.StringSliceVar(&o.consoleHosts, "console-host", envList("DWR_CONSOLE_HOST"),
		"a host name the web console answers for, besides IP addresses and localhost (repeatable; env DWR_CONSOLE_HOST, comma-separated): requests naming another host are refused, against DNS rebinding")
	natsFlags(cmd, &o.cfg.External)
	logKeyFlag(cmd, &o.cfg.LogKeyFile)
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fail(exitInvalid, "--log-level %q: use debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// httpDefault is --http's default: DWR_HTTP when it is set (empty: no HTTP
// server), else the loopback address web.DefaultAddr.
func httpDefault() string {
	if v, ok := os.LookupEnv("DWR_HTTP"); ok {
		return v
	}
	return web.DefaultAddr
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

// consoleHandler sets cfg.Console to the web console (handlers/console),
// answering for hosts besides IP addresses and localhost.
func consoleHandler(cfg *handlers.ServeConfig, hosts []string, logger *slog.Logger) error {
	for _, h := range hosts {
		if err := console.CheckHost(h); err != nil {
			return fail(exitInvalid, "%s", strings.TrimPrefix(err.Error(), "console: "))
		}
	}
	cfg.Console = func(n handlers.ConsoleNATS) http.Handler {
		c, err := console.New(console.Config{NATSURL: n.URL, NATSOptions: n.Options, AllowedHosts: hosts, Logger: logger})
		if err != nil { // the hosts were checked: not expected
			logger.Error("dwr: no web console", "err", err)
			return http.NotFoundHandler()
		}
		return c
	}
	return nil
}

// sizeFlag defines a flag of a size (such as 100MiB or 2GiB) or off, which
// sets *p to -1.
func sizeFlag(f *pflag.FlagSet, p *int64, name string, value int64, usage string) {
	*p = value
	f.Var(sizeValue{p}, name, usage)
}

type sizeValue struct{ n *int64 }

func (v sizeValue) Set(s string) error {
	if s == "off" {
		*v.n = -1
		return nil
	}
	n, err := handlers.ParseSize(s)
	if err != nil {
		return fmt.Errorf("%w, or off", err)
	}
	*v.n = n
	return nil
}

func (v sizeValue) String() string {
	n := *v.n
	if n < 0 {
		return "off"
	}
	for _, u := range []string{"B", "KiB", "MiB", "GiB"} {
		if n%1024 != 0 || n == 0 {
			return strconv.FormatInt(n, 10) + u
		}
		n /= 1024
	}
	return strconv.FormatInt(n, 10) + "TiB"
}

func (sizeValue) Type() string { return "size" }
