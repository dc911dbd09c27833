package web_test

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dwr-run/dwr/handlers/web"
)

// TestMain checks for leaked goroutines, but for a connection that the
// server closes after a body past its bound: it lingers half a second to
// let the client read the answer (net/http's closeWriteAndWait).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("net/http.(*conn).closeWriteAndWait"))
}

// setup starts a server on a free loopback port with cfg's handlers (and
// trivial health handlers where cfg has none) and returns its base URL.
func setup(t *testing.T, cfg web.Config) (*web.Server, string) {
	t.Helper()
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	text := func(code int, body string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code); _, _ = io.WriteString(w, body) })
	}
	if cfg.Healthz == nil {
		cfg.Healthz = text(http.StatusOK, "alive")
	}
	if cfg.Readyz == nil {
		cfg.Readyz = text(http.StatusServiceUnavailable, "starting")
	}
	s, err := web.New(cfg)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	t.Cleanup(func() {
		require.NoError(t, s.Close())
		require.NoError(t, <-done)
	})
	return s, strings.TrimSuffix(s.URL(), "/")
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url) //nolint:gosec // the test's own loopback server
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// The endpoints answer with their handlers; without a console, / lists
// them, and any other path is not found.
func TestServerRoutesTheEndpoints(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "dwr_up 1\n") })
	_, base := setup(t, web.Config{Metrics: metrics})

	code, body := get(t, base+"/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "alive", body)
	code, body = get(t, base+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "starting", body)
	code, body = get(t, base+"/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "dwr_up 1\n", body)
	code, body = get(t, base+"/")
	require.Equal(t, http.StatusOK, code)
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		require.Contains(t, body, p)
	}
	code, _ = get(t, base+"/elsewhere")
	require.Equal(t, http.StatusNotFound, code)

	resp, err := http.Post(base+"/metrics", "text/plain", strings.NewReader("x"))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, "the endpoints are read-only")
}

// A console takes every path but the endpoints, and reads bodies only up
// to the server's bound.
func TestServerMountsTheConsoleAndBoundsBodies(t *testing.T) {
	var read int64
	var readErr error
	var path string
	console := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		read, readErr = io.Copy(io.Discard, r.Body)
		path = r.URL.Path
		_, _ = io.WriteString(w, "console")
	})
	_, base := setup(t, web.Config{Console: console})

	code, body := get(t, base+"/goals/01ABC")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "console", body)
	require.Equal(t, "/goals/01ABC", path)
	code, body = get(t, base+"/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "alive", body, "the console does not shadow the endpoints")
	code, _ = get(t, base+"/metrics")
	require.Equal(t, http.StatusOK, code, "without metrics, /metrics is the console's")

	resp, err := http.Post(base+"/approvals", "application/octet-stream", strings.NewReader(strings.Repeat("x", web.MaxBodyBytes+1)))
	require.NoError(t, err)
	resp.Body.Close()
	var tooLarge *http.MaxBytesError
	require.ErrorAs(t, readErr, &tooLarge, "a body past MaxBodyBytes is cut")
	require.Equal(t, int64(web.MaxBodyBytes), read)
}

// An address that cannot be bound is ErrBind, naming the flag it came
// from; a malformed one names the flag too.
func TestServerNamesTheFlagOfAnAddressItCannotBind(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	ok := http.NotFoundHandler()
	_, err = web.New(web.Config{Addr: ln.Addr().String(), Flag: "--http", Healthz: ok, Readyz: ok})
	require.ErrorIs(t, err, web.ErrBind)
	require.ErrorContains(t, err, "--http "+ln.Addr().String())

	_, err = web.New(web.Config{Addr: "7480", Flag: "--http", Healthz: ok, Readyz: ok})
	require.Error(t, err)
	require.NotErrorIs(t, err, web.ErrBind)
	require.ErrorContains(t, err, `--http "7480"`)

	_, err = web.New(web.Config{Addr: "127.0.0.1:0"})
	require.ErrorContains(t, err, "Healthz, Readyz")
}
