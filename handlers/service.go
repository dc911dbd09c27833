package handlers

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	fastjson "github.com/go-json-experiment/json/v1"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/handlers/endpoints"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// MaxCommandBytes bounds a command's body, checked before it is decoded. It
// stays well under NATS's default 1 MiB payload so that a command's events,
// with their envelopes, fit in one log record.
const MaxCommandBytes = 512 << 10

// Config configures the service. Zero fields take the documented defaults.
type Config struct {
	// Prefix is the first token of every subject. Default "dwr".
	Prefix string
	// Partition is the log partition this service writes. Default "0".
	Partition string
	// Replicas of the log and derived streams: 1 embedded, 3 on a cluster. Default 1.
	Replicas int
	// WriterID names this replica in log records and the lease. Default: a ULID.
	WriterID string
	// LeaseTTL is how long a writer lease lives without renewal: the writer
	// renews it every LeaseTTL/4 and stops serving commands as soon as it
	// has not renewed it for LeaseTTL (by its own clock, pauses included); a
	// standby takes it over once it has seen no renewal for LeaseTTL, and
	// answers commands "unavailable" once it has seen none for LeaseTTL/2.
	// Every replica of one log must use the same TTL (a standby with a
	// shorter one takes the lease from a live writer; the log's fencing
	// keeps that safe, not smooth). Default DefaultLeaseTTL (2s).
	LeaseTTL time.Duration
	// MinSeqWait bounds how long a query waits for the views to reach the
	// sequence it names (Dwr-Min-Seq); a sequence beyond the log's end is
	// refused at once (invalid). Default 5s.
	MinSeqWait time.Duration
	// MaxInFlight bounds the requests, commands and queries, handled at
	// once: one over it is refused with unavailable. Default 16,384.
	MaxInFlight int
	// MaxQueriesInFlight bounds the queries among them; the rest of
	// MaxInFlight is kept for commands, so that queries, however many
	// callers send them, never leave commands unanswered. At most
	// MaxInFlight. Default three quarters of MaxInFlight (12,288).
	MaxQueriesInFlight int
	// MaxQueriesRunning bounds the queries that read the views at once;
	// the others admitted wait their turn, taken in turn by caller. Without
	// it, one caller's queries in flight — a thousand, within its limit —
	// ran all at once and took the CPU from the service's own work: the
	// writer lost its lease and every caller's commands failed until it
	// came back. Default twice the processors Go runs on (at least 4).
	MaxQueriesRunning int
	// MaxWriterBytes bounds the commands handed to the writer at once —
	// queued for its next batch or in the one it commits — by their bytes
	// (each counts its body, a third more when sealed, and 512 bytes for
	// its events' envelopes); the others wait, taken in turn by caller.
	// Without it the writer took commands in the order they came: one
	// caller keeping its 32 MiB of large commands in flight made every
	// other caller's command wait behind them, seconds. Four log records'
	// worth keeps the writer's next batch ready while it commits one.
	// Default 4 MiB.
	MaxWriterBytes int
	// MaxWriterCommands bounds how many of those commands wait for the
	// writer's next batch (a command gives its place back when the writer
	// takes it into a batch, its bytes once committed); the others wait,
	// taken in turn by caller. Without it small commands were bounded only by their bytes
	// (some 8,000 at once): four identities each sending 10,000 small
	// commands a second, each under its own limits, kept the writer's queue
	// so full that another caller's command waited behind thousands of
	// theirs, a quarter of a second to a second (`dwr bench flood
	// --payload-bytes 40 --rate 10000`); with 128, 12–74 ms. A batch of 128
	// already spreads a fsync over more commands than the writer decides in
	// its time. Default 128.
	MaxWriterCommands int
	// MaxInFlightPerCaller bounds the requests of one caller handled at
	// once — a caller is the identity the NATS server stamped on the request
	// (account and user); requests without one count as one caller — so that
	// one caller's flood is refused (unavailable, naming this caller's limit)
	// while the others are served. At most MaxInFlight. Default 1,024, or a
	// quarter of MaxInFlight when that is smaller: far above what an honest
	// client has in flight (a CLI one, an SDK worker its concurrency and a
	// heartbeat per job), far below the service's whole budget.
	MaxInFlightPerCaller int
	// MaxInFlightPerWorkspace is a workspace's share of MaxInFlight: once
	// the requests in flight reach MaxInFlight less it, a workspace with
	// this many in flight is refused (unavailable, naming its share), so
	// that the rest stays for the other workspaces — one workspace's many
	// identities, each under MaxInFlightPerCaller (its admin may add up to
	// MaxMembersPerWorkspace), took every place, and every other
	// workspace's requests were refused. Below that a workspace may have
	// more. At most MaxInFlight. Default a quarter of MaxInFlight, or
	// MaxInFlightPerCaller when that is larger.
	MaxInFlightPerWorkspace int
	// MaxBytesInFlightPerWorkspace is a workspace's share of
	// MaxBytesInFlight, as MaxInFlightPerWorkspace of their number. At most
	// MaxBytesInFlight. Default a quarter of MaxBytesInFlight, or
	// MaxBytesInFlightPerCaller when that is larger.
	MaxBytesInFlightPerWorkspace int
	// MaxBytesInFlight bounds the bytes of the requests handled at once
	// (their bodies, as they came): one over it is refused with
	// unavailable, unless none is in flight. The service holds a few copies
	// of each as it decodes and seals it. Default 256 MiB.
	MaxBytesInFlight int
	// MaxBytesInFlightPerCaller bounds the bytes of one caller's requests
	// handled at once, as MaxInFlightPerCaller their number: a caller with
	// a thousand large commands in flight held ~800 MiB of the service's
	// heap. At most MaxBytesInFlight. Default 32 MiB, or a quarter of
	// MaxBytesInFlight when that is smaller: twice what an SDK worker
	// running 64 jobs holds when each reports a result at the bound.
	MaxBytesInFlightPerCaller int
	// MaxBacklog bounds the requests received and not yet taken in — waiting
	// in the service's process for its handlers, across its command and
	// query endpoints — before the service acts: past it, the identity that
	// sent the most requests in the current second, if at least a quarter
	// of its MaxInFlightPerCaller, is benched (BenchFor) — or, when none
	// did, the heaviest identities of the workspace whose identities sent
	// that together, as many as it takes to bring the rest under it — and
	// the next at most every 50 ms while the backlog stays past it (the
	// service looks every 256 requests it takes in: an idle one, never). Requests come faster than the
	// service takes them in only from callers that do not wait for their
	// answers; without it four identities each sending small commands as
	// fast as their connections took them (each under BenchFor's counts,
	// which the service reaches only as it takes requests in) grew the
	// process by ~60 MB a second — requests waiting, and the NATS server's
	// mapping of each one's reply — and another caller got 2 commands
	// answered in a minute. Each endpoint holds at most four times it
	// (nats.go drops what comes past). Default 16,384.
	MaxBacklog int
	// BenchFor is how long the requests of an identity that floods are
	// refused and, with the embedded server, the identity is kept off it
	// (AuthConfig.Bench): one whose requests within one second, answered or
	// refused, pass eight times its MaxBytesInFlightPerCaller in bytes or 64
	// times its MaxInFlightPerCaller in requests — several times what the
	// service can take in a second — or that is refused for its own limits
	// sixteen times its MaxInFlightPerCaller: a client sending without
	// waiting for its answers. Refusing its requests costs the flooder
	// nothing: they still reached the service, and a flood of large ones
	// made the NATS server cut the service's own connection as a slow
	// consumer. Default DefaultBenchFor; negative: never.
	BenchFor time.Duration
	// MaxReplyBytes bounds a reply: a query's result is kept 4 KiB under it
	// (list queries answer as many items as fit, and a cursor to continue;
	// a single result too large is refused with too_large). Default, and at
	// most, the largest message the NATS connection carries (max_payload,
	// 1 MiB by default). At least 8 KiB.
	MaxReplyBytes int
	// FeedMaxBytes bounds the event feed's stream (DWR_EVENTS): past it, its
	// oldest events are dropped. The feed is derived and read live (an
	// aggregate's history comes from the views), so what it drops is
	// never needed again; it keeps its last event, from which a writer's
	// start resumes it. Default DefaultFeedMaxBytes (1 GiB); -1: no bound.
	FeedMaxBytes int64
	// MaxQueues bounds the queues of the whole service: each is a durable
	// consumer of the work stream, whose MaxConsumers it sets. A command
	// that would give a task (or a queue configuration) a new queue past
	// it is refused (conflict). Default DefaultMaxQueues (1,000,
	// JetStream's own default per stream).
	MaxQueues int
	// MaxQueuesPerWorkspace bounds the queues of one workspace, so that
	// one workspace's clients cannot take every queue of the service.
	// Default DefaultMaxQueuesPerWorkspace (100); -1: only MaxQueues.
	MaxQueuesPerWorkspace int
	// MaxSchedulesPerWorkspace bounds the schedules of one workspace: each
	// fires on the writer's timers, which every workspace's timers (retry
	// backoffs, deadlines, waits) wait behind, so that one workspace's
	// clients cannot make schedules without end. A schedule.create past it
	// is refused (conflict). Default DefaultMaxSchedulesPerWorkspace (100);
	// -1: none.
	MaxSchedulesPerWorkspace int
	// MaxMembersPerWorkspace bounds the members of one workspace: each is a
	// user of the NATS server, whose users are rebuilt from a workspace's
	// members at every change of them (and every command of the workspace
	// reads them), so that one workspace's admins cannot make that cost
	// grow without end for every workspace. A member.add of a new member
	// past it is refused (conflict). Default DefaultMaxMembersPerWorkspace
	// (1,000); -1: none.
	MaxMembersPerWorkspace int
	// ArtifactMaxBytes bounds one artifact. Default
	// DefaultArtifactMaxBytes (1 GiB).
	ArtifactMaxBytes int64
	// MaxArtifactBytesPerWorkspace bounds the bytes of one workspace's
	// artifacts, so that one workspace's members cannot fill the store and
	// the disk every workspace shares: a put past it is refused (too_large,
	// /size). Default DefaultMaxArtifactBytesPerWorkspace (10 GiB); -1:
	// none.
	MaxArtifactBytesPerWorkspace int64
	// ArtifactStoreMaxBytes bounds the artifact store (the object store
	// <prefix>-artifacts): past it, a put is refused. Default 0: no bound.
	ArtifactStoreMaxBytes int64
	// ArtifactRetention is how long the artifacts a task made and no task
	// names are kept once the task's goal ended (SweepArtifacts). Default
	// DefaultArtifactRetention (a week); negative: kept forever.
	ArtifactRetention time.Duration
	// Clock is the time source. Default time.Now.
	Clock func() time.Time
	// Tracer makes the OpenTelemetry spans of the commands (dwr.command,
	// dwr.commit) and of the work items dispatched (dwr.dispatch), children
	// of the trace a request carries (traceparent). Default: none are made.
	Tracer trace.TracerProvider
	// Metrics, when set, is the registry the service's Prometheus metrics
	// are registered on (dwr_*; see Service.Metrics), private to this
	// service: NewMetricsRegistry makes one with the Go and process
	// collectors, as dwr serve does. Default nil: no metrics are kept.
	Metrics *prometheus.Registry
	// Logger receives the service's logs. Default: discarded.
	Logger *slog.Logger
	// Version is reported by the micro service. Default "0.1.0".
	Version string
	// Auth says whom the service serves, and as whom.
	Auth AuthConfig
	// Encryption seals the payloads of commands (task inputs, results,
	// checkpoints, signal payloads, verdict evidence) with the data key of
	// their workspace, or of their goal (schemas.Envelope.Privacy), before
	// they are decided: the log, the event feed, the work queue and the
	// views hold them sealed, and replies carry them opened. The data keys
	// live in the stream <PREFIX>_KEYS, wrapped by MasterKey.
	Encryption bool
	// MasterKey wraps the data keys (eventstore.MasterKeyBytes); required
	// with Encryption. Every replica of one log must hold the same key.
	MasterKey []byte
	// TokenKey is the secret attempt tokens are derived with (at least
	// TokenKeyBytes). Default: a random key the service keeps in its KV
	// bucket <prefix>-keys, made by the first service that needs it, so
	// that every replica and every restart derives the same tokens. Give
	// one to keep it elsewhere (a file of the data directory, a secret
	// store); replicas of one log must share it.
	TokenKey []byte
	// DefaultLease is the lease of a queue whose work consumer cannot be
	// found (an executor that consumes under another name): how long an
	// attempt not heard from keeps its task. Default 30s, the SDK's.
	DefaultLease time.Duration
	// LeaseGrace is added to a queue's lease before a claim may supersede
	// an attempt not heard from: the lease is counted from the attempt's
	// last claim, checkpoint or heartbeat. Default 1s.
	LeaseGrace time.Duration
	// LogKey is the secret that authenticates the log's records (at least
	// eventstore.LogKeySize bytes; see LoadLogKey). Every replica of one log
	// must hold the same key. Required.
	LogKey []byte
	// RetiredLogKeys are the log keys that rotations retired, the most
	// recent first (OpenRetiredLogKeys): the log's records before the
	// rotations are verified with them. Records are written under LogKey.
	RetiredLogKeys [][]byte
	// AcceptVerifiedPrefix makes a start on a log that fails verification
	// accept its verified prefix: the commands after it are reported lost
	// (logged one by one), the views are rebuilt from the prefix and an
	// acceptance record is appended, after which the writer carries on (see
	// AcceptVerifiedPrefix). Without it such a start fails.
	AcceptVerifiedPrefix bool
	// StreamCheckInterval is how often the running service checks the log
	// stream's configuration again; a change stops it. Default 10s.
	StreamCheckInterval time.Duration
	// MinFreeDisk is the free space kept on the disk holding the views
	// (with the embedded server, its streams too): below it new commands
	// are refused (unavailable, "storage is full") until room is made,
	// checked every second, so that no write of the log or the views meets
	// a full disk. Default DefaultMinFreeDisk of the disk's size; -1: none.
	MinFreeDisk int64
	// TrustBelowCheckpoint skips, on start, reading the log below the views'
	// checkpoint to check its chain of hashes (one read of the whole log,
	// without decoding): the start is faster on a very long log, but a
	// record lost or changed below the checkpoint is then found only by
	// `dwr admin verify` or a rebuild (the log's own counts, checked
	// instead, can miss it).
	TrustBelowCheckpoint bool
	// Log is the log the service writes and reads. Default: the JetStream
	// log of Prefix and Partition on the connection (stream <PREFIX>_LOG),
	// made if missing, whose stream configuration is checked on start and
	// every StreamCheckInterval. Another Log — eventstore.NewMemoryLog() for
	// a test that does not test storage — is used as it is; it is checked
	// like the JetStream log if it has a stream (a CheckStream method). The
	// derived streams (work items, event feed), the writer lease and the
	// token key stay in JetStream on the connection either way.
	Log eventstore.Log
}

