package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// The attempt tests play an honest executor and a hostile client on their
// own connections to a real service. A hostile client knows everything the
// event feed shows — task ids, attempt numbers, who claimed — and the SDK's
// command ids; it never sees a token.

// peer is a client on its own connection, sending as actor.
type peer struct {
	nc    *nats.Conn
	actor string
}

// peer returns a connection of member actor, an admin of the workspace
// (added on first use: again after a restart, the same name with a new
// key — the identity the service binds attempts to is the name).
func (b *bundle) peer(t *testing.T, actor string) *peer {
	t.Helper()
	if b.peers == nil {
		b.peers = map[string]*peer{}
	}
	if p, ok := b.peers[actor]; ok {
		return p
	}
	p := &peer{nc: b.st.Member(t, "default", actor, domain.RoleAdmin), actor: actor}
	b.peers[actor] = p
	return p
}

// request sends a query or command on the peer's connection, with headers
// h (none when nil).
func (p *peer) request(t *testing.T, subject string, body any, h ...nats.Header) schemas.Reply {
	t.Helper()
	m := nats.NewMsg(subject)
	if len(h) > 0 {
		m.Header = h[0]
	}
	var err error
	m.Data, err = json.Marshal(body)
	require.NoError(t, err)
	resp, err := p.nc.RequestMsg(m, 10*time.Second)
	require.NoError(t, err)
	var r schemas.Reply
	require.NoError(t, json.Unmarshal(resp.Data, &r), string(resp.Data))
	return r
}

// send sends command name with body under command id cmdID (none when
// empty) and returns the answer.
func (p *peer) send(t *testing.T, name string, body any, cmdID string) schemas.Reply {
	t.Helper()
	h := nats.Header{}
	if cmdID != "" {
		h.Set(schemas.HeaderCommandID, cmdID)
	}
	return p.request(t, "dwr.cmd.default."+name, body, h)
}

// claim claims task id and returns the reply, which must start an attempt
// and carry its token.
func (p *peer) claim(t *testing.T, id string, cmdID string, supersedes int) domain.Reply {
	t.Helper()
	body := map[string]any{"task_id": id, "executor": p.actor}
	if supersedes > 0 {
		body["supersedes"] = supersedes
	}
	r := p.send(t, "task.claim", body, cmdID)
	require.True(t, r.OK, "claim: %+v", r.Error)
	var rep domain.Reply
	require.NoError(t, json.Unmarshal(r.Result, &rep))
	require.Equal(t, domain.StateRunning, rep.State)
	require.Len(t, rep.Token, 43, "a claim's reply carries the attempt's token")
	return rep
}

func (p *peer) succeed(t *testing.T, id string, attempt int, token, cmdID string, result any) schemas.Reply {
	t.Helper()
	return p.send(t, "task.succeed", map[string]any{"task_id": id, "attempt": attempt, "token": token, "result": result}, cmdID)
}

// forgedToken is well-formed, and nobody's.
var forgedToken = strings.Repeat("A", 43)

// requireRefused requires r to be refused with code, naming /token when it
// is forbidden.
func requireRefused(t *testing.T, r schemas.Reply, code domain.Code) {
	t.Helper()
	require.False(t, r.OK, "the command was taken")
	require.Equal(t, string(code), r.Error.Code, r.Error.Message)
	if code == domain.CodeForbidden || code == domain.CodeInvalid {
		var ptrs []string
		for _, f := range r.Error.Fields {
			ptrs = append(ptrs, f.Pointer)
		}
		require.Contains(t, ptrs, "/token", r.Error.Message)
	}
}

func (b *bundle) newTask(t *testing.T, queue string) string {
	t.Helper()
	tk, _ := b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": queue}})
	return tk.ID
}

