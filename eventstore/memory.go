package eventstore

import (
	"bytes"
	"context"
	"fmt"
	"sync"
)

// MemoryLog is a Log kept in memory, for tests and for handlers' fast tests.
// Sequences are 1, 2, 3... It is safe for concurrent use.
type MemoryLog struct {
	mu      sync.Mutex
	recs    [][]byte
	changed chan struct{} // closed and replaced on every append
}

var _ Log = (*MemoryLog)(nil)

// NewMemoryLog returns an empty in-memory log.
func NewMemoryLog() *MemoryLog {
	return &MemoryLog{changed: make(chan struct{})}
}

// Append stores a copy of rec as record expectedLast+1 if the log holds
// exactly expectedLast records. It returns an error wrapping ErrTooLarge if
// rec exceeds MaxRecordBytes, ErrConflict if the expectation fails (unless
// the record after expectedLast is byte-for-byte rec: a retry, which returns
// its sequence), or ctx's error if ctx is done.
func (l *MemoryLog) Append(ctx context.Context, rec []byte, expectedLast uint64) (uint64, error) {
	if len(rec) > MaxRecordBytes {
		return 0, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(rec), MaxRecordBytes)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	last := uint64(len(l.recs))
	if expectedLast != last {
		if expectedLast < last && bytes.Equal(l.recs[expectedLast], rec) {
			return expectedLast + 1, nil
		}
		return 0, fmt.Errorf("%w: expected last sequence %d, log is at %d", ErrConflict, expectedLast, last)
	}
	l.recs = append(l.recs, bytes.Clone(rec))
	close(l.changed)
	l.changed = make(chan struct{})
	return last + 1, nil
}

// LastSeq returns the number of records. It fails only if ctx is done.
func (l *MemoryLog) LastSeq(ctx context.Context) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return uint64(len(l.recs)), nil
}

// Stat returns the number of records, 1 as the first sequence and the
// number again as the last (zeros when empty). It fails only if ctx is done.
func (l *MemoryLog) Stat(ctx context.Context) (LogStat, error) {
	n, err := l.LastSeq(ctx)
	if err != nil || n == 0 {
		return LogStat{}, err
	}
	return LogStat{Records: n, First: 1, Last: n}, nil
}

// Read calls fn with a copy of each record from from to the last one at the
// time of the call. It returns fn's first error, or ctx's error.
func (l *MemoryLog) Read(ctx context.Context, from uint64, fn func(seq uint64, rec []byte) error) error {
	last, err := l.LastSeq(ctx)
	if err != nil {
		return err
	}
	for seq := max(from, 1); seq <= last; seq++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(seq, l.record(seq)); err != nil {
			return err
		}
	}
	return nil
}

// Record returns a copy of the record at seq.
func (l *MemoryLog) Record(ctx context.Context, seq uint64) ([]byte, error) {
	last, err := l.LastSeq(ctx)
	if err != nil {
		return nil, err
	}
	if seq == 0 || seq > last {
		return nil, fmt.Errorf("%w: no record at seq %d (the log ends at %d)", ErrIntegrity, seq, last)
	}
	return l.record(seq), nil
}

// Tail calls fn with a copy of every record from from on, waking on each
// append, until ctx is done (returning ctx's error) or fn fails (returning
// its error).
func (l *MemoryLog) Tail(ctx context.Context, from uint64, fn func(seq uint64, rec []byte) error) error {
	next := max(from, 1)
	for {
		l.mu.Lock()
		last, changed := uint64(len(l.recs)), l.changed
		l.mu.Unlock()
		for ; next <= last; next++ {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := fn(next, l.record(next)); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

func (l *MemoryLog) record(seq uint64) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.recs[seq-1])
}