func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = "dwr"
	}
	if c.Partition == "" {
		c.Partition = "0"
	}
	c.Replicas = cmp.Or(c.Replicas, 1)
	if c.WriterID == "" {
		c.WriterID = ulid.Make().String()
	}
	c.LeaseTTL = cmp.Or(c.LeaseTTL, DefaultLeaseTTL)
	c.MinSeqWait = cmp.Or(c.MinSeqWait, 5*time.Second)
	c.MaxInFlight = cmp.Or(c.MaxInFlight, DefaultMaxInFlight)
	c.MaxQueriesInFlight = cmp.Or(c.MaxQueriesInFlight, max(1, c.MaxInFlight*3/4))
	c.MaxBytesInFlight = cmp.Or(c.MaxBytesInFlight, DefaultMaxBytesInFlight)
	c.MaxBytesInFlightPerCaller = cmp.Or(c.MaxBytesInFlightPerCaller, max(1, min(DefaultMaxBytesInFlightPerCaller, c.MaxBytesInFlight/4)))
	c.MaxQueriesRunning = cmp.Or(c.MaxQueriesRunning, max(4, 2*runtime.GOMAXPROCS(0)))
	c.BenchFor = cmp.Or(c.BenchFor, DefaultBenchFor)
	c.MaxWriterBytes = cmp.Or(c.MaxWriterBytes, DefaultMaxWriterBytes)
	c.MaxWriterCommands = cmp.Or(c.MaxWriterCommands, DefaultMaxWriterCommands)
	c.MaxBacklog = cmp.Or(c.MaxBacklog, DefaultMaxBacklog)
	c.MaxInFlightPerCaller = cmp.Or(c.MaxInFlightPerCaller, max(1, min(DefaultMaxInFlightPerCaller, c.MaxInFlight/4)))
	c.MaxInFlightPerWorkspace = cmp.Or(c.MaxInFlightPerWorkspace, min(c.MaxInFlight, max(c.MaxInFlight/4, c.MaxInFlightPerCaller)))
	c.MaxBytesInFlightPerWorkspace = cmp.Or(c.MaxBytesInFlightPerWorkspace, min(c.MaxBytesInFlight, max(c.MaxBytesInFlight/4, c.MaxBytesInFlightPerCaller)))
	c.FeedMaxBytes = cmp.Or(c.FeedMaxBytes, DefaultFeedMaxBytes)
	if c.ArtifactMaxBytes <= 0 {
		c.ArtifactMaxBytes = DefaultArtifactMaxBytes
	}
	if c.MaxQueues <= 0 {
		c.MaxQueues = DefaultMaxQueues
	}
	c.MaxQueuesPerWorkspace = cmp.Or(c.MaxQueuesPerWorkspace, min(DefaultMaxQueuesPerWorkspace, c.MaxQueues))
	c.MaxSchedulesPerWorkspace = cmp.Or(c.MaxSchedulesPerWorkspace, DefaultMaxSchedulesPerWorkspace)
	c.MaxMembersPerWorkspace = cmp.Or(c.MaxMembersPerWorkspace, DefaultMaxMembersPerWorkspace)
	c.ArtifactRetention = cmp.Or(c.ArtifactRetention, DefaultArtifactRetention)
	c.MaxArtifactBytesPerWorkspace = cmp.Or(c.MaxArtifactBytesPerWorkspace, DefaultMaxArtifactBytesPerWorkspace)
	if c.ArtifactStoreMaxBytes <= 0 {
		c.ArtifactStoreMaxBytes = -1
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Tracer == nil {
		c.Tracer = noop.NewTracerProvider()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Version == "" {
		c.Version = "0.1.0"
	}
	c.DefaultLease = cmp.Or(c.DefaultLease, 30*time.Second)
	c.LeaseGrace = cmp.Or(c.LeaseGrace, time.Second)
	c.StreamCheckInterval = cmp.Or(c.StreamCheckInterval, 10*time.Second)
	return c
}

// Service runs one replica: the views following the log, the query
// endpoints, and — while it holds the writer lease — the writer with its
// command endpoints.
type Service struct {
	cfg      Config
	tracer   trace.Tracer
	key      *eventstore.LogKey
	nc       *nats.Conn
	js       jetstream.JetStream
	store    *projections.Store
	log      eventstore.Log
	feed     *feed
	dispatch *dispatcher
	// artifacts is the artifact store, and the uploads in progress.
	artifacts *artifactStore
	// privacy seals and opens payloads; nil when Config.Encryption is off.
	privacy *privacy
	// advisories is the stream keeping the work stream's max-deliveries advisories.
	advisories string
	admission  *admission
	// commandsEP, queriesEP and consumerInfoEP are the endpoints serving
	// commands (while this replica writes), queries and the consumers'
	// info: their backlog is watched.
	commandsEP, queriesEP, consumerInfoEP atomic.Pointer[endpoints.Service]
	// intake counts the requests taken in; backlogBenched is when
	// (UnixNano) a caller was last benched for the backlog (checkBacklog).
	intake, backlogBenched atomic.Int64
	// onIntake, when set (tests), is called as each request is taken in.
	onIntake atomic.Pointer[func()]
	// onAnswered, when set (tests), is called as the writer has answered a
	// record's commands, before the views apply it.
	onAnswered atomic.Pointer[func()]
	runners    *runners                            // run the handlers of requests
	reading    *turns                              // the queries reading the views, in turn by caller
	deciding   *turns                              // the commands' bytes handed to the writer, in turn by caller
	queriesJS  atomic.Pointer[jetstream.JetStream] // on the queries' connection (readJS)
	feedHandle atomic.Pointer[streamHandle]        // the feed's stream on the queries' connection (feedStream)
	// consumerInfos answers the executors' consumer info requests, on the
	// queries' connection.
	consumerInfos atomic.Pointer[consumerInfos]
	// onQuery, when set, is called as a query starts to be served, with its
	// caller's name and the query: tests hold queries in flight with it.
	onQuery atomic.Pointer[func(actor, query string)]
	// logEnd is the highest log end a query asked this replica's log for
	// (checkMinSeq); the writer knows its own.
	logEnd atomic.Uint64
	// admins maps the service's admins' keys to their names.
	admins map[string]string
	// tokenKey derives attempt tokens; leases caches the queues' leases;
	// refused counts the attempts' commands refused.
	tokenKey []byte
	leases   leases
	refused  refusals
	// metrics counts what Config.Metrics reports; nil without it.
	metrics *metrics

	// lease is the writer lease while this replica holds it: nothing is
	// decided once it is no longer valid. leasePaused stops its renewals
	// (tests).
	lease       atomic.Pointer[lease]
	leasePaused atomic.Bool
	// decided counts the commands this replica's writer took to decide.
	decided atomic.Uint64
	// jsUnreachable: the writer lease could not be read the last time it
	// was tried (Health).
	jsUnreachable atomic.Bool
	// standbyCmds answers commands "unavailable" while no writer serves
	// them (guarded by standbyMu). leaseGone: the lease shows no writer
	// (no renewal seen for TTL/2, or no lease); writerAbsent: the writer's
	// liveness subject has no responder (probeWriter).
	standbyMu    sync.Mutex
	standbyCmds  *nats.Subscription
	leaseGone    atomic.Bool
	writerAbsent atomic.Bool

	mu        sync.RWMutex
	committer *eventstore.Committer[*request]
	alive     *liveness     // when the running attempts were last alive; nil when not the writer
	timerWake chan struct{} // wakes the writer's timer loop; nil when not the writer
	writing   bool          // this replica is the writer: it applies its own records
	changed   chan struct{} // closed and replaced when writing changes
	ready     chan struct{}
	readyOnce sync.Once
	// reloads serializes the reloads of the NATS server's users
	// (reloadMembers) and remembers what the last one covered.
	reloads struct {
		sync.Mutex
		upTo uint64 // every member change up to this record is in force
	}
	// disk knows the room left on the disk holding the views above
	// Config.MinFreeDisk: new commands and uploads are refused without it.
	disk *diskGauge
}

// New returns a service on nc keeping its views in store.
func New(nc *nats.Conn, store *projections.Store, cfg Config) (*Service, error) {
	cfg = cfg.withDefaults()
	if !domain.ValidName(cfg.Prefix) || !domain.ValidName(cfg.Partition) {
		return nil, fmt.Errorf("handlers: prefix %q and partition %q must be valid subject tokens", cfg.Prefix, cfg.Partition)
	}
	if cfg.MaxInFlight < 0 || cfg.MaxQueriesInFlight < 0 || cfg.MaxQueriesInFlight > cfg.MaxInFlight ||
		cfg.MaxInFlightPerCaller < 0 || cfg.MaxInFlightPerCaller > cfg.MaxInFlight || cfg.MaxQueriesRunning < 0 || cfg.MaxWriterBytes < 0 ||
		cfg.MaxWriterCommands < 0 || cfg.MaxBacklog < 0 || cfg.MaxBytesInFlight < 0 || cfg.MaxBytesInFlightPerCaller < 0 || cfg.MaxBytesInFlightPerCaller > cfg.MaxBytesInFlight {
		return nil, fmt.Errorf("handlers: MaxInFlight %d, MaxQueriesInFlight %d, MaxInFlightPerCaller %d, MaxQueriesRunning %d, MaxWriterBytes %d, MaxWriterCommands %d, MaxBacklog %d, MaxBytesInFlight %d and MaxBytesInFlightPerCaller %d must be positive, the second and third at most MaxInFlight, the last at most MaxBytesInFlight",
			cfg.MaxInFlight, cfg.MaxQueriesInFlight, cfg.MaxInFlightPerCaller, cfg.MaxQueriesRunning, cfg.MaxWriterBytes, cfg.MaxWriterCommands, cfg.MaxBacklog, cfg.MaxBytesInFlight, cfg.MaxBytesInFlightPerCaller)
	}
	if cfg.MaxInFlightPerWorkspace < 0 || cfg.MaxInFlightPerWorkspace > cfg.MaxInFlight ||
		cfg.MaxBytesInFlightPerWorkspace < 0 || cfg.MaxBytesInFlightPerWorkspace > cfg.MaxBytesInFlight {
		return nil, fmt.Errorf("handlers: MaxInFlightPerWorkspace %d and MaxBytesInFlightPerWorkspace %d must be positive, at most MaxInFlight %d and MaxBytesInFlight %d",
			cfg.MaxInFlightPerWorkspace, cfg.MaxBytesInFlightPerWorkspace, cfg.MaxInFlight, cfg.MaxBytesInFlight)
	}
	if cfg.FeedMaxBytes != -1 && cfg.FeedMaxBytes < minFeedBytes {
		return nil, fmt.Errorf("handlers: FeedMaxBytes %d must be -1 (no bound) or at least %d (1 MiB, the largest event)", cfg.FeedMaxBytes, minFeedBytes)
	}
	if cfg.MaxReplyBytes != 0 && cfg.MaxReplyBytes < minReplyBytes {
		return nil, fmt.Errorf("handlers: MaxReplyBytes %d is below the least, %d", cfg.MaxReplyBytes, minReplyBytes)
	}
	if n := len(cfg.TokenKey); n > 0 && n < TokenKeyBytes {
		return nil, fmt.Errorf("handlers: the token key is %d bytes; at least %d are needed", n, TokenKeyBytes)
	}
	key, err := eventstore.NewLogKeyRing(cfg.LogKey, cfg.RetiredLogKeys...)
	if err != nil {
		return nil, fmt.Errorf("handlers: Config.LogKey: %w", err)
	}
	cfg.Logger.Info("dwr: log key", "id", key.ID(), "retired", strings.Join(key.IDs()[1:], ","))
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	admins := map[string]string{}
	for _, a := range cfg.Auth.Admins {
		admins[a.PublicKey] = a.Name
	}
	s := &Service{cfg: cfg, tracer: cfg.Tracer.Tracer(tracerName), key: key, nc: nc, js: js, store: store, admission: newAdmission(cfg), disk: newDiskGauge(store.Dir(), cfg.MinFreeDisk, cfg.Logger),
		runners: newRunners(maxIdleRunners), reading: newTurns(cfg.MaxQueriesRunning, 0), deciding: newTurns(cfg.MaxWriterBytes, cfg.MaxWriterCommands), admins: admins, ready: make(chan struct{}), changed: make(chan struct{})}
	if s.metrics, err = newMetrics(cfg.Metrics, s); err != nil {
		return nil, fmt.Errorf("handlers: Config.Metrics: %w", err)
	}
	return s, nil
}

// Ready is closed once the replica serves queries and, if it is the writer,
// commands.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Log returns the log once Run has opened it.
func (s *Service) Log() eventstore.Log { return s.log }

// LogKey returns the key that authenticates the log's records.
func (s *Service) LogKey() *eventstore.LogKey { return s.key }

// Run serves until ctx ends or a part fails; it returns nil on ctx's end.
func (s *Service) Run(ctx context.Context) error {
	defer s.runners.stop()
	// Run's other deferred calls stop the endpoints first; then the
	// requests already taken are answered before Run returns (and the
	// views are closed after it).
	defer func() {
		if wait := s.cfg.MinSeqWait + 5*time.Second; !s.admission.stop(wait) {
			s.cfg.Logger.Warn("handlers: requests still in flight when the service stopped", "waited", wait)
		}
	}()
	// A cluster may still be electing its JetStream leader: keep trying,
	// unless the log's stream is not as declared (it is never changed).
	l := s.cfg.Log
	if err := s.waitJetStream(ctx); err != nil {
		return nil // ctx ended
	}
	if l == nil {
		err := s.retryAPI(ctx, "open the log", func(ctx context.Context) (err error) {
			l, err = eventstore.NewJetStreamLog(ctx, s.js, s.logConfig())
			return err
		})
		if err != nil {
			return permanent(err) // nil when ctx ended
		}
	}
	s.log = l
	// An append in flight when the log's leader goes (or this connection
	// does) tries again as soon as a new one is elected, not after its
	// attempt's timeout.
	if jl, ok := l.(interface {
		RetryOnChange(*nats.Conn) (func(), error)
	}); ok {
		if stop, err := jl.RetryOnChange(s.nc); err != nil {
			s.cfg.Logger.Warn("handlers: appends will wait out their attempt's timeout when the log's leader changes", "err", err)
		} else {
			defer stop()
		}
	}
	// The log's stream remembers its replicas: the derived streams and the
	// buckets follow it, so a replica started without --replicas never
	// lowers what the cluster keeps (a log with fewer than --replicas was
	// refused above).
	if jl, ok := l.(interface{ Replicas() int }); ok && jl.Replicas() > s.cfg.Replicas {
		s.cfg.Logger.Info("handlers: the log's stream has more replicas than configured; the derived streams and buckets follow the log",
			"log_replicas", jl.Replicas(), "configured", s.cfg.Replicas)
		s.cfg.Replicas = jl.Replicas()
	}
	// A log stream just created on a cluster has no leader for a moment, and
	// reading its end then gets no answer until a try's timeout: ask for
	// its state (as its leader gives it) first.
	if err := s.retryAPI(ctx, "read the log's state", func(ctx context.Context) error {
		_, err := l.Stat(ctx)
		return err
	}); err != nil {
		return permanent(err)
	}
	if s.cfg.AcceptVerifiedPrefix {
		if err := s.retry(ctx, "accept the log's verified prefix", func(ctx context.Context) error {
			_, err := AcceptVerifiedPrefix(ctx, l, s.key, s.store, s.cfg.WriterID, s.cfg.Clock(), s.cfg.Logger)
			return err
		}); err != nil {
			return permanent(err)
		}
	}
	// Nothing is served before the log verifies from the views' last record
	// on, and still holds what the views were built from below it.
	if err := s.retry(ctx, "verify the log and catch the views up", s.catchUpViews); err != nil {
		return permanent(err)
	}
	if err := s.retryAPI(ctx, "open the event feed", func(ctx context.Context) (err error) {
		s.feed, err = newFeed(ctx, s.js, s.cfg, s.cfg.Logger)
		return err
	}); err != nil {
		return nil
	}
	if err := s.retryAPI(ctx, "open the work stream", func(ctx context.Context) (err error) {
		s.dispatch, err = newDispatcher(ctx, s.js, s.cfg)
		if err != nil {
			return err
		}
		s.dispatch.changed = func(consumer string) {
			if c := s.consumerInfos.Load(); c != nil {
				c.forget(s.dispatch.stream, consumer, nil)
			}
		}
		s.advisories, err = advisoriesStream(ctx, s.js, s.cfg, s.dispatch.stream)
		return err
	}); err != nil {
		return nil
	}
	if err := s.retryAPI(ctx, "read the attempt token key", func(ctx context.Context) (err error) {
		s.tokenKey, err = tokenKey(ctx, s.js, s.cfg)
		return err
	}); err != nil {
		return nil
	}
	if err := s.retryAPI(ctx, "open the artifact store", func(ctx context.Context) (err error) {
		s.artifacts, err = newArtifactStore(ctx, s.js, s.cfg)
		return err
	}); err != nil {
		return nil
	}
	if s.cfg.Encryption {
		var keys *eventstore.Keyring
		if err := s.retryAPI(ctx, "open the keyring", func(ctx context.Context) (err error) {
			keys, err = eventstore.OpenKeyring(ctx, s.js, s.cfg.Prefix, s.cfg.Replicas, s.cfg.MasterKey)
			return err
		}); err != nil {
			return permanent(err)
		}
		s.privacy = &privacy{keys: keys}
		s.store.OnApplied(s.privacy.forget)
		s.artifacts.privacy = s.privacy
		s.dispatch.reseal = func(ws, queue string, b []byte) []byte {
			return s.privacy.resealItem(ws, queue, s.cfg.Clock(), b)
		}
	}
	stopQueries, err := s.startQueries()
	if err != nil {
		return err
	}
	defer stopQueries()
	stopConsumerInfo, err := s.startConsumerInfo()
	if err != nil {
		return err
	}
	defer stopConsumerInfo()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 3)
	wg.Go(func() {
		if err := s.followLoop(ctx); err != nil {
			errc <- fmt.Errorf("handlers: views: %w", err)
		}
	})
	wg.Go(func() {
		if err := s.watchStorage(ctx); err != nil {
			errc <- err
		}
	})
	wg.Go(func() { s.disk.watch(ctx) })
	if s.artifacts.room != nil {
		wg.Go(func() { s.artifacts.room.follow(ctx, s.artifacts.obs, s.cfg.Logger) })
	}
	wg.Go(func() {
		if err := s.writerLoop(ctx); err != nil {
			errc <- err
		}
	})
	select {
	case <-ctx.Done():
		err = nil
	case err = <-errc:
	}
	cancel()
	wg.Wait()
	return err
}

