package executors

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Defaults of Config, applied to its zero fields.
const (
	DefaultWorkspace    = "default"
	DefaultPrefix       = "dwr"
	DefaultConcurrency  = 1
	DefaultLease        = 30 * time.Second
	DefaultMaxDeliver   = 5
	DefaultDrainTimeout = 30 * time.Second

	// MinLease is the shortest lease a worker accepts: the work item's ack
	// wait, renewed every Lease/3.
	MinLease = time.Second
)

// Config configures a Worker. Every field but Conn and Queue has a default;
// NewWorker validates the whole Config and reports every problem at once.
type Config struct {
	// Conn is the NATS connection to the dwr service. Required. Connect
	// with client.Lasting (or at least nats.MaxReconnects(-1) and, for a
	// worker that may start before the server,
	// nats.RetryOnFailedConnect(true)) so that the worker rides out server
	// restarts: the SDK retries its requests and its fetches, but a closed
	// connection ends Run.
	Conn *nats.Conn

	// Workspace the work belongs to. Default "default".
	Workspace string

	// Queue is the work queue to take items from (a task spec's queue).
	// Required.
	Queue string

	// Prefix is the first token of every subject. Default "dwr".
	Prefix string

	// Executor names this worker in the attempts it starts. Default
	// "<hostname>-<pid>". At most 200 bytes.
	Executor string

	// Version is the executor's version, recorded with every attempt.
	// Optional; at most 200 bytes.
	Version string

	// Concurrency is the number of jobs run at once; the worker fetches no
	// more work items than it has free slots. Default 1.
	Concurrency int

	// Lease is how long a work item stays with this worker without a
	// heartbeat: the consumer's ack wait. Running jobs renew it every
	// Lease/3; when a worker dies, its items are redelivered after Lease.
	// Default 30s; at least MinLease.
	//
	// Every worker of a queue shares its one consumer, so Lease and
	// MaxDeliver configure the queue, not the worker: the first worker
	// creates the consumer with them, and a later worker whose settings
	// differ uses the queue's (and logs that it does) unless Reconfigure is
	// set.
	Lease time.Duration

	// MaxDeliver is how many times a work item is delivered before the
	// service quarantines it and fails its task. Default 5.
	MaxDeliver int

	// Reconfigure makes this worker's Lease and MaxDeliver the queue's:
	// its consumer is updated. Workers already running keep renewing at
	// their own pace, so shorten a lease only with every worker restarted.
	Reconfigure bool

	// NoHandoff makes the worker take every item from the queue. By
	// default a report asks the service for the handoff
	// (schemas.Handoff): when the reported task leaves a dependent ready
	// on this queue, the report's reply hands this worker that task's
	// attempt, started in the report's commit, and the worker runs it at
	// once in the same slot — no work item, no fetch, no claim. The worker
	// does not ask while it stops (a handed attempt nobody runs waits out
	// its lease before the task is ready again).
	NoHandoff bool

	// DrainTimeout bounds how long Run lets running jobs finish after its
	// context ends; then their contexts are cancelled (cause ErrStopping)
	// and their work items left unacknowledged, to be redelivered. Default
	// 30s.
	DrainTimeout time.Duration

	// Logger receives the worker's logs: one line per job at Info, retries
	// and refusals at Warn. Default: discarded.
	Logger *slog.Logger

	// Tracer makes an OpenTelemetry span per job, "dwr.job <queue>": a
	// child of the trace its work item carries (the service's dispatch of
	// it), the parent of the job's commands (claim, checkpoints, report),
	// which carry it to the service (traceparent). The job's context holds
	// it, so the handler's own spans join the trace. Default: none are made.
	Tracer trace.TracerProvider
}

var nameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Tracer == nil {
		c.Tracer = noop.NewTracerProvider()
	}
	if c.Workspace == "" {
		c.Workspace = DefaultWorkspace
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Executor == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "executor"
		}
		c.Executor = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	c.Concurrency = cmp.Or(c.Concurrency, DefaultConcurrency)
	c.Lease = cmp.Or(c.Lease, DefaultLease)
	c.MaxDeliver = cmp.Or(c.MaxDeliver, DefaultMaxDeliver)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, DefaultDrainTimeout)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate returns every problem of c (after defaults) joined, or nil.
func (c Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Conn == nil {
		bad("Conn is required")
	}
	if c.Queue == "" {
		bad("Queue is required")
	} else if !nameRe.MatchString(c.Queue) {
		bad("Queue %q is not a valid name (lower-case letters, digits, '-' and '_', at most 63)", c.Queue)
	}
	if !nameRe.MatchString(c.Workspace) {
		bad("Workspace %q is not a valid name (lower-case letters, digits, '-' and '_', at most 63)", c.Workspace)
	}
	if !nameRe.MatchString(c.Prefix) {
		bad("Prefix %q is not a valid subject token", c.Prefix)
	}
	if strings.TrimSpace(c.Executor) == "" || len(c.Executor) > maxLabel {
		bad("Executor %q must be 1 to %d bytes", c.Executor, maxLabel)
	}
	if len(c.Version) > maxLabel {
		bad("Version is %d bytes; at most %d are allowed", len(c.Version), maxLabel)
	}
	if c.Concurrency < 1 {
		bad("Concurrency %d must be at least 1", c.Concurrency)
	}
	if c.Lease < MinLease {
		bad("Lease %s must be at least %s", c.Lease, MinLease)
	}
	if c.MaxDeliver < 1 {
		bad("MaxDeliver %d must be at least 1", c.MaxDeliver)
	}
	if c.DrainTimeout < 0 {
		bad("DrainTimeout %s must not be negative", c.DrainTimeout)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("executors: invalid config: %w", errors.Join(errs...))
}

// subjects are the names a worker uses, derived from its Config.
type subjects struct {
	stream   string // the work stream, e.g. DWR_WORK
	consumer string // the durable consumer shared by the queue's workers
	events   string // task event subject prefix: <prefix>.ev.<ws>.task.
}

func subjectsOf(c Config) subjects {
	return subjects{
		stream:   strings.ToUpper(c.Prefix) + "_WORK",
		consumer: c.Prefix + "-" + c.Workspace + "-" + c.Queue,
		events:   c.Prefix + ".ev." + c.Workspace + ".task.",
	}
}
