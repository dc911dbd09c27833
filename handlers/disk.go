package handlers

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/handlers/embedded"
)

// DefaultMinFreeDisk is Config.MinFreeDisk's default, as a share of the
// disk: a twentieth, within [64 MiB, 1 GiB] — room for the views' flushes
// and compactions and the commands in flight.
func DefaultMinFreeDisk(size int64) int64 { return min(max(size/20, 64<<20), 1<<30) }

// errDiskLow refuses what would write to a disk below its reserve.
var errDiskLow = fmt.Errorf("%w: the disk holding the views is below its reserve of free space", eventstore.ErrStorageFull)

// recordDiskCost is what a log record of n bytes is counted to take of the
// disk: the log, the event feed, the views' history and states and the
// views' write-ahead log each hold about its bytes once.
func recordDiskCost(n int) int64 { return 4 * int64(n) }

// diskGauge knows how much free space the disk holding the views has above
// its reserve (Config.MinFreeDisk): what it measured last, less what the
// service wrote since and what is on its way to the disk. Commands and
// uploads are taken while that room is not spent; once it is, the disk is
// measured again before anything is refused, so a flood of writes between
// two looks meets the reserve too, and an estimate that counted too much
// costs a measurement, not a refusal. Bytes on their way (held) are
// counted against every measurement until they are written: a measurement
// taken before they reach the disk does not see them.
type diskGauge struct {
	dir     string
	reserve int64 // 0: DefaultMinFreeDisk of the disk's size; < 0: nothing is measured
	logger  *slog.Logger
	// measure, when set, measures instead of embedded.DiskSpace (tests).
	measure atomic.Pointer[func(dir string) (free, size int64, ok bool)]
	// every is the time between two looks of watch, in nanoseconds.
	every atomic.Int64
	// room is the free space above the reserve less what was spent since
	// it was measured and what is held; math.MaxInt64 until a measurement
	// succeeds.
	room atomic.Int64
	// held is what is on its way to the disk: counted in room, and taken
	// from each measurement until it is released.
	held atomic.Int64
	// kept is the reserve the last measurement kept, in bytes (the
	// default's depends on the disk's size); 0 until one succeeds.
	kept atomic.Int64
	mu   sync.Mutex // serializes the measurements; guards low
	low  bool       // the last measurement found the disk below its reserve
}

func newDiskGauge(dir string, reserve int64, logger *slog.Logger) *diskGauge {
	g := &diskGauge{dir: dir, reserve: reserve, logger: logger}
	g.room.Store(math.MaxInt64)
	g.every.Store(int64(time.Second))
	return g
}

// hasRoom reports whether something may be written: the room is not spent,
// or a measurement now finds the disk above its reserve.
func (g *diskGauge) hasRoom() bool {
	if g.reserve < 0 || g.room.Load() >= 0 {
		return true
	}
	return g.look()
}

// lastRoom reports whether the room above the reserve is less than the
// reserve itself: the disk's last room, where a workspace holding much of
// the log is refused before the others (writer.logShare).
func (g *diskGauge) lastRoom() bool {
	kept := g.kept.Load()
	return g.reserve >= 0 && kept > 0 && g.room.Load() < kept
}

// spend counts n bytes written to the disk since the last measurement.
func (g *diskGauge) spend(n int64) {
	if g.reserve >= 0 && n > 0 {
		g.room.Add(-n)
	}
}

// hold counts n bytes on their way to the disk; release, called once they
// are written (or dropped), stops counting them against the measurements
// to come — a measurement after that sees them on the disk.
func (g *diskGauge) hold(n int64) (release func()) {
	if g.reserve < 0 || n <= 0 {
		return func() {}
	}
	g.held.Add(n)
	g.room.Add(-n)
	var once sync.Once
	return func() { once.Do(func() { g.held.Add(-n) }) }
}

// look measures the disk, sets the room from it and logs a change of
// state; it reports whether the disk is above its reserve (true when it
// cannot be measured: outside Linux).
func (g *diskGauge) look() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	measure := embedded.DiskSpace
	if f := g.measure.Load(); f != nil {
		measure = *f
	}
	free, size, ok := measure(g.dir)
	if !ok {
		g.room.Store(math.MaxInt64)
		return true
	}
	reserve := cmp.Or(g.reserve, DefaultMinFreeDisk(size))
	g.kept.Store(reserve)
	// What is held may not be on the disk yet: it is counted still.
	held := g.held.Load()
	g.room.Store(free - reserve - held)
	low := free-held < reserve
	if g.low != low {
		g.low = low
		if low {
			g.logger.Error("handlers: the disk holding the views is below its reserve of free space: new commands are refused until room is made (free disk space; dwr serve --min-free-disk sets the reserve)",
				"dir", g.dir, "free_bytes", free, "held_bytes", held, "reserve_bytes", reserve)
		} else {
			g.logger.Info("handlers: the disk has room again: commands are taken", "free_bytes", free, "reserve_bytes", reserve)
		}
	}
	return !low
}

// watch measures the disk every second until ctx ends, so that the room
// follows what others write and delete (and room made by an operator is
// seen without a refused command). Nothing is measured with a reserve of
// -1.
func (g *diskGauge) watch(ctx context.Context) {
	if g.reserve < 0 {
		return
	}
	for {
		g.look()
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(g.every.Load())):
		}
	}
}
