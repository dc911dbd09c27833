package handlers

import (
	"context"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// The metrics' labels carry only bounded values that name no one: command
// types (domain.CommandNames), outcome codes (schemas' fixed set), timer
// kinds, and the names of configured workspaces and queues. Never an id, a
// member's name or a payload: /metrics is unauthenticated.

// maxQueueSeries bounds the queues a scrape reports: the work stream's
// consumers are the service's own, one per configured queue, but a label's
// values must stay bounded whatever the stream holds.
const maxQueueSeries = 1000

// ScrapeTimeout bounds what a scrape asks JetStream (the log's end, the
// queues' consumers and oldest items): past it, the figures that needed it
// are left out of that scrape.
const ScrapeTimeout = 2 * time.Second

// NewMetricsRegistry returns a private registry holding the Go runtime's
// and the process's collectors, as dwr serve gives Config.Metrics: private,
// so that several services in one process (tests, benchmarks) each keep
// their own.
func NewMetricsRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// outcomeOK is the outcome label of a command that was answered ok.
const outcomeOK = "ok"

// knownCodes are the outcome labels of refusals; a code outside them (none
// is made today) is counted as internal, so that the label stays bounded.
var knownCodes = map[string]bool{schemas.CodeInvalid: true, schemas.CodeNotFound: true, schemas.CodeConflict: true,
	schemas.CodeForbidden: true, schemas.CodeTooLarge: true, schemas.CodeUnavailable: true, schemas.CodeInternal: true}

// metrics are the service's Prometheus metrics, counted where the service
// does what they count. A nil *metrics (Config.Metrics nil) counts nothing.
type metrics struct {
	reg           *prometheus.Registry
	commands      *prometheus.CounterVec
	okCommands    map[string]prometheus.Counter // commands's ok counter of each command type, looked up once
	appends       prometheus.Counter
	appendedBytes prometheus.Counter
	batchSize     prometheus.Histogram
	commitSeconds prometheus.Histogram
	attemptLeases prometheus.Counter
	writerLeases  prometheus.Counter
	quarantines   prometheus.Counter
	handoffs      prometheus.Counter
	feedRepairs   prometheus.Counter
	itemsRestored prometheus.Counter
	benched       prometheus.Counter
	refusals      *prometheus.CounterVec
	refusalsBy    map[string]prometheus.Counter // refusals's counter of each limit, looked up once
	timerLateness *prometheus.HistogramVec
	// workspaceBytes counts each workspace's events' and replies' bytes
	// appended to the log.
	workspaceBytes *prometheus.CounterVec
}

// newMetrics registers the service's metrics on reg, or returns nil when
// reg is nil.
func newMetrics(reg *prometheus.Registry, s *Service) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &metrics{reg: reg,
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dwr_commands_total",
			Help: "Commands answered by this replica, by command type and outcome: ok, or the refusal's code (invalid, forbidden, conflict, not_found, too_large, unavailable, internal)."},
			[]string{"command", "outcome"}),
		appends: prometheus.NewCounter(prometheus.CounterOpts{Name: "dwr_log_appends_total",
			Help: "Records the writer appended to the log, each fsynced before it was acknowledged: its epoch records and its batches of commands."}),
		appendedBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "dwr_log_appended_bytes_total",
			Help: "Bytes of the records the writer appended to the log."}),
		workspaceBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dwr_log_workspace_bytes_total",
			Help: "Bytes of the events' payloads and the commands' replies the writer appended to the log for each workspace: which workspaces grow the log (its records' envelopes are not counted)."},
			[]string{"workspace"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "dwr_commit_batch_requests",
			Help:    "Requests (commands, timer firings) answered by one record the writer appended: the group commit's batch size.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11)}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "dwr_commit_seconds",
			Help:    "Seconds from the moment the writer took a batch's first request to the acknowledgement of its record's durable append.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		attemptLeases: prometheus.NewCounter(prometheus.CounterOpts{Name: "dwr_attempt_lease_expiries_total",
			Help: "Attempts abandoned because their lease ran out without a sign of life: a claim superseded them, or the writer abandoned a handed one."}),
		writerLeases: prometheus.NewCounter(prometheus.CounterOpts{Name: "dwr_writer_lease_losses_total",
			Help: "Times this replica lost the writer lease while it was the writer (not renewed in time, or taken over)."}),
		quarantines: prometheus.NewCounter(prometheus.CounterOpts{Name: "dwr_quarantines_total",
			Help: "Tasks quarantined: failed because their work item was delivered the most times its queue allows without being completed."}),
		handoffs: prometheus.NewCounter(prometheus.CounterOpts{Name: "dwr_handoffs_total",
			Help: "Attempts handed to a reporting worker in its report's reply (the handoff), instead of going out as work items."}),
		feedRepairs: prometheus.NewCounter(prometheus.CounterOpts{Name: "dwr_feed_repairs_total",
			Help: "Times the writer found events missing from the end of the event feed while it served (a publish failed, or the feed's stream was unavailable) and sent them again from the log."}),
		itemsRestored: prometheus.NewCounter(prometheus.CounterOpts{Name: "dwr_work_items_restored_total",
			Help: "Work items the writer published again because their queue had lost them: a ready or verifying task found without an item in two audits in a row (2 s apart or more) while its queue held no item of it, to deliver or in flight."}),
		benched: prometheus.NewCounter(prometheus.CounterOpts{Name: "dwr_callers_benched_total",
			Help: "Times an identity was found flooding — within one second, more bytes or requests than the service takes, or refused too often for its own limits — and benched: its requests refused for Config.BenchFor and, on the embedded server, its connections closed."}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dwr_requests_refused_total",
			Help: "Requests refused at once for a limit on requests in flight, by limit: caller, caller_bytes (one identity's), queries, all, all_bytes (the service's), benched (an identity found flooding), stopping (the replica stops)."},
			[]string{"limit"}),
		timerLateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "dwr_timer_lateness_seconds",
			Help:    "Seconds from a durable timer's due time to its firing's commit, by timer kind.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}, []string{"kind"}),
	}
	m.refusalsBy = make(map[string]prometheus.Counter)
	for _, limit := range refusalLimits {
		m.refusalsBy[limit] = m.refusals.WithLabelValues(limit)
	}
	m.okCommands = make(map[string]prometheus.Counter)
	for _, name := range domain.CommandNames() {
		m.okCommands[name] = m.commands.WithLabelValues(name, outcomeOK)
	}
	for _, c := range []prometheus.Collector{m.commands, m.appends, m.appendedBytes, m.batchSize, m.commitSeconds,
		m.attemptLeases, m.writerLeases, m.quarantines, m.handoffs, m.feedRepairs, m.itemsRestored, m.benched, m.refusals, m.timerLateness, m.workspaceBytes, stateCollector{s}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// handler answers GET /metrics in Prometheus's formats.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, MaxRequestsInFlight: 4,
		Timeout: 2 * ScrapeTimeout})
}

