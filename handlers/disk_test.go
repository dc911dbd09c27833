package handlers_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// Below its reserve of free disk space the service takes no new command
// (unavailable, saying the storage is full) and keeps answering what it
// holds: a command sent again gets its first outcome, queries are served.
// Once room is made, commands are taken again — no restart, nothing lost.
func TestAFullDiskRefusesNewCommandsUntilRoomIsMade(t *testing.T) {
	st := servicetest.Start(t, "", servicetest.Options{})
	b := bundleOf(st)
	var free atomic.Int64
	free.Store(8 << 30)
	st.Svc.MeasureDiskWith(func(string) (int64, int64, bool) { return free.Load(), 10 << 30, true })

	before := b.command(t, "goal.create", map[string]any{"title": "before"}, "before")
	require.True(t, before.OK, "%+v", before.Error)

	free.Store(100 << 20) // below the default reserve of a 10 GiB disk (512 MiB)
	var refused schemas.Reply
	servicetest.Eventually(t, 10*time.Second, func() bool {
		refused = b.command(t, "goal.create", map[string]any{"title": "while full"}, "")
		return !refused.OK
	})
	require.Equal(t, string(domain.CodeUnavailable), refused.Error.Code)
	require.True(t, strings.Contains(refused.Error.Message, "storage is full"), refused.Error.Message)

	again := b.command(t, "goal.create", map[string]any{"title": "before"}, "before")
	require.True(t, again.OK, "a command sent again is answered: %+v", again.Error)
	require.Equal(t, before.Seq, again.Seq)
	count := func() int {
		var goals []domain.Goal
		b.query(t, "goal.list", schemas.Query{Limit: 1000}, 0, &goals)
		return len(goals)
	}
	n := count() // queries are served (goals made before the service looked at the disk included)
	require.False(t, b.command(t, "goal.create", map[string]any{"title": "while full"}, "").OK)
	require.Equal(t, n, count(), "a refused command leaves nothing")
	for _, op := range []string{"artifact.chunk", "artifact.put"} {
		r := b.request(t, "dwr.q.default."+op, map[string]any{}, nil)
		require.False(t, r.OK, op)
		require.Equal(t, string(domain.CodeUnavailable), r.Error.Code, "nor do an artifact's bytes come in: %s", op)
		require.Contains(t, r.Error.Message, "storage is full", op)
	}

	free.Store(8 << 30)
	servicetest.Eventually(t, 10*time.Second, func() bool {
		return b.command(t, "goal.create", map[string]any{"title": "after"}, "").OK
	})
	r := b.request(t, "dwr.q.default.artifact.put", map[string]any{}, nil)
	require.NotContains(t, r.Error.Message, "storage is full", "the artifact's request is judged again")
}
