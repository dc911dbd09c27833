package main

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseMemoryLimit(t *testing.T) {
	for in, want := range map[string]int64{
		"100MiB": 100 << 20, "1GiB": 1 << 30, "2TiB": 2 << 40, "20000KiB": 20000 << 10,
		"33554432": 32 << 20, "33554432B": 32 << 20, " 64MiB ": 64 << 20, "off": math.MaxInt64, "0": math.MaxInt64,
	} {
		got, err := parseMemoryLimit(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "MiB", "-5MiB", "1MiB", "100MB", "1.5GiB", "lots", "9999999TiB"} {
		_, err := parseMemoryLimit(in)
		require.Error(t, err, in)
	}
}
