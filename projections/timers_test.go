package projections_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/projections"
)

// tasksDue creates n tasks in workspace ws whose deadlines are due, the
// i-th at at+i seconds.
func tasksDue(h *harness, ws string, n int, at time.Time) {
	h.d.ws = ws
	defer func() { h.d.ws = "" }()
	if _, err := h.store.Workspace(ws); err != nil || ws != "w" {
		h.batch(cmd{&domain.CreateWorkspace{Name: ws}, "ws-" + ws})
	}
	for i := range n {
		due := at.Add(time.Duration(i) * time.Second)
		id := fmt.Sprintf("%s-%d", ws, i)
		h.batch(cmd{&domain.CreateTask{TaskID: domain.DeriveID(h.d.now, id), Spec: domain.TaskSpec{Queue: "q", Deadline: &due}}, id})
	}
}

func countByWorkspace(ts []projections.Timer) map[string]int {
	n := map[string]int{}
	for _, t := range ts {
		n[t.Workspace]++
	}
	return n
}

// One workspace's many timers due do not hold back another's: each call
// serves every workspace with timers due, whatever their moments, and
// takes more of those with more only up to the limit.
func TestDueTimersTakeEachWorkspaceInTurn(t *testing.T) {
	s, h := setup(t)
	at := h.d.now.Add(time.Minute)
	tasksDue(h, "flood", 40, at)
	// Due after every one of the flood's, and around it in key order.
	for _, ws := range []string{"b", "a-b", "z"} {
		tasksDue(h, ws, 2, at.Add(time.Hour))
	}
	tasksDue(h, "later", 3, at.Add(48*time.Hour)) // not due
	now := at.Add(2 * time.Hour)

	page, err := s.DueTimers(now, 16, 1, "")
	require.NoError(t, err)
	// One of each, then more in the same order.
	require.Equal(t, map[string]int{"a-b": 2, "b": 2, "flood": 11, "z": 1}, countByWorkspace(page.Timers))
	require.True(t, page.More)
	require.Equal(t, "z", page.Next)
	// Each workspace's earliest first.
	var flood []time.Time
	for _, tm := range page.Timers {
		if tm.Workspace == "flood" {
			flood = append(flood, tm.Due)
		}
	}
	for i, due := range flood {
		require.Equal(t, at.Add(time.Duration(i)*time.Second), due)
	}

	// A limit smaller than the workspaces due: the next call goes on after
	// the last one served, around to the first.
	page, err = s.DueTimers(now, 2, 1, "")
	require.NoError(t, err)
	require.Equal(t, map[string]int{"a-b": 1, "b": 1}, countByWorkspace(page.Timers))
	require.Equal(t, "b", page.Next)
	require.True(t, page.More)
	page, err = s.DueTimers(now, 2, 1, page.Next)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"flood": 1, "z": 1}, countByWorkspace(page.Timers))
	page, err = s.DueTimers(now, 2, 1, page.Next)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"a-b": 1, "b": 1}, countByWorkspace(page.Timers), "around to the first")

	// Enough room: every timer due, and no more left.
	page, err = s.DueTimers(now, 1000, 4, "z")
	require.NoError(t, err)
	require.Equal(t, map[string]int{"b": 2, "a-b": 2, "z": 2, "flood": 40}, countByWorkspace(page.Timers))
	require.False(t, page.More)

	// Nothing due before the first moment.
	page, err = s.DueTimers(at.Add(-time.Nanosecond), 1000, 4, "")
	require.NoError(t, err)
	require.Empty(t, page.Timers)
	require.False(t, page.More)
}

// Views written before the index by workspace was kept get it, once, when
// they are opened.
func TestViewsWithoutTheTimersByWorkspaceGetThem(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "views")
	s, err := projections.Open(dir, projections.Options{})
	require.NoError(t, err)
	h := inWorkspace(t, s)
	at := h.d.now.Add(time.Minute)
	tasksDue(h, "w", 3, at)
	tasksDue(h, "v", 2, at)
	require.NoError(t, s.Close())

	writtenBefore(t, dir, "tmw/", "k/timers-by-ws")
	s, err = projections.Open(dir, projections.Options{})
	require.NoError(t, err)
	defer s.Close()
	page, err := s.DueTimers(at.Add(time.Hour), 100, 100, "")
	require.NoError(t, err)
	require.Equal(t, map[string]int{"w": 3, "v": 2}, countByWorkspace(page.Timers))
}

// writtenBefore makes the closed views in dir as views written before a
// kind of row was kept: without the rows under prefix and without mark.
func writtenBefore(t *testing.T, dir, prefix, mark string) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatNewest})
	require.NoError(t, err)
	end := []byte(prefix)
	end[len(end)-1]++
	require.NoError(t, db.DeleteRange([]byte(prefix), end, pebble.Sync))
	require.NoError(t, db.Delete([]byte(mark), pebble.Sync))
	require.NoError(t, db.Close())
}
