package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/handlers/endpoints"
	"github.com/dwr-run/dwr/schemas"
)

// Defaults of the limits on requests in flight (Config).
const (
	// DefaultMaxInFlight is Config.MaxInFlight's default.
	DefaultMaxInFlight = 16 << 10
	// DefaultMaxInFlightPerCaller is Config.MaxInFlightPerCaller's default
	// (a quarter of MaxInFlight when that is smaller).
	DefaultMaxInFlightPerCaller = 1 << 10
	// DefaultMaxBytesInFlight is Config.MaxBytesInFlight's default.
	DefaultMaxBytesInFlight = 256 << 20
	// DefaultMaxBytesInFlightPerCaller is Config.MaxBytesInFlightPerCaller's
	// default (a quarter of MaxBytesInFlight when that is smaller).
	DefaultMaxBytesInFlightPerCaller = 32 << 20
	// DefaultMaxWriterBytes is Config.MaxWriterBytes's default.
	DefaultMaxWriterBytes = 4 << 20
	// DefaultMaxWriterCommands is Config.MaxWriterCommands's default.
	DefaultMaxWriterCommands = 128
	// DefaultMaxBacklog is Config.MaxBacklog's default.
	DefaultMaxBacklog = 16 << 10
	// DefaultBenchFor is Config.BenchFor's default.
	DefaultBenchFor = 30 * time.Second
)

// writerWeightFloor is what a command adds to a log record beside its
// body (its metadata and its events' envelopes, about), counted toward
// MaxWriterBytes and in the writer's estimate of a batch's record.
const writerWeightFloor = 512

// admission counts the requests in flight — those taken and not yet
// answered — and their bytes, and refuses one over a limit: its caller's,
// the queries', or the service's. Refusals are answered at once with
// unavailable, from replies encoded once: a flood costs a lookup per
// request, no more. A request that comes when its caller has none in flight
// is never refused for its bytes (it is bounded by the NATS server's
// max_payload), nor one that comes when the service has none.
type admission struct {
	maxCaller, maxQueries, maxAll int
	maxCallerBytes, maxAllBytes   int
	// maxWorkspace and maxWorkspaceBytes are a workspace's share: once
	// the requests in flight reach maxAll less it (their bytes,
	// maxAllBytes less it), a workspace holding it is refused.
	maxWorkspace, maxWorkspaceBytes int

	refuseCaller, refuseQueries, refuseAll, refuseCallerBytes, refuseAllBytes *cannedRefusal
	refuseWorkspace, refuseWorkspaceBytes                                     *cannedRefusal

	// benchBytes, benchCount and benchRefused: a caller that sends this
	// many bytes or requests within one second, or is refused this many
	// times for its own limits, is flooding (0: never).
	benchBytes, benchCount, benchRefused int
	benchFor                             time.Duration

	mu      sync.Mutex
	callers map[string]inFlight // by caller; callers with none are absent
	// workspaces is what each workspace has in flight (those with none are
	// absent).
	workspaces map[string]inFlight
	queries    int
	all        inFlight
	// rates counts, by caller, what it sent in its current second.
	rates map[string]rate
	// benched are the callers found flooding, whose requests are refused
	// for a while.
	benched map[string]benched
	// stopped, once set, refuses every request; drained is closed when the
	// last one admitted before is answered.
	stopped bool
	drained chan struct{}
}

// inFlight is a count of requests in flight and of their bytes (and, of a
// workspace's, of the queries among them).
type inFlight struct{ n, bytes, queries int }

// rate is what one caller sent since since: requests, their bytes, and
// those refused for its own limits; user is its NATS user, to bench it,
// and ws the workspace of its last request.
type rate struct {
	since             time.Time
	n, bytes, refused int
	user, ws          string
}

// rateWindow is how long requests are counted together.
const rateWindow = time.Second