// waitJetStream returns once JetStream answers (its meta leader, on a
// cluster), asking every 100 ms with a short timeout: a fresh cluster
// elects its meta leader seconds after it starts, and a JetStream API
// request sent before gets no answer at all, so that the streams' creation
// would wait out the whole per-try timeout of retry. It returns ctx's error
// when ctx ends first.
func (s *Service) waitJetStream(ctx context.Context) error {
	began, logged := time.Now(), false
	for {
		tctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := s.js.AccountInfo(tctx)
		cancel()
		if err == nil {
			if logged {
				s.cfg.Logger.Info("handlers: JetStream answers", "after", time.Since(began).Round(time.Millisecond))
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !logged && time.Since(began) > 2*time.Second {
			s.cfg.Logger.Warn("handlers: waiting for JetStream (a cluster electing its meta leader?)", "err", err)
			logged = true
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// followLoop keeps the views following the log while this replica is not
// the writer (the writer applies its own records as it commits them).
func (s *Service) followLoop(ctx context.Context) error {
	for ctx.Err() == nil {
		s.mu.RLock()
		writing, changed := s.writing, s.changed
		s.mu.RUnlock()
		if writing {
			select {
			case <-changed:
			case <-ctx.Done():
			}
			continue
		}
		fctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-changed:
				cancel()
			case <-fctx.Done():
			}
		}()
		err := s.store.Follow(fctx, s.log, s.key)
		cancel()
		if err == nil || ctx.Err() != nil || fctx.Err() != nil {
			continue
		}
		if errors.Is(err, eventstore.ErrIntegrity) || errors.Is(err, projections.ErrDamaged) {
			return err
		}
		// A read that failed while the cluster changes (no stream leader
		// for a while, a node gone): follow again, from the views' end.
		s.cfg.Logger.Warn("handlers: following the log failed; following it again", "err", err)
		if !sleepCtx(ctx, 500*time.Millisecond) {
			return nil
		}
	}
	return nil
}

func (s *Service) setWriting(v bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writing = v
	close(s.changed)
	s.changed = make(chan struct{})
}

// writerLoop holds the writer lease when it can and runs the writer while it
// holds it; it steps down when fenced or when the lease runs out, and tries
// again.
func (s *Service) writerLoop(ctx context.Context) error {
	// The lease is renewed on a connection of its own: on the service's,
	// its renewals queued behind the commands' traffic — a flood of large
	// commands from one client cost the writer its lease, and every caller
	// found no writer until it came back.
	var nc *nats.Conn
	if err := s.retryAPI(ctx, "connect for the writer lease", func(context.Context) (err error) {
		nc, err = s.connectionOf("lease")
		return err
	}); err != nil {
		return nil
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("handlers: the writer lease's JetStream: %w", err)
	}
	var l *lease
	if err := s.retryAPI(ctx, "open the writer lease", func(ctx context.Context) (err error) {
		l, err = newLease(ctx, js, s.cfg)
		return err
	}); err != nil {
		return nil
	}
	l.paused = &s.leasePaused
	l.standby = func(writerGone bool) {
		s.jsUnreachable.Store(false)
		s.readyOnce.Do(func() { close(s.ready) })
		s.leaseGone.Store(writerGone)
		s.answerUnavailable(s.standbyAnswers())
	}
	defer s.answerUnavailable(false)
	failing := false
	for ctx.Err() == nil {
		if err := s.acquire(ctx, l); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !failing { // once per outage, not at every try
				s.cfg.Logger.Warn("handlers: writer lease unavailable (JetStream unreachable?); not ready until it is reachable again", "err", err)
			}
			failing = true
			s.jsUnreachable.Store(true)
			if !sleepCtx(ctx, l.ttl/4) {
				return nil
			}
			continue
		}
		s.jsUnreachable.Store(false)
		if failing {
			s.cfg.Logger.Info("handlers: writer lease reachable again")
			failing = false
		}
		err := s.runWriter(ctx, l)
		l.release()
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, eventstore.ErrIntegrity) || errors.Is(err, projections.ErrDamaged) {
			return err // damage: nothing more is served
		}
		s.cfg.Logger.Warn("handlers: writer stepped down; will try again", "err", err)
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return nil
		}
	}
	return nil
}

