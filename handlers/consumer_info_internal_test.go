package handlers

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// The service reads a consumer's info from JetStream at most once at a time
// and reuses it for consumerInfoFresh, however many executors ask: so that
// no flood of info requests reaches JetStream's API queue. What JetStream
// answers with an error (a consumer not found) is passed on, not reused; a
// consumer the service changed is read again at once.
func TestConsumerInfoIsReadOnceAtATime(t *testing.T) {
	js := startJetStream(t)
	ctx := t.Context()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "DWR_WORK", Subjects: []string{"dwr.work.>"}})
	require.NoError(t, err)
	_, err = js.CreateConsumer(ctx, "DWR_WORK", jetstream.ConsumerConfig{Durable: "c1", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 42 * time.Second})
	require.NoError(t, err)
	nc := js.Conn()
	var asked sync.Map // consumer -> *atomic.Int64: the info requests JetStream got
	sub, err := nc.Subscribe("$JS.API.CONSUMER.INFO.DWR_WORK.*", func(m *nats.Msg) {
		n, _ := asked.LoadOrStore(m.Subject[len("$JS.API.CONSUMER.INFO.DWR_WORK."):], new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	load := func(consumer string) int64 {
		n, ok := asked.Load(consumer)
		if !ok {
			return 0
		}
		return n.(*atomic.Int64).Load()
	}
	// count returns the requests for consumer so far: once a marker sent
	// after them on the same connection has been seen, every one has.
	var markers int64
	count := func(consumer string) int64 {
		markers++
		require.NoError(t, nc.Publish("$JS.API.CONSUMER.INFO.DWR_WORK.marker", nil))
		require.Eventually(t, func() bool { return load("marker") == markers }, 5*time.Second, time.Millisecond)
		return load(consumer)
	}
	c := newConsumerInfos(nc)
	var mu sync.Mutex
	now := time.Now()
	c.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	type reply struct {
		Type   string                   `json:"type"`
		Config jetstream.ConsumerConfig `json:"config"`
		Error  *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	get := func(consumer string) reply {
		var r reply
		require.NoError(t, json.Unmarshal(c.get(context.Background(), "DWR_WORK", consumer), &r))
		return r
	}

	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			r := get("c1")
			if r.Error != nil || r.Config.AckWait != 42*time.Second || r.Type != jsConsumerInfoType {
				t.Errorf("JetStream's info of the consumer: %+v", r)
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 1, count("c1"), "64 callers at once: one read")

	for range 2 {
		r := get("missing")
		require.NotNil(t, r.Error, "JetStream's error is passed on")
		require.Equal(t, 404, r.Error.Code)
	}
	require.EqualValues(t, 2, count("missing"), "an error is not reused")

	c.forget("DWR_WORK", "c1", nil) // the service changed it
	get("c1")
	require.EqualValues(t, 2, count("c1"), "a consumer the service changed is read again")
	get("c1")
	require.EqualValues(t, 2, count("c1"))
	mu.Lock()
	now = now.Add(consumerInfoFresh)
	mu.Unlock()
	get("c1")
	require.EqualValues(t, 3, count("c1"), "read again once it is no longer fresh")

	// The service's own refusals read as JetStream's errors do.
	var refused reply
	require.NoError(t, json.Unmarshal(consumerInfoError(503, "retry"), &refused))
	require.Equal(t, jsConsumerInfoType, refused.Type)
	require.Equal(t, 503, refused.Error.Code)
	require.NoError(t, sub.Unsubscribe())
}
