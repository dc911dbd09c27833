package main

import (
	"os"
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