// Flooding: a caller that sends, within one second, floodBytesFactor times
// its limit of bytes in flight, or floodCountFactor times its limit of
// requests in flight, whatever their answers — several times what the whole
// service takes in a second (a 200 KB command costs it ~12 ms of CPU; it
// serves some ten thousand small requests a second on two cores) — or that
// is refused for its own limits floodRefusedFactor times its limit of
// requests. An honest client waits for its answers: it is refused about its
// excess once per retry, and sends no faster than it is answered (the Go
// client retries after 100 ms, then backs off: some four tries in the first
// second, so a client with three times its limit at once is refused about
// eight times its limit in that second, half the threshold). A flooder's
// requests cost the service their reception even when refused at once.
const (
	floodBytesFactor   = 8
	floodCountFactor   = 64
	floodRefusedFactor = 16
)

func newAdmission(cfg Config) *admission {
	a := &admission{
		maxCaller: cfg.MaxInFlightPerCaller, maxQueries: cfg.MaxQueriesInFlight, maxAll: cfg.MaxInFlight,
		maxCallerBytes: cfg.MaxBytesInFlightPerCaller, maxAllBytes: cfg.MaxBytesInFlight,
		refuseCallerBytes: newCannedRefusal("caller_bytes", &schemas.Error{Code: schemas.CodeUnavailable, Message: fmt.Sprintf(
			"this caller's requests in flight already hold %d MiB, the most one identity may have at once: "+
				"retry once some of them are answered (the limit is this caller's own; other callers are served)", cfg.MaxBytesInFlightPerCaller>>20)}),
		refuseAllBytes: newCannedRefusal("all_bytes", &schemas.Error{Code: schemas.CodeUnavailable,
			Message: "the service is at its limit of bytes of requests in flight: retry shortly"}),
		refuseCaller: newCannedRefusal("caller", &schemas.Error{Code: schemas.CodeUnavailable, Message: fmt.Sprintf(
			"this caller already has %d requests in flight, the most one identity may have at once: "+
				"retry once some of them are answered (the limit is this caller's own; other callers are served)", cfg.MaxInFlightPerCaller)}),
		refuseQueries: newCannedRefusal("queries", &schemas.Error{Code: schemas.CodeUnavailable, Message: fmt.Sprintf(
			"the service is at its limit of %d queries in flight (commands keep room of their own): retry shortly", cfg.MaxQueriesInFlight)}),
		refuseAll: newCannedRefusal("all", &schemas.Error{Code: schemas.CodeUnavailable,
			Message: "the service is at its limit of requests in flight: retry shortly"}),
		maxWorkspace: cfg.MaxInFlightPerWorkspace, maxWorkspaceBytes: cfg.MaxBytesInFlightPerWorkspace,
		refuseWorkspace: newCannedRefusal("workspace", &schemas.Error{Code: schemas.CodeUnavailable, Message: fmt.Sprintf(
			"the service's requests in flight are near its limit, and this workspace's already number %d, its share: "+
				"retry once some of them are answered (the rest are kept for other workspaces)", cfg.MaxInFlightPerWorkspace)}),
		refuseWorkspaceBytes: newCannedRefusal("workspace_bytes", &schemas.Error{Code: schemas.CodeUnavailable, Message: fmt.Sprintf(
			"the service's requests in flight are near its limit of bytes, and this workspace's already hold %d MiB, its share: "+
				"retry once some of them are answered (the rest are kept for other workspaces)", cfg.MaxBytesInFlightPerWorkspace>>20)}),
		callers:    map[string]inFlight{},
		workspaces: map[string]inFlight{},
		drained:    make(chan struct{}),
		rates:      map[string]rate{},
		benched:    map[string]benched{},
	}
	if cfg.BenchFor > 0 {
		a.benchBytes = floodBytesFactor * cfg.MaxBytesInFlightPerCaller
		a.benchCount = floodCountFactor * cfg.MaxInFlightPerCaller
		a.benchRefused = floodRefusedFactor * cfg.MaxInFlightPerCaller
		a.benchFor = cfg.BenchFor
	}
	return a
}

