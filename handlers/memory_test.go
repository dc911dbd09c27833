package handlers_test

import (
	"context"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
)

func TestParseMemoryLimit(t *testing.T) {
	for in, want := range map[string]int64{
		"100MiB": 100 << 20, "1GiB": 1 << 30, "2TiB": 2 << 40, "20000KiB": 20000 << 10,
		"33554432": 32 << 20, "33554432B": 32 << 20, " 64MiB ": 64 << 20, "off": math.MaxInt64, "0": math.MaxInt64,
	} {
		got, err := handlers.ParseMemoryLimit(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "MiB", "-5MiB", "1MiB", "100MB", "1.5GiB", "lots", "9999999TiB"} {
		_, err := handlers.ParseMemoryLimit(in)
		require.Error(t, err, in)
	}
}

// dwr serve's memory limit comes from DWR_MEMORY_LIMIT, else GOMEMLIMIT,
// else the default (none).
func TestMemoryLimitFromEnv(t *testing.T) {
	t.Setenv("DWR_MEMORY_LIMIT", "")
	t.Setenv("GOMEMLIMIT", "")
	require.Equal(t, handlers.DefaultMemoryLimit, handlers.MemoryLimitFromEnv())
	t.Setenv("GOMEMLIMIT", "1GiB")
	require.Equal(t, "1GiB", handlers.MemoryLimitFromEnv())
	t.Setenv("DWR_MEMORY_LIMIT", "512MiB")
	require.Equal(t, "512MiB", handlers.MemoryLimitFromEnv())
}

// DWR_MEMPROFILE's watcher writes a heap profile at once (the first high)
// and stops when its context ends.
func TestWatchMemoryWritesAProfile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "heap.pprof")
	ctx, cancel := context.WithCancel(context.Background())
	done := handlers.WatchMemory(ctx, file, slog.New(slog.DiscardHandler))
	servicetest.Eventually(t, 10*time.Second, func() bool {
		st, err := os.Stat(file)
		return err == nil && st.Size() > 0
	})
	cancel()
	require.True(t, servicetest.Within(10*time.Second, func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}), "the watcher stops when its context ends")
}
