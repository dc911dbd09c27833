package embedded

import (
	"math"
	"syscall"
)

// diskAvailable returns the bytes available to an unprivileged user on the
// file system holding dir, and whether it could be measured.
func diskAvailable(dir string) (int64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil || st.Bsize <= 0 {
		return 0, false
	}
	if st.Bavail > math.MaxInt64 {
		return math.MaxInt64, true
	}
	blocks, bsize := int64(st.Bavail), int64(st.Bsize)
	if blocks > math.MaxInt64/bsize {
		return math.MaxInt64, true
	}
	return blocks * bsize, true
}