// acquire is l.acquire while probeWriter watches the writer's liveness
// subject; it returns once the probe has stopped, with the standby's view
// of the writer forgotten.
func (s *Service) acquire(ctx context.Context, l *lease) error {
	pctx, cancel := context.WithCancel(ctx)
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		s.probeWriter(pctx)
	}()
	err := l.acquire(ctx)
	cancel()
	<-probed
	s.leaseGone.Store(false)
	s.writerAbsent.Store(false)
	return err
}

// standbyAnswers reports whether a standby answers commands "unavailable":
// the lease shows no writer, or the writer's liveness subject has no
// responder.
func (s *Service) standbyAnswers() bool { return s.leaseGone.Load() || s.writerAbsent.Load() }

// probeEvery is how often a standby asks whether the writer still listens.
const probeEvery = 100 * time.Millisecond

// probeWriter asks the writer's liveness subject every probeEvery until
// ctx ends. A writer that dies (kill -9, a lost connection) loses its
// subscriptions at once, and NATS answers "no responders": the standby then
// answers commands "unavailable" (retry with the same id) within about
// probeEvery, where the lease shows it only after TTL/2 without renewal —
// and meanwhile the clients' requests would find no responders. A writer
// that is alive but paused keeps its subscription: the probe times out, and
// the lease decides. The subject is the service account's own: no client
// can answer it.
func (s *Service) probeWriter(ctx context.Context) {
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, probeEvery)
		_, err := s.nc.RequestWithContext(rctx, s.writerSubject(), nil)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if absent := errors.Is(err, nats.ErrNoResponders); absent != s.writerAbsent.Load() {
			s.writerAbsent.Store(absent)
			s.answerUnavailable(s.standbyAnswers())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// writerSubject is the writer's liveness subject, <prefix>.writer.<partition>.
func (s *Service) writerSubject() string { return s.cfg.Prefix + ".writer." + s.cfg.Partition }

// answerUnavailable, on, subscribes this replica (not the writer) to every
// command subject to answer "unavailable, retry" while no writer serves
// them, so that a client is told to retry with the same command id instead
// of finding no responders; off, it unsubscribes. The writer's endpoints
// are not in a queue group, so the first reply wins: this one comes late
// (unavailableDelay), and a writer that serves answers first.
func (s *Service) answerUnavailable(on bool) {
	s.standbyMu.Lock()
	defer s.standbyMu.Unlock()
	if on == (s.standbyCmds != nil) {
		return
	}
	if !on {
		_ = s.standbyCmds.Unsubscribe()
		s.standbyCmds = nil
		return
	}
	sub, err := s.nc.Subscribe(s.cfg.Prefix+".cmd.>", func(m *nats.Msg) {
		if m.Reply == "" {
			return
		}
		time.AfterFunc(unavailableDelay, func() {
			_ = m.Respond(errResponse(noWriter(time.Now(), s.cfg.LeaseTTL)))
		})
	})
	if err != nil {
		s.cfg.Logger.Warn("handlers: could not answer commands while no writer serves them", "err", err)
		return
	}
	s.standbyCmds = sub
}

// unavailableDelay is how long a replica that is not the writer waits
// before answering a command "unavailable".
const unavailableDelay = 100 * time.Millisecond

// noWriter is the refusal of a command while no writer serves: retry with
// the same command id, soon.
func noWriter(now time.Time, ttl time.Duration) *schemas.Error {
	at := now.Add(max(ttl/8, 50*time.Millisecond)).UTC()
	return &schemas.Error{Code: schemas.CodeUnavailable, RetryAfter: &at,
		Message: "no writer is available right now (a new one is being elected): retry with the same command id"}
}

// streamLog is a log kept in a JetStream stream (eventstore.JetStreamLog):
// its stream's configuration is declared once and checked, never changed.
type streamLog interface {
	eventstore.Log
	// CheckStream returns an error wrapping eventstore.ErrIntegrity when the
	// stream's configuration is not cfg's.
	CheckStream(ctx context.Context, cfg eventstore.JetStreamConfig) error
}

// logConfig is the configuration of the log this service writes.
func (s *Service) logConfig() eventstore.JetStreamConfig {
	return eventstore.JetStreamConfig{Prefix: s.cfg.Prefix, Partition: s.cfg.Partition, Replicas: s.cfg.Replicas}
}

// retry runs fn, each try bounded by 5 s, until it succeeds or ctx ends
// (then it returns ctx's error), logging each failure. An error wrapping
// eventstore.ErrIntegrity or projections.ErrDamaged is not retried: it is
// returned at once.
func (s *Service) retry(ctx context.Context, what string, fn func(context.Context) error) error {
	return s.retryFrom(ctx, 5*time.Second, 250*time.Millisecond, what, fn)
}

// retryAPI is retry for a few JetStream API requests (creating or checking
// a stream, a bucket, a key): its first try is bounded by 250 ms, the next
// by twice the one before, up to 5 s, with 100 ms before the second. On a
// fresh cluster, replicas starting together ask to create the same streams
// at once, and a create the meta leader finds already in flight goes
// unanswered (it is proposed again, and the stream made once): a short
// first try asks again soon, and finds the stream there. A create that
// takes longer is answered on a later, longer try.
func (s *Service) retryAPI(ctx context.Context, what string, fn func(context.Context) error) error {
	return s.retryFrom(ctx, 250*time.Millisecond, 100*time.Millisecond, what, fn)
}

func (s *Service) retryFrom(ctx context.Context, try, wait time.Duration, what string, fn func(context.Context) error) error {
	for ; ; wait, try = min(2*wait, 5*time.Second), min(2*try, 5*time.Second) {
		tctx, cancel := context.WithTimeout(ctx, try)
		err := fn(tctx)
		cancel()
		if err == nil {
			return nil
		}
		if errors.Is(err, eventstore.ErrIntegrity) || errors.Is(err, projections.ErrDamaged) || errors.Is(err, eventstore.ErrMasterKey) {
			return fmt.Errorf("handlers: %s: %w", what, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.cfg.Logger.Warn("handlers: could not "+what+"; retrying", "err", err, "in", wait)
		if !sleepCtx(ctx, wait) {
			return ctx.Err()
		}
	}
}

// permanent returns err unless it only says that the context ended: what
// Run returns after a retry gave up.
func permanent(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// runWriter catches up, fences older writers, serves the command endpoints
// and commits until fenced, the lease is lost, or ctx ends.
func (s *Service) runWriter(ctx context.Context, lease *lease) error {
	s.lease.Store(lease)
	defer s.lease.Store(nil)
	s.setWriting(true)
	defer s.setWriting(false)
	timerWake, membersWake := make(chan struct{}, 1), make(chan struct{}, 1)
	handedNow := newHanded()
	c, w, err := s.takeOver(ctx, timerWake, membersWake, handedNow)
	if err != nil {
		return err
	}
	// What this writer knows of the attempts' lives starts now: every
	// running attempt counts as alive at the takeover.
	aliveNow := newLiveness(s.cfg.Clock().UTC())
	s.mu.Lock()
	s.committer, s.timerWake, s.alive = c, timerWake, aliveNow
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.committer, s.timerWake, s.alive = nil, nil, nil
		s.mu.Unlock()
	}()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- c.Run(rctx) }()
	stopRun := func() {
		cancel()
		if err := <-runErr; err != nil {
			s.cfg.Logger.Warn("handlers: writer stopped", "err", err)
		}
	}
	// The default workspace exists before the first command is taken: a
	// client that finds the endpoints never finds it missing.
	if err := s.ensureDefaultWorkspace(rctx); err != nil {
		s.cfg.Logger.Warn("handlers: could not create the default workspace", "err", err)
	}
	csvc, err := s.startCommands()
	if err != nil {
		stopRun()
		return err
	}
	// Standbys probe this subject: while it has a responder, the writer
	// serves (probeWriter).
	alive, err := s.nc.Subscribe(s.writerSubject(), func(m *nats.Msg) { _ = m.Respond(nil) })
	if err != nil {
		_ = csvc.Stop()
		stopRun()
		return fmt.Errorf("handlers: writer liveness subject: %w", err)
	}
	s.answerUnavailable(false)
	// Stopped first when the writer steps down: from then on the commands
	// go to the next writer only.
	s.commandsEP.Store(csvc)
	var stopOnce sync.Once
	stopCommands := func() {
		stopOnce.Do(func() {
			s.commandsEP.Store(nil)
			_ = alive.Unsubscribe()
			_ = csvc.Stop()
		})
	}
	defer stopCommands()
	unsubscribe, err := s.quarantine(rctx)
	if err != nil {
		stopRun()
		return err
	}
	defer unsubscribe()
	var bg sync.WaitGroup
	defer bg.Wait()
	defer cancel()
	bg.Go(func() { s.dispatch.retryLoop(rctx) })
	bg.Go(func() { s.runTimers(rctx, timerWake) })
	bg.Go(func() { s.followMembers(rctx, membersWake) })
	bg.Go(func() { s.feed.audit(rctx, s.log, s.store, s.metrics.feedRepaired) })
	bg.Go(func() { s.dispatch.audit(rctx, s.store, s.metrics.workItemsRestored) })
	bg.Go(func() { s.dispatch.gateLoop(rctx, s.store) })
	bg.Go(func() { s.sweepLoop(rctx) })
	bg.Go(func() { s.keepHandedLeases(rctx, handedNow, aliveNow) })
	s.readyOnce.Do(func() { close(s.ready) })
	s.cfg.Logger.Info("handlers: writer serving", "writer", s.cfg.WriterID, "epoch", c.Epoch(), "seq", c.LastSeq())
	s.warnNameClashes()
	select {
	case <-lease.lost:
		s.lease.Store(nil)
		if ctx.Err() == nil {
			s.metrics.writerLeaseLost()
		}
		stopCommands()
		stopRun()
		return errors.New("handlers: writer lease lost")
	case <-w.broken:
		stopCommands()
		stopRun()
		return errors.New("handlers: the views could not apply a committed record")
	case err := <-runErr:
		stopCommands()
		return err
	}
}

// followMembers calls Auth.OnMembersChanged each time the writer applied a
// record that changed workspace members (wake), until ctx ends, off the
// writer's goroutine: the hook may take time (closing a revoked member's
// connections), which must not hold up every command. The member.add or
// member.remove that made the change still waits for it before it is
// answered (execute).
func (s *Service) followMembers(ctx context.Context, wake <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
			s.reloadMembers(s.store.Checkpoint())
		}
	}
}

