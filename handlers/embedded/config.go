package embedded

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

const (
	// DefaultMaxMemory is the JetStream memory-storage limit used when
	// Config.MaxMemory is zero: 256 MiB.
	DefaultMaxMemory int64 = 256 << 20

	// DefaultMaxStore is the JetStream file-storage limit used when
	// Config.MaxStore is zero and the free space of the disk holding
	// Config.DataDir cannot be measured (outside Linux): 1 TiB, as
	// nats-server guesses then.
	DefaultMaxStore int64 = 1 << 40

	// DefaultServerName is the server name used when Config.ServerName is
	// empty and the server is not clustered.
	DefaultServerName = "dwr"

	// storeSubdir is the folder under Config.DataDir handed to nats-server
	// as its StoreDir; nats-server adds "jetstream" below it.
	storeSubdir = "nats"
)

// Config configures an embedded NATS server. The zero value of every field
// but DataDir has a documented default; Start validates the whole Config and
// reports every problem at once.
type Config struct {
	// DataDir is the directory that holds the server's files (JetStream
	// streams live in DataDir/nats/jetstream). It is created if missing.
	// Required: without it nats-server would store data in a temporary
	// directory.
	DataDir string

	// Listen is the host:port on which the server accepts client
	// connections over TCP, for example "127.0.0.1:4222". A port of 0 picks
	// a free port; Server.ClientURL tells which. Empty (the default) means no
	// TCP port at all: clients connect in-process through Server.Connect.
	// A clustered server must listen: nats-server starts its routes only
	// after its client listener.
	Listen string

	// ListenLater, with Listen, keeps the TCP port closed until
	// Server.Listen: in-process connections work at once, clients in other
	// processes are refused at the door (connection refused, which clients
	// retry) rather than judged by users that are not current yet. Start
	// still checks the port is free and, for port 0, picks it, so
	// ClientURL is known from the start. Not with Cluster (its routes wait
	// for the client listener).
	ListenLater bool

	// Monitor, when set, is the host:port of the server's HTTP monitoring
	// endpoint (nats-server's http_port: /varz, /healthz, ...), which shows,
	// among the rest, that the server fsyncs every write. Empty: none.
	Monitor string

	// ServerName names the server. It must be unique in a cluster and stable
	// across restarts of a clustered node (the JetStream node identity is
	// derived from it), so it is required when Cluster is set. Defaults to
	// DefaultServerName otherwise.
	ServerName string

	// MaxMemory caps the bytes held by memory-storage streams. Zero means
	// DefaultMaxMemory.
	MaxMemory int64

	// MaxStore caps the bytes held by file-storage streams on this server:
	// past it JetStream refuses to store more (an error an append can tell
	// apart), before the disk itself is full. Zero means what JetStream
	// holds in DataDir already plus half the disk's free space, measured
	// at start (on Linux; elsewhere DefaultMaxStore): a store that has
	// grown over the years is never over its own limit at its next start,
	// and the other half stays for what is written beside it (dwr's views
	// take about as much as its log).
	MaxStore int64

	// MaxPending is nats-server's max_pending: the most bytes the server
	// holds for one client connection before it cuts it as a slow
	// consumer. Zero: nats-server's default, 64 MiB.
	MaxPending int64

	// Cluster, when set, joins the server to a cluster over routes.
	Cluster *ClusterConfig

	// Accounts is nats-server configuration text declaring the accounts
	// and users (dwr's is access.ServerConfig). Empty means no accounts: every
	// client shares one account and needs no credentials — only for tests
	// and throwaway experiments.
	Accounts string

	// Users, when set, lets client connections in: those Users accepts,
	// as it says, and no other. The accounts text then declares no users.
	// A change of what Users answers is in force from the next connection
	// on, with no reload; Server.Disconnect closes the connections of a
	// user whose rights it changed. Needs Accounts.
	Users Users

	// TLS, when set, makes client connections use TLS.
	TLS *TLSConfig

	// AtRestKey, when set, makes JetStream encrypt what it stores on disk
	// (every stream's blocks and indexes, ChaCha20-Poly1305 with a key
	// derived from it): nats-server's own encryption at rest. Give it from
	// the first start on, and every time after: without it the streams
	// cannot be read. Empty: none.
	AtRestKey string

	// Logger receives the server's log lines. Nil means slog.Default().
	// The levels are quiet: warnings and errors at slog.LevelWarn and
	// slog.LevelError, the server's notices (startup banner, stream
	// recovery) at slog.LevelDebug, its debug lines at slog.LevelDebug-4 and
	// its protocol traces at slog.LevelDebug-8. Debug and trace output is
	// switched on in the server only when the logger's handler is enabled at
	// those levels.
	Logger *slog.Logger
}

