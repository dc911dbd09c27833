package console

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

//go:embed assets
var assets embed.FS

// Defaults of Config.
const (
	DefaultMaxSessions = 64
	DefaultIdleTimeout = 30 * time.Minute
	// MaxStreamsPerSession bounds the live streams one session holds open.
	MaxStreamsPerSession = 4
	// MaxRequestBytes bounds the body of every request the console reads
	// (a credential, a decision): checked before it is decoded.
	MaxRequestBytes = 64 << 10
	// RequestTimeout bounds one query or command sent for a request.
	RequestTimeout = 15 * time.Second
	// CookieName is the session cookie.
	CookieName = "dwr_console"
	// HeaderCSRF must be on every state-changing request (value "1"): a
	// form or a simple request from another site cannot set it.
	HeaderCSRF = "X-Dwr-Console"
)

// Config is what the console needs to reach dwr as its users.
type Config struct {
	// NATSURL is the NATS server the console dials for each session ("" with
	// an in-process option in NATSOptions, as on the embedded server).
	NATSURL string
	// NATSOptions are added to every session's connection (before the
	// user's credential): nats.InProcessServer for the embedded server.
	NATSOptions []nats.Option
	// Prefix is the first token of dwr's subjects. Default "dwr".
	Prefix string
	// AllowedHosts are host names (besides IP addresses and localhost) the
	// console answers for: a request whose Host is another name is refused,
	// so that a DNS-rebound name cannot reach it (--console-host).
	AllowedHosts []string
	// MaxSessions bounds the sessions held at once (each holds one NATS
	// connection). Default DefaultMaxSessions.
	MaxSessions int
	// IdleTimeout ends a session unused this long. Default
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
	// Logger receives what goes wrong. Default: discarded.
	Logger *slog.Logger
	// Now is the clock sessions expire by. Default time.Now.
	Now func() time.Time
}

// Console is the console's http.Handler. Close ends its sessions and their
// live streams.
type Console struct {
	cfg    Config
	mux    *http.ServeMux
	static http.Handler
	hosts  map[string]bool

	mu       sync.Mutex
	sessions map[string]*session
	pending  map[string]*pendingSignIn
	dials    sync.WaitGroup // the connection attempts of sign-ins
	closed   bool
	done     chan struct{}
}

// New returns the console for cfg. It returns an error naming a host of
// AllowedHosts that is not a host name.
func New(cfg Config) (*Console, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = "dwr"
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Console{cfg: cfg, hosts: map[string]bool{"localhost": true}, sessions: map[string]*session{}, pending: map[string]*pendingSignIn{}, done: make(chan struct{})}
	for _, h := range cfg.AllowedHosts {
		if err := CheckHost(h); err != nil {
			return nil, err
		}
		c.hosts[strings.ToLower(h)] = true
	}
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	c.static = http.FileServerFS(sub)
	c.mux = c.routes()
	return c, nil
}

// CheckHost returns an error unless h is a host name the console may be
// told to answer for (letters, digits, '-' and '.', no port).
func CheckHost(h string) error {
	ok := h != "" && len(h) <= 253
	for _, r := range h {
		if !nameRune(r) && r != '.' {
			ok = false
		}
	}
	if !ok {
		return fmt.Errorf("console: --console-host %q: want a host name such as dwr.example.internal (no scheme, no port)", h)
	}
	return nil
}

