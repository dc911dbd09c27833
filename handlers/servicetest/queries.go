package servicetest

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/dwr-run/dwr/schemas"
)

// QueryLog counts the queries sent to a workspace, as the NATS server
// routes them: a plain subscription beside the service's own sees every
// request (on an open service, or on the service's own connection of a
// closed one).
type QueryLog struct {
	mu    sync.Mutex
	count map[string]int            // by query name
	reads map[string]map[string]int // by query name, then the query's id
}

// WatchQueries counts, until the test ends, the queries sent to workspace
// ws of the service nc reaches (prefix dwr).
func WatchQueries(t testing.TB, nc *nats.Conn, ws string) *QueryLog {
	t.Helper()
	l := &QueryLog{count: map[string]int{}, reads: map[string]map[string]int{}}
	prefix := "dwr.q." + ws + "."
	sub, err := nc.Subscribe(prefix+">", func(m *nats.Msg) {
		name := strings.TrimPrefix(m.Subject, prefix)
		var q schemas.Query
		_ = json.Unmarshal(m.Data, &q)
		l.mu.Lock()
		defer l.mu.Unlock()
		l.count[name]++
		if l.reads[name] == nil {
			l.reads[name] = map[string]int{}
		}
		l.reads[name][q.ID]++
	})
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		t.Fatalf("servicetest: watch the queries of %s: %v", ws, err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return l
}

// Count returns how many queries name were sent.
func (l *QueryLog) Count(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count[name]
}

// Reads returns how many queries name were sent for each of ids (their
// "id"), in all.
func (l *QueryLog) Reads(name string, ids ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, id := range ids {
		n += l.reads[name][id]
	}
	return n
}
