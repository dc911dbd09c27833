package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A bad --memory-limit is refused before anything is opened or made.
func TestServeRefusesABadMemoryLimit(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	code, _, errs := run(t, "nats://127.0.0.1:1", "serve", "--data", data, "--memory-limit", "100MB")
	require.Equal(t, exitInvalid, code, errs)
	require.Contains(t, errs, "--memory-limit")
	_, err := os.Stat(data)
	require.ErrorIs(t, err, os.ErrNotExist)
}
