package embedded

import (
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"
)

// An in-process connection of OtherClients that the server refuses gets
// the server's refusal (over the bare pipe, the refusal and the client's
// PING waited on each other until the server gave up and closed it: a
// closed pipe, 10 s later); one it lets in works, and what it wrote before
// Close reaches the server.
func TestOtherClientsAreRefusedInWordsAndWriteAllTheyQueued(t *testing.T) {
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	srv, err := Start(Config{DataDir: t.TempDir(), Logger: testLogger(t), Accounts: "accounts { A { jetstream: enabled }, B {} }",
		Users: func(nkey string) (User, bool) { return User{Account: "B"}, nkey == pub }})
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	connect := func(opts ...nats.Option) (*nats.Conn, error) {
		return nats.Connect("", append([]nats.Option{nats.InProcessServer(srv.OtherClients()), nats.NoReconnect()}, opts...)...)
	}
	signed := nats.Nkey(pub, func(nonce []byte) ([]byte, error) { return kp.Sign(nonce) })

	_, err = connect()
	require.ErrorIs(t, err, nats.ErrAuthorization, "no credential")
	other, err := nkeys.CreateUser()
	require.NoError(t, err)
	_, err = connect(nats.Nkey(pub, func(nonce []byte) ([]byte, error) { return other.Sign(nonce) }))
	require.ErrorIs(t, err, nats.ErrAuthorization, "a signature of another key")

	sub, err := connect(signed)
	require.NoError(t, err)
	defer sub.Close()
	got, err := sub.SubscribeSync("queued.>")
	require.NoError(t, err)
	require.NoError(t, sub.Flush())
	pub1, err := connect(signed)
	require.NoError(t, err)
	const n = 200 // more than the queue holds
	for i := range n {
		require.NoError(t, pub1.Publish("queued."+strconv.Itoa(i), []byte("x")))
	}
	pub1.Close() // flushes into the queue, which Close then writes out
	for i := range n {
		m, err := got.NextMsg(5 * time.Second)
		require.NoError(t, err, "message %d of %d", i, n)
		require.Equal(t, "queued."+strconv.Itoa(i), m.Subject, "in order")
	}
}
