package endpoints_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/handlers/embedded"
	"github.com/dwr-run/dwr/handlers/endpoints"
	"github.com/dwr-run/dwr/handlers/servicetest"
)

// The requests an endpoint holds received and not yet handed to its
// handler are its backlog; past PendingLimit the newest are dropped, so a
// sender faster than the handler cannot grow the process without bound.
func TestBacklogIsBoundedByThePendingLimit(t *testing.T) {
	srv, err := embedded.Start(embedded.Config{DataDir: t.TempDir()})
	require.NoError(t, err)
	defer srv.Shutdown()
	dropped := make(chan struct{}, 1)
	nc, err := srv.Connect(nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrSlowConsumer) {
			select {
			case dropped <- struct{}{}:
			default:
			}
		}
	}))
	require.NoError(t, err)
	defer nc.Close()
	svc, err := endpoints.New(nc, endpoints.Config{Name: "test", Version: "1.0.0", PendingLimit: 4})
	require.NoError(t, err)
	defer func() { _ = svc.Stop() }()
	gate, taken := make(chan struct{}), make(chan struct{}, 16)
	var open sync.Once
	release := func() { open.Do(func() { close(gate) }) }
	defer release() // before Stop, which waits for the handler: a failed check does not hang the test
	require.NoError(t, svc.Add("echo", "test.echo", func(req micro.Request) {
		taken <- struct{}{}
		<-gate
		_ = req.Respond(req.Data())
	}))
	require.NoError(t, nc.Flush()) // the endpoint's subscription stands at the server before anything is sent
	require.Zero(t, svc.Backlog())

	client, err := srv.Connect()
	require.NoError(t, err)
	defer client.Close()
	for range 10 {
		require.NoError(t, client.PublishRequest("test.echo", client.NewRespInbox(), []byte("x")))
	}
	require.NoError(t, client.Flush())
	took := func() {
		t.Helper()
		select {
		case <-taken:
		case <-time.After(10 * time.Second):
			t.Fatal("no request reached the handler")
		}
	}
	took() // the first is in the handler, held
	select {
	case <-dropped:
	case <-time.After(10 * time.Second):
		t.Fatal("nothing was dropped past the pending limit")
	}
	require.Equal(t, 4, svc.Backlog(), "the one in the handler (nats.go counts it until the next), and three waiting")
	release()
	for range 3 {
		took()
	}
	servicetest.Eventually(t, 10*time.Second, func() bool { return svc.Backlog() == 0 })
}
