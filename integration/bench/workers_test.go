package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/schemas"
)

// sdkRoot is the checkout the SDKs' worker programs are found under, from
// this package's directory.
var sdkRoot = filepath.Join("..", "..")

// needWorkerSDK skips t when the worker program of sdk cannot run here (no
// python3 with cryptography; no node, or the TypeScript SDK not built), as
// the conformance suite does, and fails it instead when CI is set.
func needWorkerSDK(t *testing.T, sdks ...string) {
	t.Helper()
	if _, err := workerPrograms(sdkRoot, "", sdks); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// TestBenchChain3OtherSDKWorkers runs 20 chains on a deployed service with
// the workers of the Python SDK, then of the TypeScript SDK, then of the Go
// SDK as `dwr bench worker` processes, each worker a process of its own:
// every chain must end achieved, each of its tasks succeeded by that SDK's
// worker with the handler's output, and the worker processes' CPU must be
// counted in the whole system's.
func TestBenchChain3OtherSDKWorkers(t *testing.T) {
	bin := buildDWR(t)
	for _, sdk := range []string{WorkerPython, WorkerTypeScript, WorkerGoProcess} {
		t.Run(sdk, func(t *testing.T) {
			needWorkerSDK(t, sdk)
			const chains, single = 20, 2
			var goals, tasks int
			o := ChainOptions{Chains: []int{chains}, Single: single, Workers: 2, Concurrency: 4, Submitters: 4, Dir: t.TempDir(), Auth: true,
				Deployed: true, Binary: bin, WorkerSDK: sdk, SDKRoot: sdkRoot}
			o.afterRun = func(bs *service) {
				ctx := t.Context()
				goals, tasks = 0, 0 // each run's service is a fresh one
				for g, err := range bs.admin.Goals(ctx) {
					require.NoError(t, err)
					require.Equal(t, schemas.GoalStateAchieved, g.State, "goal %s", g.ID)
					goals++
				}
				for task, err := range bs.admin.Tasks(ctx, client.TaskFilter{}) {
					require.NoError(t, err)
					require.Equal(t, schemas.StateAccepted, task.State, "task %s", task.ID)
					require.Len(t, task.Attempts, 1, "task %s ran once", task.ID)
					require.Equal(t, schemas.AttemptStateSucceeded, task.Attempts[0].State)
					a := task.Attempts[0]
					require.True(t, strings.HasPrefix(a.Executor, "bench-"+sdk+"-"), "task %s ran on %s", task.ID, a.Executor)
					require.JSONEq(t, `{"ok":true}`, string(a.Result))
					tasks++
				}
			}
			rep, progress := mustRun(t, RunChain, o)
			require.NoError(t, rep.Err(), progress)
			require.Equal(t, sdk, rep.WorkerSDK)
			// Counted on the last run's service: the measured chains.
			require.Equal(t, chains, goals)
			require.Equal(t, 3*chains, tasks)
			for _, c := range append([]ChainCell{rep.Single}, rep.Cells...) {
				require.Zero(t, c.Errors, c.FirstError)
				require.Equal(t, sdk, c.Workers)
				require.Positive(t, c.ChainsPerS)
				require.Positive(t, c.WorkerRSSMiB, "the worker processes' VmHWM")
				require.GreaterOrEqual(t, c.CPUmsPerRun, c.ServiceCPUms+c.WorkerCPUms, "the whole system's CPU includes the service's and the workers'")
			}
			require.Equal(t, single, rep.Single.Chains)
			require.Equal(t, chains, rep.Cells[0].Chains)
			human := printed(t, PrintChain, rep)
			require.Contains(t, human, fmt.Sprintf("2 %s workers × 4 jobs", sdk))
			require.Contains(t, human, "OF WHICH WORKERS")
		})
	}
}

// TestBenchChain3CompareWorkers runs the chains with Go's, Python's and
// TypeScript's workers, alternating in two rounds, the order rotated, and
// pairs each with Go's: the ratios.
func TestBenchChain3CompareWorkers(t *testing.T) {
	bin := buildDWR(t)
	needWorkerSDK(t, WorkerPython, WorkerTypeScript)
	rep, progress := mustRun(t, RunChain, ChainOptions{Chains: []int{6}, Workers: 1, Concurrency: 4, Submitters: 2, Dir: t.TempDir(), Auth: true,
		Deployed: true, Binary: bin, CompareWorkers: []string{WorkerGo, WorkerPython, WorkerTypeScript}, Rounds: 2, SDKRoot: sdkRoot})
	require.NoError(t, rep.Err(), progress)
	require.Equal(t, AuthCompare, rep.WorkerSDK)
	var order []string
	for _, c := range rep.Cells {
		require.Zero(t, c.Errors, c.FirstError)
		require.Positive(t, c.ChainsPerS)
		if c.Workers == WorkerGo {
			require.Zero(t, c.WorkerCPUms, "Go's workers run in the benchmark's process, counted in its CPU")
		} else {
			require.Positive(t, c.WorkerRSSMiB)
		}
		order = append(order, fmt.Sprintf("%d/%s", c.Round, c.Workers))
	}
	require.Equal(t, []string{"1/go", "1/python", "1/typescript", "2/python", "2/typescript", "2/go"}, order)
	requireCosts(t, rep.WorkerCost, 2, "python ÷ go, N=6", "typescript ÷ go, N=6")
	human := printed(t, PrintChain, rep)
	require.Contains(t, human, "the workers' SDKs, each ÷ go")
	require.Contains(t, human, "WORKERS")

	b, err := json.Marshal(rep)
	require.NoError(t, err)
	require.Contains(t, string(b), `"worker_cost"`)
}

// TestBenchChain3WorkerSDKChecks: another SDK's workers need the service
// deployed, a comparison go and another SDK, and an SDK is one of those
// known.
func TestBenchChain3WorkerSDKChecks(t *testing.T) {
	o := ChainOptions{Chains: []int{1}, Workers: 1, Concurrency: 1, Submitters: 1, Rounds: 1, SDKRoot: sdkRoot}
	for _, c := range []struct {
		set  func(*ChainOptions)
		want string
	}{
		{func(o *ChainOptions) { o.WorkerSDK = WorkerPython }, "add --deployed"},
		{func(o *ChainOptions) { o.WorkerSDK = "rust" }, `--worker-sdk "rust"`},
		{func(o *ChainOptions) { o.CompareWorkers = []string{WorkerPython, WorkerTypeScript} }, "name go and at least one other"},
		{func(o *ChainOptions) { o.CompareWorkers = []string{WorkerGo, WorkerGo} }, "named twice"},
		{func(o *ChainOptions) { o.CompareWorkers = []string{WorkerGo, "ruby"} }, `"ruby"`},
		{func(o *ChainOptions) { o.CompareWorkers, o.CompareAuth = []string{WorkerGo, WorkerPython}, true }, "compare one thing at a time"},
		{func(o *ChainOptions) { o.Deployed, o.WorkerSDK, o.SDKRoot = true, WorkerPython, t.TempDir() }, "no executors/python/dwr/bench_worker.py"},
		{func(o *ChainOptions) { o.Deployed, o.WorkerSDK, o.SDKRoot = true, WorkerTypeScript, t.TempDir() }, "npm run build"},
	} {
		o := o
		c.set(&o)
		_, err := RunChain(t.Context(), o, io.Discard)
		require.ErrorContains(t, err, c.want)
	}
}

// TestTheDeployedServiceGetsOnlyTheProfilingVariables: a service the
// benchmark starts runs on its defaults whatever DWR_ variables the
// benchmark was run with, but writes the profiles asked for, one file per
// service; the workers it starts get no DWR_ variable of the benchmark's.
func TestTheDeployedServiceGetsOnlyTheProfilingVariables(t *testing.T) {
	t.Setenv("DWR_NATS", "nats://elsewhere:4222")
	t.Setenv("DWR_DATA", "/somewhere")
	t.Setenv("DWR_CPUPROFILE", "/tmp/serve.cpu")
	t.Setenv("DWR_MEMPROFILE", "/tmp/serve.mem")
	var dwr []string
	for _, kv := range serveEnv(3) {
		if strings.HasPrefix(kv, "DWR_") {
			dwr = append(dwr, kv)
		}
	}
	require.ElementsMatch(t, []string{"DWR_CPUPROFILE=/tmp/serve.cpu.3", "DWR_MEMPROFILE=/tmp/serve.mem.3"}, dwr)
	for _, kv := range benchEnv() {
		require.False(t, strings.HasPrefix(kv, "DWR_"), kv)
	}
}
