// Package ports hands tests loopback TCP ports to listen on at a known
// address (a server restarted on the same port, a cluster's routes).
package ports

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
)

// Ports Free hands out: below Linux's ephemeral range (32768-60999 by
// default), where the kernel picks the local ports of outgoing connections
// and of listeners on port 0. A port taken from that range and freed is soon
// the local end of another test's connection, so the server that binds it
// later fails (address in use); one below it is taken only by another
// explicit listener.
const (
	from = 10000
	to   = 32000
)

var (
	mu   sync.Mutex
	used = map[int]bool{} // handed out in this process: never twice
)

// Free returns a loopback TCP port that was free a moment ago and that this
// process has not handed out before.
func Free(t testing.TB) int {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	for range 1000 {
		port := from + rand.IntN(to-from) //nolint:gosec // G404: a port to try, not a secret
		if used[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		if err := l.Close(); err != nil {
			t.Fatalf("ports: %v", err)
		}
		used[port] = true
		return port
	}
	t.Fatal("ports: no free loopback port found")
	return 0
}
