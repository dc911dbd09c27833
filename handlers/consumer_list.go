package handlers

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// consumerLists batches the listings of the work stream's consumers that
// queue.list asks for: each waits for the listing under way to end, then
// shares the next one with every request that came meanwhile — a listing
// that starts after it came, so it sees every consumer made before it. One
// listing runs at a time, however many queue.list requests come: each
// listing is a few requests in JetStream's info queue, which the whole
// server shares (the service's own reads wait in it too), and every
// queue.list made its own.
type consumerLists struct {
	mu      sync.Mutex
	next    *consumerListing // shared by the requests that came since the listing under way began
	running bool
	onList  atomic.Pointer[func()] // a test's hook, called as each listing begins
	waiting atomic.Int64           // the requests waiting for a listing
}

// consumerListing is one listing and its outcome, once done is closed.
type consumerListing struct {
	done  chan struct{}
	infos []*jetstream.ConsumerInfo
	err   error
}

// list returns the consumers of stream on js, as a listing that began
// after it was called reads them.
func (l *consumerLists) list(ctx context.Context, js jetstream.JetStream, stream string) ([]*jetstream.ConsumerInfo, error) {
	l.mu.Lock()
	if l.next == nil {
		l.next = &consumerListing{done: make(chan struct{})}
	}
	mine := l.next
	if !l.running {
		l.running = true
		go l.run(js, stream)
	}
	l.mu.Unlock()
	l.waiting.Add(1)
	defer l.waiting.Add(-1)
	select {
	case <-mine.done:
		return mine.infos, mine.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// run makes the listings asked for, one after the other, until none is.
func (l *consumerLists) run(js jetstream.JetStream, stream string) {
	for {
		l.mu.Lock()
		cur := l.next
		l.next = nil
		if cur == nil {
			l.running = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		if f := l.onList.Load(); f != nil {
			(*f)()
		}
		cur.infos, cur.err = listConsumers(js, stream)
		close(cur.done)
	}
}

// listConsumers reads the consumers of stream on js.
func listConsumers(js jetstream.JetStream, stream string) ([]*jetstream.ConsumerInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	var out []*jetstream.ConsumerInfo
	lister := s.ListConsumers(ctx)
	for info := range lister.Info() {
		out = append(out, info)
	}
	return out, lister.Err()
}
