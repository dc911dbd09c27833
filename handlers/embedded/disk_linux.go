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

// DiskSpace returns the bytes free to an unprivileged user and the size of
// the file system holding dir, and whether they could be measured.
func DiskSpace(dir string) (free, size int64, ok bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil || st.Bsize <= 0 {
		return 0, 0, false
	}
	bsize := int64(st.Bsize)
	blocks := func(n uint64) int64 {
		if n > uint64(math.MaxInt64/bsize) {
			return math.MaxInt64
		}
		return int64(n) * bsize
	}
	return blocks(st.Bavail), blocks(st.Blocks), true
}
