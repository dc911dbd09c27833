package projections_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/projections"
)

// The views count the bytes each workspace holds in the log — its events'
// payloads and its commands' replies, as the records hold them — the same
// whether a record is applied live or replayed, and keep them across a
// reopen. Views written before they counted count from their next record.
func TestTheViewsCountEachWorkspacesLogBytes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "views")
	s, err := projections.Open(dir, projections.Options{})
	require.NoError(t, err)
	h := inWorkspace(t, s) // workspace w
	h.d.ws = "v"
	h.batch(cmd{&domain.CreateWorkspace{Name: "v"}, "ws-v"})
	h.batch(cmd{&domain.CreateGoal{GoalID: domain.DeriveID(h.d.now, "gv"), Title: "a goal of v with a long title"}, "c-gv"})
	h.d.ws = "w"
	h.batch(cmd{&domain.CreateGoal{GoalID: domain.DeriveID(h.d.now, "gw"), Title: "w's"}, "c-gw"})

	// What the log holds, counted from its records.
	want := map[string]uint64{}
	require.NoError(t, h.log.Read(context.Background(), 1, func(_ uint64, raw []byte) error {
		c, err := eventstore.DecodeCommit(raw)
		require.NoError(t, err)
		for _, e := range c.Events {
			want[e.Workspace] += uint64(len(e.Data))
		}
		for _, r := range c.Results {
			want[r.Workspace] += uint64(len(r.Reply))
		}
		return nil
	}))
	require.Positive(t, want["v"])
	require.Positive(t, want["w"])
	check := func(s *projections.Store, from uint64) {
		t.Helper()
		var all uint64
		for _, n := range want {
			all += n
		}
		for ws, n := range want {
			mine, total, f := s.LogBytes(ws)
			require.Equal(t, n, mine, "workspace %q", ws)
			require.Equal(t, all, total)
			require.Equal(t, from, f)
		}
	}
	check(s, 1)

	rebuilt, err := projections.Rebuild(context.Background(), h.log, testKey, filepath.Join(t.TempDir(), "rebuilt"), projections.Options{}, nil)
	require.NoError(t, err)
	check(rebuilt, 1)
	require.NoError(t, rebuilt.Close())

	cp := s.Checkpoint()
	require.NoError(t, s.Close())
	s, err = projections.Open(dir, projections.Options{})
	require.NoError(t, err)
	check(s, 1)
	require.NoError(t, s.Close())

	// Views written before they counted: no lb/ rows, no mark.
	writtenBefore(t, dir, "lb/", "k/log-bytes")
	s, err = projections.Open(dir, projections.Options{})
	require.NoError(t, err)
	defer s.Close()
	mine, total, from := s.LogBytes("v")
	require.Zero(t, mine)
	require.Zero(t, total)
	require.Equal(t, cp+1, from, "counted from the next record")
}
