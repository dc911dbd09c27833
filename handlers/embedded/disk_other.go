//go:build !(linux || darwin || freebsd)

package embedded

// diskAvailable cannot measure free space on this system; the caller falls
// back to DefaultMaxStore.
func diskAvailable(string) (int64, bool) { return 0, false }
