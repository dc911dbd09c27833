//go:build !linux

package embedded

// DiskSpace does not measure disks outside Linux: ok is false (the store
// limit falls back to DefaultMaxStore; the service keeps no reserve).
func DiskSpace(string) (free, size int64, ok bool) { return 0, 0, false }