// reloadMembers makes the NATS server's users follow every member change
// up to record seq (Auth.OnMembersChanged), unless an earlier call already
// did: the writer's follower and a member command both ask for the same
// change, which is applied once, one call at a time.
func (s *Service) reloadMembers(seq uint64) {
	s.reloads.Lock()
	defer s.reloads.Unlock()
	if seq <= s.reloads.upTo {
		return
	}
	at := s.store.Checkpoint() // the reload reads the views as they are now, or later
	s.cfg.Auth.OnMembersChanged()
	s.reloads.upTo = at
}

// catchUpViews verifies the log from the views' last record on and applies
// what follows it, then checks the log below that record (CheckLog). Views
// found damaged (Pebble corruption, records an accepted prefix discarded) are
// moved aside and rebuilt from the log, verifying it whole.
func (s *Service) catchUpViews(ctx context.Context) error {
	if s.store.Checkpoint() == 0 {
		s.cfg.Logger.Info("handlers: the views are empty: building them from the log, verifying it whole")
	}
	_, err := s.store.CatchUp(ctx, s.log, s.key)
	if errors.Is(err, projections.ErrDamaged) {
		moved, rerr := s.store.Reset(err)
		if rerr != nil {
			return fmt.Errorf("handlers: views damaged (%w), and moving them aside failed: %w", err, rerr)
		}
		s.cfg.Logger.Warn("handlers: the views are damaged: moved aside, rebuilding them from the log", "moved_to", moved, "err", err)
		_, err = s.store.CatchUp(ctx, s.log, s.key)
	}
	if err != nil {
		return err
	}
	return s.store.CheckLog(ctx, s.log, !s.cfg.TrustBelowCheckpoint)
}

