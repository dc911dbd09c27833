package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/handlers/servicetest"
)

// freeAddr returns a loopback address no one listens on now, for a server
// that must come back on the same address after a restart.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// `dwr watch --since` first prints what the feed kept, then follows it
// live; when the service restarts, it reconnects and goes on, printing each
// event once.
func TestWatchReplaysAndRidesOutARestart(t *testing.T) {
	dir, addr := t.TempDir(), freeAddr(t)
	st := servicetest.Start(t, dir, servicetest.Options{Listen: addr})
	url := st.URL
	var before map[string]any
	runJSON(t, url, &before, "task", "create", "--queue", "watched")
	first := before["id"].(string)

	var out, errs servicetest.Output
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- MainContext(ctx, []string{"--server", url, "watch", "task.>", "--since", "1h", "--json"}, &out, &errs)
	}()
	defer func() {
		cancel()
		require.Equal(t, exitOK, <-done, errs.String())
	}()
	waitFor := func(what string, ok func(string) bool) {
		t.Helper()
		require.Eventually(t, func() bool { return ok(out.String()) }, 20*time.Second, 20*time.Millisecond,
			"%s; watch printed:\n%s\nand on stderr:\n%s", what, out.String(), errs.String())
	}
	waitFor("the task made before watch started is replayed", func(s string) bool { return strings.Contains(s, first) })

	st.Stop()
	servicetest.Start(t, dir, servicetest.Options{Listen: addr}) // stopped at cleanup
	var after map[string]any
	runJSON(t, url, &after, "task", "create", "--queue", "watched")
	second := after["id"].(string)
	waitFor("the task made after the restart is printed", func(s string) bool { return strings.Contains(s, second) })
	require.Eventually(t, func() bool { return strings.Contains(errs.String(), "connection back") }, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, 1, strings.Count(out.String(), `"agg_id":"`+first+`"`), "each event once:\n%s", out.String())
	require.Equal(t, 1, strings.Count(out.String(), `"agg_id":"`+second+`"`), "each event once:\n%s", out.String())

	// Where to start is checked before anything is sent.
	code, _, stderr := run(t, url, "watch", "--since", "yesterday")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "--since")
	code, _, stderr = run(t, url, "watch", "--since", "1h", "--from-seq", "3")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "give one")
}
