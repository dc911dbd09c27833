package handlers_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/handlers/embedded"
	"github.com/dwr-run/dwr/handlers/servicetest"
)

// onStopped runs fn with a JetStream context on the data directory of a
// stopped service, as an attacker with JetStream API access (or a fault)
// would change it.
func onStopped(t *testing.T, dir string, fn func(ctx context.Context, js jetstream.JetStream)) {
	t.Helper()
	srv, err := embedded.Start(embedded.Config{DataDir: dir, Logger: testLogger()})
	require.NoError(t, err)
	defer srv.Shutdown()
	nc, err := srv.Connect()
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fn(ctx, js)
}

// A log stream whose retention was changed (JetStream then drops the oldest
// records at once) refuses the start, naming the setting; the stream is
// left as it was found, never "fixed" by an update that would hide it.
func TestChangedLogStreamRefusesToStart(t *testing.T) {
	b := setup(t)
	for range 5 {
		b.mustCommand(t, "goal.create", map[string]any{"title": "g"})
	}
	dir := b.dir
	b.stop()
	onStopped(t, dir, func(ctx context.Context, js jetstream.JetStream) {
		s, err := js.Stream(ctx, "DWR_LOG")
		require.NoError(t, err)
		cfg := s.CachedInfo().Config
		cfg.MaxMsgs = 3
		_, err = js.UpdateStream(ctx, cfg)
		require.NoError(t, err)
	})

	_, err := servicetest.TryStart(t, dir, servicetest.Options{})
	require.ErrorIs(t, err, eventstore.ErrIntegrity)
	require.ErrorContains(t, err, "stream DWR_LOG")
	require.ErrorContains(t, err, "max_msgs is 3, want -1 (unlimited)")
	onStopped(t, dir, func(ctx context.Context, js jetstream.JetStream) {
		s, err := js.Stream(ctx, "DWR_LOG")
		require.NoError(t, err)
		require.Equal(t, int64(3), s.CachedInfo().Config.MaxMsgs, "the service did not change the stream")
	})
}
