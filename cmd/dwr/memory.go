package main

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// defaultMemoryLimit is dwr serve's soft memory limit (--memory-limit) when
// neither the flag nor GOMEMLIMIT says otherwise: none. A limit trades CPU
// for memory (the README has the measured curve), and the lean path's first
// target is CPU; a limit below a large deployment's live heap would make it
// collect continually.
const defaultMemoryLimit = "off"

// memoryLimitFlag returns --memory-limit's default: DWR_MEMORY_LIMIT, else
// GOMEMLIMIT (which the Go runtime has already applied), else
// defaultMemoryLimit.
func memoryLimitFlag() string {
	if v := os.Getenv("DWR_MEMORY_LIMIT"); v != "" {
		return v
	}
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		return v
	}
	return defaultMemoryLimit
}

// parseMemoryLimit reads a soft memory limit as GOMEMLIMIT writes it: a
// number of bytes with an optional unit (B, KiB, MiB, GiB, TiB), or "off"
// (also "0"): no limit.
func parseMemoryLimit(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "off" || t == "0" {
		return math.MaxInt64, nil
	}
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
		return 0, fmt.Errorf("%q: want a size such as 100MiB or 1GiB, or off", s)
	}
	if n*mult < 16<<20 {
		return 0, fmt.Errorf("%q: below 16MiB the service would spend its time collecting garbage", s)
	}
	return n * mult, nil
}

// setMemoryLimit applies --memory-limit: the Go runtime collects garbage
// more often as its memory nears the limit (a soft limit: it is exceeded
// rather than fail, and the collector takes at most about half the CPU).
func setMemoryLimit(s string, logger *slog.Logger) error {
	limit, err := parseMemoryLimit(s)
	if err != nil {
		return fail(exitInvalid, "--memory-limit %v", err)
	}
	debug.SetMemoryLimit(limit)
	logger.Debug("dwr: soft memory limit", "limit", s)
	return nil
}
