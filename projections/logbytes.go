package projections

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/dwr-run/dwr/eventstore"
)

// The views count the bytes each workspace holds in the log: its events'
// payloads and its commands' replies, as the records hold them (the
// records' envelopes aside). The log is shared by every workspace and
// never shrinks; these counts say how much of it each one holds, and the
// service keeps a workspace holding much of it from the disk's last room
// (handlers). A record counts the same applied live or replayed, so views
// rebuilt from the log hold the same counts.

// logBytes is the views' count of the log's bytes by workspace, read from
// the lb/ rows when the store opens and moved after each record applied.
type logBytes struct {
	mu    sync.Mutex
	by    map[string]uint64
	total uint64
	// from is the first record counted: 1 for views that counted from the
	// log's first record; later for views written before they counted.
	from uint64
}

// loadLogBytes reads the counts, and marks views that hold no count yet
// as counting from their next record (1 for empty views).
func (s *Store) loadLogBytes() error {
	lb := &logBytes{by: map[string]uint64{}}
	v, closer, err := s.db.Get([]byte(pLogBytesFrom))
	switch {
	case err == nil:
		if len(v) != 8 {
			_ = closer.Close()
			return fmt.Errorf("%w: %s of %d bytes", ErrDamaged, pLogBytesFrom, len(v))
		}
		lb.from = binary.BigEndian.Uint64(v)
		if err := closer.Close(); err != nil {
			return err
		}
	case errors.Is(err, pebble.ErrNotFound):
		lb.from = s.checkpoint + 1
		if err := s.db.Set([]byte(pLogBytesFrom), binary.BigEndian.AppendUint64(nil, lb.from), pebble.NoSync); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: read %s: %w", ErrDamaged, pLogBytesFrom, err)
	}
	prefix := []byte(pLogBytes + "/")
	err = s.scan(prefix, func(k, v []byte) error {
		if len(v) != 8 {
			return fmt.Errorf("%w: %s of %d bytes", ErrDamaged, k, len(v))
		}
		n := binary.BigEndian.Uint64(v)
		lb.by[string(k[len(prefix):])] = n
		lb.total += n
		return nil
	})
	if err != nil {
		return err
	}
	s.logBytes = lb
	return nil
}

// WorkspaceBytes is the bytes a workspace holds in one log record: its
// events' payloads and its commands' replies.
type WorkspaceBytes struct {
	Workspace string
	N         uint64
}

// BytesByWorkspace returns c's bytes by workspace, each workspace once, in
// the order they first come.
func BytesByWorkspace(c *eventstore.Commit) []WorkspaceBytes {
	var out []WorkspaceBytes
	add := func(ws string, n uint64) {
		if n == 0 {
			return
		}
		for i := range out {
			if out[i].Workspace == ws {
				out[i].N += n
				return
			}
		}
		out = append(out, WorkspaceBytes{Workspace: ws, N: n})
	}
	for i := range c.Events {
		add(c.Events[i].Workspace, uint64(len(c.Events[i].Data)))
	}
	for i := range c.Results {
		add(c.Results[i].Workspace, uint64(len(c.Results[i].Reply)))
	}
	return out
}

// countLogBytes writes into b the counts record c leaves, and returns the
// record's bytes by workspace for logBytesApplied once b is committed.
func (s *Store) countLogBytes(b *pebble.Batch, c *eventstore.Commit) ([]WorkspaceBytes, error) {
	add := slices.DeleteFunc(BytesByWorkspace(c), func(a WorkspaceBytes) bool {
		return a.Workspace == "" || strings.Contains(a.Workspace, "/") // not a workspace's: no row (names never hold '/')
	})
	if len(add) == 0 {
		return nil, nil
	}
	lb := s.logBytes
	lb.mu.Lock()
	defer lb.mu.Unlock()
	for _, a := range add {
		if err := b.Set(key(pLogBytes, a.Workspace), binary.BigEndian.AppendUint64(nil, lb.by[a.Workspace]+a.N), nil); err != nil {
			return nil, err
		}
	}
	return add, nil
}

// logBytesApplied takes a committed record's bytes (countLogBytes's) into
// the counts.
func (s *Store) logBytesApplied(add []WorkspaceBytes) {
	lb := s.logBytes
	lb.mu.Lock()
	defer lb.mu.Unlock()
	for _, a := range add {
		lb.by[a.Workspace] += a.N
		lb.total += a.N
	}
}

// LogBytes returns the bytes of the log that workspace ws holds (its
// events' payloads and its commands' replies), those that every workspace
// holds together, and the first log record they count: 1 when the views
// counted from the log's first record, later for views written before
// they counted (a rebuild counts the whole log).
func (s *Store) LogBytes(ws string) (mine, all, from uint64) {
	lb := s.logBytes
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return lb.by[ws], lb.total, lb.from
}

// EachLogBytes calls f with the bytes of the log each workspace holds (as
// LogBytes counts them), in no order.
func (s *Store) EachLogBytes(f func(ws string, n uint64)) {
	lb := s.logBytes
	lb.mu.Lock()
	by := make(map[string]uint64, len(lb.by))
	maps.Copy(by, lb.by)
	lb.mu.Unlock()
	for ws, n := range by {
		f(ws, n)
	}
}

// DumpButLogBytes is Dump without the counts of the log's bytes: views
// written before they counted differ from views rebuilt from the log only
// there (handlers' rebuild tells the two apart).
func (s *Store) DumpButLogBytes(w io.Writer) error {
	return s.dump(w, func(k []byte) bool {
		return string(k) == pLogBytesFrom || bytes.HasPrefix(k, []byte(pLogBytes+"/"))
	})
}
