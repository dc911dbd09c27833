package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/schemas"
)

// requireRefused checks that reply refuses with unavailable and a message
// containing what.
func requireRefused(t *testing.T, reply []byte, what string) {
	t.Helper()
	require.NotNil(t, reply, "admitted; want a refusal naming %q", what)
	var r schemas.Reply
	require.NoError(t, json.Unmarshal(reply, &r))
	require.False(t, r.OK)
	require.Equal(t, string(domain.CodeUnavailable), r.Error.Code)
	require.Contains(t, r.Error.Message, what)
}

func TestAdmissionLimits(t *testing.T) {
	a := newAdmission(Config{MaxInFlight: 6, MaxQueriesInFlight: 4, MaxInFlightPerCaller: 3}.withDefaults())

	// One caller: three requests in flight, then its own limit, for queries
	// and commands alike.
	for range 3 {
		require.Nil(t, a.admit("flooder", 1, true))
	}
	requireRefused(t, a.admit("flooder", 1, true), "this caller already has 3 requests in flight")
	requireRefused(t, a.admit("flooder", 1, false), "this caller")

	// Another caller's query takes the queries' last place; a third
	// caller's query is refused at the queries' limit.
	require.Nil(t, a.admit("other", 1, true))
	requireRefused(t, a.admit("third", 1, true), "limit of 4 queries in flight")

	// Commands keep their room: two places are left for them.
	require.Nil(t, a.admit("third", 1, false))
	require.Nil(t, a.admit("third", 1, false))
	requireRefused(t, a.admit("fourth", 1, false), "the service is at its limit of requests in flight")

	// Answered requests give their places back; a caller with none in
	// flight is forgotten.
	for range 3 {
		a.release("flooder", "", 1, true)
	}
	require.NotContains(t, a.callers, "flooder")
	require.Nil(t, a.admit("fourth", 1, false))
	require.Nil(t, a.admit("flooder", 1, true))
	a.release("flooder", "", 1, true)
	a.release("fourth", "", 1, false)
	a.release("other", "", 1, true)
	a.release("third", "", 1, false)
	a.release("third", "", 1, false)
	require.Empty(t, a.callers)
	require.Zero(t, a.all)
	require.Zero(t, a.queries)
}

func TestAdmissionDefaults(t *testing.T) {
	c := Config{}.withDefaults()
	require.Equal(t, 16384, c.MaxInFlight)
	require.Equal(t, 12288, c.MaxQueriesInFlight)
	require.Equal(t, 1024, c.MaxInFlightPerCaller)
	c = Config{MaxInFlight: 64}.withDefaults()
	require.Equal(t, 48, c.MaxQueriesInFlight)
	require.Equal(t, 16, c.MaxInFlightPerCaller, "a quarter of a small MaxInFlight")
}

// Handlers run on kept goroutines: up to maxIdle wait for the next request,
// the rest end; stopped, the waiting ones end and a later request still runs.
func TestRunnersKeepUpToMaxIdleGoroutines(t *testing.T) {
	r := newRunners(4)
	release := make(chan struct{})
	var started sync.WaitGroup
	started.Add(10)
	for range 10 {
		r.run(func() { started.Done(); <-release })
	}
	started.Wait() // ten at once: none was idle, so ten goroutines
	close(release)
	require.Eventually(t, func() bool { return r.idle.Load() == 4 }, 5*time.Second, time.Millisecond, "runners idle, want 4")

	ran := make(chan struct{})
	r.run(func() { close(ran) })
	<-ran
	require.Eventually(t, func() bool { return r.idle.Load() == 4 }, 5*time.Second, time.Millisecond, "an idle runner took the request and waits again")

	r.stop()
	require.Eventually(t, func() bool { return r.idle.Load() == 0 }, 5*time.Second, time.Millisecond, "runners still idle after stop")
	done := make(chan struct{})
	r.run(func() { close(done) })
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a request after stop did not run")
	}
}

