package handlers

import (
	"bytes"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	fastjson "github.com/go-json-experiment/json/v1"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/handlers/embedded"
	"github.com/dwr-run/dwr/schemas"
)

// benchFeed starts an embedded server, closed when the benchmark ends, and
// returns a feed on it (prefix dwr, unbounded) with its connection.
func benchFeed(b *testing.B) (*feed, *nats.Conn, jetstream.JetStream) {
	srv, err := embedded.Start(embedded.Config{DataDir: b.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	require.NoError(b, err)
	b.Cleanup(srv.Shutdown)
	nc, err := srv.Connect()
	require.NoError(b, err)
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(b, err)
	f, err := newFeed(b.Context(), js, Config{Prefix: "dwr", FeedMaxBytes: -1}, slog.New(slog.DiscardHandler))
	require.NoError(b, err)
	return f, nc, js
}

// BenchmarkFeedMemory measures what the event feed's stream costs the
// service's heap for each event it holds: JetStream keeps an index entry for
// every distinct subject of a stream, and each feed event's subject names
// its aggregate (dwr.ev.<ws>.<aggregate>.<id>.<event>). One op is one event
// of a task of its own, as a feed publishes them; it reports the heap in use
// after a collection, per event held (heap-B/event).
func BenchmarkFeedMemory(b *testing.B) {
	f, nc, _ := benchFeed(b)
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
	for i := range b.N {
		c.Events[0] = eventstore.Event{Type: "task.created", Workspace: "default", AggregateType: "task", AggregateID: ulid.Make().String(), Raw: raw}
		f.publish(c, uint64(i+1)) // a record of its own: publish skips a sequence it sent
	}
	require.NoError(b, nc.Flush())
	b.StopTimer()
	require.Eventually(b, func() bool {
		info, err := f.stream.Info(b.Context())
		return err == nil && info.State.Msgs == uint64(b.N)
	}, time.Minute, 10*time.Millisecond)
	b.ReportMetric(float64(int64(inUse())-int64(before))/float64(b.N), "heap-B/event")
}

// BenchmarkFeedPageScan measures the most a feed query's page costs the
// service: a filter that names one aggregate, over a feed that holds
// feedScanLimit events of that aggregate kind and none of it, read to the
// scan's limit; and, beside it, a page of 1,000 events that all match. One
// op is one page.
func BenchmarkFeedPageScan(b *testing.B) {
	f, nc, js := benchFeed(b)
	n := feedScanLimit
	c := &eventstore.Commit{Events: make([]eventstore.Event, 1)}
	for i := range n {
		e := eventstore.Event{Type: "task.created", Workspace: "default", AggregateType: "task", AggregateID: ulid.Make().String()}
		raw, err := fastjson.Marshal(&e)
		require.NoError(b, err)
		e.Raw = append(raw[:len(raw)-1:len(raw)-1], []byte(`,"data":{"pad":"`+strings.Repeat("x", 300)+`"}}`)...)
		c.Events[0] = e
		f.publish(c, uint64(i+1))
	}
	require.NoError(b, nc.Flush())
	require.Eventually(b, func() bool {
		info, err := f.stream.Info(b.Context())
		return err == nil && info.State.Msgs == uint64(n)
	}, time.Minute, 10*time.Millisecond)
	s := &Service{cfg: Config{Prefix: "dwr"}, js: js}
	b.Run("one aggregate", func(b *testing.B) {
		q := schemas.Query{Filter: "task." + ulid.Make().String() + ".>"}
		for range b.N {
			res, next, err := s.feedPage("default", q, newPage("event", "", 100, 1<<20))
			require.NoError(b, err)
			require.Equal(b, "[]", string(res))
			require.Empty(b, next, "the whole feed was read")
		}
	})
	// For comparison: a page of 1,000 events that all match.
	b.Run("every event, 1000 a page", func(b *testing.B) {
		q := schemas.Query{Filter: ">"}
		for range b.N {
			_, next, err := s.feedPage("default", q, newPage("event", "", 1000, 1<<20))
			require.NoError(b, err)
			require.NotEmpty(b, next)
		}
	})
	// A watcher's catch-up: the ten events after a position, as a client
	// reconnecting asks for them; what a small page costs besides its
	// events.
	b.Run("ten events from the middle", func(b *testing.B) {
		q := schemas.Query{Filter: ">", After: strconv.Itoa(n / 2)}
		for range b.N {
			_, next, err := s.feedPage("default", q, newPage("event", "", 10, 1<<20))
			require.NoError(b, err)
			require.NotEmpty(b, next)
		}
	})
	b.Run("ten events after a position", func(b *testing.B) {
		q := schemas.Query{Filter: ">", After: strconv.Itoa(n - 20)}
		for range b.N {
			_, next, err := s.feedPage("default", q, newPage("event", "", 10, 1<<20))
			require.NoError(b, err)
			require.NotEmpty(b, next)
		}
	})
}
