package console

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/schemas"
)

// Signing in takes two requests, so that the credential's seed never
// leaves the browser: the page reads the credential file, sends its public
// key (POST /api/signin); the console starts a NATS connection as that
// identity and answers the nonce the NATS server asks it to sign; the page
// signs the nonce with the seed (WebCrypto Ed25519) and sends the signature
// (POST /api/signin/{challenge}); the console hands it to the server, which
// lets the connection in or refuses it.

// Bounds of sign-ins in progress.
const (
	// MaxPendingSignIns bounds the sign-ins waiting for their signature.
	MaxPendingSignIns = 16
	// MaxPendingSignInsPerAddress bounds those of one remote address, so
	// that one client that never signs cannot hold every slot (each for
	// up to twice SignInWait) and keep everyone else from signing in.
	MaxPendingSignInsPerAddress = 4
	// SignInWait bounds how long a sign-in waits for the NATS server's
	// nonce, and then for the page's signature (the server itself gives a
	// connection 2 s to authenticate).
	SignInWait = 5 * time.Second
)

// signInStart is the body of POST /api/signin.
type signInStart struct {
	Workspace string `json:"workspace"`
	PublicKey string `json:"public_key"`
	// About is the credential file's own description of whose it is, shown
	// back to its holder.
	About string `json:"about,omitempty"`
}

// signInChallenge answers it: the nonce to sign, standard base64, and the
// challenge to send the signature to.
type signInChallenge struct {
	Challenge string `json:"challenge"`
	Nonce     string `json:"nonce"`
}

// signInProof is the body of POST /api/signin/{challenge}.
type signInProof struct {
	Signature string `json:"signature"` // standard base64 of the Ed25519 signature of the nonce
}

// pendingSignIn is a NATS connection being made for a sign-in, waiting for
// the page's signature.
type pendingSignIn struct {
	id, workspace, pub, about string
	addr                      string // the remote address (its host) the sign-in came from
	created                   time.Time
	nonce                     chan []byte
	sig                       chan []byte
	done                      chan connected
}

type connected struct {
	cl  *client.Client
	err error
}

// errNoSignature is the nonce callback's error when the page sent no
// signature in time: the connection is then not made.
var errNoSignature = errors.New("console: no signature of the nonce in time")

func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	var req signInStart
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
	if !nkeys.IsValidPublicUserKey(req.PublicKey) {
		writeError(w, http.StatusBadRequest, "invalid", "/public_key: not a NATS user public key (U and 55 more characters): pick a dwr credential file, as dwr users add --out or dwr-data/admin.creds")
		return
	}
	id, err := newID()
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	addr, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		addr = r.RemoteAddr
	}
	p := &pendingSignIn{id: id, workspace: req.Workspace, pub: req.PublicKey, about: cleanAbout(req.About), addr: addr, created: c.cfg.Now(),
		nonce: make(chan []byte, 1), sig: make(chan []byte, 1), done: make(chan connected, 1)}
	if err := c.addPending(p); err != nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", err.Error())
		return
	}
	go func() {
		defer c.dials.Done() // added by addPending
		c.dial(p)
	}()
	t := time.NewTimer(SignInWait)
	defer t.Stop()
	select {
	case n := <-p.nonce:
		writeJSON(w, http.StatusOK, signInChallenge{Challenge: id, Nonce: base64.StdEncoding.EncodeToString(n)})
	case res := <-p.done:
		c.takePending(id)
		if res.cl != nil {
			res.cl.Close()
		}
		writeError(w, http.StatusBadGateway, "unavailable", fmt.Sprintf("cannot connect to NATS: %v", res.err))
	case <-t.C:
		c.takePending(id)
		writeError(w, http.StatusGatewayTimeout, "unavailable", "the NATS server sent no nonce in time")
	}
}

