package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// minSeqHeader returns headers naming log sequence seq in Dwr-Min-Seq.
func minSeqHeader(seq uint64) nats.Header {
	h := nats.Header{}
	h.Set(schemas.HeaderMinSeq, fmt.Sprint(seq))
	return h
}

// A Dwr-Min-Seq beyond the log's end is refused at once, naming the header
// and the log's end, instead of waiting for views that can never get there.
// The service waits an hour for the views: had the query waited, the request
// would have timed out.
func TestMinSeqBeyondTheLogIsRefusedAtOnce(t *testing.T) {
	b := bundleOf(servicetest.Start(t, "", servicetest.Options{Secure: true, Log: eventstore.NewMemoryLog(), Config: handlers.Config{MinSeqWait: time.Hour}}))
	b.mustCommand(t, "goal.create", map[string]any{"title": "one"})
	end := b.lastSeq(t)

	var goals []json.RawMessage
	b.query(t, "goal.list", schemas.Query{}, end, &goals)
	require.Len(t, goals, 1, "a sequence within the log is waited for and served")

	for _, seq := range []uint64{end + 1, end + 1_000_000} {
		r := b.request(t, "dwr.q.default.goal.list", schemas.Query{}, minSeqHeader(seq))
		require.False(t, r.OK)
		require.Equal(t, string(domain.CodeInvalid), r.Error.Code)
		require.Contains(t, r.Error.Message, schemas.HeaderMinSeq)
		require.Contains(t, r.Error.Message, fmt.Sprintf("beyond the log's end (%d)", end))
	}
}

// On the writer a query reflects every command already answered, whoever
// sent it — also a query whose Dwr-Min-Seq names only its caller's own
// earlier writes, as every client's does: the writer answers a record's
// commands before its views apply it, and a query in between waits for
// them. (Such a query was answered from views without another caller's
// answered command: a Python worker's report, acknowledged, was missing
// from the task its test's client read next.)
func TestAQueryOnTheWriterReflectsEveryAnsweredCommand(t *testing.T) {
	b := bundleOf(servicetest.Start(t, "", servicetest.Options{Secure: true, Log: eventstore.NewMemoryLog(),
		Config: handlers.Config{MinSeqWait: 300 * time.Millisecond}}))
	_, mine := b.mustCommand(t, "goal.create", map[string]any{"title": "mine"})
	var goals []json.RawMessage
	b.query(t, "goal.list", schemas.Query{}, mine, &goals)
	require.Len(t, goals, 1)

	held, gate := make(chan struct{}), make(chan struct{})
	var hold, release sync.Once
	b.svc.OnAnswered(func() { hold.Do(func() { close(held); <-gate }) })
	defer release.Do(func() { close(gate) })
	_, theirs := b.mustCommand(t, "goal.create", map[string]any{"title": "theirs"}) // answered; its views are held
	receive(t, held, 1, 10*time.Second)
	r := b.request(t, "dwr.q.default.goal.list", schemas.Query{}, minSeqHeader(mine))
	require.False(t, r.OK, "answered from views without the command answered at %d: %s", theirs, r.Result)
	require.Equal(t, string(domain.CodeUnavailable), r.Error.Code, "%+v", r.Error)

	release.Do(func() { close(gate) })
	b.query(t, "goal.list", schemas.Query{}, mine, &goals)
	require.Len(t, goals, 2, "both, once the views apply what was answered")
}

// A replica that is not the writer asks the log for its end, only when a
// query names a sequence its views have not reached, and refuses one beyond
// it at once too.
func TestMinSeqBeyondTheLogIsRefusedOnAStandby(t *testing.T) {
	nc, b := sharedServer(t)
	startReplicaWith(t, nc, handlers.Config{WriterID: "writer-a", MinSeqWait: 30 * time.Second})
	var first schemas.Reply
	servicetest.Eventually(t, 10*time.Second, func() bool {
		first = b.command(t, "goal.create", map[string]any{"title": "first"}, "first")
		return first.OK
	})
	standby := startReplicaWith(t, nc, handlers.Config{WriterID: "writer-b", MinSeqWait: 30 * time.Second})
	end, err := standby.svc.Log().LastSeq(context.Background())
	require.NoError(t, err)

	subject := "dwr.q.default.goal.list"
	r := standby.svc.ServeQuery("goal.list", subject, minSeqHeader(end), nil)
	require.True(t, r.OK, "%+v", r.Error)
	require.GreaterOrEqual(t, r.Seq, end)

	r = standby.svc.ServeQuery("goal.list", subject, minSeqHeader(end+1), nil)
	require.False(t, r.OK)
	require.Equal(t, string(domain.CodeInvalid), r.Error.Code)
	require.Contains(t, r.Error.Message, schemas.HeaderMinSeq)
	require.Contains(t, r.Error.Message, fmt.Sprintf("beyond the log's end (%d)", end))
}

