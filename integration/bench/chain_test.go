package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/handlers/servicetest"
)

// TestBenchChain3EndToEnd runs a few chains through the whole service and
// in-process SDK workers: every chain must end achieved.
func TestBenchChain3EndToEnd(t *testing.T) {
	rep, _ := mustRun(t, RunChain, ChainOptions{Chains: []int{10}, Single: 2, Workers: 1, Concurrency: 4, Submitters: 4,
		Dir: t.TempDir(), Auth: true})
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
	human := printed(t, PrintChain, rep)
	require.Contains(t, human, "CHAINS/S")
	require.Contains(t, human, "service closed")
}

// TestBenchChain3CompareAuth runs the chains closed and open, alternating
// in two rounds, and checks the cost of authentication pairs them.
func TestBenchChain3CompareAuth(t *testing.T) {
	rep, _ := mustRun(t, RunChain, ChainOptions{Chains: []int{6}, Single: 1, Workers: 1, Concurrency: 4, Submitters: 2,
		Dir: t.TempDir(), Auth: true, CompareAuth: true, Rounds: 2})
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
	requireCosts(t, rep.AuthCost, 2, "N=1 one at a time", "N=6")
	human := printed(t, PrintChain, rep)
	require.Contains(t, human, "the cost of authentication")
}

// TestBenchChain3CompareEncryption runs the chains with payloads sealed and
// plain, alternating in two rounds, and pairs them: the cost of encryption.
func TestBenchChain3CompareEncryption(t *testing.T) {
	rep, _ := mustRun(t, RunChain, ChainOptions{Chains: []int{6}, Workers: 1, Concurrency: 4, Submitters: 2,
		Dir: t.TempDir(), Auth: true, CompareEncryption: true, Rounds: 2})
	require.Equal(t, AuthCompare, rep.Encryption)
	require.Equal(t, AuthClosed, rep.Auth)
	var order []string
	for _, c := range rep.Cells {
		require.Zero(t, c.Errors, c.FirstError)
		order = append(order, fmt.Sprintf("%d/%s/%s", c.Round, c.Auth, c.Encryption))
	}
	requireEncryptionCompared(t, order, rep.EncryptionCost, printed(t, PrintChain, rep))
	_, err := RunChain(t.Context(), ChainOptions{Chains: []int{1}, Workers: 1, Concurrency: 1, Submitters: 1, CompareAuth: true, CompareEncryption: true, Rounds: 1}, io.Discard)
	require.ErrorContains(t, err, "compare one thing at a time")
}

// TestBenchChain3Deployed runs a few chains with the service deployed: `dwr
// serve` (built from this module) in its own process, the workers and
// submitters in the test's, over TCP; every chain must end achieved, and
// the service's CPU and peak RSS must be measured.
func TestBenchChain3Deployed(t *testing.T) {
	bin := buildDWR(t)
	rep, _ := mustRun(t, RunChain, ChainOptions{Chains: []int{10}, Single: 2, Workers: 1, Concurrency: 4, Submitters: 4,
		Warmup: 3, Dir: t.TempDir(), Auth: true, Deployed: true, Binary: bin})
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
	human := printed(t, PrintChain, rep)
	require.Contains(t, human, "service deployed")
	require.Contains(t, human, "SERVICE PEAK RSS MIB")
}

// TestBenchChain3DeployedOpen runs chains on a deployed service that is
// open (dwr serve --insecure-open): no admin adds members, so the first
// requests come right after serve is ready.
func TestBenchChain3DeployedOpen(t *testing.T) {
	bin := buildDWR(t)
	rep, _ := mustRun(t, RunChain, ChainOptions{Chains: []int{8}, Single: 1, Workers: 1, Concurrency: 4, Submitters: 4,
		Dir: t.TempDir(), Deployed: true, Binary: bin})
	require.NoError(t, rep.Err())
	require.Equal(t, AuthOpen, rep.Auth)
	require.Equal(t, 8, rep.Cells[0].Chains)
	require.Positive(t, rep.Cells[0].ServiceRSSMiB)
}

