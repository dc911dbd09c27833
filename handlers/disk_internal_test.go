package handlers

import (
	"log/slog"
	"sync/atomic"
	"testing"
)

// TestBytesOnTheirWayCountAgainstEveryLook: chunks of an upload are taken,
// then written; a look at the disk between the two does not see them on the
// disk, and must count them still, or uploads arriving together pass the
// reserve.
func TestBytesOnTheirWayCountAgainstEveryLook(t *testing.T) {
	const mib = 1 << 20
	var onDisk atomic.Int64 // what the stored chunks took of the disk
	g := newDiskGauge(t.TempDir(), 100*mib, slog.New(slog.DiscardHandler))
	measure := func(string) (free, size int64, ok bool) { return 110*mib - onDisk.Load(), 1 << 40, true }
	g.measure.Store(&measure)
	if !g.look() {
		t.Fatal("10 MiB above the reserve was found below it")
	}

	first, second := g.hold(4*mib), g.hold(4*mib)
	if !g.hasRoom() {
		t.Fatal("two chunks of 4 MiB on their way took the 10 MiB of room")
	}
	g.look() // the watch looks while both are on their way
	third := g.hold(4 * mib)
	if g.hasRoom() {
		t.Fatal("a third chunk of 4 MiB was let in: a look forgot the 8 MiB on their way and found 10 MiB of room")
	}
	third() // refused, dropped

	onDisk.Add(4 * mib) // the first is stored
	first()
	g.look()
	if r := g.room.Load(); r != 2*mib {
		t.Fatalf("room after the first chunk was stored: %d bytes, want 2 MiB (10 MiB less 4 stored, 4 on its way)", r)
	}
	onDisk.Add(4 * mib)
	second()
	g.look()
	if r := g.room.Load(); r != 2*mib {
		t.Fatalf("room after both were stored: %d bytes, want 2 MiB", r)
	}
	if !g.hasRoom() {
		t.Fatal("2 MiB of room left was refused")
	}
}
