//go:build linux || darwin || freebsd

package embedded

import "syscall"

// diskAvailable returns the bytes available to an unprivileged user on the
// file system holding dir, and whether it could be measured.
func diskAvailable(dir string) (int64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, false
	}
	avail := uint64(st.Bavail) * uint64(st.Bsize) //nolint:unconvert // field types differ by OS
	if avail > 1<<62 {
		avail = 1 << 62
	}
	return int64(avail), true
}
