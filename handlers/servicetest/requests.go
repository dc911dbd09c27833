package servicetest

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/dwr-run/dwr/schemas"
)

// Request is one command or query a workspace was sent, as the NATS server
// routed it.
type Request struct {
	Name        string // the command's or the query's: task.succeed, task.get
	Query       bool
	Body        json.RawMessage
	Traceparent string // its traceparent header
}

// Decode decodes the request's body into v.
func (r Request) Decode(v any) error { return json.Unmarshal(r.Body, v) }

// RequestLog records the commands and queries sent to a workspace: plain
// subscriptions beside the service's own see every request (on an open
// service, or on the service's own connection of a closed one).
type RequestLog struct {
	mu  sync.Mutex
	all []Request
}

// WatchRequests records, until the test ends, the commands and queries sent
// to workspace ws of the service nc reaches (prefix dwr).
func WatchRequests(t testing.TB, nc *nats.Conn, ws string) *RequestLog {
	t.Helper()
	l := &RequestLog{}
	for _, kind := range []string{"cmd", "q"} {
		prefix := "dwr." + kind + "." + ws + "."
		sub, err := nc.Subscribe(prefix+">", func(m *nats.Msg) {
			r := Request{Name: strings.TrimPrefix(m.Subject, prefix), Query: kind == "q", Body: append(json.RawMessage(nil), m.Data...),
				Traceparent: schemas.TraceCarrier(m.Header).Get(schemas.HeaderTraceparent)}
			l.mu.Lock()
			l.all = append(l.all, r)
			l.mu.Unlock()
		})
		if err != nil {
			t.Fatalf("servicetest: watch the requests of %s: %v", ws, err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("servicetest: watch the requests of %s: %v", ws, err)
	}
	return l
}

// All returns the requests recorded so far, in the order they arrived.
func (l *RequestLog) All() []Request {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Request(nil), l.all...)
}

// Count returns how many requests name were sent.
func (l *RequestLog) Count(name string) int {
	n := 0
	for _, r := range l.All() {
		if r.Name == name {
			n++
		}
	}
	return n
}

// Reads returns how many queries name were sent for any of ids (their
// "id"), in all.
func (l *RequestLog) Reads(name string, ids ...string) int {
	n := 0
	for _, r := range l.All() {
		var q schemas.Query
		if r.Query && r.Name == name && r.Decode(&q) == nil && slices.Contains(ids, q.ID) {
			n++
		}
	}
	return n
}
