package handlers_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/embedded"
	"github.com/dwr-run/dwr/handlers/servicetest"
)

// ExternalNATS connects to a server that listens, and says which of its
// settings is at fault when it cannot: a credentials file that cannot be
// read, or a server that does not answer.
func TestExternalNATSConnect(t *testing.T) {
	srv, err := embedded.Start(embedded.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: servicetest.Logger()})
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)

	nc, err := handlers.ExternalNATS{URL: srv.ClientURL()}.Connect("external-test")
	require.NoError(t, err)
	require.True(t, nc.IsConnected())
	require.Equal(t, "external-test", nc.Opts.Name)
	nc.Close()

	_, err = handlers.ExternalNATS{URL: srv.ClientURL(), Creds: filepath.Join(t.TempDir(), "missing.creds")}.Connect("external-test")
	require.ErrorIs(t, err, handlers.ErrInvalidConfig)
	require.ErrorContains(t, err, "--nats-creds")

	_, err = handlers.ExternalNATS{URL: "nats://127.0.0.1:1"}.Connect("external-test")
	require.ErrorIs(t, err, handlers.ErrUnreachable)
	require.ErrorContains(t, err, "cannot connect to NATS at nats://127.0.0.1:1")
}

// Serve refuses what does not fit together before it opens anything: a bad
// memory limit before it makes the data directory, a missing log key file,
// the external server's settings without --nats.
func TestServeRefusesABadConfiguration(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	for name, tc := range map[string]struct {
		cfg  handlers.ServeConfig
		want string
	}{
		"memory limit":     {handlers.ServeConfig{MemoryLimit: "100MB"}, "--memory-limit"},
		"log key file":     {handlers.ServeConfig{LogKeyFile: "/nonexistent/log.key"}, "the log key: --log-key-file"},
		"nats auth":        {handlers.ServeConfig{External: handlers.ExternalNATS{User: "u"}}, "apply to --nats"},
		"nats monitor":     {handlers.ServeConfig{NATSMonitor: []string{"http://127.0.0.1:8222"}}, "apply to --nats"},
		"accept unsynced":  {handlers.ServeConfig{AcceptUnsyncedCluster: true}, "the embedded server always fsyncs"},
		"nats unreachable": {handlers.ServeConfig{External: handlers.ExternalNATS{URL: "nats://%"}}, "cannot connect to NATS"},
	} {
		t.Run(name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			cfg := tc.cfg
			cfg.DataDir, cfg.Service.Logger = data, logger
			err := handlers.Serve(t.Context(), cfg)
			require.ErrorContains(t, err, tc.want)
			if name == "nats unreachable" {
				require.ErrorIs(t, err, handlers.ErrUnreachable)
				return
			}
			require.ErrorIs(t, err, handlers.ErrInvalidConfig)
			if name == "memory limit" {
				_, err := os.Stat(data)
				require.ErrorIs(t, err, os.ErrNotExist, "nothing is made")
			}
		})
	}
}

// OpenMaintenance needs the data directory's log key, and a log.
func TestOpenMaintenanceRefusesWhatIsMissing(t *testing.T) {
	dir := t.TempDir()
	_, err := handlers.OpenMaintenance(t.Context(), handlers.MaintenanceConfig{DataDir: dir})
	require.ErrorIs(t, err, handlers.ErrInvalidConfig, "no log key, and none is made")
	require.ErrorContains(t, err, "the log key: --log-key-file")
	_, _, err = handlers.LoadLogKey(filepath.Join(dir, handlers.LogKeyFile), true)
	require.NoError(t, err)
	_, err = handlers.OpenMaintenance(t.Context(), handlers.MaintenanceConfig{DataDir: dir})
	require.ErrorIs(t, err, handlers.ErrNoLog)
}
