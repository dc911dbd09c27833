package console

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"

	"github.com/dwr-run/dwr/executors/client"
)

// session is a signed-in person: their connection as their identity,
// which the browser authenticated by signing the NATS server's nonce (the
// console never holds the key, so the connection does not reconnect: once
// it is lost, the person signs in again).
type session struct {
	id        string
	cl        *client.Client
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
	})
}

// me is what the console shows of the signed-in identity.
type me struct {
	Workspace string `json:"workspace"`
	PublicKey string `json:"public_key"`
	About     string `json:"about,omitempty"`
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
		if s.cl.Conn().IsClosed() {
			c.end(r)
			writeError(w, http.StatusUnauthorized, "unauthorized", "the session's connection to dwr was lost (a restart?): sign in again")
			return
		}
		h(w, r, s)
	}
}

func (c *Console) me(w http.ResponseWriter, _ *http.Request, s *session) {
	writeJSON(w, http.StatusOK, me{Workspace: s.workspace, PublicKey: s.publicKey, About: s.about})
}

// cleanAbout returns the description a credential file gives of itself
// (its "# dwr credential: " line, read by the page), shown to its holder: at
// most 200 printable characters. It proves nothing.
func cleanAbout(about string) string {
	var b strings.Builder
	for _, r := range about {
		if b.Len() >= 200 {
			break
		}
		if unicode.IsPrint(r) {
			b.WriteRune(r)
		}
	}
	return b.String()
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