// mustRun runs a benchmark (Run or RunChain) with o, its progress written
// to a buffer, and returns its report and progress; it fails t, showing the
// progress, when the run fails.
func mustRun[O, R any](t *testing.T, run func(context.Context, O, io.Writer) (R, error), o O) (rep R, progress string) {
	t.Helper()
	var b bytes.Buffer
	rep, err := run(t.Context(), o, &b)
	require.NoError(t, err, "progress:\n%s", b.String())
	return rep, b.String()
}

// printed returns what write (Print or PrintChain) writes of rep.
func printed[R any](t *testing.T, write func(io.Writer, R) error, rep R) string {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, write(&b, rep))
	return b.String()
}

// requireCosts checks the costs of a comparison: one for each of loads,
// labelled so, each pairing the throughput and the CPU of the runs of every
// one of rounds rounds.
func requireCosts(t *testing.T, costs []AuthCost, rounds int, loads ...string) {
	t.Helper()
	require.Len(t, costs, len(loads))
	for i, c := range costs {
		require.Equal(t, loads[i], c.Load)
		require.Len(t, c.PerS.Rounds, rounds, c.Load)
		require.Len(t, c.CPU.Rounds, rounds, c.Load)
	}
}

// requireEncryptionCompared checks a comparison of encryption in two rounds
// (Run's or RunChain's): its runs, each named round/auth/encryption in
// order, were sealed and plain alternating, sealed first in the first
// round; its one cost paired the CPU of both rounds, and human (the report
// printed) shows it.
func requireEncryptionCompared(t *testing.T, order []string, cost []AuthCost, human string) {
	t.Helper()
	require.Equal(t, []string{"1/closed/sealed", "1/closed/plain", "2/closed/plain", "2/closed/sealed"}, order)
	require.Len(t, cost, 1)
	require.Len(t, cost[0].CPU.Rounds, 2)
	require.Contains(t, human, "the cost of encryption: sealed ÷ plain")
}

// dwrBuild is ./cmd/dwr of this module, built on first use.
var dwrBuild servicetest.Binary

// buildDWR builds ./cmd/dwr of this module, once per test run, and returns
// its path; it skips t under -short.
func buildDWR(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the dwr binary")
	}
	return dwrBuild.Path(t, "dwr", "./cmd/dwr", false)
}

func TestMain(m *testing.M) {
	code := m.Run()
	dwrBuild.Remove()
	os.Exit(code)
}

// TestBenchChain3CompareObservability runs the chains with observability
// off and on, alternating in two rounds, and pairs them: its cost.
func TestBenchChain3CompareObservability(t *testing.T) {
	rep, _ := mustRun(t, RunChain, ChainOptions{Chains: []int{6}, Workers: 1, Concurrency: 4, Submitters: 2,
		Dir: t.TempDir(), Auth: true, CompareObservability: true, Rounds: 2})
	require.Equal(t, AuthCompare, rep.Observability)
	require.Equal(t, AuthClosed, rep.Auth)
	require.Equal(t, EncryptionSealed, rep.Encryption)
	var order []string
	for _, c := range rep.Cells {
		require.Zero(t, c.Errors, c.FirstError)
		order = append(order, fmt.Sprintf("%d/%s", c.Round, c.Observability))
	}
	require.Equal(t, []string{"1/on", "1/off", "2/off", "2/on"}, order)
	require.Len(t, rep.ObservabilityCost, 1)
	require.Len(t, rep.ObservabilityCost[0].CPU.Rounds, 2)
	require.Len(t, rep.ObservabilityCost[0].PerS.Rounds, 2)
	require.Contains(t, printed(t, PrintChain, rep), "the cost of observability")
	_, err := RunChain(t.Context(), ChainOptions{Chains: []int{1}, Workers: 1, Concurrency: 1, Submitters: 1, CompareObservability: true, Deployed: true, Rounds: 1}, io.Discard)
	require.ErrorContains(t, err, "in-process")
}