func TestAThirdPartyReportIsRefusedAndRecordedNowhere(t *testing.T) {
	b := setup(t)
	honest, hostile := b.peer(t, "executor"), b.peer(t, "intruder")
	id := b.newTask(t, "pay")
	claim := honest.claim(t, id, "claim-1", 0)

	before := b.lastSeq(t)
	refusedBefore := b.svc.Refused()
	// No token: the schema says it is required. A wrong one, or the
	// token's hash (which the feed shows): forbidden.
	requireRefused(t, hostile.send(t, "task.succeed", map[string]any{"task_id": id, "attempt": 1, "result": "forged"}, "h-1"), domain.CodeInvalid)
	for i, tok := range []string{forgedToken, domain.TokenHash(claim.Token)[:43]} {
		requireRefused(t, hostile.succeed(t, id, 1, tok, fmt.Sprint("h-tok-", i), "forged"), domain.CodeForbidden)
	}
	for name, extra := range map[string]map[string]any{
		"task.fail":             {"error": map[string]any{"message": "x"}, "retryable": false},
		"task.checkpoint":       {"checkpoint": 1},
		"task.wait":             {"kind": "signal", "signal": "s"},
		"task.request_approval": {"action": 1},
		"task.heartbeat":        {},
		"task.delegate":         {"key": "k", "goal": map[string]any{"title": "t", "tasks": []map[string]any{{"key": "a", "queue": "pay"}}}},
	} {
		body := map[string]any{"task_id": id, "attempt": 1, "token": forgedToken}
		for k, v := range extra {
			body[k] = v
		}
		requireRefused(t, hostile.send(t, name, body, "h-"+name), domain.CodeForbidden)
	}
	require.Equal(t, before, b.lastSeq(t), "the refused commands appended nothing")
	r := hostile.request(t, "dwr.q.default.command.get", schemas.Query{ID: "h-tok-0"})
	require.False(t, r.OK, "no result was kept for a refused command")
	refused := b.svc.Refused()
	require.Equal(t, refusedBefore[domain.RefusedToken]+9, refused[domain.RefusedToken], "%v", refused)

	// The honest worker's report then succeeds.
	r = honest.succeed(t, id, 1, claim.Token, "succeed."+id+".1", map[string]any{"by": "honest"})
	require.True(t, r.OK, "%+v", r.Error)
	var done domain.Task
	b.query(t, "task.get", schemas.Query{ID: id}, r.Seq, &done)
	require.Equal(t, domain.StateAccepted, done.State)
	require.JSONEq(t, `{"by":"honest"}`, string(done.Attempts[0].Result))
}

func TestASquattedReportIDStaysTheHolders(t *testing.T) {
	b := setup(t)
	honest, hostile := b.peer(t, "executor"), b.peer(t, "intruder")
	id := b.newTask(t, "pay")
	claim := honest.claim(t, id, "claim."+id+".1.1", 0)
	sdkID := "succeed." + id + ".1" // the id the SDK reports attempt 1 under

	before := b.lastSeq(t)
	requireRefused(t, hostile.succeed(t, id, 1, forgedToken, sdkID, "forged"), domain.CodeForbidden)
	require.Equal(t, before, b.lastSeq(t))

	r := honest.succeed(t, id, 1, claim.Token, sdkID, "honest")
	require.True(t, r.OK, "the squatted id did not keep the honest report out: %+v", r.Error)
	var rep domain.Reply
	require.NoError(t, json.Unmarshal(r.Result, &rep))
	require.False(t, rep.Duplicate, "the honest report was decided, not answered with another's outcome")
	require.Equal(t, domain.StateAccepted, rep.State)
	var done domain.Task
	b.query(t, "task.get", schemas.Query{ID: id}, r.Seq, &done)
	require.JSONEq(t, `"honest"`, string(done.Attempts[0].Result), "the task holds the honest result")

	// Neither is the honest outcome handed to the squatter now.
	requireRefused(t, hostile.succeed(t, id, 1, forgedToken, sdkID, "forged"), domain.CodeForbidden)
	again := honest.succeed(t, id, 1, claim.Token, sdkID, "honest")
	require.True(t, again.OK)
	require.JSONEq(t, string(r.Result), string(again.Result), "the holder's retry gets its first outcome")
}