// command counts the answer reply to a command of type name.
func (m *metrics) command(name string, reply []byte) {
	if m == nil {
		return
	}
	werr := refusalOf(reply)
	if werr == nil {
		if c, ok := m.okCommands[name]; ok {
			c.Inc()
			return
		}
		m.commands.WithLabelValues(name, outcomeOK).Inc()
		return
	}
	code := werr.Code
	if !knownCodes[code] {
		code = schemas.CodeInternal
	}
	m.commands.WithLabelValues(name, code).Inc()
}

// appended is the committer's OnAppended.
func (m *metrics) appended(_ uint64, requests, bytes int, took time.Duration) {
	m.appends.Inc()
	m.appendedBytes.Add(float64(bytes))
	if requests > 0 {
		m.batchSize.Observe(float64(requests))
		m.commitSeconds.Observe(took.Seconds())
	}
}

// onAppended returns the committer's OnAppended, or nil without metrics.
func (m *metrics) onAppended() func(uint64, int, int, time.Duration) {
	if m == nil {
		return nil
	}
	return m.appended
}

// committed counts what a committed record c did that is counted by its
// events: attempts abandoned for their lapsed lease.
func (m *metrics) committed(c *eventstore.Commit) {
	if m == nil {
		return
	}
	for i := range c.Events {
		if c.Events[i].Type == abandonedEvent {
			m.attemptLeases.Inc()
		}
	}
	for _, b := range projections.BytesByWorkspace(c) {
		m.workspaceBytes.WithLabelValues(b.Workspace).Add(float64(b.N))
	}
}

// abandonedEvent is the type of domain.AttemptAbandoned: an attempt whose
// lease lapsed, superseded by a claim.
var abandonedEvent = (*domain.AttemptAbandoned)(nil).EventType()

// writerLeaseLost counts a loss of the writer lease.
func (m *metrics) writerLeaseLost() {
	if m != nil {
		m.writerLeases.Inc()
	}
}

// feedRepaired counts a repair of the event feed while the writer served.
func (m *metrics) feedRepaired() {
	if m != nil {
		m.feedRepairs.Inc()
	}
}

