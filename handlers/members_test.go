package handlers_test

import (
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// Public keys of NATS users made by nkeys.CreateUser.
const (
	userKeyOps    = "UA7MKXBLY6WJ5644NDJL7IFP4GV56SLO2464EHTM3LXWGVVLUA5ASOHH"
	userKeyRunner = "UAFX6JXN64DJ77OVSWCEW4QPAYNB6MQXY747VU67A2D5SZONOHUY4TJK"
)

func TestMembersAndQueuesOverTheWire(t *testing.T) {
	b := setup(t)
	var members []domain.Member
	b.query(t, "member.list", schemas.Query{}, 0, &members)
	require.Empty(t, members)
	require.NotNil(t, members, "an empty list, not null")
	var queues []domain.QueueConfig
	b.query(t, "queue.list", schemas.Query{}, 0, &queues)
	require.Empty(t, queues)

	b.mustCommand(t, "member.add", map[string]any{"name": "ops", "role": "admin", "public_key": userKeyOps})
	_, seq := b.mustCommand(t, "member.add", map[string]any{"name": "runner", "role": "executor", "public_key": userKeyRunner,
		"queues": []string{"build", "test"}})
	b.query(t, "member.list", schemas.Query{}, seq, &members)
	require.Len(t, members, 2)
	require.Equal(t, "runner", members[1].Name)
	require.Equal(t, domain.RoleExecutor, members[1].Role)
	require.Equal(t, userKeyRunner, members[1].PublicKey)
	require.Equal(t, []string{"build", "test"}, members[1].Queues)
	require.False(t, members[1].AddedAt.IsZero())

	// The schema refuses queues for a role that has none, naming the field.
	r := b.command(t, "member.add", map[string]any{"name": "eve", "role": "viewer", "public_key": userKeyRunner, "queues": []string{"build"}}, "")
	require.False(t, r.OK)
	require.Equal(t, "/queues", r.Error.Fields[0].Pointer)
	// The domain refuses a key that names another member.
	r = b.command(t, "member.add", map[string]any{"name": "eve", "role": "viewer", "public_key": userKeyRunner}, "")
	require.False(t, r.OK)
	require.Equal(t, string(domain.CodeConflict), r.Error.Code)

	rep, _ := b.mustCommand(t, "queue.configure", map[string]any{"queue": "build", "lease_ms": 30000, "max_deliver": 5})
	require.Equal(t, "build", rep.Queue)
	rep, seq = b.mustCommand(t, "queue.configure", map[string]any{"queue": "build", "lease_ms": 60000, "max_deliver": 9, "if_unset": true})
	require.Equal(t, int64(30000), rep.LeaseMS, "if_unset answers the settings in effect")
	require.Equal(t, 5, rep.MaxDeliver)
	b.query(t, "queue.list", schemas.Query{}, seq, &queues)
	require.Equal(t, []domain.QueueConfig{{Name: "build", LeaseMS: 30000, MaxDeliver: 5}}, queues)

	_, seq = b.mustCommand(t, "member.remove", map[string]any{"name": "runner"})
	b.query(t, "member.list", schemas.Query{}, seq, &members)
	require.Len(t, members, 1)
	r = b.command(t, "member.remove", map[string]any{"name": "runner"}, "")
	require.False(t, r.OK)
	require.Equal(t, string(domain.CodeNotFound), r.Error.Code)

	for _, q := range []string{"member.list", "queue.list"} {
		r := b.request(t, "dwr.q.nowhere."+q, schemas.Query{}, nil)
		require.False(t, r.OK, q)
		require.Equal(t, string(domain.CodeNotFound), r.Error.Code, q)
	}
}

// Reloading the NATS server's users takes time with every connection it
// holds; it holds up the member command that caused it (answered once its
// change is in force), not the writer: other commands are committed
// meanwhile.
func TestAMembersReloadDoesNotHoldUpTheWriter(t *testing.T) {
	release := make(chan struct{})
	var reloads atomic.Int32
	st := servicetest.Start(t, "", servicetest.Options{Log: eventstore.NewMemoryLog(), Config: handlers.Config{WriterID: "test-writer",
		Auth: handlers.AuthConfig{OnMembersChanged: func() {
			reloads.Add(1)
			<-release
		}}}})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the service stops
	b := bundleOf(st)

	added := make(chan *nats.Msg, 1)
	go func() {
		m, err := b.nc.Request("dwr.cmd.default.member.add",
			[]byte(`{"name":"ops","role":"admin","public_key":"`+userKeyOps+`"}`), time.Minute)
		if err != nil {
			m = &nats.Msg{Data: []byte(err.Error())}
		}
		added <- m
	}()
	require.Eventually(t, func() bool { return reloads.Load() >= 1 }, 10*time.Second, time.Millisecond,
		"a reload waits (the writer's follower's or the request's: one runs at a time)")
	b.mustCommand(t, "goal.create", map[string]any{"title": "while the users reload"})
	select {
	case m := <-added:
		t.Fatalf("member.add answered before its change was in force: %s", m.Data)
	default:
	}
	unblock()
	m := <-added
	var r schemas.Reply
	require.NoError(t, json.Unmarshal(m.Data, &r), "%s", m.Data)
	require.True(t, r.OK, "%+v", r.Error)
}

// A workspace's admin cannot add members without end: each is a user of
// the NATS server, rebuilt at every change of members, and every command of
// the workspace reads them. Past MaxMembersPerWorkspace a new member is
// refused (conflict on /name) and cannot connect; a member there already
// may still be changed; another workspace has room of its own.
func TestAWorkspaceAdminCannotAddMembersWithoutEnd(t *testing.T) {
	st := servicetest.Start(t, "", servicetest.Options{Secure: true, Listen: "127.0.0.1:0",
		Config: handlers.Config{MaxMembersPerWorkspace: 3}})
	boss := servicetest.NewClient(st.Member(t, "default", "boss", domain.RoleAdmin), "default")
	keys := make([]nkeys.KeyPair, 3)
	add := func(i int, role domain.Role) schemas.Reply {
		if keys[i] == nil {
			keys[i], _ = nkeys.CreateUser()
		}
		pub, _ := keys[i].PublicKey()
		return boss.Request(t, "dwr.cmd.default.member.add", domain.AddMember{Name: "m" + strconv.Itoa(i), Role: role, PublicKey: pub}, nil)
	}
	for i := range 2 {
		require.True(t, add(i, domain.RoleViewer).OK)
	}
	r := add(2, domain.RoleViewer)
	require.False(t, r.OK)
	require.Equal(t, string(domain.CodeConflict), r.Error.Code)
	require.Equal(t, "/name", r.Error.Fields[0].Pointer)
	require.Contains(t, r.Error.Message, "--max-members-per-workspace")
	pub, _ := keys[2].PublicKey()
	_, err := nats.Connect(st.Server.ClientURL(), nats.NoReconnect(), nats.Nkey(pub, keys[2].Sign))
	require.ErrorIs(t, err, nats.ErrAuthorization, "a member refused is no user of the server")
	require.True(t, add(1, domain.RoleClient).OK, "a member there already is changed")

	servicetest.Must(t, st.Admin, "other", "workspace.create", map[string]any{"name": "other"})
	for i := range 3 {
		kp, _ := nkeys.CreateUser()
		pub, _ := kp.PublicKey()
		servicetest.Must(t, st.Admin, "other", "member.add", domain.AddMember{Name: "o" + strconv.Itoa(i), Role: domain.RoleViewer, PublicKey: pub})
	}
}

// queue.list requests at once share the listings of the work stream's
// consumers — one at a time, each begun after the requests it serves came,
// so a queue given to a task just before is listed — instead of each
// making its own in JetStream's info queue, which the whole server shares.
// And they wait for it before their turns to read the views: another
// query is answered meanwhile.
func TestQueueListsShareTheConsumersListing(t *testing.T) {
	b := bundleOf(servicetest.Start(t, "", servicetest.Options{Secure: true, Log: eventstore.NewMemoryLog(),
		Config: handlers.Config{WriterID: "test-writer", MaxQueriesRunning: 4}}))
	var seq uint64
	for _, q := range []string{"q1", "q2", "q3"} {
		_, seq = b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": q}})
	}
	names := func(queues []domain.QueueConfig) []string {
		var out []string
		for _, q := range queues {
			out = append(out, q.Name)
		}
		return out
	}
	var queues []domain.QueueConfig
	b.query(t, "queue.list", schemas.Query{}, seq, &queues)
	require.Equal(t, []string{"q1", "q2", "q3"}, names(queues))

	var lists atomic.Int64
	sub, err := b.svcNC.Subscribe("$JS.API.CONSUMER.LIST.DWR_WORK", func(*nats.Msg) { lists.Add(1) })
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	require.NoError(t, b.svcNC.Flush())
	// The first listing is held until every request waits for one.
	const at = 32
	held := make(chan struct{})
	var first sync.Once
	b.svc.OnConsumerList(func() { first.Do(func() { <-held }) })
	var wg sync.WaitGroup
	for range at {
		wg.Go(func() {
			var queues []domain.QueueConfig
			r := b.request(t, "dwr.q.default.queue.list", schemas.Query{}, nil)
			if assert.True(t, r.OK, "%+v", r.Error) && assert.NoError(t, json.Unmarshal(r.Result, &queues)) {
				assert.Equal(t, []string{"q1", "q2", "q3"}, names(queues))
			}
		})
	}
	servicetest.Eventually(t, 10*time.Second, func() bool { return b.svc.ConsumerListWaiters() == at })
	var tasks []json.RawMessage
	b.query(t, "task.list", schemas.Query{}, 0, &tasks) // no turn is held by those waiting
	require.Len(t, tasks, 3)
	close(held)
	wg.Wait()
	require.Equal(t, int64(2), lists.Load(), "%d queue.list at once: the listing under way, then one for all that came meanwhile", at)

	_, seq = b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "q4"}})
	b.query(t, "queue.list", schemas.Query{}, seq, &queues)
	require.Equal(t, []string{"q1", "q2", "q3", "q4"}, names(queues), "a queue given just before is listed")
}