// A place given back goes to the next caller in turn: a caller with many
// waiting does not hold up another's one, and each caller's own are taken in
// the order they came.
func TestTurnsGoRoundTheCallers(t *testing.T) {
	tr := newTurns(1, 0)
	leave, _ := tr.enter(context.Background(), "flooder", "flooder", 1) // the one place
	got := make(chan string, 16)
	waiting := func(caller string, n int) {
		for i := range n {
			go func() {
				l, _ := tr.enter(context.Background(), caller, caller, 1)
				got <- fmt.Sprintf("%s-%d", caller, i)
				l()
			}()
			// Each waits before the next comes: their order is known.
			require.Eventually(t, func() bool {
				tr.mu.Lock()
				defer tr.mu.Unlock()
				return tr.waitingOf(caller, caller) == i+1
			}, 10*time.Second, time.Millisecond)
		}
	}
	waiting("flooder", 3)
	waiting("other", 1)
	leave()
	var order []string
	for range 4 {
		order = append(order, <-got)
	}
	require.Equal(t, []string{"flooder-0", "other-0", "flooder-1", "flooder-2"}, order)
	l, _ := tr.enter(context.Background(), "late", "late", 1) // every place was given back
	l()
	l() // a second call gives nothing more back
	tr.mu.Lock()
	defer tr.mu.Unlock()
	require.Zero(t, tr.held)
}

// Past maxHolders the next waits however light it is, and goes in, in its
// caller's turn, when one leaves; a holder alone always goes in.
func TestTurnsBoundTheHolders(t *testing.T) {
	tr := newTurns(1000, 2)
	first, _ := tr.enter(context.Background(), "flooder", "flooder", 1)
	second, _ := tr.enter(context.Background(), "flooder", "flooder", 1)
	in := make(chan string, 2)
	for _, caller := range []string{"flooder", "other"} {
		go func() {
			l, _ := tr.enter(context.Background(), caller, caller, 1)
			in <- caller
			defer l()
			<-t.Context().Done()
		}()
		require.Eventually(t, func() bool {
			tr.mu.Lock()
			defer tr.mu.Unlock()
			return tr.waitingOf(caller, caller) == 1
		}, 10*time.Second, time.Millisecond, "%s waits: two hold, light as they are", caller)
	}
	first()
	require.Equal(t, "flooder", <-in) // its turn came first
	tr.mu.Lock()
	require.Equal(t, 1, tr.waitingOf("other", "other"), "the other waits for the next place")
	tr.mu.Unlock()
	second()
	require.Equal(t, "other", <-in)

	// A holder that gives back its place (the writer took its command into
	// a batch) lets the next in, its weight still held.
	pl := newTurns(10, 1)
	h, err := pl.hold(context.Background(), "first", "first", 4)
	require.NoError(t, err)
	next := make(chan struct{})
	go func() {
		l, _ := pl.enter(context.Background(), "next", "next", 4)
		l() // in and out: what stays held is the first's
		close(next)
	}()
	require.Eventually(t, func() bool {
		pl.mu.Lock()
		defer pl.mu.Unlock()
		return pl.waitingOf("next", "next") == 1
	}, 10*time.Second, time.Millisecond, "one place, held")
	h.release()
	<-next
	pl.mu.Lock()
	require.Equal(t, 4, pl.held, "the first's weight is still held")
	require.Zero(t, pl.holders)
	pl.mu.Unlock()
	h.leave()
	h.leave()
	pl.mu.Lock()
	require.Zero(t, pl.held)
	require.Zero(t, pl.holders, "given back once")
	pl.mu.Unlock()

	alone := newTurns(10, 1)
	l, _ := alone.enter(context.Background(), "huge", "huge", 50) // heavier than the capacity, and alone
	l()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	require.Equal(t, 2, tr.holders)
}

