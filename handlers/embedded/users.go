package embedded

import (
	"encoding/base64"
	"math"
	"sync/atomic"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// User is how a client connection is let in (Config.Users): the account it
// joins and the subjects it may publish and subscribe to.
type User struct {
	// Account is the name of the account the connection joins, one that
	// Config.Accounts declares.
	Account string
	// Name is the user the server reports for a connection without an
	// nkey (it becomes the caller's identity in requests); a connection
	// with an nkey is reported by its key.
	Name string
	// Publish and Subscribe allow these subjects and deny the rest; both
	// nil: everything is allowed.
	Publish, Subscribe []string
}

// Users returns how a connection that proved it holds nkey (the user's
// public key; "" for a connection without one) is let in, or false to
// refuse it. It is called for every client connection, from many
// goroutines at once, and must be quick.
type Users func(nkey string) (User, bool)

// authenticator lets clients in as Config.Users says, in place of users
// written in the accounts text: a change of users is in force from the
// next connection, with no reload of the server — a reload judges every
// connection again, and cuts those still in their handshake.
type authenticator struct {
	users Users
	ns    atomic.Pointer[server.Server]
}

// Check implements server.Authentication. A connection with an nkey must
// have signed the nonce of the server's INFO with it; one with any other
// credential (user and password, token, JWT) is refused.
func (a *authenticator) Check(c server.ClientAuthentication) bool {
	ns := a.ns.Load()
	if ns == nil || c.Kind() != server.CLIENT {
		return false
	}
	o := c.GetOpts()
	if o.Username != "" || o.Password != "" || o.Token != "" || o.JWT != "" {
		return false
	}
	if o.Nkey != "" && !signed(o.Nkey, o.Sig, c.GetNonce()) {
		return false
	}
	u, ok := a.users(o.Nkey)
	if !ok {
		return false
	}
	acc, err := ns.LookupAccount(u.Account)
	if err != nil {
		return false
	}
	user := &server.User{Account: acc}
	if o.Nkey == "" {
		user.Username = u.Name
	}
	if u.Publish != nil || u.Subscribe != nil {
		user.Permissions = &server.Permissions{Publish: allowOnly(u.Publish), Subscribe: allowOnly(u.Subscribe)}
	}
	c.RegisterUser(user)
	return true
}

// allowOnly allows subjects and denies the rest (everything when there are none).
func allowOnly(subjects []string) *server.SubjectPermission {
	if len(subjects) == 0 {
		return &server.SubjectPermission{Deny: []string{">"}}
	}
	return &server.SubjectPermission{Allow: subjects}
}

// signed reports whether sig (base64, as clients send it) is nonce signed
// with the key of user nkey pub, as nats-server checks it for its own nkey
// users.
func signed(pub, sig string, nonce []byte) bool {
	if len(nonce) == 0 {
		return false
	}
	raw, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		if raw, err = base64.StdEncoding.DecodeString(sig); err != nil {
			return false
		}
	}
	if !nkeys.IsValidPublicUserKey(pub) {
		return false
	}
	kp, err := nkeys.FromPublicKey(pub)
	if err != nil {
		return false
	}
	return kp.Verify(nonce, raw) == nil
}

// Disconnect closes the client connections whose user — the nkey it
// proved, or the name it was let in as — drop reports true, and returns
// how many it closed: for a user whose rights Config.Users no longer gives
// as they were (its clients reconnect, and are judged again).
func (s *Server) Disconnect(drop func(user string) bool) int {
	var ids []uint64
	s.eachClient("", func(c *server.ConnInfo) {
		if c.AuthorizedUser != "" && drop(c.AuthorizedUser) {
			ids = append(ids, c.Cid)
		}
	})
	closed := 0
	for _, id := range ids {
		if s.ns.DisconnectClientByID(id) == nil {
			closed++
		}
	}
	return closed
}

// Holding is what one user's client connections hold of the server: how
// many, their subscriptions, and the bytes the server holds for them, not
// yet written (a connection that does not read makes them grow, up to
// max_pending each).
type Holding struct {
	Connections, Subscriptions int
	Pending                    int64
}

// Holdings returns what the client connections of account hold, by user
// (the nkey it proved, or the name it was let in as).
func (s *Server) Holdings(account string) map[string]Holding {
	held := map[string]Holding{}
	s.eachClient(account, func(c *server.ConnInfo) {
		if c.AuthorizedUser == "" {
			return
		}
		h := held[c.AuthorizedUser]
		h.Connections++
		h.Subscriptions += int(c.NumSubs)
		h.Pending += int64(c.Pending)
		held[c.AuthorizedUser] = h
	})
	return held
}

// eachClient calls f with each open client connection (of account, when
// not ""). One call lists them all: the server fills the information of
// every connection at each call whatever its page, so that listing n
// connections a page of 1,024 at a time cost n²/1,024.
func (s *Server) eachClient(account string, f func(*server.ConnInfo)) {
	cz, err := s.ns.Connz(&server.ConnzOptions{Username: true, Account: account, Limit: math.MaxInt32})
	if err != nil {
		s.logger.Error("embedded: listing the client connections", "err", err)
		return
	}
	for _, c := range cz.Conns {
		f(c)
	}
}
