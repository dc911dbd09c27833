package bench

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/handlers/servicetest"
)

// TestBenchChain3EndToEnd runs a few chains through the whole service and
// in-process SDK workers: every chain must end achieved.
func TestBenchChain3EndToEnd(t *testing.T) {
	var errb bytes.Buffer
	rep, err := RunChain(t.Context(), ChainOptions{Chains: []int{10}, Single: 2, Workers: 1, Concurrency: 4, Submitters: 4,
		Dir: t.TempDir(), Auth: true}, &errb)
	require.NoError(t, err, "progress:\n%s", errb.String())
	require.NoError(t, rep.Err())
	require.Equal(t, 2, rep.Single.Chains)
	require.Len(t, rep.Cells, 1)
	for _, c := range append([]ChainCell{rep.Single}, rep.Cells...) {
		require.Zero(t, c.Errors, c.FirstError)
		require.Positive(t, c.ChainsPerS)
		require.InDelta(t, 3*c.ChainsPerS, c.TasksPerS, 0.2)
		require.Positive(t, c.P50ms)
		require.GreaterOrEqual(t, c.P99ms, c.P50ms)
		require.Positive(t, c.CPUmsPerRun)
	}
	require.Positive(t, rep.PeakRSSMiB)
	require.Equal(t, AuthClosed, rep.Auth)
	require.Equal(t, AuthClosed, rep.Single.Auth)
	require.Equal(t, AuthClosed, rep.Cells[0].Auth)
	var human bytes.Buffer
	require.NoError(t, PrintChain(&human, rep))
	require.Contains(t, human.String(), "CHAINS/S")
	require.Contains(t, human.String(), "service closed")
}

// TestBenchChain3CompareAuth runs the chains closed and open, alternating
// in two rounds, and checks the cost of authentication pairs them.
func TestBenchChain3CompareAuth(t *testing.T) {
	var errb bytes.Buffer
	rep, err := RunChain(t.Context(), ChainOptions{Chains: []int{6}, Single: 1, Workers: 1, Concurrency: 4, Submitters: 2,
		Dir: t.TempDir(), Auth: true, CompareAuth: true, Rounds: 2}, &errb)
	require.NoError(t, err, "progress:\n%s", errb.String())
	require.Equal(t, AuthCompare, rep.Auth)
	require.Zero(t, rep.Single.Chains, "every run is in cells")
	var order []string
	for _, c := range rep.Cells {
		require.Zero(t, c.Errors, c.FirstError)
		require.Positive(t, c.ChainsPerS)
		order = append(order, fmt.Sprintf("%d/%d/%v/%s", c.Round, c.Chains, c.OneAtATime, c.Auth))
	}
	require.Equal(t, []string{"1/1/true/closed", "1/1/true/open", "1/6/false/closed", "1/6/false/open",
		"2/1/true/open", "2/1/true/closed", "2/6/false/open", "2/6/false/closed"}, order)
	require.Len(t, rep.AuthCost, 2)
	require.Equal(t, "N=1 one at a time", rep.AuthCost[0].Load)
	require.Equal(t, "N=6", rep.AuthCost[1].Load)
	for _, c := range rep.AuthCost {
		require.Len(t, c.PerS.Rounds, 2)
		require.Len(t, c.CPU.Rounds, 2)
	}
	var human bytes.Buffer
	require.NoError(t, PrintChain(&human, rep))
	require.Contains(t, human.String(), "the cost of authentication")
}

// TestBenchChain3Deployed runs a few chains with the service deployed: `dwr
// serve` (built from this module) in its own process, the workers and
// submitters in the test's, over TCP; every chain must end achieved, and
// the service's CPU and peak RSS must be measured.
func TestBenchChain3Deployed(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the dwr binary")
	}
	bin := buildDWR(t)
	var errb bytes.Buffer
	rep, err := RunChain(t.Context(), ChainOptions{Chains: []int{10}, Single: 2, Workers: 1, Concurrency: 4, Submitters: 4,
		Warmup: 3, Dir: t.TempDir(), Auth: true, Deployed: true, Binary: bin}, &errb)
	require.NoError(t, err, "progress:\n%s", errb.String())
	require.NoError(t, rep.Err())
	require.Equal(t, ServiceDeployed, rep.Service)
	require.Equal(t, AuthClosed, rep.Auth)
	require.Equal(t, 3, rep.Warmup)
	require.Len(t, rep.Cells, 1)
	for _, c := range append([]ChainCell{rep.Single}, rep.Cells...) {
		require.Zero(t, c.Errors, c.FirstError)
		require.Positive(t, c.ChainsPerS)
		require.Positive(t, c.P50ms)
		require.GreaterOrEqual(t, c.P99ms, c.P50ms)
		require.Positive(t, c.ServiceRSSMiB, "the service's VmHWM")
		require.GreaterOrEqual(t, c.CPUmsPerRun, c.ServiceCPUms, "the whole system's CPU includes the service's")
	}
	require.Equal(t, 10, rep.Cells[0].Chains)
	var human bytes.Buffer
	require.NoError(t, PrintChain(&human, rep))
	require.Contains(t, human.String(), "service deployed")
	require.Contains(t, human.String(), "SERVICE PEAK RSS MIB")
}

// TestBenchChain3DeployedOpen runs chains on a deployed service that is
// open (dwr serve --insecure-open): no admin adds members, so the first
// requests come right after serve is ready.
func TestBenchChain3DeployedOpen(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the dwr binary")
	}
	bin := buildDWR(t)
	var errb bytes.Buffer
	rep, err := RunChain(t.Context(), ChainOptions{Chains: []int{8}, Single: 1, Workers: 1, Concurrency: 4, Submitters: 4,
		Dir: t.TempDir(), Deployed: true, Binary: bin}, &errb)
	require.NoError(t, err, "progress:\n%s", errb.String())
	require.NoError(t, rep.Err())
	require.Equal(t, AuthOpen, rep.Auth)
	require.Equal(t, 8, rep.Cells[0].Chains)
	require.Positive(t, rep.Cells[0].ServiceRSSMiB)
}

var (
	dwrOnce sync.Once
	dwrBin  string
	dwrErr  error
)

// buildDWR builds ./cmd/dwr of this module, once per test run, and returns
// its path.
func buildDWR(t *testing.T) string {
	t.Helper()
	dwrOnce.Do(func() {
		dir, err := os.MkdirTemp("", "dwr-bench-bin-")
		if err != nil {
			dwrErr = err
			return
		}
		bin := filepath.Join(dir, "dwr")
		if dwrErr = servicetest.GoBuild(bin, "./cmd/dwr", false); dwrErr == nil {
			dwrBin = bin
		}
	})
	require.NoError(t, dwrErr)
	return dwrBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if dwrBin != "" {
		_ = os.RemoveAll(filepath.Dir(dwrBin))
	}
	os.Exit(code)
}