// workItemsRestored counts n work items published again by the audit.
func (m *metrics) workItemsRestored(n int) {
	if m != nil {
		m.itemsRestored.Add(float64(n))
	}
}

// handedOff counts an attempt handed in a report's reply.
func (m *metrics) handedOff() {
	if m != nil {
		m.handoffs.Inc()
	}
}

// quarantined counts a quarantined task.
func (m *metrics) quarantined() {
	if m != nil {
		m.quarantines.Inc()
	}
}

// timerFired observes the lateness of a timer of kind fired at now.
func (m *metrics) timerFired(kind string, due, now time.Time) {
	if m == nil {
		return
	}
	m.timerLateness.WithLabelValues(kind).Observe(max(now.Sub(due), 0).Seconds())
}

// Metrics returns the handler of GET /metrics: the service's metrics in
// Prometheus's formats, from the registry Config.Metrics; nil when it is
// nil (metrics off).
func (s *Service) Metrics() http.Handler {
	if s.metrics == nil {
		return nil
	}
	return s.metrics.handler()
}

// stateCollector reports, at each scrape, what the service's state says:
// how far the views are behind the log, each queue's depth and oldest item,
// the pending approvals. They are read when asked (bounded by
// ScrapeTimeout) rather than refreshed in the background: exact at the
// scrape, and nothing is asked of JetStream while nobody scrapes.
type stateCollector struct{ s *Service }

var (
	descWriter = prometheus.NewDesc("dwr_writer",
		"1 while this replica is the writer (holds the writer lease), else 0.", nil, nil)
	descLogLast = prometheus.NewDesc("dwr_log_last_sequence",
		"Sequence of the log's last record.", nil, nil)
	descViewsApplied = prometheus.NewDesc("dwr_views_applied_sequence",
		"Sequence of the last log record the views applied.", nil, nil)
	descViewsLag = prometheus.NewDesc("dwr_views_lag_records",
		"Log records the views have not applied yet: dwr_log_last_sequence - dwr_views_applied_sequence.", nil, nil)
	queueLabels       = []string{"workspace", "queue"}
	descQueuePending  = prometheus.NewDesc("dwr_queue_pending", "Work items of a queue not delivered to a worker yet.", queueLabels, nil)
	descQueueInFlight = prometheus.NewDesc("dwr_queue_in_flight",
		"Work items of a queue delivered to a worker and not acknowledged yet.", queueLabels, nil)
	descQueuePaused = prometheus.NewDesc("dwr_queue_paused",
		"1 while a queue is paused (queue.pause): its consumer hands out no work item.", queueLabels, nil)
	descQueueHeld = prometheus.NewDesc("dwr_queue_held",
		"Work items of a queue with a rate limit or an order by priority (queue.configure rate_limit, order) that the writer holds back, to let them out at the queue's rate or in its order (on the writer only).", queueLabels, nil)
	descQueueOldest = prometheus.NewDesc("dwr_queue_oldest_item_age_seconds",
		"Age of a queue's oldest work item not acknowledged yet (0 when it has none).", queueLabels, nil)
	descQueues = prometheus.NewDesc("dwr_queues",
		"Queues that stand: the work stream's consumers, one a queue (bounded by dwr_queues_max).", nil, nil)
	descQueuesMax = prometheus.NewDesc("dwr_queues_max",
		"The most queues the service may have (dwr serve --max-queues): a task given a new queue past it is refused.", nil, nil)
	descApprovals     = prometheus.NewDesc("dwr_approvals_pending", "Approvals waiting for a decision.", []string{"workspace"}, nil)
	descArtifactBytes = prometheus.NewDesc("dwr_artifact_bytes",
		"What a workspace's artifacts count for against dwr serve --max-artifact-bytes-per-workspace (each at least 64 KiB), as this replica counts them.", []string{"workspace"}, nil)
	descArtifactBytesMax = prometheus.NewDesc("dwr_artifact_bytes_max",
		"The bytes one workspace's artifacts may hold (dwr serve --max-artifact-bytes-per-workspace).", nil, nil)
	descLogHeld = prometheus.NewDesc("dwr_log_workspace_held_bytes",
		"The bytes of the log a workspace holds, as the views count them from the records (its events' payloads and its commands' replies): in the disk's last room, one holding more than a quarter of all is refused first.", []string{"workspace"}, nil)
	descBacklog = prometheus.NewDesc("dwr_requests_backlog",
		"Requests received and not yet taken in by this replica's command and query endpoints: past Config.MaxBacklog the heaviest sender is benched.", nil, nil)
)

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descWriter, descLogLast, descViewsApplied, descViewsLag,
		descQueuePending, descQueueInFlight, descQueuePaused, descQueueHeld, descQueueOldest, descQueues, descQueuesMax, descApprovals, descArtifactBytes, descArtifactBytesMax, descLogHeld, descBacklog} {
		ch <- d
	}
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	writer := 0.0
	if s.holdsLease() {
		writer = 1
	}
	gauge(descWriter, writer)
	gauge(descBacklog, float64(s.backlog()))
	if writer == 1 && s.dispatch != nil {
		for k, n := range s.dispatch.gate.held() {
			gauge(descQueueHeld, float64(n), k[0], k[1])
		}
	}
	applied := s.store.Checkpoint()
	gauge(descViewsApplied, float64(applied))
	s.collectApprovals(gauge)
	s.store.EachLogBytes(func(ws string, n uint64) { gauge(descLogHeld, float64(n), ws) })
	select {
	case <-s.ready: // the log and the work stream are open
	default:
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), ScrapeTimeout)
	defer cancel()
	last := s.answeredSeq() // the writer knows the log's end
	if last == 0 {
		var err error
		if last, err = s.log.LastSeq(ctx); err != nil {
			s.cfg.Logger.Debug("handlers: metrics: the log's end cannot be read", "err", err)
		}
	}
	if last > 0 {
		gauge(descLogLast, float64(last))
		gauge(descViewsLag, float64(last-min(applied, last)))
	}
	if s.artifacts.room != nil {
		s.artifacts.room.collect(gauge)
	}
	if err := s.collectQueues(ctx, gauge); err != nil {
		s.cfg.Logger.Debug("handlers: metrics: the queues cannot be read", "err", err)
	}
}

