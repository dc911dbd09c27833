package client_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"iter"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// collect returns every item of a list, failing the test at an error.
func collect[T any](t *testing.T, seq iter.Seq2[*T, error]) []*T {
	t.Helper()
	var out []*T
	for v, err := range seq {
		require.NoError(t, err)
		out = append(out, v)
	}
	return out
}

// An admin runs a workspace with the client: creates it, adds and removes
// members, registers and revokes an approver, configures a queue, and reads
// each back; a list is read whole or a page at a time.
func TestClientAdministersAWorkspace(t *testing.T) {
	s := start(t)
	ctx := within(t, 30*time.Second)
	admin := client.New(s.Admin)
	ops := admin.In("ops")

	r, err := ops.CreateWorkspace(ctx, schemas.CreateWorkspace{Description: "operations"})
	require.NoError(t, err)
	require.Equal(t, "ops", r.ID)
	var names []string
	for _, w := range collect(t, admin.Workspaces(ctx)) {
		names = append(names, w.Name)
		if w.Name == "ops" {
			require.Equal(t, "operations", w.Description)
		}
	}
	require.Subset(t, names, []string{"default", "ops"})

	for _, name := range []string{"carol", "alice", "bob"} {
		cred, err := access.NewCredential()
		require.NoError(t, err)
		_, err = ops.AddMember(ctx, schemas.AddMember{Name: name, Role: "executor", PublicKey: cred.PublicKey, Queues: []string{"build"}})
		require.NoError(t, err)
	}
	var got []string
	for _, m := range collect(t, ops.Members(ctx, client.Limit(2))) { // two pages
		got = append(got, m.Name)
		require.Equal(t, schemas.Role("executor"), m.Role)
		require.Equal(t, []string{"build"}, m.Queues)
	}
	require.Equal(t, []string{"alice", "bob", "carol"}, got, "by name, across pages")
	var next string
	page := collect(t, ops.Members(ctx, client.Limit(2), client.OnePage(&next)))
	require.Len(t, page, 2)
	require.NotEmpty(t, next, "more follow the first page")
	page = collect(t, ops.Members(ctx, client.Limit(2), client.After(next), client.OnePage(&next)))
	require.Len(t, page, 1)
	require.Equal(t, "carol", page[0].Name)
	require.Empty(t, next, "the last page")

	_, err = ops.RemoveMember(ctx, "bob")
	require.NoError(t, err)
	got = nil
	for _, m := range collect(t, ops.Members(ctx)) {
		got = append(got, m.Name)
	}
	require.Equal(t, []string{"alice", "carol"}, got)

	pub, _, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	_, err = ops.RegisterApprover(ctx, schemas.RegisterApprover{Name: "dana", Role: "ops", PublicKey: base64.StdEncoding.EncodeToString(pub)})
	require.NoError(t, err)
	_, err = ops.RevokeApprover(ctx, "dana")
	require.NoError(t, err)
	aps := collect(t, ops.Approvers(ctx))
	require.Len(t, aps, 1)
	require.Equal(t, "dana", aps[0].Name)
	require.NotNil(t, aps[0].RevokedAt, "revoked, and still on record")

	q, err := ops.ConfigureQueue(ctx, schemas.ConfigureQueue{Queue: "build", LeaseMS: 60_000, MaxDeliver: 7})
	require.NoError(t, err)
	require.Equal(t, int64(60_000), q.LeaseMS)
	q, err = ops.ConfigureQueue(ctx, schemas.ConfigureQueue{Queue: "build", LeaseMS: 5_000, MaxDeliver: 2, IfUnset: true})
	require.NoError(t, err)
	require.Equal(t, int64(60_000), q.LeaseMS, "if_unset keeps the queue's settings")
	require.Equal(t, 7, q.MaxDeliver)
	qs := collect(t, ops.Queues(ctx))
	require.Equal(t, []*schemas.Queue{{QueueConfig: schemas.QueueConfig{Name: "build", LeaseMS: 60_000, MaxDeliver: 7}}}, qs)

	q, err = ops.PauseQueue(ctx, "build")
	require.NoError(t, err)
	require.True(t, q.Paused)
	require.Equal(t, int64(60_000), q.LeaseMS, "a pause keeps the settings")
	qs = collect(t, ops.Queues(ctx, client.MinSeq(q.Seq)))
	require.True(t, qs[0].Paused)
	q, err = ops.ResumeQueue(ctx, "build")
	require.NoError(t, err)
	require.False(t, q.Paused)
	_, err = ops.ResumeQueue(ctx, "nowhere")
	require.ErrorIs(t, err, client.ErrNotFound)
}

// A Lasting connection is made before any server answers, and keeps
// trying, where a plain one fails at once.
func TestLastingConnectsBeforeTheServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "nats://" + ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now

	_, err = client.Connect(url)
	require.Error(t, err, "a plain connection needs a server")
	c, err := client.Connect(url, client.Lasting(servicetest.Logger(), "test"))
	require.NoError(t, err, "a lasting one is made anyway")
	t.Cleanup(c.Close)
	require.False(t, c.Conn().IsConnected())
	require.False(t, c.Conn().IsClosed(), "it keeps trying")
	require.Equal(t, -1, c.Conn().Opts.MaxReconnect)
	require.Equal(t, client.LastingReconnectWait, c.Conn().Opts.ReconnectWait)
}

// Feed hands over the live feed's events of the workspace that its filter
// matches, as the service encoded them, until stopped.
func TestFeedHandsOverTheLiveEvents(t *testing.T) {
	s := start(t)
	ctx := within(t, 30*time.Second)
	c := client.New(s.Admin)
	got := make(chan []byte, 16)
	stop, err := c.Feed("task.>", func(raw []byte) { got <- raw })
	require.NoError(t, err)
	defer stop()
	r, err := c.CreateTask(ctx, schemas.TaskSpec{Queue: "q"})
	require.NoError(t, err)
	select {
	case raw := <-got:
		var e schemas.Event
		require.NoError(t, json.Unmarshal(raw, &e))
		require.Equal(t, "task.created", e.Type)
		require.Equal(t, r.ID, e.AggregateID)
	case <-ctx.Done():
		t.Fatal("no event on the feed")
	}
}
