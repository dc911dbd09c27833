package projections_test

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/projections"
)

// viewsOnDisk writes some views to a directory, with their rows in tables
// (not only in the write-ahead log), and returns it with the log they came
// from.
func viewsOnDisk(t *testing.T) (string, *eventstore.MemoryLog) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "views")
	s, err := projections.Open(dir, projections.Options{})
	require.NoError(t, err)
	h := inWorkspace(t, s)
	for i := range 20 {
		h.batch(cmd{&domain.CreateGoal{GoalID: domain.DeriveID(h.d.now, string(rune('a'+i))), Title: strings.Repeat("g", 200)}, string(rune('a' + i))})
	}
	require.NoError(t, s.Close())
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatNewest})
	require.NoError(t, err)
	require.NoError(t, db.Flush())
	require.NoError(t, db.Close())
	return dir, h.log
}

func flipTables(t *testing.T, dir string) {
	t.Helper()
	tables, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	require.NoError(t, err)
	require.NotEmpty(t, tables)
	for _, f := range tables {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		b[len(b)/2] ^= 0xff
		require.NoError(t, os.WriteFile(f, b, 0o600)) //nolint:gosec // a file of the test's own temp dir
	}
}

// A flipped byte in a table is found when the views are opened — not by a
// query later, and never as a panic — and with OnDamaged the damaged views
// are moved aside and rebuilt from the log, equal to a rebuild.
func TestDamagedViewsAreMovedAsideAndRebuilt(t *testing.T) {
	dir, log := viewsOnDisk(t)
	flipTables(t, dir)

	_, err := projections.Open(dir, projections.Options{})
	require.ErrorIs(t, err, projections.ErrDamaged)
	require.ErrorContains(t, err, "checksum")

	var moved string
	var cause error
	s, err := projections.Open(dir, projections.Options{OnDamaged: func(to string, why error) { moved, cause = to, why }})
	require.NoError(t, err)
	defer s.Close()
	require.ErrorIs(t, cause, projections.ErrDamaged)
	require.True(t, strings.HasPrefix(moved, dir+".corrupt-"), moved)
	require.DirExists(t, moved, "the damaged views are kept for a post-mortem")
	require.Zero(t, s.Checkpoint())

	_, err = s.CatchUp(context.Background(), log, testKey)
	require.NoError(t, err)
	rebuilt := openMem(t)
	defer rebuilt.Close()
	_, err = rebuilt.CatchUp(context.Background(), log, testKey)
	require.NoError(t, err)
	require.Equal(t, dump(t, rebuilt), dump(t, s))
	goals, err := s.ListGoals("w", "", 0)
	require.NoError(t, err)
	require.Len(t, goals, 20)
}

// Views in use by another process are not damaged: they are left alone.
func TestViewsInUseAreNotMovedAside(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "views")
	s, err := projections.Open(dir, projections.Options{})
	require.NoError(t, err)
	defer s.Close()
	_, err = projections.Open(dir, projections.Options{OnDamaged: func(string, error) { t.Error("moved views in use") }})
	require.Error(t, err)
	require.NotErrorIs(t, err, projections.ErrDamaged)
	require.ErrorContains(t, err, "in use")
}

// Views written before the log was chained know no verified record to
// resume from: they are rebuilt, once.
func TestViewsWithoutALogTipAreRebuilt(t *testing.T) {
	dir, _ := viewsOnDisk(t)
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatNewest})
	require.NoError(t, err)
	require.NoError(t, db.Delete([]byte("k/logtip"), pebble.Sync))
	require.NoError(t, db.Set([]byte("k/checkpoint"), binary.BigEndian.AppendUint64(nil, 21), pebble.Sync))
	require.NoError(t, db.Close())
	_, err = projections.Open(dir, projections.Options{})
	require.ErrorIs(t, err, projections.ErrDamaged)
	require.ErrorContains(t, err, "predate the log's chain")
}

// Reset moves views found damaged after opening (by CatchUp) aside.
func TestResetStartsEmptyViews(t *testing.T) {
	dir, log := viewsOnDisk(t)
	var moved []string
	s, err := projections.Open(dir, projections.Options{OnDamaged: func(to string, _ error) { moved = append(moved, to) }})
	require.NoError(t, err)
	defer s.Close()
	require.NotZero(t, s.Checkpoint())
	to, err := s.Reset(projections.ErrDamaged)
	require.NoError(t, err)
	require.Equal(t, []string{to}, moved)
	require.Zero(t, s.Checkpoint())
	require.Equal(t, eventstore.LogTip{}, s.LogTip())
	_, err = s.CatchUp(context.Background(), log, testKey)
	require.NoError(t, err)
	last, err := log.LastSeq(context.Background())
	require.NoError(t, err)
	require.Equal(t, last, s.Checkpoint())
}

// closedGoalHistory writes views in which a goal was created and cancelled,
// closes them and returns their directory, the harness, the goal and its
// history of two events.
func closedGoalHistory(t *testing.T) (string, *harness, string, []eventstore.Event) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "views")
	s, err := projections.Open(dir, projections.Options{})
	require.NoError(t, err)
	h := inWorkspace(t, s)
	goal := domain.DeriveID(h.d.now, "g")
	h.batch(cmd{&domain.CreateGoal{GoalID: goal, Title: "g"}, "g"})
	h.batch(cmd{&domain.CancelGoal{GoalID: goal}, "cancel"})
	hist, err := s.History(context.Background(), h.log, "goal", goal)
	require.NoError(t, err)
	require.Len(t, hist, 2)
	require.NoError(t, s.Close())
	return dir, h, goal, hist
}