// holdQueriesOf holds the queries of the callers named in flight, each until
// release is called (at cleanup at the latest); held receives the name of
// each caller whose query is held.
func holdQueriesOf(t *testing.T, svc *handlers.Service, callers ...string) (held <-chan string, release func()) {
	t.Helper()
	h := make(chan string, 1024)
	gate := make(chan struct{})
	hold := map[string]bool{}
	for _, c := range callers {
		hold[c] = true
	}
	svc.OnQuery(func(actor, _ string) {
		if hold[actor] {
			h <- actor
			<-gate
		}
	})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	return h, release
}

// asyncRequest sends a request on nc from its own goroutine; its answer (or
// transport error) arrives on the channel returned.
func asyncRequest(nc *nats.Conn, subject string, body any, out chan<- reply) {
	go func() {
		m := nats.NewMsg(subject)
		m.Data, _ = json.Marshal(body)
		out <- requestReply(nc, m)
	}()
}

// requestReply sends m on nc and returns its answer, or the transport error.
func requestReply(nc *nats.Conn, m *nats.Msg) reply {
	resp, err := nc.RequestMsg(m, 30*time.Second)
	if err != nil {
		return reply{err: err}
	}
	var r schemas.Reply
	err = json.Unmarshal(resp.Data, &r)
	return reply{r: r, err: err}
}

type reply struct {
	r   schemas.Reply
	err error
}

// receive takes n values from c, failing the test if they do not come
// within d (a deadline against a hang, not a measure of speed).
func receive[T any](t *testing.T, c <-chan T, n int, d time.Duration) []T {
	t.Helper()
	out := make([]T, 0, n)
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for len(out) < n {
		select {
		case v := <-c:
			out = append(out, v)
		case <-deadline.C:
			t.Fatalf("received %d of %d within %s", len(out), n, d)
		}
	}
	return out
}

// commandsFrom sends n goal.create commands from nc, at most conc at once,
// and returns their answers.
func commandsFrom(t *testing.T, nc *nats.Conn, n, conc int) []reply {
	t.Helper()
	out := make(chan reply, n)
	sem := make(chan struct{}, conc)
	for i := range n {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			m := nats.NewMsg("dwr.cmd.default.goal.create")
			m.Header.Set(schemas.HeaderCommandID, fmt.Sprintf("fair-%d", i))
			m.Data, _ = json.Marshal(map[string]any{"title": fmt.Sprintf("goal %d", i)})
			out <- requestReply(nc, m)
		}()
	}
	return receive(t, out, n, time.Minute)
}

// One identity floods queries — far more at once than its limit — while
// another identity sends commands: the flooder's requests beyond its limit
// are refused at once, with a message naming its own limit, and every
// command of the other is answered. The flooder's admitted queries are held
// in flight until the commands are done, so the counts are exact.
func TestOneCallersFloodLeavesOthersCommandsServed(t *testing.T) {
	const perCaller, flood = 8, 200
	st := servicetest.Start(t, "", servicetest.Options{Secure: true, Log: eventstore.NewMemoryLog(),
		Config: handlers.Config{MaxInFlight: 64, MaxInFlightPerCaller: perCaller, BenchFor: -1}}) // the limits alone, no bench
	flooder := st.Member(t, "default", "flooder", domain.RoleViewer)
	client := st.Member(t, "default", "client", domain.RoleClient)
	held, release := holdQueriesOf(t, st.Svc, "flooder")

	answers := make(chan reply, flood)
	for range flood {
		asyncRequest(flooder, "dwr.q.default.task.list", schemas.Query{}, answers)
	}
	receive(t, held, perCaller, time.Minute)
	// Nothing held can answer yet: every answer now is a refusal.
	for _, a := range receive(t, answers, flood-perCaller, time.Minute) {
		require.NoError(t, a.err)
		require.False(t, a.r.OK)
		require.Equal(t, string(domain.CodeUnavailable), a.r.Error.Code)
		require.Contains(t, a.r.Error.Message, fmt.Sprintf("this caller already has %d requests in flight", perCaller))
	}

	// Meanwhile another identity's commands are all answered.
	for _, a := range commandsFrom(t, client, 4*perCaller, perCaller) {
		require.NoError(t, a.err)
		require.True(t, a.r.OK, "%+v", a.r.Error)
	}

	// Released, the flooder's held queries are answered.
	release()
	for _, a := range receive(t, answers, perCaller, time.Minute) {
		require.NoError(t, a.err)
		require.True(t, a.r.OK, "%+v", a.r.Error)
	}
	select {
	case a := <-held:
		t.Fatalf("a query of %s was held beyond the limit", a)
	default:
	}
}

