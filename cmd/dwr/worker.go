package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/executors/shell"
)

// workerConnName names a worker's NATS connection.
const workerConnName = "dwr-worker"

func workerCmd(g *globals) *cobra.Command {
	var cfg executors.Config
	var logLevel, otlp string
	var verify bool
	cmd := &cobra.Command{
		Use:   "worker --queue Q [flags] -- COMMAND [ARGS...]",
		Short: "run COMMAND for every task of a queue: an executor made of any program",
		Long: "dwr worker takes the work items of one queue and runs COMMAND once per attempt.\n\n" + shell.Contract + `

SIGINT or SIGTERM stops the worker: it takes no more work and lets running
commands finish for up to --drain-timeout.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := untilStopped(cmd)
			defer stop()
			logger, err := newLogger(cmd.ErrOrStderr(), logLevel)
			if err != nil {
				return err
			}
			cfg.Logger = logger
			tp, shutdown, err := tracerProvider(ctx, otlp, "dwr-worker")
			if err != nil {
				return err
			}
			defer shutdown()
			cfg.Tracer = tp
			return runWorker(ctx, g, cfg, args, verify)
		},
	}
	f := cmd.Flags()
	f.SetInterspersed(false) // everything after COMMAND is its own
	f.StringVar(&cfg.Queue, "queue", "", "the work queue to take tasks from (required)")
	f.IntVar(&cfg.Concurrency, "concurrency", executors.DefaultConcurrency, "commands run at once")
	f.DurationVar(&cfg.Lease, "lease", executors.DefaultLease, "how long a task stays with this worker without a heartbeat (renewed every lease/3)")
	f.IntVar(&cfg.MaxDeliver, "max-deliver", executors.DefaultMaxDeliver, "deliveries of a work item before it is quarantined and its task failed")
	f.BoolVar(&cfg.NoHandoff, "no-handoff", false, "take every task from the queue: the reports do not ask for the next task of their chain (the handoff)")
	f.BoolVar(&cfg.Reconfigure, "reconfigure", false, "make --lease and --max-deliver the queue's (they are shared by every worker of the queue; without this flag, a worker uses the queue's)")
	f.StringVar(&cfg.Executor, "executor", "", "this worker's name in the attempts it runs (default <hostname>-<pid>)")
	f.StringVar(&cfg.Version, "executor-version", "", "the version recorded with every attempt")
	f.DurationVar(&cfg.DrainTimeout, "drain-timeout", executors.DefaultDrainTimeout, "how long running commands may finish after SIGINT or SIGTERM")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	otlpFlag(f, &otlp)
	f.BoolVar(&verify, "verify", false, "be a verifier: COMMAND gets the attempt's result on stdin and prints {\"outcome\": \"PASS\"|\"FAIL\"|\"INCONCLUSIVE\", \"evidence\": ...}")
	return cmd
}

// runWorker runs the worker of cfg (shell.NewWorker) for argv until ctx
// ends, connected as --creds in --workspace.
func runWorker(ctx context.Context, g *globals, cfg executors.Config, argv []string, verify bool) error {
	logger := cfg.Logger
	if cfg.Queue == "" {
		return fail(exitInvalid, "--queue is required")
	}
	// A worker outlives restarts of the service and of NATS.
	cl, err := g.open(workerConnName, client.Lasting(logger, "dwr worker"))
	if err != nil {
		return err
	}
	defer cl.Close()
	cfg.Conn, cfg.Workspace = cl.Conn(), g.workspace
	if !cfg.Conn.IsConnected() {
		logger.Warn("dwr worker: NATS is not reachable yet; retrying until it is", "server", g.server)
	}
	w, err := shell.NewWorker(cfg, argv, verify)
	if err != nil {
		return fail(exitInvalid, "%v", err)
	}
	if err := w.Run(ctx); err != nil {
		return fail(exitUnavailable, "%v", err)
	}
	return nil
}