// Holders of different weights: what is given back goes to the callers in
// turn while their weights fit; a lighter one never passes the caller whose
// turn it is, and one heavier than the whole capacity enters alone.
func TestTurnsWeighWhatTheyHold(t *testing.T) {
	tr := newTurns(10, 0)
	first, _ := tr.enter(context.Background(), "flooder", "flooder", 10) // all of it
	in := make(chan string, 16)
	leaves := map[string]chan struct{}{}
	wait := func(caller string, i, weight int) {
		name := fmt.Sprintf("%s-%d", caller, i)
		leave := make(chan struct{})
		leaves[name] = leave
		tr.mu.Lock()
		n := tr.waitingOf(caller, caller)
		tr.mu.Unlock()
		go func() {
			l, _ := tr.enter(context.Background(), caller, caller, weight)
			in <- name
			<-leave
			l()
		}()
		require.Eventually(t, func() bool {
			tr.mu.Lock()
			defer tr.mu.Unlock()
			return tr.waitingOf(caller, caller) == n+1
		}, 10*time.Second, time.Millisecond)
	}
	// Turns are given under the lock, when a holder leaves: once leave
	// returns, what is held says who was let in.
	entered := func(held int, want ...string) {
		t.Helper()
		tr.mu.Lock()
		require.Equal(t, held, tr.held)
		tr.mu.Unlock()
		got := make([]string, 0, len(want))
		for range want {
			select {
			case name := <-in:
				got = append(got, name)
			case <-time.After(10 * time.Second):
				t.Fatalf("entered %v, want %v", got, want)
			}
		}
		require.ElementsMatch(t, want, got)
	}
	leave := func(name string) {
		t.Helper()
		tr.mu.Lock()
		held := tr.held
		tr.mu.Unlock()
		close(leaves[name])
		require.Eventually(t, func() bool {
			tr.mu.Lock()
			defer tr.mu.Unlock()
			return tr.held != held
		}, 10*time.Second, time.Millisecond)
	}
	wait("flooder", 0, 6)
	wait("flooder", 1, 6)
	wait("other", 0, 3)
	wait("other", 1, 3)
	wait("huge", 0, 25)

	first()
	entered(9, "flooder-0", "other-0") // huge's turn is next, and it waits
	leave("flooder-0")
	entered(3) // huge waits for the rest, and no one passes it
	leave("other-0")
	entered(25, "huge-0") // alone
	leave("huge-0")
	entered(9, "flooder-1", "other-1")
	leave("flooder-1")
	leave("other-1")
	require.Eventually(t, func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return tr.held == 0
	}, 10*time.Second, time.Millisecond)
}

// A waiter whose request's deadline passes leaves the line holding nothing,
// and the caller it held up (the next in turn, lighter) goes in.
func TestTurnsForgetWhoStopsWaiting(t *testing.T) {
	tr := newTurns(10, 0)
	a, err := tr.enter(t.Context(), "a", "a", 5)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := tr.enter(ctx, "b", "b", 8) // does not fit: waits
		gaveUp <- err
	}()
	waitingFor := func(caller string) func() bool {
		return func() bool {
			tr.mu.Lock()
			defer tr.mu.Unlock()
			return tr.waitingOf(caller, caller) == 1
		}
	}
	require.Eventually(t, waitingFor("b"), 10*time.Second, time.Millisecond)
	in := make(chan func(), 1)
	go func() {
		l, _ := tr.enter(t.Context(), "c", "c", 2) // fits, but b's turn is first
		in <- l
	}()
	require.Eventually(t, waitingFor("c"), 10*time.Second, time.Millisecond)

	cancel()
	require.ErrorIs(t, <-gaveUp, context.Canceled)
	var c func()
	select {
	case c = <-in:
	case <-time.After(10 * time.Second):
		t.Fatal("c was not let in when b gave up")
	}
	tr.mu.Lock()
	require.Equal(t, 7, tr.held, "a's 5 and c's 2; b holds nothing")
	require.Empty(t, tr.order)
	tr.mu.Unlock()
	a()
	c()
	require.Zero(t, tr.held)
}

// A stopping service refuses what comes and waits for what it took.
func TestAStoppingServiceAnswersWhatItTook(t *testing.T) {
	a := newAdmission(Config{MaxInFlight: 8, MaxQueriesInFlight: 4, MaxInFlightPerCaller: 4}.withDefaults())
	require.Nil(t, a.admit("one", 1, true))
	stopped := make(chan bool)
	go func() { stopped <- a.stop(time.Minute) }()
	require.Eventually(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.stopped
	}, 10*time.Second, time.Millisecond)
	requireRefused(t, a.admit("two", 1, false), "this replica is stopping")
	select {
	case <-stopped:
		t.Fatal("stopped with a query still in flight")
	default:
	}
	a.release("one", "", 1, true)
	require.True(t, <-stopped)
	require.False(t, newAdmissionStoppedWithOneInFlight().stop(10*time.Millisecond), "a request never answered is waited for d only")
}

func newAdmissionStoppedWithOneInFlight() *admission {
	a := newAdmission(Config{MaxInFlight: 8, MaxQueriesInFlight: 4, MaxInFlightPerCaller: 4}.withDefaults())
	a.admit("stuck", 1, false)
	return a
}

