package handlers_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers"
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

// A flood of commands between two looks at the disk stops at the reserve:
// the service counts what it writes since it last measured, and measures
// again once that room is spent, rather than writing on until its next
// look. Here the disk has 4 MiB above its reserve, less what the service's
// directory has grown by, and the service does not look on its own during
// the flood.
func TestAFloodOfCommandsBetweenTwoLooksMeetsTheReserve(t *testing.T) {
	const reserve, room = 64 << 20, 4 << 20
	st := servicetest.Start(t, "", servicetest.Options{Config: handlers.Config{MinFreeDisk: reserve}})
	b := bundleOf(st)
	base := diskUsage(t, st.Dir)
	var looks atomic.Int64
	st.Svc.LookAtDiskEvery(time.Hour)
	st.Svc.MeasureDiskWith(func(string) (int64, int64, bool) {
		looks.Add(1)
		return reserve + room - (diskUsage(t, st.Dir) - base), 10 << 30, true
	})
	servicetest.Eventually(t, 5*time.Second, func() bool { return looks.Load() > 0 }) // the look pending before
	looks.Store(0)

	input := strings.Repeat("x", 100<<10)
	var accepted, refused atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for accepted.Load() < 200 && refused.Load() == 0 {
				r := b.command(t, "task.create", map[string]any{"spec": map[string]any{"queue": "flood", "input": map[string]any{"blob": input}}}, "")
				switch {
				case r.OK:
					accepted.Add(1)
				case strings.Contains(r.Error.Message, "storage is full"):
					refused.Add(1)
				default:
					t.Errorf("task.create: %+v", r.Error)
					return
				}
			}
		})
	}
	wg.Wait()
	grown := diskUsage(t, st.Dir) - base
	t.Logf("%d commands of 100 KiB taken, the directory grew by %.1f MiB, %d looks at the disk", accepted.Load(), float64(grown)/(1<<20), looks.Load())
	require.Positive(t, refused.Load(), "the flood met the reserve (200 commands of 100 KiB would take ~80 MiB)")
	require.Positive(t, looks.Load(), "the disk was measured again before a command was refused")
	require.Less(t, grown, int64(room+8<<20), "what was written past the room is at most about a batch of commands in flight")
}

// diskUsage returns the bytes the files below dir take on the disk.
func diskUsage(t *testing.T, dir string) int64 {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed while walked (a compaction's input, a deleted block)
		}
		if err != nil || d.IsDir() {
			return err
		}
		if fi, err := d.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			} else {
				n += fi.Size()
			}
		}
		return nil
	})
	if err != nil {
		t.Errorf("du %s: %v", dir, err)
	}
	return n
}

// In the disk's last room — less free space above the reserve than the
// reserve itself — a workspace that holds more than a quarter of the log's
// bytes has its new commands refused (unavailable, naming its share), while
// the other workspaces' are taken on until the reserve; once room is made,
// its commands are taken again. Nothing refused is recorded.
func TestAWorkspaceHoldingMuchOfTheLogStopsFirstNearAFullDisk(t *testing.T) {
	const reserve = 1 << 30
	st := servicetest.Start(t, "", servicetest.Options{Config: handlers.Config{MinFreeDisk: reserve}})
	b := bundleOf(st)
	var free atomic.Int64
	free.Store(8 << 30)
	st.Svc.MeasureDiskWith(func(string) (int64, int64, bool) { return free.Load(), 10 << 30, true })
	servicetest.Must(t, st.Admin, "big", "workspace.create", map[string]any{"name": "big"})
	big := servicetest.NewClient(st.Admin, "big")
	long := strings.Repeat("x", 9000)
	bigGoal := func(title string) schemas.Reply {
		return big.Request(t, "dwr.cmd.big.goal.create", map[string]any{"title": title, "description": long}, nil)
	}
	for i := range 4 {
		r := bigGoal(fmt.Sprintf("big %d", i))
		require.True(t, r.OK, "%+v", r.Error)
	}
	require.True(t, b.command(t, "goal.create", map[string]any{"title": "small"}, "").OK)

	free.Store(reserve + 512<<20) // 512 MiB above the reserve: its last room
	var refused schemas.Reply
	servicetest.Eventually(t, 10*time.Second, func() bool {
		refused = bigGoal("while the disk is low")
		return !refused.OK
	})
	require.Equal(t, string(domain.CodeUnavailable), refused.Error.Code)
	require.Contains(t, refused.Error.Message, `workspace "big" holds`)
	r := b.command(t, "goal.create", map[string]any{"title": "small, while the disk is low"}, "")
	require.True(t, r.OK, "another workspace's command is taken: %+v", r.Error)
	count := func() int {
		var goals []domain.Goal
		big.Query(t, "goal.list", schemas.Query{Limit: 1000}, &goals)
		return len(goals)
	}
	n := count()
	require.False(t, bigGoal("again while the disk is low").OK)
	require.Equal(t, n, count(), "nothing refused is recorded")

	free.Store(8 << 30)
	servicetest.Eventually(t, 10*time.Second, func() bool { return bigGoal("after").OK })
}

// Views written before they counted the log's bytes by workspace count
// them from their next record on; a rebuild counts the whole log, and its
// verdict tells that difference from damage: the views are otherwise the
// same.
func TestARebuildOfViewsThatCountedTheLogLateSaysSo(t *testing.T) {
	dir := t.TempDir()
	b := start(t, dir)
	b.mustCommand(t, "goal.create", map[string]any{"title": "before the counts"})
	b.stop()
	views, err := pebble.Open(filepath.Join(dir, "views"), &pebble.Options{FormatMajorVersion: pebble.FormatNewest})
	require.NoError(t, err)
	require.NoError(t, views.DeleteRange([]byte("lb/"), []byte("lb0"), pebble.Sync))
	require.NoError(t, views.Delete([]byte("k/log-bytes"), pebble.Sync))
	require.NoError(t, views.Close())
	b = start(t, dir) // the views count from here
	b.mustCommand(t, "goal.create", map[string]any{"title": "counted"})
	b.stop()

	m, err := handlers.OpenMaintenance(context.Background(), handlers.MaintenanceConfig{DataDir: dir})
	require.NoError(t, err)
	rebuilt, err := m.Rebuild(context.Background(), handlers.RebuildOptions{})
	m.Close()
	require.NoError(t, err)
	require.Contains(t, rebuilt.Verdict, "identical to the current views but for the log's bytes by workspace")
	m, err = handlers.OpenMaintenance(context.Background(), handlers.MaintenanceConfig{DataDir: dir})
	require.NoError(t, err)
	rebuilt, err = m.Rebuild(context.Background(), handlers.RebuildOptions{})
	m.Close()
	require.NoError(t, err)
	require.Equal(t, "identical to the current views, byte for byte", rebuilt.Verdict, "once rebuilt, they count the whole log")
}
