package main

import (
	"context"
	"io"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/executors/shell"
)

// workerConnName names a worker's NATS connection.
const workerConnName = "dwr-worker"

// workerOpts are the flags of `dwr worker`.
type workerOpts struct {
	queue, executor, version, logLevel string
	concurrency, maxDeliver            int
	lease, drainTimeout                time.Duration
	verify, reconfigure                bool
}

func workerCmd(g *globals) *cobra.Command {
	var o workerOpts
	cmd := &cobra.Command{
		Use:   "worker --queue Q [flags] -- COMMAND [ARGS...]",
		Short: "run COMMAND for every task of a queue: an executor made of any program",
		Long: "dwr worker takes the work items of one queue and runs COMMAND once per attempt.\n\n" + shell.Contract + `

SIGINT or SIGTERM stops the worker: it takes no more work and lets running
commands finish for up to --drain-timeout.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return runWorker(ctx, g, o, args, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.SetInterspersed(false) // everything after COMMAND is its own
	f.StringVar(&o.queue, "queue", "", "the work queue to take tasks from (required)")
	f.IntVar(&o.concurrency, "concurrency", executors.DefaultConcurrency, "commands run at once")
	f.DurationVar(&o.lease, "lease", executors.DefaultLease, "how long a task stays with this worker without a heartbeat (renewed every lease/3)")
	f.IntVar(&o.maxDeliver, "max-deliver", executors.DefaultMaxDeliver, "deliveries of a work item before it is quarantined and its task failed")
	f.BoolVar(&o.reconfigure, "reconfigure", false, "make --lease and --max-deliver the queue's (they are shared by every worker of the queue; without this flag, a worker uses the queue's)")
	f.StringVar(&o.executor, "executor", "", "this worker's name in the attempts it runs (default <hostname>-<pid>)")
	f.StringVar(&o.version, "executor-version", "", "the version recorded with every attempt")
	f.DurationVar(&o.drainTimeout, "drain-timeout", executors.DefaultDrainTimeout, "how long running commands may finish after SIGINT or SIGTERM")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.BoolVar(&o.verify, "verify", false, "be a verifier: COMMAND gets the attempt's result on stdin and prints {\"outcome\": \"PASS\"|\"FAIL\"|\"INCONCLUSIVE\", \"evidence\": ...}")
	return cmd
}

// runWorker runs the worker until ctx ends.
func runWorker(ctx context.Context, g *globals, o workerOpts, argv []string, stderr io.Writer) error {
	logger, err := newLogger(stderr, o.logLevel)
	if err != nil {
		return err
	}
	if o.queue == "" {
		return fail(exitInvalid, "--queue is required")
	}
	// Reconnect forever, also when the service is not up yet: a worker
	// outlives restarts of the service and of NATS.
	// A worker rides out restarts: its identity may be let in again only
	// once the restarted service has read its members.
	cl, err := g.open(workerConnName, client.NATSOptions(nats.MaxReconnects(-1), nats.IgnoreAuthErrorAbort(),
		nats.ReconnectWait(250*time.Millisecond), nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			logger.Warn("dwr worker: disconnected from NATS; reconnecting", "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { logger.Info("dwr worker: reconnected", "url", nc.ConnectedUrl()) }),
		nats.ConnectHandler(func(nc *nats.Conn) { logger.Info("dwr worker: connected", "url", nc.ConnectedUrl()) })))
	if err != nil {
		return err
	}
	defer cl.Close()
	nc := cl.Conn()
	if !nc.IsConnected() {
		logger.Warn("dwr worker: NATS is not reachable yet; retrying until it is", "server", g.server)
	}
	x, err := shell.New(argv, shell.Options{Lease: o.lease, Logger: logger})
	if err != nil {
		return fail(exitInvalid, "%v", err)
	}
	cfg := executors.Config{Conn: nc, Workspace: g.workspace, Queue: o.queue,
		Executor: o.executor, Version: o.version, Concurrency: o.concurrency, Lease: o.lease,
		MaxDeliver: o.maxDeliver, Reconfigure: o.reconfigure, DrainTimeout: o.drainTimeout, Logger: logger}
	var w *executors.Worker
	if o.verify {
		w, err = executors.NewVerifier(cfg, x.Verify)
	} else {
		w, err = executors.NewWorker(cfg, x.Handle)
	}
	if err != nil {
		return fail(exitInvalid, "%v", err)
	}
	if err := w.Run(ctx); err != nil {
		return fail(exitUnavailable, "%v", err)
	}
	return nil
}
