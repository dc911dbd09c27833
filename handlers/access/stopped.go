package access

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/dwr-run/dwr/handlers/embedded"
)

// OpenStopped starts the embedded NATS server of a stopped service's data
// directory, without a listener, and connects as the service: in
// ServiceAccount, where a closed service keeps its streams, or as they are
// for data written without accounts (before them, or by an open test
// server; dwr serve moves those, see MigrateStore). It is for maintenance
// and tests that read or change the streams. On error nothing is left
// running.
func OpenStopped(dataDir string, logger *slog.Logger) (*embedded.Server, *nats.Conn, error) {
	cfg := embedded.Config{DataDir: dataDir, Logger: logger, AtRestKey: AtRestKeyFromEnv()}
	opts := []nats.Option{nats.Name("dwr-maintenance")}
	if _, err := os.Stat(filepath.Join(dataDir, "nats", "jetstream", "$G", "streams")); err != nil {
		id, err := NewServiceIdentity()
		if err != nil {
			return nil, nil, err
		}
		cfg.Accounts = ServiceOnly(id)
		opts = append(opts, id.Option())
	}
	srv, err := embedded.Start(cfg)
	if err != nil {
		return nil, nil, err
	}
	nc, err := srv.Connect(opts...)
	if err != nil {
		srv.Shutdown()
		return nil, nil, fmt.Errorf("access: connect as the service: %w", err)
	}
	return srv, nc, nil
}

// EnvAtRestKeyFile names the environment variable that holds the file of
// JetStream's key for encryption at rest (dwr serve --at-rest-key-file):
// the maintenance commands, which open a stopped server's streams, read it
// from there.
const EnvAtRestKeyFile = "DWR_AT_REST_KEY_FILE"

// AtRestKeyFromEnv returns the key in the file EnvAtRestKeyFile names, or
// "" when it names none (or it cannot be read: the streams then fail to
// open, saying so).
func AtRestKeyFromEnv() string {
	path := os.Getenv(EnvAtRestKeyFile)
	if path == "" {
		return ""
	}
	b, err := os.ReadFile(path) //nolint:gosec // the operator's key file
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