// refuseStopped answers a request that comes while the service stops.
var refuseStopped = newCannedRefusal("stopping", &schemas.Error{Code: schemas.CodeUnavailable, Message: "this replica is stopping: retry (another replica, or this one once restarted, answers)"})

// stop refuses every request from now on and waits until the ones admitted
// before are answered, or d passes; it reports whether they were. The
// service stops before its views close: a request still reading them then
// would find them gone.
func (a *admission) stop(d time.Duration) bool {
	a.mu.Lock()
	if !a.stopped {
		a.stopped = true
		if a.all.n == 0 {
			close(a.drained)
		}
	}
	a.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-a.drained:
		return true
	case <-t.C:
		return false
	}
}

// admit takes a place for a request of caller of size bytes, a query when
// query is set. It returns nil when the request may be served (it then
// holds its place until release), or the reply that refuses it.
func (a *admission) admit(caller string, size int, query bool) []byte {
	if r, _ := a.take(caller, "", "", size, query, time.Now()); r != nil {
		return r.body
	}
	return nil
}

// take is admit at now, of a request to workspace ws ("": none, held to
// no workspace's share), that also reports, for a caller that can be
// benched (user, its NATS user, is not ""), that the caller is flooding
// (flood); a caller found flooding is refused until BenchFor has passed.
func (a *admission) take(caller, ws, user string, size int, query bool, now time.Time) (refused *cannedRefusal, flooding bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if b, ok := a.benched[caller]; ok {
		if now.Before(b.until) {
			return b.refusal, false
		}
		delete(a.benched, caller)
	}
	mine := a.callers[caller]
	own := true // refused for the caller's own limits
	switch {
	case a.stopped:
		refused, own = refuseStopped, false
	case mine.n >= a.maxCaller:
		refused = a.refuseCaller
	case mine.n > 0 && mine.bytes+size > a.maxCallerBytes:
		refused = a.refuseCallerBytes
	default:
		refused, own = a.admitAll(caller, ws, mine, size, query), false
	}
	if flooding = user != "" && a.flood(caller, user, ws, size, own, now); flooding {
		a.bench(caller, now)
	}
	return refused, flooding
}

// flood counts a request of size bytes from caller at now, refused for
// the caller's own limits when refused is set, and reports whether it makes
// caller flooding: its requests within the second, whatever their answers,
// passed benchBytes in bytes or benchCount in number, or those refused for
// its own limits passed benchRefused. A caller found flooding starts a new
// second when its bench is over (take refuses it before it is counted).
func (a *admission) flood(caller, user, ws string, size int, refused bool, now time.Time) bool {
	if a.benchBytes == 0 {
		return false
	}
	r, ok := a.rates[caller]
	if !ok || now.Sub(r.since) >= rateWindow {
		if !ok && len(a.rates) >= maxTracked { // forget those whose second is over
			maps.DeleteFunc(a.rates, func(_ string, old rate) bool { return now.Sub(old.since) >= rateWindow })
		}
		r = rate{since: now, user: user}
	}
	r.n++
	r.bytes += size
	r.ws = ws
	if refused {
		r.refused++
	}
	if r.bytes >= a.benchBytes || r.n >= a.benchCount || r.refused >= a.benchRefused {
		delete(a.rates, caller)
		return true
	}
	a.rates[caller] = r
	return false
}

// bench refuses caller's requests from now until BenchFor has passed,
// telling it when to come back.
func (a *admission) bench(caller string, now time.Time) {
	if len(a.benched) >= maxTracked { // forget the benches that are over
		maps.DeleteFunc(a.benched, func(_ string, b benched) bool { return !now.Before(b.until) })
	}
	until := now.Add(a.benchFor)
	at := until.UTC()
	a.benched[caller] = benched{until: until, refusal: newCannedRefusal("benched", &schemas.Error{Code: schemas.CodeUnavailable, RetryAfter: &at, Message: fmt.Sprintf(
		"this caller sent more in one second than the service takes (%d MiB, %d requests, or %d refused for its own limits): "+
			"its requests are refused for %s; send no faster than you are answered", a.benchBytes>>20, a.benchCount, a.benchRefused, a.benchFor)})}
}

