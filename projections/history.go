package projections

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/dwr-run/dwr/eventstore"
)

// An aggregate's history row (h/<aggtype>/<id>/<version BE>) says where its
// event is in the log — the record's sequence and the event's place among
// the record's events — with the event's hash and workspace; the event
// itself stays in the log, and a listing reads it from there (EachEvent).
// Kept whole in the views, the events were about half the bytes the views
// wrote, which cost the writer their copying, flushing and compacting and
// the memtables' memory (the README's "History rows point into the log:
// measured and kept"). Views written before hold the event itself: such a
// row is the event's JSON, which starts with '{'.
const refFormat = 1

// eventRef is a history row, decoded.
type eventRef struct {
	seq       uint64 // the log record holding the event
	index     int    // the event's place among the record's events
	hash      string // the hex SHA-256 of the event's stored bytes
	workspace string
	raw       []byte // the event itself, in a row of views written before
}

// encodeRef is the history row of the index-th event of log record seq,
// whose stored bytes hash to hash (hex).
func encodeRef(seq uint64, index int, hash, workspace string) ([]byte, error) {
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64+32+len(workspace))
	b = append(b, refFormat)
	b = binary.AppendUvarint(b, seq)
	b = binary.AppendUvarint(b, uint64(index)) //nolint:gosec // an index is not negative
	sum, err := hex.DecodeString(hash)
	if err != nil || len(sum) != 32 {
		return nil, fmt.Errorf("projections: an event's hash %q is not a hex SHA-256", hash)
	}
	b = append(b, sum...)
	return append(b, workspace...), nil
}

// decodeRef reads a history row.
func decodeRef(v []byte) (eventRef, error) {
	if len(v) > 0 && v[0] == '{' {
		var e struct {
			Workspace string `json:"ws"`
		}
		if err := json.Unmarshal(v, &e); err != nil {
			return eventRef{}, fmt.Errorf("%w: a history row that is not an event: %w", ErrDamaged, err)
		}
		raw := append([]byte(nil), v...)
		return eventRef{hash: (&eventstore.Event{Raw: raw}).Hash(), workspace: e.Workspace, raw: raw}, nil
	}
	if len(v) == 0 || v[0] != refFormat {
		return eventRef{}, fmt.Errorf("%w: a history row of an unknown format", ErrDamaged)
	}
	rest := v[1:]
	seq, n := binary.Uvarint(rest)
	if n <= 0 {
		return eventRef{}, fmt.Errorf("%w: a history row without its record", ErrDamaged)
	}
	rest = rest[n:]
	index, n := binary.Uvarint(rest)
	if n <= 0 || index > eventstore.MaxRecordBytes || len(rest[n:]) < 32 {
		return eventRef{}, fmt.Errorf("%w: a history row without its event's place and hash", ErrDamaged)
	}
	rest = rest[n:]
	return eventRef{seq: seq, index: int(index), hash: hex.EncodeToString(rest[:32]), workspace: string(rest[32:])}, nil //nolint:gosec // bounded above
}

// Records are what a history listing reads events from: the log.
type Records interface {
	Record(ctx context.Context, seq uint64) ([]byte, error)
}

// errNotInRecord reports a history row naming an event its record does not
// hold.
var errNotInRecord = errors.New("the log record holds no such event")

// resolver reads the events history rows name from the log, keeping the
// records it decoded last (an aggregate's events are often in the same few
// records).
type resolver struct {
	ctx     context.Context
	records Records
	recent  map[uint64]*eventstore.Commit
}

// prefetchRows is how many history rows a listing takes at a time, reading
// the records they name at once; it bounds the records a resolver keeps.
const prefetchRows = 8

// prefetch reads at once the records refs name that are not decoded yet
// (each on a goroutine of its own): a listing waits for one round trip to
// the log instead of one a record. A record it cannot read is left for
// event, which reads it again and says why.
func (r *resolver) prefetch(refs []eventRef) {
	var seqs []uint64
	for _, ref := range refs {
		if ref.raw == nil && r.recent[ref.seq] == nil && !slices.Contains(seqs, ref.seq) {
			seqs = append(seqs, ref.seq)
		}
	}
	if len(seqs) < 2 || r.records == nil {
		return
	}
	got := make([]*eventstore.Commit, len(seqs))
	var wg sync.WaitGroup
	for i, seq := range seqs {
		wg.Go(func() {
			if rec, err := r.records.Record(r.ctx, seq); err == nil {
				got[i], _ = eventstore.DecodeCommit(rec)
			}
		})
	}
	wg.Wait()
	clear(r.recent)
	for i, c := range got {
		if c != nil {
			r.recent[seqs[i]] = c
		}
	}
}

// event returns the stored bytes of the event ref names.
func (r *resolver) event(ref eventRef) ([]byte, error) {
	if ref.raw != nil {
		return ref.raw, nil
	}
	c, ok := r.recent[ref.seq]
	if !ok {
		if r.records == nil {
			return nil, fmt.Errorf("projections: log record %d: no log to read the event from", ref.seq)
		}
		rec, err := r.records.Record(r.ctx, ref.seq)
		if err != nil {
			return nil, fmt.Errorf("projections: log record %d: %w", ref.seq, err)
		}
		if c, err = eventstore.DecodeCommit(rec); err != nil {
			return nil, fmt.Errorf("projections: log record %d: %w", ref.seq, err)
		}
		if len(r.recent) >= prefetchRows {
			clear(r.recent)
		}
		r.recent[ref.seq] = c
	}
	if ref.index >= len(c.Events) {
		return nil, fmt.Errorf("projections: log record %d, event %d: %w", ref.seq, ref.index, errNotInRecord)
	}
	return c.Events[ref.index].Raw, nil
}
