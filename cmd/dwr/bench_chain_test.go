package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBenchChain3EndToEnd runs a few chains through the whole service and
// in-process SDK workers: every chain must end achieved.
func TestBenchChain3EndToEnd(t *testing.T) {
	var out, errb bytes.Buffer
	code := Main([]string{"bench", "chain3", "--chains", "10", "--single", "2", "--workers", "1", "--concurrency", "4",
		"--submitters", "4", "--dir", t.TempDir(), "--json"}, strings.NewReader(""), &out, &errb)
	require.Equal(t, exitOK, code, "stderr:\n%s", errb.String())
	var rep chainReport
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep), out.String())
	require.Equal(t, 2, rep.Single.Chains)
	require.Len(t, rep.Cells, 1)
	for _, c := range append([]chainCell{rep.Single}, rep.Cells...) {
		require.Zero(t, c.Errors, c.FirstError)
		require.Positive(t, c.ChainsPerS)
		require.InDelta(t, 3*c.ChainsPerS, c.TasksPerS, 0.2)
		require.Positive(t, c.P50ms)
		require.GreaterOrEqual(t, c.P99ms, c.P50ms)
		require.Positive(t, c.CPUmsPerRun)
	}
	require.Positive(t, rep.PeakRSSMiB)
	var human bytes.Buffer
	require.NoError(t, printChainBench(&human, &rep))
	require.Contains(t, human.String(), "CHAINS/S")
}