func (c *Console) routes() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", c.index)
	m.Handle("GET /assets/", http.StripPrefix("/assets", c.static))
	m.HandleFunc("POST /api/signin", c.signIn)
	m.HandleFunc("POST /api/signin/{challenge}", c.signInFinish)
	m.HandleFunc("POST /api/signout", c.signOut)
	m.HandleFunc("GET /api/me", c.withSession(c.me))
	m.HandleFunc("GET /api/goals", c.withSession(c.goals))
	m.HandleFunc("GET /api/goals/{id}", c.withSession(c.goal))
	m.HandleFunc("GET /api/goal-by-key/{key}", c.withSession(c.goalByKey))
	m.HandleFunc("GET /api/goals/{id}/plans", c.withSession(c.plans))
	m.HandleFunc("GET /api/goals/{id}/stream", c.withSession(c.stream))
	m.HandleFunc("POST /api/goals/{id}/cancel", c.withSession(c.cancelGoal))
	m.HandleFunc("POST /api/goals/{id}/labels", c.withSession(c.labelGoal))
	m.HandleFunc("POST /api/goals/{id}/priority", c.withSession(c.prioritizeGoal))
	m.HandleFunc("GET /api/tasks", c.withSession(c.tasks))
	m.HandleFunc("POST /api/tasks/{id}/labels", c.withSession(c.labelTask))
	m.HandleFunc("GET /api/tasks/{id}", c.withSession(c.task))
	m.HandleFunc("POST /api/tasks/{id}/cancel", c.withSession(c.cancelTask))
	m.HandleFunc("POST /api/tasks/{id}/retry", c.withSession(c.retryTask))
	m.HandleFunc("GET /api/approvals", c.withSession(c.approvals))
	m.HandleFunc("GET /api/approvals/{id}", c.withSession(c.approval))
	m.HandleFunc("POST /api/approvals/{id}/decide", c.withSession(c.decide))
	m.HandleFunc("GET /api/schedules", c.withSession(c.schedules))
	m.HandleFunc("POST /api/schedules/{name}/pause", c.withSession(c.pauseSchedule))
	m.HandleFunc("POST /api/schedules/{name}/resume", c.withSession(c.resumeSchedule))
	m.HandleFunc("GET /api/queues", c.withSession(c.queues))
	m.HandleFunc("GET /api/queues/{name}", c.withSession(c.queue))
	m.HandleFunc("GET /api/queues/{name}/tasks", c.withSession(c.queueTasks))
	m.HandleFunc("POST /api/queues/{name}/pause", c.withSession(c.pauseQueue))
	m.HandleFunc("POST /api/queues/{name}/resume", c.withSession(c.resumeQueue))
	return m
}

// ServeHTTP checks the request's host, and a state-changing request's
// origin and CSRF header, before routing it.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	if !c.hostAllowed(r.Host) {
		writeError(w, http.StatusMisdirectedRequest, "host", fmt.Sprintf("this console does not answer for host %q: open it by its address, or start dwr serve with --console-host NAME", r.Host))
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if r.Header.Get(HeaderCSRF) != "1" {
			writeError(w, http.StatusForbidden, "csrf", "a state-changing request must carry the header "+HeaderCSRF+": 1 (the console's own pages send it)")
			return
		}
		if !sameOrigin(r) {
			writeError(w, http.StatusForbidden, "csrf", fmt.Sprintf("origin %q is not this console's (%s)", r.Header.Get("Origin"), r.Host))
			return
		}
	}
	c.mux.ServeHTTP(w, r)
}

// hostAllowed reports whether host (a Host header, with or without a
// port) is an IP address, localhost, or one of the allowed names.
func (c *Console) hostAllowed(host string) bool {
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")
	if net.ParseIP(name) != nil {
		return true // a rebound name is a name, never an address
	}
	return c.hosts[strings.ToLower(name)]
}

// sameOrigin reports whether the request's Origin (or, without one, its
// Referer) names the host it was sent to.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		o = r.Header.Get("Referer")
	}
	if o == "" || o == "null" {
		return false
	}
	rest, ok := strings.CutPrefix(o, "http://")
	if !ok {
		if rest, ok = strings.CutPrefix(o, "https://"); !ok {
			return false
		}
	}
	host, _, _ := strings.Cut(rest, "/")
	return strings.EqualFold(host, r.Host)
}

func (c *Console) index(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	http.ServeFileFS(w, r, assets, "assets/index.html")
}

// Close ends every session (closing its connection and its streams); the
// console answers no request after it.
func (c *Console) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.done)
	all, pending := c.sessions, c.pending
	c.sessions, c.pending = map[string]*session{}, map[string]*pendingSignIn{}
	c.mu.Unlock()
	for _, s := range all {
		s.close()
	}
	// The sign-ins in progress end at once (their nonce callbacks see
	// done): wait for their connection attempts, and close what they made.
	c.dials.Wait()
	for _, p := range pending {
		select { // every attempt has ended; its outcome may have been taken already
		case res := <-p.done:
			if res.cl != nil {
				res.cl.Close()
			}
		default:
		}
	}
	return nil
}

// newID returns a fresh random 256-bit session id, as hex.
func newID() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// errClosed is a request's error once the console is closed.
var errClosed = errors.New("console: closed")

// requestCtx bounds the queries and commands of one request.
func requestCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), RequestTimeout)
}
