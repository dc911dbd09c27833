package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
)

// httpServe runs Serve on a fresh data directory with cfg's HTTP settings
// until the test ends, and returns its logs and a channel of its result.
func httpServe(t *testing.T, cfg handlers.ServeConfig) (*servicetest.Output, <-chan error) {
	t.Helper()
	cfg.DataDir = t.TempDir()
	key, _, err := handlers.LoadLogKey(filepath.Join(cfg.DataDir, handlers.LogKeyFile), true)
	require.NoError(t, err)
	logs := &servicetest.Output{}
	cfg.Service.LogKey, cfg.Service.Logger = key, slog.New(slog.NewTextHandler(logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done, stopped := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(stopped)
		done <- handlers.Serve(ctx, cfg)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-stopped:
		case <-time.After(30 * time.Second):
			t.Error("Serve did not stop")
		}
	})
	return logs, done
}

var consoleURL = regexp.MustCompile(`console and metrics on (http://[^/ "]+)/`)

// baseURL waits for Serve to log its HTTP server's URL and returns it.
func baseURL(t *testing.T, logs *servicetest.Output) string {
	t.Helper()
	servicetest.Eventually(t, 20*time.Second, func() bool { return consoleURL.MatchString(logs.String()) }, logs.String)
	return consoleURL.FindStringSubmatch(logs.String())[1]
}

func getHealth(t *testing.T, url string) (int, handlers.Health) {
	t.Helper()
	resp, err := http.Get(url) //nolint:gosec // the test's own loopback server
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var h handlers.Health
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&h))
	return resp.StatusCode, h
}

// page returns the body of what url answers (the index page at /).
func page(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url) //nolint:gosec // the test's own loopback server
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// dwr serve's HTTP server answers /healthz while the process runs and
// /readyz with 200 once the replica serves; the page at / lists them.
func TestServeHTTPAnswersHealthAndReadiness(t *testing.T) {
	logs, _ := httpServe(t, handlers.ServeConfig{HTTP: "127.0.0.1:0"})
	base := baseURL(t, logs)
	code, h := getHealth(t, base+"/healthz")
	require.Equal(t, http.StatusOK, code, "alive whether ready or not: %+v", h)
	servicetest.Eventually(t, 20*time.Second, func() bool {
		code, _ := getHealth(t, base+"/readyz")
		return code == http.StatusOK
	}, logs.String)
	code, h = getHealth(t, base+"/readyz")
	require.Equal(t, http.StatusOK, code)
	require.True(t, h.Ready && h.Writer, "%+v", h)
	require.Empty(t, h.Reason)

	require.Contains(t, page(t, base+"/"), "GET /readyz")
}

// A replica that reaches no NATS node is alive but not ready: /readyz
// answers 503 with the reason.
func TestServeHTTPReadyzIs503UntilTheReplicaServes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	nowhere := ln.Addr().String()
	require.NoError(t, ln.Close()) // a port where no NATS server answers
	logs, _ := httpServe(t, handlers.ServeConfig{HTTP: "127.0.0.1:0", AcceptUnsyncedCluster: true,
		External: handlers.ExternalNATS{URL: "nats://" + nowhere}})
	base := baseURL(t, logs)
	code, h := getHealth(t, base+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code, "%+v", h)
	require.False(t, h.Ready)
	require.NotEmpty(t, h.Reason)
	code, _ = getHealth(t, base+"/healthz")
	require.Equal(t, http.StatusOK, code)
}

// An --http address the operator gave that cannot be bound stops the
// start, naming the flag; the default one taken (a second replica on the
// same machine) is a warning, and the replica serves without HTTP.
func TestServeHTTPAddressTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	taken := ln.Addr().String()

	_, done := httpServe(t, handlers.ServeConfig{HTTP: taken})
	select {
	case err := <-done:
		require.ErrorIs(t, err, handlers.ErrInvalidConfig)
		require.ErrorContains(t, err, "--http "+taken)
	case <-time.After(20 * time.Second):
		t.Fatal("Serve started on a taken --http address")
	}

	logs, done := httpServe(t, handlers.ServeConfig{HTTP: taken, HTTPIsDefault: true})
	servicetest.Eventually(t, 20*time.Second, func() bool { return regexp.MustCompile(`msg="dwr ready"`).MatchString(logs.String()) }, logs.String)
	require.Regexp(t, fmt.Sprintf(`level=WARN msg=.*default --http address is taken.*%s`, regexp.QuoteMeta(taken)), logs.String())
	require.NotRegexp(t, consoleURL, logs.String())
	select {
	case err := <-done:
		t.Fatalf("Serve stopped: %v", err)
	default:
	}
}

// dwr serve's HTTP server answers GET /metrics with the service's metrics
// (its own registry, with the Go and process collectors) once it runs, and
// lists it at /; with NoMetrics it has no /metrics.
func TestServeHTTPServesMetrics(t *testing.T) {
	logs, _ := httpServe(t, handlers.ServeConfig{HTTP: "127.0.0.1:0"})
	base := baseURL(t, logs)
	servicetest.Eventually(t, 20*time.Second, func() bool {
		code, _ := getHealth(t, base+"/readyz")
		return code == http.StatusOK
	}, logs.String)
	m := servicetest.Scrape(t, base+"/metrics")
	writer, ok := m.Value("dwr_writer")
	require.True(t, ok)
	require.Equal(t, 1.0, writer)
	appends, _ := m.Value("dwr_log_appends_total")
	require.GreaterOrEqual(t, appends, 1.0, "the epoch record, and the default workspace")
	_, ok = m.Value("process_resident_memory_bytes")
	require.True(t, ok)
	require.Contains(t, page(t, base+"/"), "GET /metrics")

	logs, _ = httpServe(t, handlers.ServeConfig{HTTP: "127.0.0.1:0", NoMetrics: true})
	base = baseURL(t, logs)
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}
