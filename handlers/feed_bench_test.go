package handlers

import (
	"bytes"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/handlers/embedded"
)

// BenchmarkFeedMemory measures what the event feed's stream costs the
// service's heap for each event it holds: JetStream keeps an index entry for
// every distinct subject of a stream, and each feed event's subject names
// its aggregate (dwr.ev.<ws>.<aggregate>.<id>.<event>). One op is one event
// of a task of its own, as a feed publishes them; it reports the heap in use
// after a collection, per event held (heap-B/event).
func BenchmarkFeedMemory(b *testing.B) {
	srv, err := embedded.Start(embedded.Config{DataDir: b.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	require.NoError(b, err)
	defer srv.Shutdown()
	nc, err := srv.Connect()
	require.NoError(b, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(b, err)
	f, err := newFeed(b.Context(), js, Config{Prefix: "dwr", FeedMaxBytes: -1}, slog.New(slog.DiscardHandler))
	require.NoError(b, err)
	raw := bytes.Repeat([]byte{'x'}, 450) // a feed event's size in chain-3
	inUse := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	before := inUse()
	b.ResetTimer()
	c := &eventstore.Commit{Events: make([]eventstore.Event, 1)}
	for range b.N {
		c.Events[0] = eventstore.Event{Type: "task.created", Workspace: "default", AggregateType: "task", AggregateID: ulid.Make().String(), Raw: raw}
		f.publish(c, 1)
	}
	require.NoError(b, nc.Flush())
	b.StopTimer()
	require.Eventually(b, func() bool {
		info, err := f.stream.Info(b.Context())
		return err == nil && info.State.Msgs == uint64(b.N)
	}, time.Minute, 10*time.Millisecond)
	b.ReportMetric(float64(int64(inUse())-int64(before))/float64(b.N), "heap-B/event")
}
