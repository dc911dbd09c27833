package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/schemas"
)

// session is a signed-in person: their connection as their identity, and
// the key that connection authenticates with (in memory only, for its
// reconnections; wiped at sign-out).
type session struct {
	id        string
	cl        *client.Client
	kp        nkeys.KeyPair
	workspace string
	publicKey string
	about     string // the credential file's own description of whose it is
	last      atomic.Int64
	streams   atomic.Int32
	ctx       context.Context
	cancel    context.CancelFunc
	once      sync.Once
}

func (s *session) close() {
	s.once.Do(func() {
		s.cancel()
		s.cl.Close()
		s.kp.Wipe()
	})
}

// signInRequest is the body of POST /api/signin: the credential file's
// text and the workspace to work in.
type signInRequest struct {
	Workspace   string `json:"workspace"`
	Credentials string `json:"credentials"`
}

// me is what the console shows of the signed-in identity.
type me struct {
	Workspace string `json:"workspace"`
	PublicKey string `json:"public_key"`
	About     string `json:"about,omitempty"`
}

func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	var req signInRequest
	if !readJSON(w, r, &req) {
		return
	}
	if req.Workspace == "" {
		req.Workspace = client.DefaultWorkspace
	}
	if !validName(req.Workspace) {
		writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("/workspace: %q is not a workspace name (lower-case letters, digits, '-' and '_')", req.Workspace))
		return
	}
	kp, err := nkeys.ParseDecoratedUserNKey([]byte(req.Credentials))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid", "/credentials: not a dwr credential file (a user nkey seed, as dwr users add --out or dwr-data/admin.creds): "+err.Error())
		return
	}
	pub, err := kp.PublicKey()
	if err != nil {
		kp.Wipe()
		writeError(w, http.StatusBadRequest, "invalid", "/credentials: "+err.Error())
		return
	}
	id, err := newID()
	if err != nil {
		kp.Wipe()
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	opts := append([]nats.Option{}, c.cfg.NATSOptions...)
	opts = append(opts, nats.Nkey(pub, kp.Sign), nats.CustomInboxPrefix(schemas.InboxPrefix(pub)), nats.ReconnectWait(time.Second))
	cl, err := client.Connect(c.cfg.NATSURL, client.Workspace(req.Workspace), client.Prefix(c.cfg.Prefix),
		client.Name("dwr-console"), client.NATSOptions(opts...))
	if err != nil {
		kp.Wipe()
		// Refused, the embedded server closes an in-process connection
		// without a word.
		if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, io.ErrClosedPipe) {
			writeError(w, http.StatusUnauthorized, "unauthorized", "the server refused this credential (an identity unknown in this dwr, or revoked)")
			return
		}
		writeError(w, http.StatusBadGateway, "unavailable", "cannot connect to NATS: "+err.Error())
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &session{id: id, cl: cl, kp: kp, workspace: req.Workspace, publicKey: pub, about: aboutOf(req.Credentials), ctx: ctx, cancel: cancel}
	s.last.Store(c.cfg.Now().UnixNano())
	if err := c.add(s); err != nil {
		s.close()
		writeError(w, http.StatusServiceUnavailable, "unavailable", err.Error())
		return
	}
	c.end(r) // a session this browser held before
	// Secure over TLS only: on the default http://127.0.0.1 a Secure cookie
	// would never be sent back.
	ck := &http.Cookie{Name: CookieName, Value: id, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil} //nolint:gosec // G124: Secure over TLS only, as said
	http.SetCookie(w, ck)
	writeJSON(w, http.StatusOK, me{Workspace: s.workspace, PublicKey: pub, About: s.about})
}

// add keeps s, first dropping the sessions idle too long; it refuses when
// MaxSessions are held.
func (c *Console) add(s *session) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errClosed
	}
	c.sweepLocked()
	if len(c.sessions) >= c.cfg.MaxSessions {
		return fmt.Errorf("the console holds %d sessions, its bound: sign out elsewhere, or wait for idle ones to expire (%s)", len(c.sessions), c.cfg.IdleTimeout)
	}
	c.sessions[s.id] = s
	return nil
}

// sweepLocked ends the sessions idle longer than IdleTimeout (and with no
// live stream).
func (c *Console) sweepLocked() {
	cutoff := c.cfg.Now().Add(-c.cfg.IdleTimeout).UnixNano()
	for id, s := range c.sessions {
		if s.last.Load() < cutoff && s.streams.Load() == 0 {
			delete(c.sessions, id)
			go s.close()
		}
	}
}

// lookup returns the request's live session, or nil.
func (c *Console) lookup(r *http.Request) *session {
	ck, err := r.Cookie(CookieName)
	if err != nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweepLocked()
	s := c.sessions[ck.Value]
	if s != nil {
		s.last.Store(c.cfg.Now().UnixNano())
	}
	return s
}

// end ends the request's session, if it has one: its connection and its
// streams are closed.
func (c *Console) end(r *http.Request) {
	ck, err := r.Cookie(CookieName)
	if err != nil {
		return
	}
	c.mu.Lock()
	s := c.sessions[ck.Value]
	delete(c.sessions, ck.Value)
	c.mu.Unlock()
	if s != nil {
		s.close()
	}
}

func (c *Console) signOut(w http.ResponseWriter, r *http.Request) {
	c.end(r)
	gone := &http.Cookie{Name: CookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil} //nolint:gosec // G124: it deletes the cookie
	http.SetCookie(w, gone)
	w.WriteHeader(http.StatusNoContent)
}

// withSession runs h with the request's session, or answers 401.
func (c *Console) withSession(h func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		s := c.lookup(r)
		if s == nil {
			writeError(w, http.StatusUnauthorized, "unauthorized", "not signed in (or the session expired): sign in with your credential file")
			return
		}
		h(w, r, s)
	}
}

func (c *Console) me(w http.ResponseWriter, _ *http.Request, s *session) {
	writeJSON(w, http.StatusOK, me{Workspace: s.workspace, PublicKey: s.publicKey, About: s.about})
}

// aboutOf returns the description a credential file gives of itself (its
// "# dwr credential: " line), shown to its holder; it proves nothing.
func aboutOf(creds string) string {
	for line := range strings.Lines(creds) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "# dwr credential: "); ok {
			if len(v) > 200 {
				v = v[:200]
			}
			return v
		}
	}
	return ""
}

// validName reports whether s is a workspace name as the service takes it
// (domain.ValidName): lower-case letters and digits, then also '-' and
// '_', at most 63.
func validName(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch ch := s[i]; {
		case ch >= 'a' && ch <= 'z', ch >= '0' && ch <= '9':
		case (ch == '-' || ch == '_') && i > 0:
		default:
			return false
		}
	}
	return true
}

// validToken reports whether s can stand as one token of a subject (an id
// the console subscribes by): letters, digits, '-' and '_', at most 128.
func validToken(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !nameRune(r) && r != '_' {
			return false
		}
	}
	return true
}

// nameRune reports whether r is an ASCII letter, a digit or '-'.
func nameRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-'
}
