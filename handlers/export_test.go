package handlers

import (
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/dwr-run/dwr/schemas"
)

// ServeQuery answers a query on this replica alone, as its endpoint would
// answer a request on subject with headers h and body: for a test that must
// reach one replica of several (the endpoints of all share a queue group).
func (s *Service) ServeQuery(name, subject string, h nats.Header, body []byte) schemas.Reply {
	var r schemas.Reply
	req := &testRequest{subject: subject, h: h, body: body}
	_ = json.Unmarshal(s.handleQuery(name, req, senderOf(req.Headers())), &r)
	return r
}

// testRequest is a request that no NATS connection carried.
type testRequest struct {
	subject string
	h       nats.Header
	body    []byte
}

func (r *testRequest) Respond([]byte, ...micro.RespondOpt) error               { return nil }
func (r *testRequest) RespondJSON(any, ...micro.RespondOpt) error              { return nil }
func (r *testRequest) Error(string, string, []byte, ...micro.RespondOpt) error { return nil }
func (r *testRequest) Data() []byte                                            { return r.body }
func (r *testRequest) Headers() micro.Headers                                  { return micro.Headers(r.h) }
func (r *testRequest) Subject() string                                         { return r.subject }
func (r *testRequest) Reply() string                                           { return "" }

// OnQuery makes f be called as each query starts to be served, with its
// caller's name and the query, while the query holds its place in flight:
// a test holds queries in flight by blocking in f.
func (s *Service) OnQuery(f func(actor, query string)) { s.onQuery.Store(&f) }

// OnIntake makes f be called as each request is taken in, before its
// admission: a test holds the intake by blocking in f, as a service short
// of CPU would fall behind.
func (s *Service) OnIntake(f func()) { s.onIntake.Store(&f) }

// OnAnswered makes f be called as the writer has answered a record's
// commands, before the views apply it: a test holds the views behind the
// answers by blocking in f.
func (s *Service) OnAnswered(f func()) { s.onAnswered.Store(&f) }

// Intake returns how many requests were taken in: the service looks at
// its backlog at each multiple of 256.
func (s *Service) Intake() int64 { return s.intake.Load() }

// EndRateWindow forgets what each caller sent so far, as when its second
// is over: a test's own requests then weigh nothing in the next look at
// the backlog.
func (s *Service) EndRateWindow() {
	s.admission.mu.Lock()
	defer s.admission.mu.Unlock()
	clear(s.admission.rates)
}

// Backlog returns the requests received and not yet taken in.
func (s *Service) Backlog() int { return s.backlog() }

// PauseLease stops (or resumes) the renewals of this replica's writer
// lease, as if it could not reach the lease's bucket or were stopped past
// its lease — the rest of the replica runs on.
func (s *Service) PauseLease(paused bool) { s.leasePaused.Store(paused) }

// HoldsLease reports whether this replica holds the writer lease now, by
// its own clock.
func (s *Service) HoldsLease() bool { return s.holdsLease() }

// Decided returns how many commands this replica's writer has taken to
// decide.
func (s *Service) Decided() uint64 { return s.decided.Load() }

// SetHistoryReadLimit makes a page of the events query end once it has
// read n bytes of log records, until the returned function restores the
// limit.
func SetHistoryReadLimit(n int) (restore func()) {
	was := historyReadOverride.Swap(int64(n))
	return func() { historyReadOverride.Store(was) }
}

// SetFeedScanLimit makes a feed page read at most n events, until the
// returned function restores the limit.
func SetFeedScanLimit(n int) (restore func()) {
	was := feedScanOverride.Swap(int64(n))
	return func() { feedScanOverride.Store(was) }
}

// SetListScanLimit makes a goal.list page with a state filter read at
// most n goals of other states, and a task.list page with a queue filter
// n tasks of other queues, until the returned function restores the limit.
func SetListScanLimit(n int) (restore func()) {
	was := stateScanOverride.Swap(int64(n))
	return func() { stateScanOverride.Store(was) }
}

// MeasureDiskWith makes the service measure the disk holding its views
// with f from its next look on (every second).
func (s *Service) MeasureDiskWith(f func(dir string) (free, size int64, ok bool)) {
	s.disk.measure.Store(&f)
}

// LookAtDiskEvery makes the service look at the disk holding its views
// every d (a second by default) from its next look on.
func (s *Service) LookAtDiskEvery(d time.Duration) { s.disk.every.Store(int64(d)) }

// ArtifactBytes returns what this replica counts of workspace ws's
// artifacts: stored, and being stored by its own puts under way.
func (s *Service) ArtifactBytes(ws string) (stored, storing int64) {
	r := s.artifacts.room
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.used[ws], r.held[ws]
}

// OnConsumerList makes f be called as each listing of the work stream's
// consumers for queue.list begins: a test holds a listing by blocking in f.
func (s *Service) OnConsumerList(f func()) { s.dispatch.lists.onList.Store(&f) }

// ConsumerListWaiters returns the queue.list requests waiting for a listing
// of the work stream's consumers.
func (s *Service) ConsumerListWaiters() int64 { return s.dispatch.lists.waiting.Load() }

// WorkspaceOfConsumer returns the workspace whose share a consumer-info
// request for consumer counts in.
func (s *Service) WorkspaceOfConsumer(consumer string) string { return s.workspaceOfConsumer(consumer) }

// WaitingForTheWriter returns how many commands of workspace ws wait for
// their turn to be handed to the writer (Config.MaxWriterCommands,
// MaxWriterBytes).
func (s *Service) WaitingForTheWriter(ws string) int {
	t := s.deciding
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	if g := t.groups[ws]; g != nil {
		for _, q := range g.waiting {
			n += len(q)
		}
	}
	return n
}
