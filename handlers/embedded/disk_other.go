//go:build !linux

package embedded

// diskAvailable does not measure free space outside Linux; the caller falls
// back to DefaultMaxStore.
func diskAvailable(string) (int64, bool) { return 0, false }

// DiskSpace does not measure disks outside Linux: ok is false.
func DiskSpace(string) (free, size int64, ok bool) { return 0, 0, false }
