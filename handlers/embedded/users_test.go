package embedded

import (
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"
)

// Config.Users lets in exactly whom it names, as it says: a connection
// must sign the server's nonce with its nkey; a key it does not name, a
// forged signature and any other kind of credential are refused; a change
// is in force from the next connection, and Disconnect closes the
// connections of a user whose rights changed.
func TestUsersLetInWhomTheySay(t *testing.T) {
	key := func() (nkeys.KeyPair, string) {
		kp, err := nkeys.CreateUser()
		require.NoError(t, err)
		pub, err := kp.PublicKey()
		require.NoError(t, err)
		return kp, pub
	}
	kp, pub := key()
	other, otherPub := key()
	var mu sync.Mutex
	users := map[string]User{pub: {Account: "B", Publish: []string{"ok.>"}, Subscribe: []string{"_INBOX.>"}}}
	srv, err := Start(Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: testLogger(t),
		Accounts: "accounts { A { jetstream: enabled }, B {} }",
		Users: func(nkey string) (User, bool) {
			mu.Lock()
			defer mu.Unlock()
			u, ok := users[nkey]
			return u, ok
		}})
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	signer := func(kp nkeys.KeyPair) nats.SignatureHandler {
		return func(nonce []byte) ([]byte, error) { return kp.Sign(nonce) }
	}
	connect := func(opts ...nats.Option) (*nats.Conn, error) {
		return nats.Connect(srv.ClientURL(), append(opts, nats.Timeout(2*time.Second), nats.NoReconnect())...)
	}

	denied := make(chan error, 4)
	closed := make(chan struct{})
	nc, err := connect(nats.Nkey(pub, signer(kp)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { denied <- err }),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	require.NoError(t, err, "a named key connects")
	require.NoError(t, nc.Publish("ok.1", nil))
	require.NoError(t, nc.Publish("other", nil))
	require.NoError(t, nc.Flush())
	select {
	case err := <-denied:
		require.ErrorIs(t, err, nats.ErrPermissionViolation, "its rights are the ones given")
	case <-time.After(5 * time.Second):
		t.Fatal("a publication outside its rights was not refused")
	}

	for name, opts := range map[string][]nats.Option{
		"a key not named":         {nats.Nkey(otherPub, signer(other))},
		"a forged signature":      {nats.Nkey(pub, signer(other))},
		"no credential":           nil,
		"a user and password":     {nats.UserInfo(pub, "secret")},
		"a token":                 {nats.Token("secret")},
		"a named key as username": {nats.UserInfo(pub, "")},
	} {
		_, err := connect(opts...)
		require.ErrorIs(t, err, nats.ErrAuthorization, name)
	}

	mu.Lock()
	users[otherPub] = User{Account: "B"}
	users[""] = User{Account: "B", Name: "anonymous"}
	mu.Unlock()
	for name, opts := range map[string][]nats.Option{"a key named now": {nats.Nkey(otherPub, signer(other))}, "no credential, named now": nil} {
		c, err := connect(opts...)
		require.NoError(t, err, name)
		c.Close()
	}

	require.Equal(t, 1, srv.Disconnect(func(user string) bool { return user == pub }))
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the user's connection was not closed")
	}
}