// watchStorage stops the service when its storage is found damaged while it
// runs: Pebble reports corruption in the views (the next start rebuilds
// them), or the log stream's configuration was changed (never changed
// back by dwr).
func (s *Service) watchStorage(ctx context.Context) error {
	t := time.NewTicker(s.cfg.StreamCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.store.Damaged():
			return fmt.Errorf("handlers: %w (restart: the views are rebuilt from the log)", s.store.DamageErr())
		case <-t.C:
			sl, ok := s.log.(streamLog)
			if !ok {
				continue // no stream configuration to check
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := sl.CheckStream(cctx, s.logConfig())
			cancel()
			if errors.Is(err, eventstore.ErrIntegrity) {
				return fmt.Errorf("handlers: %w", err)
			}
			if err != nil && ctx.Err() == nil {
				s.cfg.Logger.Warn("handlers: could not check the log stream's configuration", "err", err)
			}
		}
	}
}

// takeOver makes this replica the writer: it catches the views up, starts a
// committer (which fences older writers with a new epoch), and repairs what
// a crash may have lost of the derived streams (event feed, work items).
func (s *Service) takeOver(ctx context.Context, timerWake, membersWake chan struct{}, handedNow *handed) (*eventstore.Committer[*request], *writer, error) {
	if _, err := s.store.CatchUp(ctx, s.log, s.key); err != nil {
		return nil, nil, err
	}
	if err := s.dispatch.room.load(ctx, s.js, s.dispatch.stream, s.cfg.Prefix); err != nil {
		s.cfg.Logger.Warn("handlers: could not list the queues' consumers; the queues counted are those made from now on", "err", err)
	}
	w := &writer{store: s.store, room: s.dispatch.room, maxSchedules: s.cfg.MaxSchedulesPerWorkspace, maxMembers: s.cfg.MaxMembersPerWorkspace, clock: s.cfg.Clock, logger: s.cfg.Logger, broken: make(chan struct{}), tracer: s.tracer, disk: s.disk,
		dispatch: s.dispatch.dispatchCommit, answered: &s.onAnswered,
		after: func(c *eventstore.Commit, seq uint64) {
			// A writer deposed meanwhile (paused past its lease) leaves the
			// record to its successor's feed catch-up: the feed repeats
			// nothing, without JetStream's deduplication.
			if s.holdsLease() {
				s.feed.publish(c, seq)
			}
			if s.cfg.Auth.OnMembersChanged != nil && changesMembers(c) {
				select { // followMembers reloads, off the writer's goroutine
				case membersWake <- struct{}{}:
				default:
				}
			}
			s.metrics.committed(c)
			handedNow.add(c)
			if setsTimer(c) {
				select {
				case timerWake <- struct{}{}:
				default:
				}
			}
		}}
	if s.privacy != nil {
		w.seal = s.privacy.seal
	}
	// The chain tips come from the views, which apply every record before
	// the next batch is linked (and cache the live aggregates' tips); the
	// verifier holds only the recent ones: 10,000, not 100,000 (at 20,000
	// chains in flight, peak RSS 0.95x, CPU unchanged).
	c := eventstore.NewCommitter[*request](s.log, w, eventstore.GroupConfig{
		WriterID: s.cfg.WriterID, Clock: s.cfg.Clock, Logger: s.cfg.Logger, LogKey: s.key,
		Chain: eventstore.NewChainVerifierOver(s.store, 10_000), Resume: s.store.LogTip(), OnAppended: s.metrics.onAppended()})
	if err := c.Start(ctx); err != nil {
		return nil, nil, err
	}
	// Apply the writer's own epoch record, so the views stand at the log's end.
	if _, err := s.store.CatchUp(ctx, s.log, s.key); err != nil {
		return nil, nil, err
	}
	if err := s.feed.repair(ctx, s.log, s.store); err != nil {
		s.cfg.Logger.Warn("handlers: event feed catch-up failed; it is tried again shortly", "err", err)
	}
	if err := handedNow.load(s.store); err != nil {
		return nil, nil, fmt.Errorf("handlers: reading the handed attempts: %w", err)
	}
	if n, err := s.dispatch.rederive(ctx, s.store); err != nil {
		s.cfg.Logger.Warn("handlers: re-deriving work items failed in part; what was not published is derived again on the next start", "published", n, "err", err)
	} else if n > 0 {
		s.cfg.Logger.Info("handlers: work items of ready tasks published again", "tasks", n)
	}
	return c, w, nil
}