// The bytes of a caller's requests in flight are bounded as their number
// is: past its bytes, a caller's next request is refused naming them, while
// another caller is served; a request that comes alone is never refused for
// its size.
func TestAdmissionBoundsTheBytesInFlight(t *testing.T) {
	a := newAdmission(Config{MaxBytesInFlight: 40 << 20, MaxBytesInFlightPerCaller: 10 << 20}.withDefaults())
	require.Nil(t, a.admit("flooder", 20<<20, false), "alone: taken whatever its size")
	requireRefused(t, a.admit("flooder", 1, false), "this caller's requests in flight already hold 10 MiB")
	a.release("flooder", "", 20<<20, false)
	for range 4 {
		require.Nil(t, a.admit("flooder", 2<<20, false))
	}
	requireRefused(t, a.admit("flooder", 3<<20, false), "already hold 10 MiB")
	require.Nil(t, a.admit("flooder", 2<<20, false), "up to its bytes")
	for _, c := range []string{"a", "b", "c"} {
		require.Nil(t, a.admit(c, 9<<20, false))
	}
	requireRefused(t, a.admit("d", 4<<20, false), "the service is at its limit of bytes of requests in flight")
	require.Nil(t, a.admit("d", 3<<20, false))
}

// A caller is found flooding, once, when what it sends within one second —
// answered or refused — passes eight times its bytes in flight, or 64 times
// its requests in flight, or when it is refused for its own limits sixteen
// times its requests in flight; its requests are then refused until
// BenchFor has passed. The same sent over more than a second is not a
// flood, and neither is a caller that cannot be benched (no identity).
func TestAdmissionFindsFlooders(t *testing.T) {
	cfg := Config{MaxInFlightPerCaller: 4, MaxBytesInFlightPerCaller: 1 << 20, BenchFor: 10 * time.Second}.withDefaults()
	start := time.Unix(1_000_000, 0)
	// send takes and releases n requests of size bytes from caller, at
	// start+at, and returns how many found it flooding.
	send := func(a *admission, caller string, benchable bool, n, size int, at time.Duration) (flooding int) {
		user := ""
		if benchable {
			user = "U" + caller
		}
		for range n {
			refused, f := a.take(caller, "", user, size, false, start.Add(at))
			require.Nil(t, refused)
			a.release(caller, "", size, false)
			if f {
				flooding++
			}
		}
		return flooding
	}

	a := newAdmission(cfg)
	require.Zero(t, send(a, "bytes", true, 7, 1<<20, 0), "7 MiB in a second: not yet")
	require.Equal(t, 1, send(a, "bytes", true, 1, 1<<20, 900*time.Millisecond), "the eighth MiB within the second")
	refused, f := a.take("bytes", "", "Ubytes", 1, false, start.Add(time.Second))
	require.False(t, f, "found once")
	requireRefused(t, refused.body, "its requests are refused for 10s")
	require.Equal(t, "unavailable", refused.headers.Get("Nats-Service-Error-Code"), "with the headers of a micro service error")
	var r schemas.Reply
	require.NoError(t, json.Unmarshal(refused.body, &r))
	require.NotNil(t, r.Error.RetryAfter, "it is told when to come back")
	require.True(t, r.Error.RetryAfter.Equal(start.Add(900*time.Millisecond+10*time.Second)), "%v", r.Error.RetryAfter)
	found := 900 * time.Millisecond
	requireRefused(t, first(a.take("bytes", "", "Ubytes", 1, false, start.Add(found+10*time.Second-time.Nanosecond))).body, "refused for 10s")
	require.Nil(t, first(a.take("bytes", "", "Ubytes", 1, false, start.Add(found+10*time.Second))), "let in again once BenchFor has passed")

	a = newAdmission(cfg)
	require.Zero(t, send(a, "slow", true, 7, 1<<20, 0))
	require.Zero(t, send(a, "slow", true, 7, 1<<20, time.Second), "the same bytes over two seconds")
	require.Zero(t, send(a, "anonymous", false, 100, 1<<20, 0), "a caller that cannot be benched")
	require.Nil(t, first(a.take("anonymous", "", "", 1, false, start)))

	a = newAdmission(cfg)
	require.Zero(t, send(a, "count", true, 64*4-1, 1, 0))
	require.Equal(t, 1, send(a, "count", true, 1, 1, 0), "64 times its 4 requests in flight")

	a = newAdmission(cfg)
	for range 4 { // its limit in flight, held
		require.Nil(t, first(a.take("refused", "", "Urefused", 1, false, start)))
	}
	var flooding int
	for range 16 * 4 {
		refused, f := a.take("refused", "", "Urefused", 1, false, start)
		require.NotNil(t, refused)
		if f {
			flooding++
		}
	}
	require.Equal(t, 1, flooding, "refused sixteen times its requests in flight")

	cfg.BenchFor = -1
	a = newAdmission(cfg.withDefaults())
	require.Zero(t, send(a, "never", true, 100, 1<<20, 0), "BenchFor -1: never")
}