// Queries, however many callers send them, leave room for commands: once
// the queries in flight reach MaxQueriesInFlight the next query is refused
// at the service's query limit, and commands are still served from the rest
// of MaxInFlight.
func TestQueriesLeaveRoomForCommands(t *testing.T) {
	const perCaller = 4
	st := servicetest.Start(t, "", servicetest.Options{Secure: true, Log: eventstore.NewMemoryLog(),
		Config: handlers.Config{MaxInFlight: 3 * perCaller, MaxQueriesInFlight: 2 * perCaller, MaxInFlightPerCaller: perCaller, BenchFor: -1,
			MaxInFlightPerWorkspace: 3 * perCaller}}) // one workspace: no share kept for others
	readers := []*nats.Conn{
		st.Member(t, "default", "reader-1", domain.RoleViewer),
		st.Member(t, "default", "reader-2", domain.RoleViewer),
		st.Member(t, "default", "reader-3", domain.RoleViewer),
	}
	client := st.Member(t, "default", "client", domain.RoleClient)
	held, release := holdQueriesOf(t, st.Svc, "reader-1", "reader-2", "reader-3")

	answers := make(chan reply, 3*perCaller)
	for _, r := range readers[:2] {
		for range perCaller {
			asyncRequest(r, "dwr.q.default.goal.list", schemas.Query{}, answers)
		}
	}
	receive(t, held, 2*perCaller, time.Minute) // the queries' budget is full
	for range perCaller {
		asyncRequest(readers[2], "dwr.q.default.goal.list", schemas.Query{}, answers)
	}
	for _, a := range receive(t, answers, perCaller, time.Minute) {
		require.NoError(t, a.err)
		require.False(t, a.r.OK)
		require.Equal(t, string(domain.CodeUnavailable), a.r.Error.Code)
		require.Contains(t, a.r.Error.Message, fmt.Sprintf("limit of %d queries in flight", 2*perCaller))
	}

	for _, a := range commandsFrom(t, client, 4*perCaller, perCaller) {
		require.NoError(t, a.err)
		require.True(t, a.r.OK, "%+v", a.r.Error)
	}
	release()
	for _, a := range receive(t, answers, 2*perCaller, time.Minute) {
		require.NoError(t, a.err)
		require.True(t, a.r.OK, "%+v", a.r.Error)
	}
}

// One identity keeps a thousand large listings in flight — within its
// limit of requests in flight, every one admitted — while another identity
// sends commands: every command is answered. (The listings' replies, tens of
// MiB a second, once queued on the connection that also carried the writer's
// lease: the writer lost its lease and most commands found no responders.)
func TestAFloodOfLargeQueriesLeavesCommandsServed(t *testing.T) {
	if testing.Short() {
		t.Skip("floods the service for seconds")
	}
	st := servicetest.Start(t, "", servicetest.Options{Secure: true})
	flooder := st.Member(t, "default", "flooder", domain.RoleViewer)
	client := st.Member(t, "default", "client", domain.RoleClient)
	for _, a := range commandsFrom(t, client, 200, 16) { // a listing of ~36 KiB
		require.NoError(t, a.err)
		require.True(t, a.r.OK, "%+v", a.r.Error)
	}

	ctx, stop := context.WithCancel(t.Context())
	var flooded sync.WaitGroup
	var listed atomic.Int64
	for range 1024 {
		flooded.Go(func() {
			for ctx.Err() == nil {
				if m, err := flooder.RequestWithContext(ctx, "dwr.q.default.goal.list", []byte(`{}`)); err == nil && len(m.Data) > 30<<10 {
					listed.Add(1)
				}
			}
		})
	}
	defer func() { stop(); flooded.Wait() }()
	servicetest.Eventually(t, time.Minute, func() bool { return listed.Load() >= 2048 }) // the flood is on

	for i := range 30 {
		m := nats.NewMsg("dwr.cmd.default.goal.create")
		m.Header.Set(schemas.HeaderCommandID, fmt.Sprintf("during-flood-%d", i))
		m.Data, _ = json.Marshal(map[string]any{"title": fmt.Sprintf("during the flood %d", i)})
		a := requestReply(client, m)
		require.NoError(t, a.err, "command %d during the flood (%d listings answered)", i, listed.Load())
		require.True(t, a.r.OK, "%+v", a.r.Error)
	}
}

// One identity keeps its 10 MiB of large commands in flight while another
// sends commands one at a time: each of the other's commands is committed
// after at most the few of the flooder's the writer already held — it takes
// commands in turn by caller — not after all of them. (It took them in the
// order they came: ~37 of the flooder's, ~3 s, ahead of each; with the
// default 4 MiB handed to the writer and 30 MiB flooding, ~117 against 16.)
// Counted in commits, not timed.
func TestAFloodOfLargeCommandsLeavesOthersTheirTurn(t *testing.T) {
	if testing.Short() {
		t.Skip("floods the service for seconds")
	}
	const size, flooding, atTheWriter = 250 << 10, 40, 1 << 20
	st := servicetest.Start(t, "", servicetest.Options{Secure: true, Config: handlers.Config{MaxWriterBytes: atTheWriter}})
	body, err := json.Marshal(map[string]any{"spec": map[string]any{"queue": "flood",
		"input": map[string]any{"blob": strings.Repeat("x", size)}}})
	require.NoError(t, err)
	// Ahead of the other caller's command, once it waits for its turn: what
	// the writer held then (1 MiB: three or four of these; 3 here), and at
	// most as many again decided before its turn; never the rest of the
	// flooder's in flight (33–36 taken in the order they came).
	for i, ahead := range commitsAheadBesideAFlood(t, st, "dwr.cmd.default.task.create", body, flooding) {
		require.LessOrEqual(t, ahead, 2*atTheWriter/size, "the flooder's commands committed between command %d's wait for its turn and its commit", i)
	}
}