func TestAReportFromAnotherIdentityWithTheTokenIsRefused(t *testing.T) {
	b := setup(t)
	// Today the identity is the Dwr-Actor header; once it is the NATS
	// authenticated user, this is a token leaked to another user.
	a, other := b.peer(t, "executor-a"), b.peer(t, "executor-b")
	id := b.newTask(t, "pay")
	claim := a.claim(t, id, "claim-a", 0)
	before := b.lastSeq(t)
	r := other.succeed(t, id, 1, claim.Token, "succeed."+id+".1", "stolen")
	requireRefused(t, r, domain.CodeForbidden)
	require.Contains(t, r.Error.Message, domain.RefusedClaimer)
	requireRefused(t, other.send(t, "task.heartbeat", map[string]any{"task_id": id, "attempt": 1, "token": claim.Token}, ""), domain.CodeForbidden)
	require.Equal(t, before, b.lastSeq(t))
	require.Positive(t, b.svc.Refused()[domain.RefusedClaimer])
	require.True(t, a.succeed(t, id, 1, claim.Token, "succeed."+id+".1", "mine").OK)
}

func TestARetriedClaimReturnsTheSameTokenAndNoRecordHoldsIt(t *testing.T) {
	b := setupJetStream(t)
	exec := b.peer(t, "executor")
	id := b.newTask(t, "pay")
	first := exec.claim(t, id, "claim-x", 0)
	again := exec.claim(t, id, "claim-x", 0)
	require.Equal(t, first.Token, again.Token, "a retry of the claim gets the same token")

	// Another identity's claim under the same id is its own: the task is
	// running, so it is refused, and carries no token.
	r := b.peer(t, "other").send(t, "task.claim", map[string]any{"task_id": id, "executor": "other"}, "claim-x")
	require.False(t, r.OK)
	require.Equal(t, string(domain.CodeConflict), r.Error.Code)

	// A restart (a new writer) derives the same token for the retry.
	dir := b.dir
	b.stop()
	b2 := start(t, dir)
	exec2 := b2.peer(t, "executor")
	require.Equal(t, first.Token, exec2.claim(t, id, "claim-x", 0).Token)
	require.True(t, exec2.succeed(t, id, 1, first.Token, "s", 1).OK)

	// The token is in no record: not in the log, the event feed, the views,
	// nor a stored reply (command.get).
	js := b2.jetstream(t)
	for _, stream := range []string{"DWR_LOG", "DWR_EVENTS", "DWR_WORK"} {
		requireNotInStream(t, js, stream, first.Token)
	}
	var views bytes.Buffer
	require.NoError(t, b2.store.Dump(&views))
	require.NotContains(t, views.String(), first.Token)
	require.Contains(t, views.String(), domain.TokenHash(first.Token), "the views keep the token's hash")
	cr := b2.peer(t, "executor").request(t, "dwr.q.default.command.get", schemas.Query{ID: "claim-x"})
	require.True(t, cr.OK, "%+v", cr.Error)
	var o projections.CommandOutcome
	require.NoError(t, json.Unmarshal(cr.Result, &o))
	require.NotContains(t, string(o.Reply), first.Token)
	require.NotContains(t, string(cr.Result), first.Token)
}

// requireNotInStream requires that no message kept in stream holds s.
func requireNotInStream(t *testing.T, js jetstream.JetStream, stream, s string) {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, stream)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted (a work item taken)
		}
		require.NotContains(t, string(m.Data), s, "%s message %d", stream, seq)
	}
}

// workConsumer creates the work consumer of queue with lease as its ack
// wait, as the first worker of the queue does.
func (b *bundle) workConsumer(t *testing.T, queue string, lease time.Duration) {
	t.Helper()
	_, err := b.jetstream(t).CreateOrUpdateConsumer(context.Background(), "DWR_WORK", jetstream.ConsumerConfig{
		Durable: "dwr-default-" + queue, FilterSubject: "dwr.work.default." + queue,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: lease})
	require.NoError(t, err)
}