// When requests come faster than the service takes them in, the caller
// that sent the most requests in the current second is benched — if it
// sent at least the floor, can be benched, and is not benched yet — and
// only that one.
func TestAdmissionBenchesTheHeaviestSender(t *testing.T) {
	a := newAdmission(Config{BenchFor: 10 * time.Second}.withDefaults())
	now := time.Unix(1_000_000, 0)
	sent := func(caller, user string, n int) {
		for range n {
			r, _ := a.take(caller, "", user, 1, false, now)
			require.Nil(t, r)
			a.release(caller, "", 1, false)
		}
	}
	sent("light", "Ulight", 100)
	sent("heavy", "Uheavy", 300)
	sent("anonymous", "", 500) // cannot be benched
	require.Empty(t, a.benchHeaviest(now, 400), "none that can be benched sent the floor")

	require.Equal(t, []string{"Uheavy"}, a.benchHeaviest(now.Add(500*time.Millisecond), 100))
	refused, _ := a.take("heavy", "", "Uheavy", 1, false, now.Add(time.Second))
	require.NotNil(t, refused)
	requireRefused(t, refused.body, "its requests are refused for 10s")
	refused, _ = a.take("other", "", "Uother", 1, false, now.Add(time.Second))
	require.Nil(t, refused, "the others are served")
	a.release("other", "", 1, false)

	require.Equal(t, []string{"Ulight"}, a.benchHeaviest(now.Add(600*time.Millisecond), 100), "the next heaviest, the heaviest benched already")
	require.Empty(t, a.benchHeaviest(now.Add(2*time.Second), 1), "a second later, nobody has sent anything yet")

	a = newAdmission(Config{BenchFor: -1}.withDefaults())
	sent("heavy", "Uheavy", 300)
	require.Empty(t, a.benchHeaviest(now, 1), "BenchFor -1: never")
}

// When no caller sent the floor, the callers of the workspace whose callers
// sent the most together are benched, the heaviest first, until what the
// others of it sent is under the floor; another workspace's are not.
func TestAdmissionBenchesAWorkspacesCrowd(t *testing.T) {
	a := newAdmission(Config{BenchFor: 10 * time.Second}.withDefaults())
	now := time.Unix(1_000_000, 0)
	sent := func(caller, ws string, n int) {
		for range n {
			r, _ := a.take(caller, ws, "U"+caller, 1, false, now)
			require.Nil(t, r)
			a.release(caller, ws, 1, false)
		}
	}
	for i := range 8 {
		sent(fmt.Sprintf("c%d", i), "crowd", 50+i)
	}
	sent("calm", "calm", 90) // more than any one of the crowd
	users := a.benchHeaviest(now, 100)
	require.Equal(t, []string{"Uc7", "Uc6", "Uc5", "Uc4", "Uc3", "Uc2", "Uc1"}, users, "the rest, c0's 50, is under the floor")
	require.Empty(t, a.benchHeaviest(now, 100), "none left that sent the floor, alone or together")
	refused, _ := a.take("c7", "crowd", "Uc7", 1, false, now)
	requireRefused(t, refused.body, "its requests are refused")
	require.Nil(t, first(a.take("calm", "calm", "Ucalm", 1, false, now)))
}

// first returns a pair's first value.
func first[A, B any](a A, _ B) A { return a }

// BenchmarkRefusal measures answering a request its caller's limit refuses:
// with the refusal and its headers encoded once (as admission answers), and
// with its headers read back from the reply (as respond answers any other
// refusal).
func BenchmarkRefusal(b *testing.B) {
	a := newAdmission(Config{MaxInFlightPerCaller: 1, BenchFor: -1}.withDefaults())
	req := &testRequest{subject: "dwr.cmd.default.goal.create", body: []byte(`{"title":"t"}`)}
	require.Nil(b, a.admit("flooder", 1, false))
	b.Run("canned", func(b *testing.B) {
		for b.Loop() {
			r, _ := a.take("flooder", "", "Uflooder", 1, false, time.Now())
			_ = req.Respond(r.body, micro.WithHeaders(r.headers))
		}
	})
	b.Run("decoded", func(b *testing.B) {
		for b.Loop() {
			_ = respond(req, a.admit("flooder", 1, false))
		}
	})
}

// waitingOf returns how many holders of caller of group wait. The caller
// holds t.mu.
func (t *turns) waitingOf(group, caller string) int {
	if g := t.groups[group]; g != nil {
		return len(g.waiting[caller])
	}
	return 0
}