// One identity keeps many small commands in flight, under its own limits,
// while another sends commands one at a time: each of the other's commands
// is committed after at most the few of the flooder's the writer was
// committing or that waited for its next batch (MaxWriterCommands), not
// after all of them. (Small commands were
// bounded only by their bytes — some 8,000 at once — and four identities
// flooding 10,000 a second each made another caller's command wait ~1 s:
// `dwr bench flood --payload-bytes 40 --rate 10000`.) Counted in commits,
// not timed.
func TestAFloodOfSmallCommandsLeavesOthersTheirTurn(t *testing.T) {
	if testing.Short() {
		t.Skip("floods the service for seconds")
	}
	const flooding, waiting = 200, 8
	st := servicetest.Start(t, "", servicetest.Options{Secure: true, Config: handlers.Config{MaxWriterCommands: waiting}})
	// Ahead of the other caller's command, once it waits for its turn: the
	// commands holding the places then (8 here, every run), and at most a
	// batch more when the writer takes the next before the other's command
	// reaches its queue; never the rest of the flooder's in flight (90–119
	// without the bound; 184–200 with the flooder's and the other's
	// commands taken in the order they came).
	aheads := commitsAheadBesideAFlood(t, st, "dwr.cmd.default.goal.create", []byte(`{"title":"flood"}`), flooding)
	for i, ahead := range aheads {
		require.LessOrEqual(t, ahead, 2*waiting, "the flooder's commands committed between command %d's wait for its turn and its commit", i)
	}
}

// A workspace's many identities, each under its own limits, flood small
// commands while another workspace's client sends commands one at a time:
// the writer's turns go round the workspaces before their callers, so each
// of the client's commands waits for a few of the crowd's, not for a turn
// of each of its identities (a workspace's admin makes as many as it
// likes, up to --max-members-per-workspace).
func TestAWorkspacesManyIdentitiesLeaveAnotherWorkspaceItsTurn(t *testing.T) {
	if testing.Short() {
		t.Skip("floods the service for seconds")
	}
	const identities, waiting = 48, 4
	st := servicetest.Start(t, "", servicetest.Options{Secure: true, Log: eventstore.NewMemoryLog(),
		Config: handlers.Config{MaxWriterCommands: waiting}})
	servicetest.Must(t, st.Admin, "crowd", "workspace.create", map[string]any{"name": "crowd"})
	crowd := make([]*nats.Conn, identities)
	for i := range crowd {
		crowd[i] = st.Member(t, "crowd", fmt.Sprintf("crowd-%d", i), domain.RoleClient)
	}
	// As many ahead as TestAFloodOfSmallCommandsLeavesOthersTheirTurn
	// allows one flooder (4 or 5 here); a turn of each identity first was
	// 45–59.
	aheads := commitsAheadBeside(t, st, crowd, "dwr.cmd.crowd.goal.create", []byte(`{"title":"flood"}`), 2*identities)
	for i, ahead := range aheads {
		require.LessOrEqual(t, ahead, 2*waiting, "the crowd's commands committed between command %d's wait for its turn and its commit", i)
	}
}

// commitsAheadBesideAFlood has an identity keep flooding requests of body
// on subject in flight, one after another on each of flooding goroutines,
// while another sends five goal.create one at a time; it returns, for each
// of those, how many of the flooder's commands were committed between its
// waiting for its turn at the writer and its commit.
func commitsAheadBesideAFlood(t *testing.T, st *servicetest.Service, subject string, body []byte, flooding int) []int {
	t.Helper()
	return commitsAheadBeside(t, st, []*nats.Conn{st.Member(t, "default", "flooder", domain.RoleClient)}, subject, body, flooding)
}