// benchHeaviest benches the caller that sent the most requests in the
// second now is in, if it can be benched and sent at least floor, and
// returns that caller's NATS user. When none did, it benches the callers of
// the workspace whose callers sent the most, if they sent at least floor
// together — the heaviest first, as many as it takes to bring what the
// others sent under floor — and returns their users: a workspace's many
// identities, each sending less than floor, flooded the service together
// and none was benched. Only callers that can be benched have a rate, and
// none that is benched: its rate goes when it is benched, and take refuses
// it before it is counted again.
func (a *admission) benchHeaviest(now time.Time, floor int) (users []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.benchBytes == 0 {
		return nil
	}
	type sent struct {
		caller string
		n      int
	}
	var heaviest sent
	byWS := map[string][]sent{}
	sums := map[string]int{}
	for c, r := range a.rates {
		if now.Sub(r.since) >= rateWindow {
			continue
		}
		if r.n > heaviest.n {
			heaviest = sent{c, r.n}
		}
		byWS[r.ws] = append(byWS[r.ws], sent{c, r.n})
		sums[r.ws] += r.n
	}
	bench := func(caller string) {
		users = append(users, a.rates[caller].user)
		delete(a.rates, caller)
		a.bench(caller, now)
	}
	if heaviest.n >= floor {
		bench(heaviest.caller)
		return users
	}
	ws, most := "", floor-1
	for w, n := range sums {
		if w != "" && n > most {
			ws, most = w, n
		}
	}
	if ws == "" {
		return nil
	}
	crowd := byWS[ws]
	slices.SortFunc(crowd, func(x, y sent) int { return y.n - x.n })
	for _, c := range crowd {
		if most < floor {
			break
		}
		bench(c.caller)
		most -= c.n
	}
	return users
}

// backlogEvery is how many requests are taken in between two looks at
// the backlog, and backlogBenchEvery the least time between two benches
// for it.
const (
	backlogEvery      = 256
	backlogBenchEvery = 50 * time.Millisecond
)

// endpointPending is the most requests one endpoint holds received and not
// yet taken in: four times MaxBacklog.
func endpointPending(cfg Config) int { return 4 * cfg.MaxBacklog }

// checkBacklog benches the heaviest sender of the current second (or the
// heaviest of the workspace that sent the most: benchHeaviest) when the
// requests received and not yet taken in pass MaxBacklog (see Config), at
// most once every backlogBenchEvery (a look that benches nobody does not
// count). It is called as requests are taken in
// (every backlogEvery of them): a backlog grows only while requests come,
// faster than the service takes them in, and an idle service looks at
// nothing. The backlog counts requests only (what the service reads for
// itself waits elsewhere).
func (s *Service) checkBacklog(now time.Time) {
	last := s.backlogBenched.Load()
	if s.cfg.BenchFor <= 0 || now.UnixNano()-last < int64(backlogBenchEvery) {
		return
	}
	backlog := s.backlog()
	if backlog < s.cfg.MaxBacklog || !s.backlogBenched.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	users := s.admission.benchHeaviest(now, max(1, s.cfg.MaxInFlightPerCaller/4))
	if len(users) == 0 {
		// Nobody sent enough yet this second: the next look may bench, not
		// only one backlogBenchEvery later — by then a fast flood is taken
		// in whole, every look of it skipped.
		s.backlogBenched.CompareAndSwap(now.UnixNano(), last)
		return
	}
	s.cfg.Logger.Warn("handlers: requests come faster than the service takes them in; the identity that sent the most this second, or the heaviest of the workspace whose identities sent the most, are benched",
		"backlog", backlog, "users", users, "for", s.cfg.BenchFor)
	for _, user := range users {
		s.benchFlooder(user)
	}
}