// leased starts a service on a clock at epoch whose queue's work consumer
// has lease, for the tests of the attempts' leases: its log in memory when
// dir is empty, else on data directory dir (for a test that restarts it).
func leased(t *testing.T, dir, queue string, lease time.Duration) (*bundle, *servicetest.Clock) {
	t.Helper()
	clock := servicetest.NewClock(epoch)
	var b *bundle
	if dir == "" {
		b = setupClocked(t, clock)
	} else {
		b = startClocked(t, dir, clock)
	}
	b.workConsumer(t, queue, lease)
	return b, clock
}

// supersede sends a claim of id superseding attempt n.
func (p *peer) supersede(t *testing.T, id string, n int, cmdID string) schemas.Reply {
	t.Helper()
	return p.send(t, "task.claim", map[string]any{"task_id": id, "executor": p.actor, "supersedes": n}, cmdID)
}

// requireLeaseHeld requires r to refuse a claim that supersedes too early,
// naming the moment it may be sent again.
func requireLeaseHeld(t *testing.T, r schemas.Reply, retryAfter time.Time) {
	t.Helper()
	require.False(t, r.OK, "the claim superseded an attempt within its lease")
	require.Equal(t, string(domain.CodeConflict), r.Error.Code, r.Error.Message)
	require.Equal(t, "/supersedes", r.Error.Fields[0].Pointer)
	require.Contains(t, r.Error.Message, domain.RefusedLeaseHeld)
	require.NotNil(t, r.Error.RetryAfter)
	require.True(t, retryAfter.Equal(*r.Error.RetryAfter), "retry after %s, want %s", r.Error.RetryAfter, retryAfter)
}

func TestASupersedingClaimWaitsUntilTheLeaseLapsed(t *testing.T) {
	const lease, grace = 10 * time.Second, time.Second // grace: handlers.Config.LeaseGrace's default
	b, clock := leased(t, "", "pay", lease)
	exec, rescuer := b.peer(t, "executor"), b.peer(t, "rescuer")

	// Alive by its heartbeats: superseding it is refused until the lease has
	// passed since the last one.
	id := b.newTask(t, "pay")
	claim := exec.claim(t, id, "claim-1", 0)
	clock.Advance(8 * time.Second)
	hb := exec.send(t, "task.heartbeat", map[string]any{"task_id": id, "attempt": 1, "token": claim.Token}, "")
	require.True(t, hb.OK, "%+v", hb.Error)
	lastAlive := clock.Now()
	clock.Advance(4 * time.Second) // past the claim's lease, within the heartbeat's
	before := b.lastSeq(t)
	requireLeaseHeld(t, rescuer.supersede(t, id, 1, "rescue-1"), lastAlive.Add(lease+grace))
	clock.Set(lastAlive.Add(lease + grace - time.Millisecond))
	requireLeaseHeld(t, rescuer.supersede(t, id, 1, "rescue-1"), lastAlive.Add(lease+grace))
	require.Equal(t, before, b.lastSeq(t), "a refused supersede appends nothing")

	// Once it lapsed, the same claim is taken: attempt 1 is abandoned and
	// its reports are refused.
	clock.Set(lastAlive.Add(lease + grace))
	rescued := rescuer.claim(t, id, "rescue-1", 1)
	require.Equal(t, 2, rescued.Attempt)
	require.NotEqual(t, claim.Token, rescued.Token)
	r := exec.succeed(t, id, 1, claim.Token, "succeed."+id+".1", "late")
	requireRefused(t, r, domain.CodeConflict)
	require.Equal(t, "/attempt", r.Error.Fields[0].Pointer)
	requireRefused(t, exec.send(t, "task.heartbeat", map[string]any{"task_id": id, "attempt": 1, "token": claim.Token}, ""), domain.CodeConflict)
	require.True(t, rescuer.succeed(t, id, 2, rescued.Token, "succeed."+id+".2", "rescued").OK)

	// A checkpoint is a sign of life too.
	id2 := b.newTask(t, "pay")
	claim2 := exec.claim(t, id2, "claim-2", 0)
	clock.Advance(5 * time.Second)
	cp := exec.send(t, "task.checkpoint", map[string]any{"task_id": id2, "attempt": 1, "token": claim2.Token, "checkpoint": 1}, "cp-1")
	require.True(t, cp.OK, "%+v", cp.Error)
	requireLeaseHeld(t, rescuer.supersede(t, id2, 1, "rescue-2"), clock.Now().Add(lease+grace))

	// Not heard from since its claim: superseded as soon as the lease lapsed.
	id3 := b.newTask(t, "pay")
	exec.claim(t, id3, "claim-3", 0)
	clock.Advance(lease + grace)
	require.Equal(t, 2, rescuer.claim(t, id3, "rescue-3", 1).Attempt)

	// A queue without a work consumer has the service's default lease.
	id4 := b.newTask(t, "elsewhere")
	exec.claim(t, id4, "claim-4", 0)
	requireLeaseHeld(t, rescuer.supersede(t, id4, 1, "rescue-4"), clock.Now().Add(30*time.Second+grace))

	require.GreaterOrEqual(t, b.svc.Refused()[domain.RefusedLeaseHeld], uint64(4))
}

