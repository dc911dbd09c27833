package handlers

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"
)

// DefaultMemoryLimit is dwr serve's soft memory limit (ServeConfig's
// MemoryLimit) when neither DWR_MEMORY_LIMIT nor GOMEMLIMIT says otherwise:
// none. A limit trades CPU for memory (the README has the measured curve),
// and the lean path's first target is CPU; a limit below a large
// deployment's live heap would make it collect continually.
const DefaultMemoryLimit = "off"

// MemoryLimitFromEnv returns the soft memory limit the environment asks
// for: DWR_MEMORY_LIMIT, else GOMEMLIMIT (which the Go runtime has already
// applied), else DefaultMemoryLimit.
func MemoryLimitFromEnv() string {
	if v := os.Getenv("DWR_MEMORY_LIMIT"); v != "" {
		return v
	}
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		return v
	}
	return DefaultMemoryLimit
}

// ParseMemoryLimit reads a soft memory limit as GOMEMLIMIT writes it: a
// number of bytes with an optional unit (B, KiB, MiB, GiB, TiB), or "off"
// (also "0"): no limit.
func ParseMemoryLimit(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "off" || t == "0" {
		return math.MaxInt64, nil
	}
	n, err := ParseSize(s)
	if err != nil {
		return 0, fmt.Errorf("%w, or off", err)
	}
	if n < 16<<20 {
		return 0, fmt.Errorf("%q: below 16MiB the service would spend its time collecting garbage", s)
	}
	return n, nil
}

// ParseSize reads a positive number of bytes with an optional unit (B,
// KiB, MiB, GiB, TiB), as GOMEMLIMIT writes it: 100MiB, 20GiB.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(t), 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q: want a size such as 100MiB or 1GiB", s)
	}
	return n * mult, nil
}

// MemProfileEnv names the diagnostic environment variable that makes dwr
// serve write a heap profile: a file name. Off by default; it writes only
// to a local file the operator names, and opens nothing to the network.
const MemProfileEnv = "DWR_MEMPROFILE"

// CPUProfileEnv names the diagnostic environment variable that makes dwr
// serve write a CPU profile of its whole run, until it stops, to a file.
// Off by default; like MemProfileEnv it writes only to a local file.
const CPUProfileEnv = "DWR_CPUPROFILE"

// StartCPUProfile starts a CPU profile of the whole process into file
// (nothing when file is empty) and returns what ends it.
func StartCPUProfile(file string) (stop func(), err error) {
	if file == "" {
		return func() {}, nil
	}
	f, err := os.Create(file) //nolint:gosec // the operator names the file
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }, nil
}

// WatchMemory samples the process's memory twice a second until ctx ends and,
// whenever the heap in use reaches a new high (by 5 %), writes a heap
// profile to file (replacing the last): the profile of the peak. When ctx
// ends it logs the highs it saw (heap in use, stacks, goroutines, memory
// obtained from the OS), so that they can be set beside the peak RSS.
func WatchMemory(ctx context.Context, file string, logger *slog.Logger) (done <-chan struct{}) {
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
					logger.Warn("handlers: "+MemProfileEnv, "err", err)
				}
				logger.Info("handlers: heap high", "heap_inuse_mib", ms.HeapInuse>>20, "heap_idle_mib", ms.HeapIdle>>20,
					"heap_released_mib", ms.HeapReleased>>20, "next_gc_mib", ms.NextGC>>20, "stack_inuse_mib", ms.StackInuse>>20,
					"sys_mib", ms.Sys>>20, "goroutines", runtime.NumGoroutine(), "rss", rss())
			}
			select {
			case <-ctx.Done():
				logger.Info("handlers: memory highs", "heap_inuse_mib", heap>>20, "stack_inuse_mib", stacks>>20,
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