// A history whose stored events no longer chain — one deleted, one changed,
// one row naming another event of the log or with another hash — is never
// served: History and a listing from a cursor stop with the eventstore's
// *ChainError, naming the aggregate and the version.
func TestBrokenHistoryIsNotServed(t *testing.T) {
	dir, h, goal, hist := closedGoalHistory(t)

	historyKey := func(v uint64) []byte { return binary.BigEndian.AppendUint64([]byte("h/goal/"+goal+"/"), v) }
	reopen := func(change func(db *pebble.DB)) *projections.Store {
		db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatNewest})
		require.NoError(t, err)
		change(db)
		require.NoError(t, db.Close())
		s, err := projections.Open(dir, projections.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}

	var rows [2][]byte // the rows of v1 and v2, as written
	s := reopen(func(db *pebble.DB) {
		for i := range rows {
			v, closer, err := db.Get(historyKey(uint64(i + 1))) //nolint:gosec // 1 and 2
			require.NoError(t, err)
			rows[i] = append([]byte(nil), v...)
			require.NoError(t, closer.Close())
		}
		require.NoError(t, db.Delete(historyKey(1), pebble.Sync))
	})
	_, err := s.History(context.Background(), h.log, "goal", goal)
	var ce *eventstore.ChainError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, eventstore.ChainGap, ce.Problem)
	require.Equal(t, uint64(2), ce.Version)
	require.ErrorContains(t, err, "goal/"+goal+" v2: version gap: want v1")
	err = s.EachEvent(context.Background(), h.log, "goal", goal, 1, func(eventstore.Event) bool { return true })
	require.ErrorAs(t, err, &ce, "the cursor's event is gone")
	require.Equal(t, eventstore.ChainGap, ce.Problem)
	require.NoError(t, s.Close())

	// A row that names another event of the log than the one recorded for
	// its version (here v2's, under v1), or whose hash is not the event's.
	s = reopen(func(db *pebble.DB) {
		require.NotEqual(t, byte('{'), rows[0][0], "a row holds the event's place in the log, not the event")
		require.NoError(t, db.Set(historyKey(1), rows[1], pebble.Sync))
	})
	_, err = s.History(context.Background(), h.log, "goal", goal)
	require.ErrorAs(t, err, &ce)
	require.Equal(t, eventstore.ChainNotRecorded, ce.Problem)
	require.Equal(t, uint64(1), ce.Version)
	require.NoError(t, s.Close())
	s = reopen(func(db *pebble.DB) {
		flipped := append([]byte(nil), rows[0]...)
		flipped[len(flipped)-len("w")-1] ^= 1 // the hash's last byte, before the workspace
		require.NoError(t, db.Set(historyKey(1), flipped, pebble.Sync))
	})
	_, err = s.History(context.Background(), h.log, "goal", goal)
	require.ErrorAs(t, err, &ce)
	require.Equal(t, eventstore.ChainNotRecorded, ce.Problem)
	require.NoError(t, s.Close())

	// A row of views written before, which held the event itself: changed.
	s = reopen(func(db *pebble.DB) {
		changed := strings.Replace(string(hist[0].Raw), `"title":"g"`, `"title":"h"`, 1)
		require.NotEqual(t, string(hist[0].Raw), changed)
		require.NoError(t, db.Set(historyKey(1), []byte(changed), pebble.Sync))
	})
	served := 0
	_, err = s.History(context.Background(), h.log, "goal", goal)
	require.ErrorAs(t, err, &ce)
	require.Equal(t, eventstore.ChainPrevMismatch, ce.Problem)
	require.Equal(t, uint64(2), ce.Version)
	err = s.EachEvent(context.Background(), h.log, "goal", goal, 1, func(eventstore.Event) bool { served++; return true })
	require.ErrorAs(t, err, &ce, "the event after the cursor does not chain on the cursor's")
	require.Equal(t, eventstore.ChainPrevMismatch, ce.Problem)
	require.Zero(t, served)
}

// Views written before this kind of history row kept each event whole in
// its row: such rows are listed as they are, beside the newer ones.
func TestHistoryRowsThatHoldTheEventAreStillListed(t *testing.T) {
	dir, _, goal, want := closedGoalHistory(t)

	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatNewest})
	require.NoError(t, err)
	for _, e := range want {
		require.NoError(t, db.Set(binary.BigEndian.AppendUint64([]byte("h/goal/"+goal+"/"), e.Version), e.Raw, pebble.Sync))
	}
	require.NoError(t, db.Close())
	s, err := projections.Open(dir, projections.Options{})
	require.NoError(t, err)
	defer s.Close()
	got, err := s.History(context.Background(), nil, "goal", goal)
	require.NoError(t, err, "rows that hold their events need no log")
	require.Equal(t, want, got)
	ws, ok, err := s.HistoryWorkspace("goal", goal)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "w", ws)
	v, hash, err := s.Tip("goal", goal)
	require.NoError(t, err)
	require.Equal(t, want[1].Version, v)
	require.Equal(t, want[1].Hash(), hash)
}