// A place given back goes to the next group in turn: a group whose many
// callers wait (a workspace's many identities) does not hold up another
// group's one caller, and within a group the callers take turns.
func TestTurnsGoRoundTheGroupsFirst(t *testing.T) {
	tr := newTurns(1, 0)
	leave, _ := tr.enter(context.Background(), "crowd", "c0", 1) // the one place
	got := make(chan string, 16)
	wait := func(group, caller string) {
		n := func() int {
			tr.mu.Lock()
			defer tr.mu.Unlock()
			return tr.waitingOf(group, caller)
		}
		before := n()
		go func() {
			l, _ := tr.enter(context.Background(), group, caller, 1)
			got <- caller
			l()
		}()
		require.Eventually(t, func() bool { return n() == before+1 }, 10*time.Second, time.Millisecond)
	}
	for _, c := range []string{"c1", "c2", "c3", "c1"} {
		wait("crowd", c)
	}
	wait("alone", "a")
	wait("alone", "a")
	leave()
	var order []string
	for range 6 {
		order = append(order, <-got)
	}
	require.Equal(t, []string{"c1", "a", "c2", "a", "c3", "c1"}, order)
}

// Near the service's limits, a workspace holding its share is refused:
// the rest of the places (and bytes) stay for the other workspaces, whose
// callers one workspace's many identities, each under its own limits,
// would otherwise leave none.
func TestAdmissionKeepsRoomForOtherWorkspaces(t *testing.T) {
	a := newAdmission(Config{MaxInFlight: 16, MaxInFlightPerCaller: 2, MaxBytesInFlight: 64 << 20, MaxBytesInFlightPerCaller: 8 << 20}.withDefaults())
	require.Equal(t, 4, a.maxWorkspace, "a quarter of the places")
	take := func(caller, ws string, size int) *cannedRefusal {
		return first(a.take(caller, ws, "", size, false, time.Now()))
	}
	admitted := 0
	for i := range 8 { // the crowd: eight identities, two requests each
		for range 2 {
			if take(fmt.Sprintf("c%d", i), "crowd", 1) == nil {
				admitted++
			}
		}
	}
	require.Equal(t, 12, admitted, "up to the service's limit less a workspace's share")
	requireRefused(t, take("c9", "crowd", 1).body, "this workspace's already number 4, its share")
	for _, caller := range []string{"x", "y"} { // another workspace: its share is left
		for range 2 {
			require.Nil(t, take(caller, "calm", 1))
		}
	}
	requireRefused(t, take("z", "third", 1).body, "the service is at its limit of requests in flight")
	a.release("c0", "crowd", 1, false)
	requireRefused(t, take("c9", "crowd", 1).body, "its share")
	requireRefused(t, take("z", "calm", 1).body, "its share")
	require.Nil(t, take("z", "third", 1), "a workspace under its share")

	// Bytes the same way: a workspace holding a quarter of them, past
	// three quarters in all.
	a = newAdmission(Config{MaxInFlight: 1000, MaxBytesInFlight: 64 << 20, MaxBytesInFlightPerCaller: 8 << 20}.withDefaults())
	for i := range 6 {
		require.Nil(t, take(fmt.Sprintf("c%d", i), "crowd", 8<<20))
	}
	requireRefused(t, take("c6", "crowd", 8<<20).body, "this workspace's already hold 16 MiB, its share")
	require.Nil(t, take("x", "calm", 8<<20))
	require.Nil(t, take("y", "calm", 8<<20))
	requireRefused(t, take("z", "calm", 1).body, "its share")

	// And queries, near the queries' limit (three quarters of the places).
	a = newAdmission(Config{MaxInFlight: 16, MaxInFlightPerCaller: 2}.withDefaults())
	query := func(caller, ws string) *cannedRefusal { return first(a.take(caller, ws, "", 1, true, time.Now())) }
	admitted = 0
	for i := range 8 {
		for range 2 {
			if query(fmt.Sprintf("c%d", i), "crowd") == nil {
				admitted++
			}
		}
	}
	require.Equal(t, 8, admitted, "up to the queries' limit less a workspace's share")
	for _, caller := range []string{"x", "y"} {
		for range 2 {
			require.Nil(t, query(caller, "calm"))
		}
	}
	requireRefused(t, query("z", "third").body, "limit of 12 queries in flight")
	require.Nil(t, take("z", "third", 1), "commands keep room of their own")
}