// dial makes p's connection: the nonce callback hands the server's nonce
// to the page and waits for its signature.
func (c *Console) dial(p *pendingSignIn) {
	sign := func(nonce []byte) ([]byte, error) {
		select {
		case p.nonce <- nonce:
		default: // a second try: the first one's signature is all there is
		}
		t := time.NewTimer(SignInWait)
		defer t.Stop()
		select {
		case sig := <-p.sig:
			return sig, nil
		case <-t.C:
			return nil, errNoSignature
		case <-c.done: // the console closes
			return nil, errClosed
		}
	}
	opts := append([]nats.Option{}, c.cfg.NATSOptions...)
	opts = append(opts, nats.Nkey(p.pub, sign), nats.CustomInboxPrefix(schemas.InboxPrefix(p.pub)), nats.NoReconnect())
	cl, err := client.Connect(c.cfg.NATSURL, client.Workspace(p.workspace), client.Prefix(c.cfg.Prefix),
		client.Name("dwr-console"), client.NATSOptions(opts...))
	p.done <- connected{cl, err}
}

func (c *Console) signInFinish(w http.ResponseWriter, r *http.Request) {
	var req signInProof
	if !readJSON(w, r, &req) {
		return
	}
	sig, err := base64.StdEncoding.DecodeString(req.Signature)
	if err != nil || len(sig) != 64 {
		writeError(w, http.StatusBadRequest, "invalid", "/signature: want the standard base64 of a 64-byte Ed25519 signature of the nonce")
		return
	}
	p := c.takePending(r.PathValue("challenge"))
	if p == nil {
		writeError(w, http.StatusNotFound, "not_found", "no such sign-in in progress (it expired, or was finished): sign in again")
		return
	}
	p.sig <- sig
	t := time.NewTimer(RequestTimeout)
	defer t.Stop()
	var res connected
	select {
	case res = <-p.done:
	case <-t.C:
		go func() { // the connection may still be made: close it then
			if res := <-p.done; res.cl != nil {
				res.cl.Close()
			}
		}()
		writeError(w, http.StatusGatewayTimeout, "unavailable", "the NATS server did not answer the sign-in in time")
		return
	}
	if res.err != nil {
		// Refused. Over the embedded server's bare in-process pipe (not
		// dwr serve's: embedded.Server.OtherClients) a refusal comes as
		// the pipe closed, after the server's write deadline.
		if errors.Is(res.err, nats.ErrAuthorization) || errors.Is(res.err, io.ErrClosedPipe) {
			writeError(w, http.StatusUnauthorized, "unauthorized", "the server refused this credential (an identity unknown in this dwr, revoked, or a signature of another key)")
			return
		}
		writeError(w, http.StatusBadGateway, "unavailable", "cannot connect to NATS: "+res.err.Error())
		return
	}
	id, err := newID()
	if err != nil {
		res.cl.Close()
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &session{id: id, cl: res.cl, workspace: p.workspace, publicKey: p.pub, about: p.about, ctx: ctx, cancel: cancel}
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
	writeJSON(w, http.StatusOK, me{Workspace: s.workspace, PublicKey: s.publicKey, About: s.about})
}

// addPending keeps p until its signature comes, first dropping the
// sign-ins older than twice SignInWait; it refuses past MaxPendingSignIns.
func (c *Console) addPending(p *pendingSignIn) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errClosed
	}
	cutoff := c.cfg.Now().Add(-2 * SignInWait)
	for id, q := range c.pending {
		if q.created.Before(cutoff) {
			delete(c.pending, id)
			go drain(q)
		}
	}
	if len(c.pending) >= MaxPendingSignIns {
		return fmt.Errorf("%d sign-ins are in progress, the console's bound: try again in a few seconds", len(c.pending))
	}
	mine := 0
	for _, q := range c.pending {
		if q.addr == p.addr {
			mine++
		}
	}
	if mine >= MaxPendingSignInsPerAddress {
		return fmt.Errorf("%d sign-ins from your address are in progress, the bound for one address: finish one, or try again in a few seconds", mine)
	}
	c.pending[p.id] = p
	c.dials.Add(1) // under mu, so before Close waits: the caller dials
	return nil
}

// takePending removes and returns sign-in id, or nil.
func (c *Console) takePending(id string) *pendingSignIn {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pending[id]
	delete(c.pending, id)
	return p
}

// drain waits for an abandoned sign-in's connection attempt to end (it
// does, SignInWait after its nonce) and closes what it made.
func drain(p *pendingSignIn) {
	if res := <-p.done; res.cl != nil {
		res.cl.Close()
	}
}
