package main

import (
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/dwr-run/dwr/handlers"
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

// setMemoryLimit applies --memory-limit: the Go runtime collects garbage
// more often as its memory nears the limit (a soft limit: it is exceeded
// rather than fail, and the collector takes at most about half the CPU).
func setMemoryLimit(s string, logger *slog.Logger) error {
	limit, err := handlers.ParseMemoryLimit(s)
	if err != nil {
		return fail(exitInvalid, "--memory-limit %v", err)
	}
	debug.SetMemoryLimit(limit)
	logger.Debug("dwr: soft memory limit", "limit", s)
	return nil
}