// commitsAheadBeside is commitsAheadBesideAFlood with flooders taking
// turns to send each of the flood's requests.
func commitsAheadBeside(t *testing.T, st *servicetest.Service, flooders []*nats.Conn, subject string, body []byte, flooding int) []int {
	t.Helper()
	client := st.Member(t, "default", "client", domain.RoleClient)
	ctx, stop := context.WithCancel(t.Context())
	var flooded sync.WaitGroup
	var mu sync.Mutex
	var floods []uint64 // the log sequences of the flooder's commits
	for i := range flooding {
		flooder := flooders[i%len(flooders)]
		flooded.Go(func() {
			for ctx.Err() == nil {
				m, err := flooder.RequestWithContext(ctx, subject, body)
				if err != nil {
					continue
				}
				var r schemas.Reply
				if json.Unmarshal(m.Data, &r) == nil && r.OK {
					mu.Lock()
					floods = append(floods, r.Seq)
					mu.Unlock()
				}
			}
		})
	}
	stopped := false
	end := func() {
		if !stopped {
			stopped = true
			stop()
			flooded.Wait()
		}
	}
	defer end()
	servicetest.Eventually(t, time.Minute, func() bool { // the flood is on: every goroutine's in flight
		mu.Lock()
		defer mu.Unlock()
		return len(floods) >= 2*flooding
	})

	// Each of the other's commands is counted from the moment it waits for
	// its turn at the writer, not from its sending: the writer is held
	// after a commit until the command waits, so the commits of its trip
	// to the service (many on a busy machine, the log in memory) are not
	// counted as ahead of it.
	type span struct{ after, at uint64 } // the log's end when it waited, its commit
	var spans []span
	for i := range 5 {
		held, gate := make(chan struct{}), make(chan struct{})
		var hold, release sync.Once
		st.Svc.OnAnswered(func() { hold.Do(func() { close(held); <-gate }) })
		defer release.Do(func() { close(gate) }) // if the test ends first
		receive(t, held, 1, time.Minute)
		m := nats.NewMsg("dwr.cmd.default.goal.create")
		m.Header.Set(schemas.HeaderCommandID, fmt.Sprintf("beside-the-flood-%d", i))
		m.Data, _ = json.Marshal(map[string]any{"title": fmt.Sprintf("beside the flood %d", i)})
		answer := make(chan reply, 1)
		go func() { answer <- requestReply(client, m) }()
		servicetest.Eventually(t, time.Minute, func() bool { return st.Svc.WaitingForTheWriter("default") > 0 })
		after, err := st.Svc.Log().LastSeq(t.Context())
		require.NoError(t, err)
		st.Svc.OnAnswered(func() {})
		release.Do(func() { close(gate) })
		a := receive(t, answer, 1, time.Minute)[0]
		require.NoError(t, a.err)
		require.True(t, a.r.OK, "%+v", a.r.Error)
		spans = append(spans, span{after, a.r.Seq})
	}
	end()
	aheads := make([]int, len(spans))
	for i, s := range spans {
		for _, seq := range floods {
			if seq > s.after && seq < s.at {
				aheads[i]++
			}
		}
	}
	return aheads
}

// A viewer reads the feed over a stretch of large events: the page comes
// back, and the queries' connection stays up for the next caller. (A feed
// page pulled 256 events at once — up to 256 MiB — past the server's
// max_pending: the server cut the service's queries' connection, and every
// query in flight with it went unanswered.)
func TestAFeedOfLargeEventsIsReadAFewAtATime(t *testing.T) {
	if testing.Short() {
		t.Skip("writes ~37 MiB of tasks")
	}
	// max_pending 12 MiB: what passes 64 MiB on a busy machine passes 12
	// on an idle one.
	st := servicetest.Start(t, "", servicetest.Options{Secure: true, MaxPending: 12 << 20})
	client := st.Member(t, "default", "client", domain.RoleClient)
	viewer := st.Member(t, "default", "viewer", domain.RoleViewer)
	body, err := json.Marshal(map[string]any{"spec": map[string]any{"queue": "large",
		"input": map[string]any{"blob": strings.Repeat("x", 250<<10)}}}) // sealed, ~333 KiB an event
	require.NoError(t, err)
	out := make(chan reply, 150)
	sem := make(chan struct{}, 16)
	for range cap(out) {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			out <- requestReply(client, &nats.Msg{Subject: "dwr.cmd.default.task.create", Data: body})
		}()
	}
	for _, a := range receive(t, out, cap(out), 5*time.Minute) {
		require.NoError(t, a.err)
		require.True(t, a.r.OK, "%+v", a.r.Error)
	}

	// The feed is published after each commit, without waiting: on a busy
	// machine its last events may come in after the replies.
	page := func(i int) reply {
		m := nats.NewMsg("dwr.q.default.feed")
		m.Data, _ = json.Marshal(schemas.Query{Filter: "task.>", Limit: 5})
		a := requestReply(viewer, m)
		require.NoError(t, a.err, "feed page %d", i)
		require.True(t, a.r.OK, "%+v", a.r.Error)
		return a
	}
	servicetest.Eventually(t, time.Minute, func() bool { return page(0).r.Next != "" })
	for i := range 3 { // each page holds one event (a reply is at most 1 MiB)
		require.NotEmpty(t, page(i+1).r.Next, "more events follow")
	}
	require.Zero(t, st.Server.NATS().NumSlowConsumers(), "a connection was cut as a slow consumer")
}

