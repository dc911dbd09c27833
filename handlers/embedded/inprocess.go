package embedded

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// OtherClients returns what nats.InProcessServer takes to connect in-process
// as an identity the server may refuse (the console signs people in this
// way). Over the server's bare in-process pipe a refused handshake waits
// out the server's write deadline (10 s): nats.go writes CONNECT and PING
// apart, and the server writes its refusal after the CONNECT — each write
// of a pipe waits for the other side to read, and each side waits in its
// write. Here the client's writes are queued and written in order by a
// goroutine of their own, so the client reads the refusal at once. The
// service's own connections keep the bare pipe (Connect): their handshakes
// are not refused, and their writes are the hot path.
func (s *Server) OtherClients() nats.InProcessConnProvider { return otherClients{s} }

type otherClients struct{ s *Server }

func (o otherClients) InProcessConn() (net.Conn, error) {
	c, err := o.s.ns.InProcessConn()
	if err != nil {
		return nil, err
	}
	q := &queuedWrites{Conn: c, queue: make(chan []byte, queuedWritesMax), drained: make(chan struct{})}
	go q.write()
	return q, nil
}

// queuedWritesMax is how many writes a queuedWrites holds before a write
// waits; queuedWritesDrain how long its Close waits for them to be written.
const (
	queuedWritesMax   = 16
	queuedWritesDrain = time.Second
)

// queuedWrites is a connection whose writes are queued and written in
// order by its own goroutine. A write fails once an earlier one did, or
// once the connection is closed; Close writes what is queued first (for at
// most queuedWritesDrain).
type queuedWrites struct {
	net.Conn
	queue   chan []byte
	drained chan struct{} // closed when the writer has returned
	err     atomic.Pointer[error]

	mu     sync.Mutex // guards closed, and sending on queue
	closed bool
}

func (q *queuedWrites) Write(b []byte) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return 0, net.ErrClosed
	}
	if err := q.err.Load(); err != nil {
		return 0, *err
	}
	q.queue <- append([]byte(nil), b...) // the writer drains it without q.mu
	return len(b), nil
}

// write writes what is queued until the queue is closed; after a failed
// write it drops the rest.
func (q *queuedWrites) write() {
	defer close(q.drained)
	for b := range q.queue {
		if q.err.Load() != nil {
			continue
		}
		if _, err := q.Conn.Write(b); err != nil {
			q.err.Store(&err)
		}
	}
}

func (q *queuedWrites) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	close(q.queue)
	q.mu.Unlock()
	t := time.NewTimer(queuedWritesDrain)
	defer t.Stop()
	select {
	case <-q.drained:
	case <-t.C:
	}
	return q.Conn.Close()
}
