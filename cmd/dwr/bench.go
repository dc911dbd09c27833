package main

import (
	"context"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/integration/bench"
)

func benchCmd(g *globals) *cobra.Command {
	o := bench.Options{Warmup: -1}
	cmd := reportCmd(g, "bench", "measure the durable write path: one message per event vs group commit, and the disk's fsync", bench.Method,
		func(ctx context.Context, cmd *cobra.Command, progress io.Writer) (*bench.Report, error) {
			if !cmd.Flags().Changed("modes") {
				o.Modes = nil // both, unless comparing
			}
			return bench.Run(ctx, o, progress)
		}, bench.Print)
	f := cmd.Flags()
	f.IntSliceVar(&o.Clients, "clients", []int{1, 8, 64}, "concurrency levels: clients each with one operation in flight")
	f.DurationVar(&o.Duration, "duration", 5*time.Second, "measured time per mode and level")
	f.DurationVar(&o.Warmup, "warmup", -1, "unmeasured time before each measurement (default duration/5, at most 1s)")
	f.StringSliceVar(&o.Modes, "modes", []string{bench.ModeBaseline, bench.ModeGroup}, "modes to run: baseline, group (the fsync reference always runs)")
	f.StringVar(&o.Dir, "dir", os.TempDir(), "where the fresh directories are made: put it on the disk you care about")
	f.IntVar(&o.Fsyncs, "fsyncs", 2000, "fsyncs timed for the reference (stops early after --duration)")
	f.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the whole run (server, service and clients) to this file")
	f.BoolVar(&o.Auth, "auth", true, "run the service closed, as dwr serve does (--auth=false: open, without accounts or credentials)")
	f.BoolVar(&o.CompareAuth, "compare-auth", false, "run group mode closed and open, alternating in --rounds rounds, and print the cost of authentication")
	f.IntVar(&o.Rounds, "rounds", 3, "with --compare-auth or --compare-encryption: rounds, each measuring every level both ways (the order swapped each round)")
	f.BoolVar(&o.Plain, "plain", false, "run the service without encryption (payloads stored as sent); by default it seals them, as dwr serve does")
	f.BoolVar(&o.CompareEncryption, "compare-encryption", false, "run group mode with payloads sealed and plain, alternating in --rounds rounds, and print the cost of encryption (give --payload-bytes: goal.create carries no payload otherwise)")
	f.IntVar(&o.PayloadBytes, "payload-bytes", 0, "make each goal.create carry a plan of one task whose input holds this many bytes (0: none)")
	cmd.AddCommand(benchChainCmd(g), benchFloodCmd(g), benchWorkerCmd())
	return cmd
}

func benchChainCmd(g *globals) *cobra.Command {
	var o bench.ChainOptions
	cmd := reportCmd(g, "chain3", "chains of three sequential tasks, executed by SDK workers, with fsync before ack", bench.ChainMethod,
		func(ctx context.Context, _ *cobra.Command, progress io.Writer) (*bench.ChainReport, error) {
			return bench.RunChain(ctx, o, progress)
		}, bench.PrintChain)
	f := cmd.Flags()
	f.IntSliceVar(&o.Chains, "chains", []int{200, 2000}, "numbers of chains to run, each in a fresh service")
	f.IntVar(&o.Workers, "workers", 2, "SDK workers on the queue")
	f.IntVar(&o.Concurrency, "concurrency", 64, "jobs each worker runs at once")
	f.IntVar(&o.Submitters, "submitters", 32, "clients submitting goals and plans concurrently")
	f.IntVar(&o.Single, "single", 20, "chains run one at a time first, for the latency at low load")
	f.StringVar(&o.Dir, "dir", os.TempDir(), "where the fresh directories are made")
	f.DurationVar(&o.Timeout, "timeout", bench.DefaultChainTimeout, "give up on a run after this long")
	f.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file (with --deployed: of this process, the workers and clients, only)")
	f.StringVar(&o.MemProfile, "memprofile", "", "write a profile of the whole run's allocations to this file (with --deployed: of this process only)")
	f.BoolVar(&o.Auth, "auth", true, "run the service closed, as dwr serve does (--auth=false: open, without accounts or credentials)")
	f.BoolVar(&o.CompareAuth, "compare-auth", false, "run closed and open, alternating in --rounds rounds, and print the cost of authentication")
	f.IntVar(&o.Rounds, "rounds", 3, "with --compare-auth, --compare-encryption, --compare-observability or --compare-workers: rounds, each running everything each way (the order changed each round)")
	f.BoolVar(&o.Plain, "plain", false, "run the service without encryption (payloads stored as sent); by default it seals them, as dwr serve does")
	f.BoolVar(&o.CompareEncryption, "compare-encryption", false, "run with payloads sealed and plain, alternating in --rounds rounds, and print the cost of encryption")
	f.BoolVar(&o.CompareObservability, "compare-observability", false,
		"run with observability off and on (metrics kept and scraped every second, every span made by an OpenTelemetry SDK tracer that exports nowhere), alternating in --rounds rounds, and print its cost (in-process only)")
	f.BoolVar(&o.Observe, "observe", false, "run with observability on, as --compare-observability's \"on\" (to profile it with --cpuprofile; in-process only)")
	f.BoolVar(&o.Deployed, "deployed", false, "run the service as deployed: dwr serve in its own process, the workers and submitters in this one")
	f.StringVar(&o.Binary, "binary", "", "with --deployed: the dwr binary to run as the service (default: this one)")
	f.IntVar(&o.Warmup, "warmup", 0, "chains run in each fresh service before the measured ones, and not measured")
	f.StringVar(&o.WorkerSDK, "worker-sdk", bench.WorkerGo,
		"the SDK the workers are written with: go (in this process); go-process, python or typescript (with --deployed: each worker a process of its own, its CPU counted)")
	f.StringSliceVar(&o.CompareWorkers, "compare-workers", nil,
		"run with the workers of each SDK named (go and go-process, python and/or typescript), alternating in --rounds rounds, and print the ratios to go (with --deployed)")
	f.StringVar(&o.SDKRoot, "sdk-root", ".", "with --worker-sdk or --compare-workers: the checkout holding executors/python and executors/typescript (built with npm run build)")
	return cmd
}