// The NATS server cuts the service's own connection, as it cuts a slow
// consumer under a flood: the service is back on it at the first try (in
// 10 ms; nats.go waits 2 s by default, and every caller found no
// responders meanwhile: embedded.InProcessReconnectDelay) and answers
// commands again, its writer still the writer.
func TestTheServiceComesBackWhenTheServerCutsItsConnection(t *testing.T) {
	st := servicetest.Start(t, "", servicetest.Options{Secure: true})
	client := st.Member(t, "default", "client", domain.RoleClient)
	command := func(id string) reply {
		m := nats.NewMsg("dwr.cmd.default.goal.create")
		m.Header.Set(schemas.HeaderCommandID, id)
		m.Data = []byte(`{"title":"t"}`)
		return requestReply(client, m)
	}
	before := command("before")
	require.NoError(t, before.err)
	require.True(t, before.r.OK, "%+v", before.r.Error)

	cid, err := st.Conn.GetClientID()
	require.NoError(t, err)
	require.NoError(t, st.Server.NATS().DisconnectClientByID(cid))
	servicetest.Eventually(t, 10*time.Second, func() bool { return st.Conn.Stats().Reconnects == 1 })

	var after reply
	servicetest.Eventually(t, 30*time.Second, func() bool { // the reply of a command sent as it reconnected may be lost: retried by id
		after = command("after")
		return after.err == nil && after.r.OK
	})
	require.Greater(t, after.r.Seq, before.r.Seq)
	require.Equal(t, uint64(1), st.Conn.Stats().Reconnects, "back at the first try")
}

// An identity that floods — sends far more in a second than the service
// takes, without waiting for its answers — is kept off the NATS server: its
// connection is closed, it cannot connect again until BenchFor has passed,
// and it is counted; another identity's commands are served meanwhile. Once
// the bench is over it connects and is served again. (Without the bench a
// flood like this one of 900 KiB commands, from four identities, made the
// NATS server cut the service's own connection as a slow consumer; other
// callers then found no responders for seconds.)
func TestAFlooderIsKeptOffTheServer(t *testing.T) {
	const bench = 3 * time.Second
	st := servicetest.Start(t, "", servicetest.Options{Secure: true, Listen: "127.0.0.1:0", Log: eventstore.NewMemoryLog(),
		Config: handlers.Config{BenchFor: bench, MaxBytesInFlightPerCaller: 512 << 10, Metrics: handlers.NewMetricsRegistry()}})
	key := st.MemberKey(t, "default", "flooder", domain.RoleClient)
	other := st.Member(t, "default", "other", domain.RoleClient)
	connect := func(name string, opts ...nats.Option) (*nats.Conn, error) { // over TCP, as a client in another process
		pub, _ := key.PublicKey()
		return nats.Connect(st.Server.ClientURL(), append(opts, nats.Name(name), nats.CustomInboxPrefix(schemas.InboxPrefix(pub)),
			nats.Nkey(pub, func(nonce []byte) ([]byte, error) { return key.Sign(nonce) }))...)
	}
	flooder, err := connect("flooder", nats.NoReconnect())
	require.NoError(t, err)
	defer flooder.Close()

	// Too large for a command: each is refused at once, and the flood
	// still passes 4 MiB (eight times 512 KiB) in well under a second —
	// under -race on a slow machine too, where the service took such
	// requests in at ~15 MB/s (a 16 MiB bound was then never reached).
	body := []byte(`{"title":"` + strings.Repeat("x", 900<<10) + `"}`)
	flooded := make(chan int)
	go func() {
		n := 0
		for ; flooder.PublishRequest("dwr.cmd.default.goal.create", flooder.NewRespInbox(), body) == nil; n++ {
		}
		flooded <- n
	}()
	servicetest.Eventually(t, 10*time.Second, flooder.IsClosed)
	require.Less(t, <-flooded, 1000, "its connection was closed early in the flood")

	_, err = connect("flooder again", nats.NoReconnect())
	require.ErrorIs(t, err, nats.ErrAuthorization, "benched, it cannot connect again")
	for i := range 3 {
		r := requestReply(other, nats.NewMsg("dwr.cmd.default.goal.create"))
		require.NoError(t, r.err)
		require.Equal(t, string(domain.CodeInvalid), r.r.Error.Code, "an empty goal.create %d of another identity is answered", i)
	}
	m := servicetest.ScrapeHandler(t, st.Svc.Metrics())
	v, _ := m.Value("dwr_callers_benched_total")
	require.Equal(t, 1.0, v)

	var again *nats.Conn
	servicetest.Eventually(t, bench+10*time.Second, func() bool {
		again, err = connect("flooder after its bench", nats.NoReconnect())
		return err == nil
	})
	defer again.Close()
	req := nats.NewMsg("dwr.cmd.default.goal.create")
	req.Data = []byte(`{"title":"after the bench"}`)
	r := requestReply(again, req)
	require.NoError(t, r.err)
	require.True(t, r.r.OK, "%+v", r.r.Error)
}

