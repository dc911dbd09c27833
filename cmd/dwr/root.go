package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/propagation"

	"github.com/dwr-run/dwr/schemas"
)

// Exit codes, documented in the README.
const (
	exitOK          = 0
	exitError       = 1 // the server refused the command (conflict, internal...)
	exitInvalid     = 2 // bad input: flags, files, or a command the server found invalid
	exitUnavailable = 3 // no server answered, or it is not ready
	exitNotFound    = 4
	exitConflict    = 5
	exitDamaged     = 6 // the log, or its stream's configuration, fails verification
)

// exitError carries the exit code of a failed command.
type cliError struct {
	code int
	msg  string
}

func (e *cliError) Error() string { return e.msg }

func fail(code int, format string, args ...any) error {
	return &cliError{code: code, msg: fmt.Sprintf(format, args...)}
}

// globals are the flags every client command shares.
type globals struct {
	server    string
	creds     string
	tlsCA     string
	tlsCert   string
	tlsKey    string
	workspace string
	json      bool
	timeout   string
	stdin     io.Reader
	ctx       context.Context // the trace the commands belong to, if any (TRACEPARENT)
	out       io.Writer
	errOut    io.Writer // notes beside the output, such as "more follow"
}

// untilStopped returns cmd's context, ended by SIGINT or SIGTERM, and the
// function that releases it.
func untilStopped(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// Main runs the CLI with args and returns the process's exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return mainIn(context.Background(), args, stdin, stdout, stderr)
}

// MainContext is Main until ctx ends, as Ctrl-C ends a command that runs
// until stopped (watch, worker), with nothing on stdin.
func MainContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return mainIn(ctx, args, strings.NewReader(""), stdout, stderr)
}

func mainIn(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	// A command run by a job (dwr worker sets TRACEPARENT) joins its trace.
	if tp := os.Getenv(schemas.EnvTraceparent); tp != "" {
		ctx = propagation.TraceContext{}.Extract(ctx, schemas.TraceCarrier{schemas.HeaderTraceparent: {tp}})
	}
	g := &globals{stdin: stdin, out: stdout, errOut: stderr, ctx: ctx}
	root := &cobra.Command{
		Use:           "dwr",
		Short:         "dwr — the durable work runtime",
		Long:          "dwr keeps long-running work (agents, reviews, slow systems) alive across crashes, retries and days of waiting.\n`dwr serve` runs the service; the other commands talk to it over NATS.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.server, "server", envOr("DWR_SERVER", "nats://127.0.0.1:4222"), "NATS URL of the dwr service (env DWR_SERVER)")
	pf.StringVar(&g.creds, "creds", os.Getenv("DWR_CREDS"), "dwr credential file to connect with (env DWR_CREDS; default: ./dwr-data/admin.creds when it exists)")
	pf.StringVar(&g.tlsCA, "tls-ca", os.Getenv("DWR_TLS_CA"), "CA certificate (PEM) to verify the server's TLS certificate (env DWR_TLS_CA)")
	pf.StringVar(&g.tlsCert, "tls-cert", os.Getenv("DWR_TLS_CERT"), "client certificate (PEM) for mutual TLS (env DWR_TLS_CERT)")
	pf.StringVar(&g.tlsKey, "tls-key", os.Getenv("DWR_TLS_KEY"), "client key (PEM) for mutual TLS (env DWR_TLS_KEY)")
	pf.StringVar(&g.workspace, "workspace", envOr("DWR_WORKSPACE", "default"), "workspace to act in (env DWR_WORKSPACE)")
	pf.BoolVar(&g.json, "json", false, "print machine-readable JSON instead of tables")
	pf.StringVar(&g.timeout, "timeout", "10s", "how long to wait for the service to answer")
	root.AddCommand(serveCmd(), shredCmd(g), workspaceCmd(g), goalCmd(g), planCmd(g), taskCmd(g), eventsCmd(g), watchCmd(g),
		adminCmd(g), schemaCmd(g), reviewCmd(g), signalCmd(g), benchCmd(g), workerCmd(g),
		keysCmd(g), approvalsCmd(g), approveCmd(g), usersCmd(g), artifactCmd(g), ritualCmd(g), scheduleCmd(g), queueCmd(g), versionCmd(g))
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetIn(stdin)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	code, msg := exitInvalid, err.Error() // cobra's own errors: unknown flags, wrong arguments
	var ce *cliError
	if errors.As(err, &ce) {
		code, msg = ce.code, ce.msg
	}
	if g.json {
		// A program reads the error as it reads a result.
		_ = printJSON(stderr, map[string]any{"error": map[string]any{"message": msg, "exit_code": code}})
		return code
	}
	fmt.Fprintln(stderr, "dwr:", msg)
	return code
}
