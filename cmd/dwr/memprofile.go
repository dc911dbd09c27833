package main

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"
)

// memProfileEnv names the diagnostic environment variable that makes dwr
// serve write a heap profile: a file name. Off by default; it writes only
// to a local file the operator names, and opens nothing to the network.
const memProfileEnv = "DWR_MEMPROFILE"

// watchMemory samples the process's memory twice a second until ctx ends and,
// whenever the heap in use reaches a new high (by 5 %), writes a heap
// profile to file (replacing the last): the profile of the peak. When ctx
// ends it logs the highs it saw (heap in use, stacks, goroutines, memory
// obtained from the OS), so that they can be set beside the peak RSS.
func watchMemory(ctx context.Context, file string, logger *slog.Logger) (done <-chan struct{}) {
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		var ms runtime.MemStats
		var heap, stacks, sys uint64
		goroutines := 0
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			runtime.ReadMemStats(&ms)
			stacks, sys = max(stacks, ms.StackInuse), max(sys, ms.Sys)
			goroutines = max(goroutines, runtime.NumGoroutine())
			if ms.HeapInuse > heap+heap/20 {
				heap = ms.HeapInuse
				if err := writeHeapProfile(file); err != nil {
					logger.Warn("dwr: "+memProfileEnv, "err", err)
				}
				logger.Info("dwr: heap high", "heap_inuse_mib", ms.HeapInuse>>20, "heap_idle_mib", ms.HeapIdle>>20,
					"heap_released_mib", ms.HeapReleased>>20, "next_gc_mib", ms.NextGC>>20, "stack_inuse_mib", ms.StackInuse>>20,
					"sys_mib", ms.Sys>>20, "goroutines", runtime.NumGoroutine(), "rss", rss())
			}
			select {
			case <-ctx.Done():
				logger.Info("dwr: memory highs", "heap_inuse_mib", heap>>20, "stack_inuse_mib", stacks>>20,
					"sys_mib", sys>>20, "goroutines", goroutines, "profile", file)
				return
			case <-t.C:
			}
		}
	}()
	return finished
}

// rss returns the process's resident set size lines of /proc/self/status
// (Linux; empty elsewhere): all, anonymous and file-backed (the binary).
func rss() string {
	b, _ := os.ReadFile("/proc/self/status")
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") || strings.HasPrefix(l, "RssAnon:") || strings.HasPrefix(l, "RssFile:") {
			out = append(out, strings.Join(strings.Fields(l), " "))
		}
	}
	return strings.Join(out, ", ")
}

func writeHeapProfile(file string) error {
	f, err := os.Create(file) //nolint:gosec // G703: the path is the operator's own DWR_MEMPROFILE
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
