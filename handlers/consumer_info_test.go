package handlers_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// An executor that floods its queue's consumer info requests stalls no one
// else. JetStream keeps the whole server's info requests in one queue and,
// once 10,000 wait, drops every one of them: one executor of one queue,
// publishing as fast as its connection took it, made other workspaces'
// executors fail to bind to their queues (a third of their binds timed
// out), the admin's queue.list fail, and the service's own reads of its
// consumers. The service now answers the client account's info requests
// itself, under each caller's limits, and asks JetStream once at a time
// per consumer: the service's own reads of JetStream are answered
// throughout the flood, and other executors bind.
func TestAFloodOfConsumerInfoStallsNoOneElse(t *testing.T) {
	b := bundleOf(servicetest.Start(t, "", servicetest.Options{Secure: true, Config: handlers.Config{WriterID: "test-writer"}}))
	servicetest.NewClient(b.st.Admin, "other").Command(t, "workspace.create", schemas.CreateWorkspace{Name: "other"})
	kp := b.st.MemberKey(t, "default", "mallory", domain.RoleExecutor, "q")
	pub, _ := kp.PublicKey()
	mallory, err := b.st.Server.Connect(nats.Name("mallory"), nats.CustomInboxPrefix(schemas.InboxPrefix(pub)),
		nats.Nkey(pub, kp.Sign), nats.NoReconnect())
	require.NoError(t, err)
	t.Cleanup(mallory.Close)
	honest := b.st.Member(t, "other", "honest", domain.RoleExecutor, "w")
	admin := servicetest.NewClient(b.st.Admin, "other")
	servicetest.NewClient(b.st.Admin, "default").Command(t, "queue.configure", schemas.ConfigureQueue{Queue: "q", LeaseMS: 30_000, MaxDeliver: 5})

	js, err := jetstream.NewWithAPIPrefix(honest, schemas.JetStreamAPIPrefix)
	require.NoError(t, err)
	bind := func() (jetstream.Consumer, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return js.Consumer(ctx, "DWR_WORK", "dwr-other-w")
	}
	// A consumer not found is not remembered: the queue configured a moment
	// later is found at once.
	_, err = bind()
	require.ErrorIs(t, err, jetstream.ErrConsumerNotFound)
	admin.Command(t, "queue.configure", schemas.ConfigureQueue{Queue: "w", LeaseMS: 45_000, MaxDeliver: 7})
	cons, err := bind()
	require.NoError(t, err)
	require.Equal(t, 45*time.Second, cons.CachedInfo().Config.AckWait, "JetStream's info of the consumer, as configured")
	require.Equal(t, 7, cons.CachedInfo().Config.MaxDeliver)

	// Mallory floods as fast as her connection takes it, for three seconds
	// or until the service benches her (her requests now reach it, under her
	// limits: it closes her connection, when she sends more in a second than
	// it takes); every other caller is answered meanwhile.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !mallory.IsClosed() {
				select {
				case <-stop:
					return
				default:
				}
				for range 500 {
					_ = mallory.PublishRequest("dwrjs.CONSUMER.INFO.DWR_WORK.dwr-default-q", "_INBOX.mallory", nil)
				}
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	start := time.Now()
	for i := 0; i < 10 || (!mallory.IsClosed() && time.Since(start) < 3*time.Second); i++ {
		// An executor binds, retrying as the SDKs do: a flood that outruns
		// what the service takes in before it benches the flooder (CI's
		// load, -race) drops requests on its way to the service, the
		// flooder's and others' alike.
		servicetest.Eventually(t, 10*time.Second, func() bool { _, err := bind(); return err == nil })
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var queues []schemas.QueueConfig
		err = admin.QueryErr(ctx, "queue.list", schemas.Query{}, &queues)
		cancel()
		require.NoError(t, err, "queue.list %d (the service reads its consumers from JetStream)", i)
		require.Len(t, queues, 1)
	}
}
