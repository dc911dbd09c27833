package embedded

import (
	"math"
	"syscall"
)

// DiskSpace returns the bytes free to an unprivileged user and the size of
// the file system holding dir, and whether they could be measured.
func DiskSpace(dir string) (free, size int64, ok bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil || st.Bsize <= 0 {
		return 0, 0, false
	}
	return bytesOf(st.Bavail, st.Bsize), bytesOf(st.Blocks, st.Bsize), true
}

// bytesOf returns blocks blocks of bsize bytes, or math.MaxInt64 when that
// is more.
func bytesOf(blocks uint64, bsize int64) int64 {
	if blocks > math.MaxInt64 {
		return math.MaxInt64
	}
	n := int64(blocks)
	if n > math.MaxInt64/bsize {
		return math.MaxInt64
	}
	return n * bsize
}
