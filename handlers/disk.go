package handlers

import (
	"context"
	"fmt"
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

// watchDisk keeps diskLow true while the disk holding the views has less
// free space than its reserve (Config.MinFreeDisk), looking every second
// until ctx ends, and logs each change. A command refused meanwhile
// changes nothing; once room is made, commands are taken again. Nothing is
// measured where the disk cannot be (outside Linux) or with a reserve of
// -1.
func (s *Service) watchDisk(ctx context.Context) {
	if s.cfg.MinFreeDisk < 0 {
		return
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		measure := embedded.DiskSpace
		if f := s.diskSpace.Load(); f != nil {
			measure = *f
		}
		if free, size, ok := measure(s.store.Dir()); ok {
			reserve := s.cfg.MinFreeDisk
			if reserve == 0 {
				reserve = DefaultMinFreeDisk(size)
			}
			low := free < reserve
			if s.diskLow.Swap(low) != low {
				if low {
					s.cfg.Logger.Error("handlers: the disk holding the views is below its reserve of free space: new commands are refused until room is made (free disk space; dwr serve --min-free-disk sets the reserve)",
						"dir", s.store.Dir(), "free_bytes", free, "reserve_bytes", reserve)
				} else {
					s.cfg.Logger.Info("handlers: the disk has room again: commands are taken", "free_bytes", free, "reserve_bytes", reserve)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
