package main

import (
	"context"
	"net/http"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/handlers/servicetest"
)

var httpURL = regexp.MustCompile(`console and metrics on (http://[^/ "]+)/`)

// serveHTTP runs `dwr serve` with args on a fresh data directory, NATS and
// HTTP on free loopback ports, until the test ends, and returns the HTTP
// server's base URL once it logged it.
func serveHTTP(t *testing.T, args ...string) string {
	t.Helper()
	logs, data := &servicetest.Output{}, filepath.Join(t.TempDir(), "data") // removed after serve stopped
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- MainContext(ctx, append([]string{"serve", "--data", data, "--listen", "127.0.0.1:0",
			"--http", "127.0.0.1:0"}, args...), &servicetest.Output{}, logs)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("dwr serve did not stop")
		}
	})
	servicetest.Eventually(t, 30*time.Second, func() bool { return httpURL.MatchString(logs.String()) }, logs.String)
	base := httpURL.FindStringSubmatch(logs.String())[1]
	servicetest.Eventually(t, 30*time.Second, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, logs.String)
	return base
}

// dwr serve serves its metrics on GET /metrics of --http by default, and
// none with --metrics=false.
func TestServeServesMetrics(t *testing.T) {
	m := servicetest.Scrape(t, serveHTTP(t)+"/metrics")
	writer, ok := m.Value("dwr_writer")
	require.True(t, ok)
	require.Equal(t, 1.0, writer)
	appends, _ := m.Value("dwr_log_appends_total")
	require.GreaterOrEqual(t, appends, 1.0)
	_, ok = m.Value("go_goroutines")
	require.True(t, ok)

	resp, err := http.Get(serveHTTP(t, "--metrics=false") + "/metrics")
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}
