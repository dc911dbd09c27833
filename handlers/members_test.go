package handlers_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
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