func TestANewWriterCountsEveryRunningAttemptAliveAtItsTakeover(t *testing.T) {
	const lease, grace = 10 * time.Second, time.Second
	b, clock := leased(t, t.TempDir(), "pay", lease)
	id := b.newTask(t, "pay")
	b.peer(t, "executor").claim(t, id, "claim-1", 0)
	clock.Advance(time.Hour) // long past its lease: but the new writer cannot know it was not heard from
	b.stop()

	b2 := startClocked(t, b.dir, clock)
	takeover := clock.Now()
	rescuer := b2.peer(t, "rescuer")
	requireLeaseHeld(t, rescuer.supersede(t, id, 1, "rescue"), takeover.Add(lease+grace))
	clock.Advance(lease + grace)
	require.Equal(t, 2, rescuer.claim(t, id, "rescue", 1).Attempt)
}

func TestAShortTokenKeyIsRefusedAtStart(t *testing.T) {
	_, err := handlers.New(nil, nil, handlers.Config{TokenKey: []byte("short")})
	require.ErrorContains(t, err, "token key")
}

func TestAGivenTokenKeyDerivesTheTokens(t *testing.T) {
	dir := t.TempDir()
	startKeyed := func(key byte) *bundle {
		return bundleOf(servicetest.Start(t, dir, servicetest.Options{Secure: true, Config: handlers.Config{WriterID: "test-writer",
			TokenKey: bytes.Repeat([]byte{key}, handlers.TokenKeyBytes)}}))
	}
	b := startKeyed(1)
	id := b.newTask(t, "pay")
	first := b.peer(t, "executor").claim(t, id, "claim-k", 0)
	b.stop()

	b = startKeyed(1)
	require.Equal(t, first.Token, b.peer(t, "executor").claim(t, id, "claim-k", 0).Token, "the same key derives the same token")
	b.stop()

	// Another key: the retried claim's attempt is not the new token's, so
	// its answer carries none (an executor then leaves the item to be
	// superseded after the lease).
	b = startKeyed(2)
	r := b.peer(t, "executor").send(t, "task.claim", map[string]any{"task_id": id, "executor": "executor"}, "claim-k")
	require.True(t, r.OK, "%+v", r.Error)
	var rep domain.Reply
	require.NoError(t, json.Unmarshal(r.Result, &rep))
	require.Equal(t, 1, rep.Attempt)
	require.Empty(t, rep.Token)
}
