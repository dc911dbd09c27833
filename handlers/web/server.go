package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"
)

// DefaultAddr is the address `dwr serve` serves HTTP on unless told
// otherwise: loopback only, so that nothing is exposed by default.
const DefaultAddr = "127.0.0.1:7480"

// Bounds of the server: a slow or hostile client cannot hold a connection
// open with a trickle of headers, nor make it read a large body.
const (
	// ReadHeaderTimeout bounds the time to read a request's headers.
	ReadHeaderTimeout = 5 * time.Second
	// ReadTimeout bounds the time to read a whole request.
	ReadTimeout = 30 * time.Second
	// IdleTimeout closes keep-alive connections idle this long.
	IdleTimeout = 2 * time.Minute
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes = 16 << 10
	// MaxBodyBytes bounds a request's body: reading past it fails.
	MaxBodyBytes = 1 << 20
)

// ErrBind is what New returns (wrapped) when the address cannot be bound;
// errors.Is(err, ErrBind) tells it from a bad configuration.
var ErrBind = errors.New("web: cannot listen")

// Config is what the server serves, and where.
type Config struct {
	// Addr is the host:port to listen on (port 0: any free one). Required.
	Addr string
	// Flag names the setting Addr came from in errors ("--http").
	Flag string
	// Healthz answers GET /healthz: whether the process is alive. Required.
	Healthz http.Handler
	// Readyz answers GET /readyz: whether the replica serves. Required.
	Readyz http.Handler
	// Metrics, when set, answers GET /metrics in Prometheus's text format.
	Metrics http.Handler
	// Console, when set, is mounted at / (every path the others do not
	// take); without it, / answers a small plain page listing the
	// endpoints.
	Console http.Handler
	// Logger receives the server's errors. Default: discarded.
	Logger *slog.Logger
}

// Server is the HTTP server on its listener. Serve runs it; Close stops it.
type Server struct {
	cfg Config
	ln  net.Listener
	srv *http.Server
}

// New checks cfg and binds its address. It returns an error wrapping ErrBind
// when the address cannot be listened on (taken, or not this host's), and
// another error naming the field when cfg is incomplete.
func New(cfg Config) (*Server, error) {
	if cfg.Flag == "" {
		cfg.Flag = "Addr"
	}
	var missing []string
	if cfg.Addr == "" {
		missing = append(missing, cfg.Flag)
	}
	if cfg.Healthz == nil {
		missing = append(missing, "Healthz")
	}
	if cfg.Readyz == nil {
		missing = append(missing, "Readyz")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("web: missing %s", strings.Join(missing, ", "))
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if _, _, err := net.SplitHostPort(cfg.Addr); err != nil {
		return nil, fmt.Errorf("web: %s %q: want host:port (e.g. %s): %v", cfg.Flag, cfg.Addr, DefaultAddr, err)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("%w on %s %s: %w", ErrBind, cfg.Flag, cfg.Addr, err)
	}
	s := &Server{cfg: cfg, ln: ln}
	s.srv = &http.Server{
		Handler:           http.MaxBytesHandler(s.mux(), MaxBodyBytes),
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		// No WriteTimeout: the console streams live task states (server-sent
		// events) on long-lived responses; a stalled reader is cut by TCP.
		IdleTimeout:    IdleTimeout,
		MaxHeaderBytes: MaxHeaderBytes,
		ErrorLog:       slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug),
	}
	return s, nil
}

// mux routes the endpoints; the console takes every other path.
func (s *Server) mux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", s.cfg.Healthz)
	mux.Handle("GET /readyz", s.cfg.Readyz)
	if s.cfg.Metrics != nil {
		mux.Handle("GET /metrics", s.cfg.Metrics)
	}
	if s.cfg.Console != nil {
		mux.Handle("/", s.cfg.Console)
	} else {
		mux.HandleFunc("GET /{$}", s.index)
	}
	return mux
}

// index is the plain page at / when no console is mounted.
func (s *Server) index(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	lines := []string{"dwr", "", "GET /healthz   200 while the process is alive",
		"GET /readyz    200 when this replica serves, 503 with the reason when not"}
	if s.cfg.Metrics != nil {
		lines = append(lines, "GET /metrics   Prometheus metrics (counts and states; never payloads, ids or member names)")
	}
	fmt.Fprintln(w, strings.Join(lines, "\n"))
}

// Addr returns the address the server listens on (with the port chosen
// when Config.Addr asked for port 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL returns the server's base URL, e.g. http://127.0.0.1:7480/.
func (s *Server) URL() string { return "http://" + s.Addr() + "/" }

// Serve serves requests until Close or Shutdown; it returns nil then, or
// the listener's error.
func (s *Server) Serve() error {
	if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("web: %w", err)
	}
	return nil
}

// Shutdown stops taking requests and waits for those in flight until ctx
// ends; then it closes the rest (the console's streams) at once. It
// returns ctx's error when it had to.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	return err
}

// Close closes the listener and every connection at once. Before Serve it
// releases the listener.
func (s *Server) Close() error {
	err := s.srv.Close()
	if cerr := s.ln.Close(); err == nil && cerr != nil && !errors.Is(cerr, net.ErrClosed) {
		err = cerr
	}
	return err
}