func (s *Service) ensureDefaultWorkspace(ctx context.Context) error {
	if w, err := s.store.Workspace("default"); err != nil || w != nil {
		return err
	}
	o := s.execute(ctx, &domain.CreateWorkspace{Name: "default"}, domain.Meta{
		Workspace: "default", CommandID: "dwr-default-workspace", Actor: actorService})
	if o.Err != nil && !errors.Is(o.Err, domain.ErrConflict) {
		return o.Err
	}
	return nil
}

// answeredSeq returns the log sequence of the last record this replica's
// writer appended (and so may have answered), or 0 when it is not the writer.
func (s *Service) answeredSeq() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.committer == nil {
		return 0
	}
	return s.committer.LastSeq()
}

// warnNameClashes logs each pair of workspaces made before a name could not
// extend another's with '-' (domain: checkNameApart): a queue of one may
// share its work consumer with a queue of the other.
func (s *Service) warnNameClashes() {
	ws, err := s.store.ListWorkspaces()
	if err != nil {
		return
	}
	names := make(map[string]bool, len(ws))
	for _, w := range ws {
		names[w.Name] = true
	}
	// Each clash is found from its longer name: the names it extends.
	for _, w := range ws {
		for i := range len(w.Name) {
			if w.Name[i] != '-' || !names[w.Name[:i]] {
				continue
			}
			s.cfg.Logger.Error("handlers: two workspaces' names clash: a queue's work consumer is named <prefix>-<workspace>-<queue>, so a queue of one may share its consumer with a queue of the other, "+
				"and a member of one could take the other's work items; move one workspace's work to a workspace named apart and delete its members",
				"workspace", w.Name[:i], "other", w.Name)
		}
	}
}

// The actors the service's own commands are recorded under: reserved
// names (domain.ReservedName), which no member may take.
const (
	actorService    = "dwr"
	actorTimer      = "dwr-timer"
	actorQuarantine = "dwr-quarantine"
	actorRetention  = "dwr-retention"
)

// execute runs one of the service's own commands through the writer.
func (s *Service) execute(ctx context.Context, cmd domain.Command, m domain.Meta) outcome {
	return s.toWriter(ctx, cmd, m, writerWeightFloor, nil)
}

// executeSent runs a command caller sent, a body of size bytes, through
// the writer once it is the caller's turn (Config.MaxWriterBytes,
// MaxWriterCommands), the callers of each workspace taking its turns.
func (s *Service) executeSent(ctx context.Context, cmd domain.Command, m domain.Meta, caller string, size int) outcome {
	est := s.estimateRecordBytes(size)
	h, err := s.deciding.hold(ctx, m.Workspace, caller, est)
	if err != nil {
		return outcome{Err: err} // not handed to the writer, as when its queue is full
	}
	defer h.leave()
	// Its place among MaxWriterCommands is given back once the writer takes
	// it into a batch, its bytes once it is committed: the next commands
	// queue for the next batch while this one commits.
	return s.toWriter(ctx, cmd, m, est, h.release)
}

// estimateRecordBytes estimates what a command's body of size bytes adds
// to a log record: itself, its events' envelopes, and a third more for what is
// sealed (base64).
func (s *Service) estimateRecordBytes(size int) int {
	if s.privacy != nil {
		size += size / 3
	}
	return size + writerWeightFloor
}

// toWriter hands a command estimated at est bytes in a record to the
// writer and waits for its outcome, calling taken (when not nil) once the
// writer takes the command into a batch.
func (s *Service) toWriter(ctx context.Context, cmd domain.Command, m domain.Meta, est int, taken func()) outcome {
	s.mu.RLock()
	c := s.committer
	s.mu.RUnlock()
	if c == nil || !s.holdsLease() {
		return outcome{Err: errNotWriter}
	}
	s.decided.Add(1)
	return submit(ctx, c, cmd, m, est, taken)
}

// holdsLease reports whether this replica holds the writer lease now, by
// its own clock: a writer that was paused past its lease, or could not
// renew it, decides nothing more, even before it has noticed and stepped
// down.
func (s *Service) holdsLease() bool {
	l := s.lease.Load()
	return l != nil && l.valid()
}

// internalCommands are decided only for the writer's own timers and
// quarantine: they have no endpoint, so no client can fire a timer or
// quarantine a task.
var internalCommands = map[string]bool{"timer.fire": true, "task.quarantine": true}

// startCommands registers the micro service "dwr" with one endpoint per
// command on <prefix>.cmd.<workspace>.<command>.
func (s *Service) startCommands() (*endpoints.Service, error) {
	// Not in a queue group: a writer that was deposed while paused (or cut
	// off) still holds its subscriptions until it runs again, and in a
	// queue group it would take its share of the commands and answer none;
	// with plain subscriptions every command also reaches the writer.
	svc, err := endpoints.New(s.nc, endpoints.Config{Name: "dwr", Version: s.cfg.Version, PendingLimit: endpointPending(s.cfg),
		Description: "dwr commands: decided by the writer, answered after the commit"})
	if err != nil {
		return nil, fmt.Errorf("handlers: command service: %w", err)
	}
	for _, name := range domain.CommandNames() {
		if internalCommands[name] {
			continue
		}
		subject := s.cfg.Prefix + ".cmd.*." + name
		h := func(req micro.Request) {
			if !s.holdsLease() { // a writer that has just lost its lease, before it stopped these endpoints
				reply := errResponse(noWriter(time.Now(), s.cfg.LeaseTTL))
				s.metrics.command(name, reply)
				_ = respond(req, reply)
				return
			}
			s.async(req, false, func(who sender) []byte {
				reply := s.handleCommand(name, req, who)
				s.metrics.command(name, reply)
				return reply
			})
		}
		if err := svc.Add(strings.ReplaceAll(name, ".", "_"), subject, h); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("handlers: endpoint %s: %w", name, err)
		}
	}
	return svc, nil
}

