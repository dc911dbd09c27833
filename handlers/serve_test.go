package handlers_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/handlers/servicetest"
)

// Serve runs the service as dwr serve does: on its data directory, closed,
// with the admin credential made there, until its context ends; a
// configuration the service refuses is ErrInvalidConfig.
func TestServeRunsUntilItsContextEnds(t *testing.T) {
	dir := t.TempDir()
	key, _, err := handlers.LoadLogKey(filepath.Join(dir, handlers.LogKeyFile), true)
	require.NoError(t, err)
	logs := &servicetest.Output{}
	cfg := handlers.ServeConfig{DataDir: dir, Service: handlers.Config{LogKey: key, Logger: slog.New(slog.NewTextHandler(logs, nil))}}

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- handlers.Serve(ctx, cfg) }()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(logs.String(), "msg=\"dwr ready\" nats=\"in-process only\"") {
		require.True(t, time.Now().Before(deadline), "not ready: %s", logs.String())
		<-tick.C
	}
	cancel()
	require.NoError(t, <-done)
	require.Contains(t, logs.String(), `msg="dwr stopped"`)
	_, err = access.CredentialKey(filepath.Join(dir, access.AdminCredsFile))
	require.NoError(t, err, "the admin credential was made")
	id, err := os.ReadFile(filepath.Join(dir, "writer-id"))
	require.NoError(t, err)
	require.NotEmpty(t, strings.TrimSpace(string(id)), "the writer id is kept")

	cfg.Service.Prefix = "Not A Token"
	require.ErrorIs(t, handlers.Serve(t.Context(), cfg), handlers.ErrInvalidConfig)
}
