//go:build !linux

package embedded

// diskAvailable does not measure free space outside Linux; the caller falls
// back to DefaultMaxStore.
func diskAvailable(string) (int64, bool) { return 0, false }