// An identity that sends small requests faster than the service takes them
// in — each answered at once, far under the counts that find a flood as the
// service takes requests in — is benched once the requests waiting to be
// taken in pass MaxBacklog: its connection is closed, and another
// identity's commands are served. (Four such identities, without it, grew
// the service's process by ~60 MB a second, and another caller got 2
// commands answered in a minute: dwr bench flood --payload-bytes 40.) The
// service is held from taking requests in until the backlog has built, as
// a service short of CPU falls behind: here the test's own flooder is
// slowed by the NATS server as often as the service is.
func TestASmallRequestFloodFasterThanTheServiceIsKeptOffTheServer(t *testing.T) {
	const maxBacklog = 256
	st := servicetest.Start(t, "", servicetest.Options{Secure: true, Listen: "127.0.0.1:0", Log: eventstore.NewMemoryLog(),
		Config: handlers.Config{BenchFor: time.Minute, MaxBacklog: maxBacklog, Metrics: handlers.NewMetricsRegistry()}})
	key := st.MemberKey(t, "default", "flooder", domain.RoleClient)
	other := st.Member(t, "default", "other", domain.RoleClient)
	pub, _ := key.PublicKey()
	flooder, err := nats.Connect(st.Server.ClientURL(), nats.Name("flooder"), nats.NoReconnect(), nats.CustomInboxPrefix(schemas.InboxPrefix(pub)),
		nats.Nkey(pub, func(nonce []byte) ([]byte, error) { return key.Sign(nonce) }))
	require.NoError(t, err)
	defer flooder.Close()

	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	defer release()
	st.Svc.OnIntake(func() { <-gate })
	// No title: each is answered invalid as it is taken in, and never
	// refused for the flooder's limits on requests in flight.
	body := []byte(`{}`)
	flooded := make(chan int)
	go func() {
		n := 0
		for ; flooder.PublishRequest("dwr.cmd.default.goal.create", flooder.NewRespInbox(), body) == nil; n++ {
		}
		flooded <- n
	}()
	servicetest.Eventually(t, 30*time.Second, func() bool { return st.Svc.Backlog() >= 2*maxBacklog })
	v, _ := servicetest.ScrapeHandler(t, st.Svc.Metrics()).Value("dwr_requests_backlog")
	require.GreaterOrEqual(t, v, float64(2*maxBacklog), "the backlog is a metric")
	release()
	servicetest.Eventually(t, 30*time.Second, flooder.IsClosed)
	t.Logf("%d requests sent before the flooder's connection was closed", <-flooded)

	// The flood's requests taken in before the bench are answered first, and
	// one that came while an endpoint held its bound was dropped: another
	// identity's command is served once they are, asked again as a client
	// asks again after its timeout.
	for i := range 3 {
		servicetest.Eventually(t, time.Minute, func() bool {
			req := nats.NewMsg("dwr.cmd.default.goal.create")
			req.Header.Set(schemas.HeaderCommandID, fmt.Sprintf("served-%d", i))
			req.Data = []byte(`{"title":"served"}`)
			resp, err := other.RequestMsg(req, 5*time.Second)
			if err != nil {
				return false
			}
			var r schemas.Reply
			require.NoError(t, json.Unmarshal(resp.Data, &r))
			require.True(t, r.OK, "goal.create %d of another identity: %+v", i, r.Error)
			return true
		})
	}
	v, _ = servicetest.ScrapeHandler(t, st.Svc.Metrics()).Value("dwr_callers_benched_total")
	require.Equal(t, 1.0, v, "the flooder only")
}

// An honest client with three times its limit of requests at once — the
// excess refused, and asked again by the Go client as it backs off — is
// served in the end and never benched; its refusals are counted under its
// limit.
func TestAClientPastItsLimitIsServedNotBenched(t *testing.T) {
	const perCaller = 8
	st := servicetest.Start(t, "", servicetest.Options{Secure: true, Log: eventstore.NewMemoryLog(),
		Config: handlers.Config{MaxInFlight: 64, MaxInFlightPerCaller: perCaller, Metrics: handlers.NewMetricsRegistry()}})
	busy := st.Member(t, "default", "busy", domain.RoleViewer)
	held, release := holdQueriesOf(t, st.Svc, "busy")
	cl := servicetest.NewClient(busy, "default")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make(chan error, 3*perCaller)
	for range 3 * perCaller {
		go func() {
			var out []json.RawMessage
			errs <- cl.QueryErr(ctx, "task.list", schemas.Query{}, &out)
		}()
	}
	receive(t, held, perCaller, time.Minute)
	refused := func() float64 {
		v, _ := servicetest.ScrapeHandler(t, st.Svc.Metrics()).Value("dwr_requests_refused_total", "limit", "caller")
		return v
	}
	// Each of the 16 beyond the limit refused three times at least: a
	// second of the client's backing off, held to its limit throughout.
	servicetest.Eventually(t, time.Minute, func() bool { return refused() >= 3*2*perCaller })
	release()
	for range 3 * perCaller {
		require.NoError(t, <-errs)
	}
	m := servicetest.ScrapeHandler(t, st.Svc.Metrics())
	benched, _ := m.Value("dwr_callers_benched_total")
	require.Zero(t, benched, "an honest client is not benched")
	t.Logf("%v refusals of %d queries", refused(), 3*perCaller)
}