// workspaceOf returns the workspace token of subject <prefix>.<kind>.<ws>....
// It allocates nothing: admission reads it for every request too.
func workspaceOf(subject string) string {
	rest := subject
	for range 2 {
		i := strings.IndexByte(rest, '.')
		if i < 0 {
			return ""
		}
		rest = rest[i+1:]
	}
	ws, _, ok := strings.Cut(rest, ".")
	if !ok {
		return ""
	}
	return ws
}

func (s *Service) handleCommand(name string, req micro.Request, who sender) (reply []byte) {
	ws := workspaceOf(req.Subject())
	if !domain.ValidName(ws) {
		return errResponse(&schemas.Error{Code: schemas.CodeInvalid,
			Message: fmt.Sprintf("workspace %q in the subject is not a valid name", ws)})
	}
	traced, end := s.traceCommand(name, ws, req)
	defer func() { end(refusalOf(reply)) }()
	h := req.Headers()
	p, werr := s.authorize(who, ws, "cmd", name)
	if werr != nil {
		return errResponse(werr)
	}
	body := req.Data()
	if err := schemas.CheckBounds(body, MaxCommandBytes, schemas.MaxDepth); err != nil {
		return errResponse(toWire(err, s.cfg.Logger))
	}
	if err := schemas.ValidateCommand(name, body); err != nil {
		s.countRefusal(name, domain.Meta{Workspace: ws, Actor: p.name}, err)
		return errResponse(toWire(err, s.cfg.Logger))
	}
	if err := schemas.CheckNotSealed(name, body); err != nil {
		s.countRefusal(name, domain.Meta{Workspace: ws, Actor: p.name}, err)
		return errResponse(toWire(err, s.cfg.Logger))
	}
	cmd, _ := domain.NewCommand(name)
	if err := fastjson.Unmarshal(body, cmd); err != nil {
		return errResponse(&schemas.Error{Code: schemas.CodeInvalid, Message: "the command does not decode: " + err.Error()})
	}
	if werr := s.authorizeTask(p, name, cmd); werr != nil {
		return errResponse(werr)
	}
	if werr := s.heldByGate(cmd); werr != nil {
		return errResponse(werr)
	}
	fillIDs(cmd)
	ctx, cancel := context.WithTimeout(traced, 30*time.Second)
	defer cancel()
	if werr := s.checkArtifacts(ctx, ws, cmd); werr != nil {
		return errResponse(werr)
	}
	// The actor is who the NATS server authenticated, never a header.
	m := domain.Meta{Workspace: ws, CommandID: h.Get(schemas.HeaderCommandID), Actor: p.name,
		Authenticated: p.authenticated, CorrelationID: h.Get(schemas.HeaderCorrelationID), Body: bodyName(name, body)}
	if p.member != nil && p.role == domain.RoleExecutor {
		// The writer checks the queue again on the state it decides on
		// (authorizeTask read the views, which may not hold the task yet).
		m.Executor, m.Queues = true, slices.Clone(p.member.Queues)
	}
	if m.CommandID == "" {
		m.CommandID = ulid.Make().String()
	} else if len(m.CommandID) > 128 {
		return errResponse(&schemas.Error{Code: schemas.CodeInvalid, Message: "header " + schemas.HeaderCommandID + " is longer than 128 bytes"})
	}
	s.mu.RLock()
	alive := s.alive
	s.mu.RUnlock()
	var o outcome
	var token string
	switch c := cmd.(type) {
	case *domain.Heartbeat:
		o = s.heartbeat(ctx, c, m, alive)
	case *domain.ClaimTask:
		var err error
		if token, err = s.prepareClaim(ctx, c, m, alive); err != nil {
			return errResponse(toWire(err, s.cfg.Logger))
		}
		o = s.executeSent(ctx, cmd, m, who.key(), len(body))
	case *domain.DeleteQueue:
		if werr := s.queueInUse(ctx, c, m); werr != nil {
			return errResponse(werr)
		}
		o = s.executeSent(ctx, cmd, m, who.key(), len(body))
	case *domain.CreateSchedule:
		if err := s.roomForSchedule(ctx, c, m); err != nil {
			return errResponse(toWire(err, s.cfg.Logger))
		}
		o = s.executeSent(ctx, cmd, m, who.key(), len(body))
	default:
		token = s.prepareReport(cmd, m)
		o = s.executeSent(ctx, cmd, m, who.key(), len(body))
	}
	if o.Err != nil {
		s.countRefusal(name, m, o.Err)
		return errResponse(toWire(o.Err, s.cfg.Logger))
	}
	if (name == "member.add" || name == "member.remove") && s.cfg.Auth.OnMembersChanged != nil {
		// Effective once acknowledged: the NATS server's users follow the
		// change before the admin hears of it, so the new credential
		// connects (or the revoked one is cut off) at once.
		if err := s.store.WaitFor(ctx, o.Seq); err == nil {
			s.reloadMembers(o.Seq)
		}
	}
	if name == "queue.configure" || name == "queue.pause" || name == "queue.resume" {
		// The consumer stands as the reply says before the executor (or
		// the admin) hears it: also when nothing changed (a consumer
		// deleted by hand is made again).
		if werr := s.ensureQueueOf(ctx, ws, o); werr != nil {
			return errResponse(werr)
		}
	}
	if name == "queue.delete" {
		// The queue's consumer is gone when the admin hears it: the record
		// is dispatched before the views apply it.
		if err := s.store.WaitFor(ctx, o.Seq); err != nil {
			return errResponse(toWire(err, s.cfg.Logger))
		}
	}
	// The handed item joins the reply before the reply is opened for its
	// sender, as a claim's task does.
	o.Reply = s.withHandoff(ctx, o, token)
	if s.privacy != nil {
		if werr := s.afterPrivacy(ctx, ws, cmd, &o); werr != nil {
			return errResponse(werr)
		}
	}
	switch c := cmd.(type) {
	case *domain.ClaimTask:
		// The token goes to the claimer only: it is in no stored reply.
		o.Reply = withToken(o.Reply, token)
	case *domain.SaveCheckpoint:
		if alive != nil {
			alive.mark(c.TaskID, c.Attempt, s.cfg.Clock().UTC(), s.running)
		}
	}
	return okResponse(o.Seq, o.Reply)
}

// fillIDs gives a creating command the new aggregate's id when the client
// left it out.
func fillIDs(cmd domain.Command) {
	switch c := cmd.(type) {
	case *domain.CreateGoal:
		if c.GoalID == "" {
			c.GoalID = ulid.Make().String()
		}
	case *domain.CreateTask:
		if c.TaskID == "" {
			c.TaskID = ulid.Make().String()
		}
	case *domain.RunRitual:
		if c.GoalID == "" {
			c.GoalID = ulid.Make().String()
		}
	case *domain.DelegateTask:
		// A retry with the same command id is answered with the goal the
		// first made, whatever id this one is given.
		if c.Goal != nil {
			fillIDs(c.Goal)
		}
		if c.Ritual != nil {
			fillIDs(c.Ritual)
		}
	}
}

func minSeq(h micro.Headers) (uint64, error) {
	v := h.Get(schemas.HeaderMinSeq)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, &schemas.Error{Code: schemas.CodeInvalid, Message: "header " + schemas.HeaderMinSeq + " must be a log sequence number"}
	}
	return n, nil
}

// ensureQueueOf makes the consumer of the queue that a queue.configure reply
// names stand with the settings it gives, unless a configuration later in
// the log stands already (a retried older command's reply).
func (s *Service) ensureQueueOf(ctx context.Context, ws string, o outcome) *schemas.Error {
	var res domain.Reply
	if err := json.Unmarshal(o.Reply, &res); err != nil {
		return toWire(err, s.cfg.Logger)
	}
	if res.Queue == "" {
		return nil // a command applied before to a queue deleted since
	}
	r := domain.QueueConfig{Name: res.Queue, LeaseMS: res.LeaseMS, MaxDeliver: res.MaxDeliver, MaxRunning: res.MaxRunning, Paused: res.Paused}
	if err := s.dispatch.configureQueue(ctx, ws, r, o.Seq); err != nil {
		s.cfg.Logger.Warn("handlers: a queue's consumer could not be configured", "err", err)
		return &schemas.Error{Code: schemas.CodeUnavailable, Message: "the queue's consumer could not be configured: retry"}
	}
	return nil
}
