package handlers

import (
	"encoding/json"
	"sync"

	"github.com/nats-io/nats.go/micro"
)

// HeaderRequestInfo is the header nats-server attaches to a request that
// crossed a service import marked "share": JSON naming the account and the
// user that the server authenticated. A client cannot forge it: the server
// replaces any value a client sent.
const HeaderRequestInfo = "Nats-Request-Info"

// Caller is who sent a request, as the NATS server authenticated it.
type Caller struct {
	// Account is the NATS account the request came from.
	Account string `json:"acc"`
	// User is the authenticated user: its name, or for an nkey user its
	// public key.
	User string `json:"user"`
}

// maxRequestInfoBytes bounds the header before it is decoded.
const maxRequestInfoBytes = 4 << 10

// callerOf returns the server-stamped identity of a request, and false when
// the request carries none (it did not cross a shared service import).
func callerOf(h micro.Headers) (Caller, bool) {
	v := h.Get(HeaderRequestInfo)
	if v == "" || len(v) > maxRequestInfoBytes {
		return Caller{}, false
	}
	if c, ok := requestInfos.get(v); ok {
		return c, c.Account != ""
	}
	var c Caller
	if err := json.Unmarshal([]byte(v), &c); err != nil || c.Account == "" {
		c = Caller{}
	}
	requestInfos.put(v, c)
	return c, c.Account != ""
}

// requestInfos remembers the callers of the request infos seen last. A
// connection's requests carry the same info (the server stamps its
// account, user, connection and round trip) until its round trip is
// measured again, and decoding the ~400 bytes of JSON cost more than the
// rest of admitting a request. What a header says depends on nothing else,
// so a remembered answer is the decoded one.
var requestInfos = &callerCache{m: map[string]Caller{}}

// maxCallersKept bounds requestInfos; when full it starts again.
const maxCallersKept = 4096

type callerCache struct {
	mu sync.Mutex
	m  map[string]Caller
}

func (c *callerCache) get(info string) (Caller, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[info]
	return v, ok
}

func (c *callerCache) put(info string, v Caller) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxCallersKept {
		clear(c.m)
	}
	c.m[info] = v
}

// sender is a request's identity, decoded once when the request arrives:
// the caller the server stamped on it, if any.
type sender struct {
	Caller
	known bool // the request carried a server-stamped identity
}

// senderOf decodes the identity of a request with headers h.
func senderOf(h micro.Headers) sender {
	c, ok := callerOf(h)
	return sender{Caller: c, known: ok}
}

// key names the sender for the per-caller limit: its account and user, or
// "" — one caller — for every request without an identity.
func (s sender) key() string {
	if !s.known {
		return ""
	}
	return s.Account + "/" + s.User
}