// A workspace's many identities, each within its own limit of requests in
// flight, cannot take every place of the service: near its limits a
// workspace holding its share (a quarter) is refused, and another
// workspace's client is served. (They took every place the queries have,
// and the other's query was refused.)
func TestAWorkspacesManyIdentitiesCannotTakeEveryPlace(t *testing.T) {
	const perCaller, identities = 8, 8
	st := servicetest.Start(t, "", servicetest.Options{Secure: true, Log: eventstore.NewMemoryLog(),
		Config: handlers.Config{MaxInFlight: 64, MaxInFlightPerCaller: perCaller, Metrics: handlers.NewMetricsRegistry()}})
	servicetest.Must(t, st.Admin, "crowd", "workspace.create", map[string]any{"name": "crowd"})
	names := make([]string, identities)
	crowd := make([]*nats.Conn, identities)
	for i := range crowd {
		names[i] = fmt.Sprintf("crowd-%d", i)
		crowd[i] = st.Member(t, "crowd", names[i], domain.RoleViewer)
	}
	other := st.Member(t, "default", "other", domain.RoleViewer)
	held, release := holdQueriesOf(t, st.Svc, names...)
	answers := make(chan reply, identities*perCaller)
	for _, nc := range crowd {
		for range perCaller {
			asyncRequest(nc, "dwr.q.crowd.task.list", schemas.Query{}, answers)
		}
	}
	// 16 of the 48 queries' places are the crowd's share, kept from it
	// once the queries in flight reach 32; the rest of its requests are
	// refused at once.
	receive(t, held, 32, time.Minute)
	for range identities*perCaller - 32 {
		a := <-answers
		require.NoError(t, a.err)
		require.False(t, a.r.OK)
		require.Contains(t, a.r.Error.Message, "this workspace's already number 16, its share")
	}
	r := servicetest.NewClient(other, "default").Request(t, "dwr.q.default.task.list", schemas.Query{}, nil)
	require.True(t, r.OK, "another workspace's query: %+v", r.Error)
	v, _ := servicetest.ScrapeHandler(t, st.Svc.Metrics()).Value("dwr_requests_refused_total", "limit", "workspace")
	require.Equal(t, float64(identities*perCaller-32), v)
	release()
	for range 32 {
		a := <-answers
		require.NoError(t, a.err)
		require.True(t, a.r.OK, "%+v", a.r.Error)
	}
}

// A workspace's many identities send requests without waiting for their
// answers, faster together than the service takes them in, each fewer in a
// second than would get it benched alone: the heaviest of them are benched
// together, and another workspace's client is served.
func TestAWorkspacesCrowdFloodingTogetherIsBenched(t *testing.T) {
	const maxBacklog, identities, each = 512, 8, 240 // each under the floor, a quarter of MaxInFlightPerCaller (256)
	st := servicetest.Start(t, "", servicetest.Options{Secure: true, Listen: "127.0.0.1:0", Log: eventstore.NewMemoryLog(),
		Config: handlers.Config{BenchFor: time.Minute, MaxBacklog: maxBacklog, Metrics: handlers.NewMetricsRegistry()}})
	servicetest.Must(t, st.Admin, "crowd", "workspace.create", map[string]any{"name": "crowd"})
	crowd := make([]*nats.Conn, identities)
	for i := range crowd {
		key := st.MemberKey(t, "crowd", fmt.Sprintf("crowd-%d", i), domain.RoleClient)
		pub, _ := key.PublicKey()
		nc, err := nats.Connect(st.Server.ClientURL(), nats.NoReconnect(), nats.CustomInboxPrefix(schemas.InboxPrefix(pub)),
			nats.Nkey(pub, func(nonce []byte) ([]byte, error) { return key.Sign(nonce) }))
		require.NoError(t, err)
		defer nc.Close()
		crowd[i] = nc
	}
	other := st.Member(t, "default", "other", domain.RoleClient)
	// The service looks at its backlog every 256 requests taken in: the
	// admin's queries bring the next look to the flood's first request,
	// when no identity has sent enough to be benched (the admin's second
	// over). That look must not put off the next ones while the flood is
	// taken in — it is taken in faster than the least time between two
	// benches.
	admin := servicetest.NewClient(st.Admin, "crowd")
	for st.Svc.Intake()%256 != 255 {
		var out any
		admin.Query(t, "goal.list", schemas.Query{}, &out)
	}
	st.Svc.EndRateWindow()

	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	defer release()
	st.Svc.OnIntake(func() { <-gate })
	for _, nc := range crowd {
		for range each {
			require.NoError(t, nc.PublishRequest("dwr.cmd.crowd.goal.create", nc.NewRespInbox(), []byte(`{}`)))
		}
		require.NoError(t, nc.Flush())
	}
	servicetest.Eventually(t, 30*time.Second, func() bool { return st.Svc.Backlog() >= maxBacklog })
	release()
	benched := func() float64 {
		v, _ := servicetest.ScrapeHandler(t, st.Svc.Metrics()).Value("dwr_callers_benched_total")
		return v
	}
	servicetest.Eventually(t, 30*time.Second, func() bool { return benched() >= 1 }, func() string { return "a crowd's identity benched" })
	servicetest.Eventually(t, 30*time.Second, func() bool {
		for _, nc := range crowd {
			if nc.IsClosed() {
				return true // kept off the server
			}
		}
		return false
	})
	r := servicetest.NewClient(other, "default").Command(t, "goal.create", map[string]any{"title": "served"})
	require.NotEmpty(t, r)
}