// ClusterConfig joins an embedded server to a cluster of NATS servers.
type ClusterConfig struct {
	// Name is the cluster's name, the same on every member. Required.
	Name string

	// Listen is the host:port on which the server accepts route connections
	// from its peers. A port of 0 picks a free port. Required.
	Listen string

	// Routes lists the peers' route addresses, as host:port or as
	// nats-route://host:port URLs. Listing this server's own address is
	// allowed (every member can share one list).
	Routes []string
}

// TLSConfig makes the server accept clients over TLS only.
type TLSConfig struct {
	// CertFile and KeyFile are the server's certificate and key (PEM).
	// Required.
	CertFile, KeyFile string
	// CAFile, when set, makes TLS mutual: clients must present a
	// certificate signed by one of its CAs.
	CAFile string
}

// options is the validated form of a Config: the nats-server options and
// what Start needs to check the running server against.
type options struct {
	nats     *server.Options
	logger   *slog.Logger
	storeDir string // StoreDir handed to nats-server (DataDir/nats)
}

// buildOptions validates cfg, applies the defaults and returns the
// nats-server options. All problems are reported together.
func buildOptions(cfg Config) (*options, error) {
	var errs []error
	addErr := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(format, args...))
	}

	o := &server.Options{
		ServerName:         cfg.ServerName,
		JetStream:          true,
		SyncAlways:         true,
		NoSigs:             true,
		JetStreamMaxMemory: cfg.MaxMemory,
		JetStreamMaxStore:  cfg.MaxStore,
		MaxPending:         cfg.MaxPending,
	}

	if cfg.Accounts != "" {
		// Options first: the accounts text must not be able to change what
		// is set below (the store, sync always, the limits).
		if err := o.ProcessConfigString(cfg.Accounts); err != nil {
			addErr("Accounts: %w", err)
		}
		o.JetStream, o.SyncAlways, o.NoSigs = true, true, true
		o.JetStreamMaxMemory, o.JetStreamMaxStore, o.MaxPending = cfg.MaxMemory, cfg.MaxStore, cfg.MaxPending
	}
	if cfg.Users != nil {
		if cfg.Accounts == "" {
			addErr("Users needs Accounts")
		}
		// The nonce every client signs with its nkey, which the server
		// offers only when it has nkey users of its own.
		o.CustomClientAuthentication, o.AlwaysEnableNonce = &authenticator{users: cfg.Users}, true
	}
	if cfg.AtRestKey != "" {
		o.JetStreamKey, o.JetStreamCipher = cfg.AtRestKey, server.ChaCha
	}
	if t := cfg.TLS; t != nil {
		if t.CertFile == "" || t.KeyFile == "" {
			addErr("TLS needs both CertFile and KeyFile")
		} else {
			tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: t.CertFile, KeyFile: t.KeyFile,
				CaFile: t.CAFile, Verify: t.CAFile != ""})
			if err != nil {
				addErr("TLS: %w", err)
			} else {
				o.TLSConfig, o.TLS, o.TLSVerify, o.TLSTimeout = tc, true, t.CAFile != "", 2
			}
		}
	}
	if cfg.DataDir == "" {
		addErr("DataDir is required")
	}
	if cfg.MaxMemory < 0 {
		addErr("MaxMemory must not be negative, got %d", cfg.MaxMemory)
	}
	if cfg.MaxStore < 0 {
		addErr("MaxStore must not be negative, got %d", cfg.MaxStore)
	}
	if cfg.MaxPending < 0 {
		addErr("MaxPending must not be negative, got %d", cfg.MaxPending)
	}
	o.JetStreamMaxMemory = cmp.Or(o.JetStreamMaxMemory, DefaultMaxMemory)

	if cfg.Listen == "" {
		o.DontListen = true
	} else if host, port, err := parseHostPort(cfg.Listen); err != nil {
		addErr("Listen: %w", err)
	} else {
		o.Host, o.Port = host, port
	}

	if cfg.Monitor != "" {
		if host, port, err := parseHostPort(cfg.Monitor); err != nil {
			addErr("Monitor: %w", err)
		} else {
			o.HTTPHost, o.HTTPPort = host, port
		}
	}

	if cfg.ListenLater && cfg.Listen == "" {
		addErr("ListenLater needs Listen")
	}
	if c := cfg.Cluster; c != nil {
		if cfg.ListenLater {
			addErr("ListenLater cannot be used with Cluster: nats-server opens routes only after the client port")
		}
		if cfg.ServerName == "" {
			addErr("ServerName is required with Cluster")
		}
		if c.Name == "" {
			addErr("Cluster.Name is required")
		}
		if cfg.Listen == "" {
			// nats-server starts its route listener only once the client
			// listener is up; with DontListen it waits forever (v2.15.2).
			addErr("Listen is required with Cluster: nats-server opens routes only after the client port")
		}
		o.Cluster.Name = c.Name
		if c.Listen == "" {
			addErr("Cluster.Listen is required")
		} else if host, port, err := parseHostPort(c.Listen); err != nil {
			addErr("Cluster.Listen: %w", err)
		} else {
			o.Cluster.Host, o.Cluster.Port = host, port
		}
		for i, r := range c.Routes {
			u, err := parseRoute(r)
			if err != nil {
				addErr("Cluster.Routes[%d]: %w", i, err)
				continue
			}
			o.Routes = append(o.Routes, u)
		}
	}
	if o.ServerName == "" {
		o.ServerName = DefaultServerName
	}

	if len(errs) > 0 {
		return nil, fmt.Errorf("embedded: invalid config: %w", errors.Join(errs...))
	}

	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("embedded: create data dir: %w", err)
	}
	o.StoreDir = filepath.Join(cfg.DataDir, storeSubdir)
	if o.JetStreamMaxStore == 0 {
		o.JetStreamMaxStore = DefaultMaxStore
		if avail, _, ok := DiskSpace(cfg.DataDir); ok {
			o.JetStreamMaxStore = storeLimit(stored(o.StoreDir), avail)
		}
	}

	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return &options{nats: o, logger: logger, storeDir: o.StoreDir}, nil
}

// parseHostPort splits "host:port" and maps a port of 0 to nats-server's
// "pick a random port" value.
func parseHostPort(hp string) (string, int, error) {
	host, portStr, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("invalid port %q", portStr)
	}
	port = cmp.Or(port, server.RANDOM_PORT)
	return host, port, nil
}

// parseRoute accepts "host:port" or a nats-route:// URL.
func parseRoute(r string) (*url.URL, error) {
	if !strings.Contains(r, "://") {
		r = "nats-route://" + r
	}
	u, err := url.Parse(r)
	if err != nil {
		return nil, err
	}
	if u.Hostname() == "" || u.Port() == "" {
		return nil, fmt.Errorf("route %q needs a host and a port", r)
	}
	return u, nil
}

// storeLimit is the store limit of a server whose JetStream holds stored
// bytes with avail bytes free on its disk: what it holds, and half the
// rest.
func storeLimit(stored, avail int64) int64 {
	room := avail / 2
	if stored > math.MaxInt64-room {
		return math.MaxInt64
	}
	return stored + room
}

// stored returns the bytes of the files under dir (0 when there is none).
func stored(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable: the server reports it when it opens the store
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}