// collectApprovals reports the pending approvals of each workspace.
func (s *Service) collectApprovals(gauge func(*prometheus.Desc, float64, ...string)) {
	wss, err := s.store.ListWorkspaces()
	if err != nil {
		return
	}
	for _, w := range wss {
		if n, err := s.store.CountApprovals(w.Name, domain.ApprovalStatePending); err == nil {
			gauge(descApprovals, float64(n), w.Name)
		}
	}
}

// collectQueues reports the depth and the oldest item of each queue, from
// the work stream's consumers (one per queue, named by their filter
// subject <prefix>.work.<workspace>.<queue>).
func (s *Service) collectQueues(ctx context.Context, gauge func(*prometheus.Desc, float64, ...string)) error {
	st, err := s.js.Stream(ctx, s.dispatch.stream)
	if err != nil {
		return err
	}
	infos := st.ListConsumers(ctx)
	n := 0
	for ci := range infos.Info() {
		ws, queue, ok := queueOf(s.cfg.Prefix, ci.Config.FilterSubject)
		if !ok {
			continue // not a queue's consumer
		}
		if n++; n > maxQueueSeries {
			continue // read on to the listing's end, not reported
		}
		gauge(descQueuePending, float64(ci.NumPending), ws, queue)
		gauge(descQueueInFlight, float64(ci.NumAckPending), ws, queue)
		paused := 0.0
		if ci.Paused {
			paused = 1
		}
		gauge(descQueuePaused, paused, ws, queue)
		age := 0.0
		if ci.NumPending+uint64(max(ci.NumAckPending, 0)) > 0 {
			// The first item after the ack floor is the oldest not acknowledged.
			if m, err := st.GetMsg(ctx, ci.AckFloor.Stream+1, jetstream.WithGetMsgSubject(ci.Config.FilterSubject)); err == nil {
				age = max(time.Since(m.Time).Seconds(), 0)
			}
		}
		gauge(descQueueOldest, age, ws, queue)
	}
	if err := infos.Err(); err != nil {
		return err
	}
	gauge(descQueues, float64(n))
	gauge(descQueuesMax, float64(s.cfg.MaxQueues))
	return nil
}

// bench counts an identity kept off the server for flooding.
func (m *metrics) bench() {
	if m != nil {
		m.benched.Inc()
	}
}

// refused counts a request refused at once for limit.
func (m *metrics) refused(limit string) {
	if m == nil {
		return
	}
	if c, ok := m.refusalsBy[limit]; ok {
		c.Inc()
	}
}

// refusalLimits are the limit labels of dwr_requests_refused_total.
var refusalLimits = []string{"caller", "caller_bytes", "workspace", "workspace_bytes", "queries", "all", "all_bytes", "benched", "stopping"}