// backlog returns the requests received and not yet taken in by the
// command, query and consumer info endpoints.
func (s *Service) backlog() int {
	n := 0
	for _, ep := range []*endpoints.Service{s.commandsEP.Load(), s.queriesEP.Load(), s.consumerInfoEP.Load()} {
		if ep != nil {
			n += ep.Backlog()
		}
	}
	return n
}

// benched is a caller found flooding: until when, and the reply that
// refuses its requests meanwhile.
type benched struct {
	until   time.Time
	refusal *cannedRefusal
}

// maxTracked is how many callers' rates (and benches) are kept before those
// that are over are forgotten.
const maxTracked = 1024

// admitAll takes a place for a request the caller's own limits let through,
// or returns the reply that refuses it for the service's: past the
// service's limits less a workspace's share, a workspace that holds its
// share is refused, so that the rest stays for the others (one workspace's
// many identities, each under its own limits, took every place).
func (a *admission) admitAll(caller, ws string, mine inFlight, size int, query bool) *cannedRefusal {
	theirs := a.workspaces[ws]
	switch {
	case ws != "" && theirs.n >= a.maxWorkspace && a.all.n >= a.maxAll-a.maxWorkspace:
		return a.refuseWorkspace
	case ws != "" && theirs.n > 0 && theirs.bytes+size > a.maxWorkspaceBytes && a.all.bytes+size > a.maxAllBytes-a.maxWorkspaceBytes:
		return a.refuseWorkspaceBytes
	case ws != "" && query && theirs.queries >= a.maxWorkspace && a.queries >= a.maxQueries-a.maxWorkspace:
		return a.refuseWorkspace
	case query && a.queries >= a.maxQueries:
		return a.refuseQueries
	case a.all.n >= a.maxAll:
		return a.refuseAll
	case a.all.n > 0 && a.all.bytes+size > a.maxAllBytes:
		return a.refuseAllBytes
	}
	a.callers[caller] = inFlight{n: mine.n + 1, bytes: mine.bytes + size}
	a.all = inFlight{n: a.all.n + 1, bytes: a.all.bytes + size}
	if query {
		a.queries++
		theirs.queries++
	}
	if ws != "" {
		a.workspaces[ws] = inFlight{theirs.n + 1, theirs.bytes + size, theirs.queries}
	}
	return nil
}

// release gives back the place of an admitted request of size bytes to
// workspace ws.
func (a *admission) release(caller, ws string, size int, query bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if mine := a.callers[caller]; mine.n > 1 {
		a.callers[caller] = inFlight{n: mine.n - 1, bytes: mine.bytes - size}
	} else {
		delete(a.callers, caller)
	}
	if theirs := a.workspaces[ws]; theirs.n > 1 {
		if query {
			theirs.queries--
		}
		a.workspaces[ws] = inFlight{theirs.n - 1, theirs.bytes - size, theirs.queries}
	} else {
		delete(a.workspaces, ws)
	}
	a.all = inFlight{n: a.all.n - 1, bytes: a.all.bytes - size}
	if query {
		a.queries--
	}
	if a.stopped && a.all.n == 0 {
		close(a.drained)
	}
}

// async answers req from a goroutine, so that a waiting request does not
// hold up the ones behind it on the same endpoint (and so batches form),
// once admission lets it in; a request over a limit is refused at once.
func (s *Service) async(req micro.Request, query bool, handle func(sender) []byte) {
	s.asyncRespond(req, query, func(who sender) ([]byte, micro.Headers) { return handle(who), nil })
}

// benchable reports whether who may be benched for flooding: an identity
// of the clients' account. Not the anonymous user of an open server, nor
// requests without an identity: that is every caller.
func (who sender) benchable() bool {
	return who.known && who.Account == access.ClientAccount && who.User != "" && who.User != access.AnonymousUser
}

