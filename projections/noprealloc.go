package projections

import "github.com/cockroachdb/pebble/v2/vfs"

// noPreallocFS is a file system whose files reserve no space ahead of
// their writes. Pebble reserves each write-ahead log file's space in steps
// of 110 % of the memtable size (fallocate), and a memtable that grows from
// 256 KiB to its 32 MiB leaves up to seven such files waiting for one
// flush: ~250 MiB of disk held for ~32 MiB of views, which filled a small
// disk long before the log did. The views sync their log rarely (they are
// rebuilt from the log), so the reservation buys nothing here.
type noPreallocFS struct{ vfs.FS }

func (fs noPreallocFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	return noPrealloc(fs.FS.Create(name, category))
}

func (fs noPreallocFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return noPrealloc(fs.FS.OpenReadWrite(name, category, opts...))
}

func (fs noPreallocFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	return noPrealloc(fs.FS.ReuseForWrite(oldname, newname, category))
}

func noPrealloc(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return noPreallocFile{f}, nil
}

type noPreallocFile struct{ vfs.File }

// Preallocate reserves nothing: the file grows as it is written.
func (noPreallocFile) Preallocate(offset, length int64) error { return nil }