func benchFloodCmd(g *globals) *cobra.Command {
	var o bench.FloodOptions
	cmd := reportCmd(g, "flood", "what one client gets while hostile clients flood the service with large commands", bench.FloodMethod,
		func(ctx context.Context, _ *cobra.Command, progress io.Writer) (*bench.FloodReport, error) {
			return bench.RunFlood(ctx, o, progress)
		}, bench.PrintFlood)
	f := cmd.Flags()
	f.IntVar(&o.Flooders, "flooders", 4, "flooding identities, each on a connection of its own")
	f.IntVar(&o.PayloadBytes, "payload-bytes", 900<<10, "bytes of each flooding command")
	f.IntVar(&o.Rate, "rate", 0, "requests each flooder sends a second (0: as fast as its connection takes them)")
	f.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the flood (server, service and clients) to this file")
	f.DurationVar(&o.Duration, "duration", 5*time.Second, "how long the flood and the other client's commands run")
	f.DurationVar(&o.BenchFor, "bench-flooders", 0, "the service's bench of flooders, as dwr serve's flag (0: its default; -1s: off)")
	f.IntVar(&o.CallerBytes, "caller-bytes", 0, "the service's bytes in flight per identity (0: its default, 32 MiB); a flooder is benched past 8 times it in a second")
	f.StringVar(&o.Dir, "dir", os.TempDir(), "where the fresh directory is made")
	return cmd
}

// benchWorkerCmd is `dwr bench worker`: one Go SDK worker of chain-3 as a
// process of its own, which `dwr bench chain3 --worker-sdk go-process`
// starts (bench.ServeWorker); hidden, it is the benchmark's, not a user's.
func benchWorkerCmd() *cobra.Command {
	return &cobra.Command{
		Use: "worker", Short: "a Go SDK worker of dwr bench chain3 --worker-sdk go-process (configured by its environment)", Hidden: true, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := untilStopped(cmd)
			defer stop()
			if err := bench.ServeWorker(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr()); err != nil {
				return fail(exitError, "bench worker: %v", err)
			}
			return nil
		},
	}
}

// reportCmd returns benchmark command use: it runs run until a signal
// stops it, prints its report (as JSON with --json, else with print), and
// fails when the run had errors.
func reportCmd[R interface{ Err() error }](g *globals, use, short, long string, run func(context.Context, *cobra.Command, io.Writer) (R, error),
	print func(io.Writer, R) error) *cobra.Command {
	return &cobra.Command{
		Use: use, Short: short, Long: long, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			name := strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ") // "bench chain3"
			ctx, stop := untilStopped(cmd)
			defer stop()
			rep, err := run(ctx, cmd, cmd.ErrOrStderr())
			if err != nil {
				return fail(exitError, "%s: %v", name, err)
			}
			if g.json {
				err = printJSON(g.out, rep)
			} else {
				err = print(g.out, rep)
			}
			if err != nil {
				return err
			}
			if err := rep.Err(); err != nil {
				return fail(exitError, "%s: %v", name, err)
			}
			return nil
		},
	}
}