// benchFlooder keeps who, found flooding, off the NATS server for
// BenchFor when the service can (AuthConfig.Bench: the embedded server);
// the service refuses its requests meanwhile either way.
func (s *Service) benchFlooder(user string) {
	s.metrics.bench()
	if s.cfg.Auth.Bench == nil {
		s.cfg.Logger.Warn("handlers: an identity sends more in one second than the service takes; its requests are refused for a while, "+
			"but it cannot be kept off this NATS server from here (revoke it, or limit it in NATS)", "user", user, "for", s.cfg.BenchFor)
		return
	}
	go s.cfg.Auth.Bench(user, s.cfg.BenchFor) // it logs whom, and the connections it closed
}

// respond sends reply to req: a refusal (a reply that is not OK) with the
// headers of a micro service error (Nats-Service-Error, -Code) that name
// it; the body is the reply all the same. (Not with req.Error: the reply
// may leave after the endpoint's handler returned, and micro reads what
// Error records when the handler returns, so `nats micro stats` cannot
// count these.)
func respond(req micro.Request, reply []byte, opts ...micro.RespondOpt) error {
	if !bytes.HasPrefix(reply, []byte(`{"ok":false`)) {
		return req.Respond(reply, opts...)
	}
	var r schemas.Reply
	if err := json.Unmarshal(reply, &r); err != nil || r.Error == nil {
		return req.Respond(reply, opts...)
	}
	return req.Respond(reply, append(opts, micro.WithHeaders(errorHeaders(r.Error)))...)
}

// errorHeaders are the headers of a micro service error that name e.
func errorHeaders(e *schemas.Error) micro.Headers {
	desc := strings.Join(strings.Fields(e.Message), " ") // one header line
	if len(desc) > 256 {
		desc = desc[:253] + "..."
	}
	return micro.Headers{micro.ErrorHeader: {desc}, micro.ErrorCodeHeader: {e.Code}}
}

// cannedRefusal is a reply that refuses a request, encoded once with its
// headers: admission's refusals are sent many times over, a flood's at
// tens of thousands a second.
type cannedRefusal struct {
	limit   string // which: the label of dwr_requests_refused_total
	body    []byte
	headers micro.Headers
	jsAPI   []byte // the refusal of a JetStream API request answered in JetStream's place
}

func newCannedRefusal(limit string, e *schemas.Error) *cannedRefusal {
	return &cannedRefusal{limit: limit, body: errResponse(e), headers: errorHeaders(e), jsAPI: consumerInfoError(503, e.Message)}
}

// asyncRespond is async for a reply with headers.
func (s *Service) asyncRespond(req micro.Request, query bool, handle func(sender) ([]byte, micro.Headers)) {
	s.admit(req, query, workspaceOf(req.Subject()), func(r *cannedRefusal) { _ = req.Respond(r.body, micro.WithHeaders(r.headers)) }, handle)
}

// admit answers req as asyncRespond does, as a request to workspace ws,
// with refuse sending admission's refusal.
func (s *Service) admit(req micro.Request, query bool, ws string, refuse func(*cannedRefusal), handle func(sender) ([]byte, micro.Headers)) {
	if f := s.onIntake.Load(); f != nil {
		(*f)()
	}
	who := senderOf(req.Headers()) // decoded once: admission and authorization share it
	caller := who.key()
	size := len(req.Data())
	var user string
	if who.benchable() {
		user = who.User
	}
	now := time.Now()
	refused, flooding := s.admission.take(caller, ws, user, size, query, now)
	if flooding {
		s.benchFlooder(user)
	}
	if s.intake.Add(1)%backlogEvery == 0 {
		s.checkBacklog(now)
	}
	if refused != nil {
		s.metrics.refused(refused.limit)
		refuse(refused)
		return
	}
	s.runners.run(func() {
		// The place is given back before the reply leaves: a caller that
		// sends its next request once answered finds it free.
		reply, h := func() ([]byte, micro.Headers) {
			defer s.admission.release(caller, ws, size, query)
			return handle(who)
		}()
		var opts []micro.RespondOpt
		if h != nil {
			opts = append(opts, micro.WithHeaders(h))
		}
		if err := respond(req, reply, opts...); err != nil {
			s.cfg.Logger.Warn("handlers: a reply could not be sent", "subject", req.Subject(), "err", err)
		}
	})
}

