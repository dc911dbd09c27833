package eventstore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Verification is the result of verifying a whole partition (VerifyLog).
type Verification struct {
	// Tip is the last verified record: the end of the log when Damage is
	// nil, else the end of the verified prefix.
	Tip LogTip
	// Last is the sequence of the last record read.
	Last uint64
	// Records counts the records read; Legacy those of FormatLegacy;
	// Accepted the damaged stretches that acceptances closed.
	Records, Legacy, Accepted int
	// Damage is what does not verify, with the records after the prefix;
	// nil when the whole log verifies.
	Damage *IntegrityError
}

// VerifyLog verifies every record of l from its first, under key, calling
// progress (when not nil) now and then with the sequence reached and the
// log's last sequence. Damage is reported in the result, not as an error: it
// returns an error only if the log cannot be read, or ctx ends.
func VerifyLog(ctx context.Context, l Log, key *LogKey, progress func(seq, last uint64)) (*Verification, error) {
	last, err := l.LastSeq(ctx)
	if err != nil {
		return nil, err
	}
	v := NewLogVerifier(key, LogTip{})
	out := &Verification{}
	lastReport := time.Now()
	err = l.Read(ctx, 1, func(seq uint64, rec []byte) error {
		out.Records++
		out.Last = seq
		c, err := v.Check(seq, rec)
		if err != nil {
			return err
		}
		if c != nil && c.Format == FormatLegacy {
			out.Legacy++
		}
		if progress != nil && (time.Since(lastReport) > 500*time.Millisecond || seq == last) {
			lastReport = time.Now()
			progress(seq, last)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out.Tip, out.Accepted = v.Tip(), v.Accepted()
	var ie *IntegrityError
	if errors.As(v.Err(), &ie) {
		out.Damage = ie
	}
	return out, nil
}

// AppendAcceptance appends to l a record of kind KindAccept that accepts the
// verified prefix ending at prefix: it chains on that record (position one
// above, its hash as Prev), carries a (with AfterSeq, AfterN and UpToSeq
// filled in: UpToSeq is at least last), and is appended expecting last as
// the log's last sequence, so that it lands after whatever the log holds.
// Readers then verify the log through it (see LogVerifier).
//
// It returns the record's sequence and the record. It returns an error
// wrapping ErrConflict if the log's last sequence is not last (something
// was appended meanwhile: verify again), or the append's error.
func AppendAcceptance(ctx context.Context, l Log, key *LogKey, prefix LogTip, last uint64, a Acceptance, writer string, now time.Time) (uint64, *Commit, error) {
	a.AfterSeq, a.AfterN, a.UpToSeq = prefix.Seq, prefix.N, max(a.UpToSeq, last)
	if len(a.Lost) > MaxAcceptLost {
		a.LostMore += len(a.Lost) - MaxAcceptLost
		a.Lost = a.Lost[:MaxAcceptLost]
	}
	c := &Commit{Kind: KindAccept, Epoch: max(prefix.Epoch, 1), Writer: writer, Time: now, N: prefix.N + 1, Prev: prefix.Hash, Accept: &a}
	rec, err := EncodeCommit(c, key)
	if err != nil {
		return 0, nil, err
	}
	seq, err := l.Append(ctx, rec, last)
	if err != nil {
		return 0, nil, fmt.Errorf("eventstore: append the acceptance of the prefix up to %s: %w", prefix, err)
	}
	return seq, c, nil
}
