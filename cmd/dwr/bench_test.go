package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBenchEndToEnd runs `dwr bench` briefly, for real (embedded NATS with
// SyncAlways, the whole service in-process), and checks every cell measured
// something and the output is JSON; then prints the same report for people.
func TestBenchEndToEnd(t *testing.T) {
	var out, errb bytes.Buffer
	code := Main([]string{"bench", "--clients", "1,4", "--duration", "300ms", "--fsyncs", "200", "--dir", t.TempDir(), "--json"},
		strings.NewReader(""), &out, &errb)
	require.Equal(t, exitOK, code, "stderr:\n%s", errb.String())

	var rep benchReport
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep), out.String())
	require.NotNil(t, rep.Fsync)
	require.Positive(t, rep.Fsync.Syncs)
	require.Positive(t, rep.Fsync.PerSecond)
	require.Positive(t, rep.Fsync.P50)

	require.Len(t, rep.Cells, 4)
	seen := map[string]bool{}
	for _, c := range rep.Cells {
		seen[fmt.Sprintf("%s/%d", c.Mode, c.Clients)] = true
		require.Positive(t, c.Ops, "%s/%d", c.Mode, c.Clients)
		require.Positive(t, c.OpsPerSec, "%s/%d", c.Mode, c.Clients)
		require.Zero(t, c.Errors, "%s/%d: %s", c.Mode, c.Clients, c.FirstError)
		require.Positive(t, c.P50, "%s/%d", c.Mode, c.Clients)
		require.GreaterOrEqual(t, c.P99, c.P50)
		require.Positive(t, c.Records, "%s/%d", c.Mode, c.Clients)
		require.GreaterOrEqual(t, c.Batch, 1.0, "%s/%d", c.Mode, c.Clients)
	}
	require.Equal(t, map[string]bool{"baseline/1": true, "baseline/4": true, "group/1": true, "group/4": true}, seen)
	require.Equal(t, 4, rep.Ratios.ThroughputClients)
	require.Positive(t, rep.Ratios.GroupOverBaseline)
	require.Equal(t, 1, rep.Ratios.LatencyClients)
	require.Positive(t, rep.Ratios.GroupP50OverFsyncP50)
	require.Contains(t, errb.String(), "group, 4 clients", "progress on stderr")

	var human bytes.Buffer
	require.NoError(t, printBench(&human, &rep))
	require.Contains(t, human.String(), "group commit (dwr)")
	require.Contains(t, human.String(), "summary: group commit ÷ baseline ops/s at 4 clients")
}

func TestBenchRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--clients", "0"},
		{"bench", "--duration", "0s"},
		{"bench", "--modes", "nope"},
	} {
		var out, errb bytes.Buffer
		require.NotEqual(t, exitOK, Main(args, strings.NewReader(""), &out, &errb), "%v", args)
	}
}

func TestPercentilesAndFormat(t *testing.T) {
	require.Equal(t, [3]float64{}, percentiles(nil))
	require.Equal(t, "1,234,568", thousands(1234567.6))
	require.Equal(t, "999", thousands(999))
	require.Equal(t, "0.42", ms(0.4167))
}