// turns lets holders in up to a capacity, each taking its weight of it,
// and at most maxHolders of them (0: no bound but the capacity); the others
// wait, and what is given back goes to the next group in turn, and within
// it to the next caller in turn (round robin over the groups waiting, over
// each group's callers waiting, each caller's own in the order they came):
// one caller with many waiting does not hold up another's one, nor does a
// group with many callers waiting — a workspace whose admin made many
// identities — another group's one. A holder heavier than the whole
// capacity enters alone. The caller whose turn it is waits until its
// weight fits — no lighter holder passes it — so a heavy one is not starved
// by light ones.
type turns struct {
	mu         sync.Mutex
	capacity   int
	maxHolders int
	held       int
	holders    int
	groups     map[string]*turnGroup // the groups with callers waiting
	order      []string              // the groups waiting, whose turn is next first
}

// turnGroup is a group's callers waiting.
type turnGroup struct {
	waiting map[string][]waiter // by caller, in the order they came
	order   []string            // the callers waiting, whose turn is next first
}

// waiter is a holder waiting for its turn: turn is closed when it has it.
type waiter struct {
	weight int
	turn   chan struct{}
}

func newTurns(capacity, maxHolders int) *turns {
	return &turns{capacity: capacity, maxHolders: maxHolders, groups: map[string]*turnGroup{}}
}

// enter waits for the turn of caller of group to hold weight and returns
// the function that gives it back (once), or ctx's error if ctx ends first
// (nothing is then held).
func (t *turns) enter(ctx context.Context, group, caller string, weight int) (leave func(), err error) {
	h, err := t.hold(ctx, group, caller, weight)
	if err != nil {
		return nil, err
	}
	return h.leave, nil
}

// hold is enter that returns the holding itself: its holder's place can be
// given back before its weight (holding.release).
func (t *turns) hold(ctx context.Context, group, caller string, weight int) (*holding, error) {
	h := &holding{t: t, weight: weight, place: true, held: true}
	t.mu.Lock()
	if len(t.order) == 0 && t.fits(weight) {
		t.held += weight
		t.holders++
		t.mu.Unlock()
		return h, nil
	}
	w := waiter{weight: weight, turn: make(chan struct{})}
	g := t.groups[group]
	if g == nil {
		g = &turnGroup{waiting: map[string][]waiter{}}
		t.groups[group] = g
		t.order = append(t.order, group)
	}
	if len(g.waiting[caller]) == 0 {
		g.order = append(g.order, caller)
	}
	g.waiting[caller] = append(g.waiting[caller], w)
	t.mu.Unlock()
	select {
	case <-w.turn: // its weight is held for it, never given back between
		return h, nil
	case <-ctx.Done():
	}
	t.mu.Lock()
	gone := t.forget(group, caller, w.turn)
	t.mu.Unlock()
	if !gone { // its turn came meanwhile: give it back
		h.leave()
	}
	return nil, ctx.Err()
}

// holding is what one holder holds: its weight and its place among the
// maxHolders. Its fields are guarded by t.mu.
type holding struct {
	t           *turns
	weight      int
	place, held bool // not given back yet
}

// release gives back the holder's place, keeping its weight held, and lets
// in the callers whose turn it is: the writer takes a command into a batch,
// and the next may queue for the batch after it while this one commits.
// Once; leave gives back the rest.
func (h *holding) release() {
	h.t.mu.Lock()
	defer h.t.mu.Unlock()
	h.givePlace()
	h.t.admit()
}

// leave gives back what the holder still holds (once) and lets in the
// callers whose turn it is.
func (h *holding) leave() {
	t := h.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if h.held {
		h.held = false
		t.held -= h.weight
	}
	h.givePlace()
	t.admit()
}

// givePlace gives back the holder's place, once. The caller holds t.mu.
func (h *holding) givePlace() {
	if h.place {
		h.place = false
		h.t.holders--
	}
}

// forget takes the waiter whose turn is turn out of its caller's queue in
// group; it reports false when it is not there (its turn was given).
func (t *turns) forget(group, caller string, turn chan struct{}) bool {
	g := t.groups[group]
	if g == nil {
		return false
	}
	queue := g.waiting[caller]
	i := slices.IndexFunc(queue, func(w waiter) bool { return w.turn == turn })
	if i < 0 {
		return false
	}
	if queue = slices.Delete(queue, i, i+1); len(queue) > 0 {
		g.waiting[caller] = queue
	} else {
		delete(g.waiting, caller)
		g.order = slices.DeleteFunc(g.order, func(c string) bool { return c == caller })
	}
	if len(g.order) == 0 {
		delete(t.groups, group)
		t.order = slices.DeleteFunc(t.order, func(c string) bool { return c == group })
	}
	t.admit() // those it held up, if it was next
	return true
}

// fits reports whether one more holder of weight may be let in now.
func (t *turns) fits(weight int) bool {
	return t.held == 0 || (t.held+weight <= t.capacity && (t.maxHolders == 0 || t.holders < t.maxHolders))
}

// admit lets in the callers whose turn it is, as long as their weights fit.
func (t *turns) admit() {
	for len(t.order) > 0 {
		group := t.order[0]
		g := t.groups[group]
		caller := g.order[0]
		queue := g.waiting[caller]
		next := queue[0]
		if !t.fits(next.weight) {
			return
		}
		t.held += next.weight
		t.holders++
		g.order = g.order[1:]
		if queue = queue[1:]; len(queue) > 0 {
			g.waiting[caller] = queue
			g.order = append(g.order, caller) // its next waits for the group's others' turns
		} else {
			delete(g.waiting, caller)
		}
		t.order = t.order[1:]
		if len(g.order) > 0 {
			t.order = append(t.order, group) // its next waits for the other groups' turns
		} else {
			delete(t.groups, group)
		}
		close(next.turn)
	}
}

// maxIdleRunners bounds the runners kept waiting for a request.
const maxIdleRunners = 256

// runners run the handlers of requests on goroutines kept for the next
// request once done. A fresh goroutine per request grew its stack to the
// validator's depth each time, copying it (schemas.growStack): ~3 % of the
// service's CPU under chain-3 load, deployed. An idle runner waits for a
// request; past maxIdle idle ones, a runner that finishes ends.
type runners struct {
	work     chan func()
	stopped  chan struct{}
	stopOnce sync.Once
	idle     atomic.Int32
	maxIdle  int32
}

func newRunners(maxIdle int32) *runners {
	return &runners{work: make(chan func()), stopped: make(chan struct{}), maxIdle: maxIdle}
}

// run runs f on an idle runner, or on a new one when none is idle.
func (r *runners) run(f func()) {
	select {
	case r.work <- f:
	default:
		go r.loop(f)
	}
}

func (r *runners) loop(f func()) {
	for {
		f()
		if r.idle.Add(1) > r.maxIdle {
			r.idle.Add(-1)
			return
		}
		select {
		case f = <-r.work:
			r.idle.Add(-1)
		case <-r.stopped:
			r.idle.Add(-1)
			return
		}
	}
}

// stop ends the idle runners; a request run after it runs on a goroutine
// of its own.
func (r *runners) stop() { r.stopOnce.Do(func() { close(r.stopped) }) }
