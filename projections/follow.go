package projections

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
)

// CatchUp verifies the records of log after the views' last record and
// applies them, up to the log's end when CatchUp was called, and returns the
// new checkpoint. It first checks that the log still holds the views' last
// record, with the same bytes: the log was not truncated below the views.
//
// It returns an error wrapping eventstore.ErrIntegrity (an
// *eventstore.IntegrityError) when the log does not verify from there:
// nothing after the damage is applied. It returns an error wrapping
// ErrDamaged when the views must be rebuilt: they hold records that an
// accepted prefix discarded, or Pebble reports corruption. Other errors come
// from reading the log or applying a record.
func (s *Store) CatchUp(ctx context.Context, log eventstore.Log, key *eventstore.LogKey) (uint64, error) {
	_, err := eventstore.ReadVerified(ctx, log, key, s.LogTip(), s.Apply)
	if errors.Is(err, eventstore.ErrTipDiscarded) {
		err = fmt.Errorf("%w: %w", ErrDamaged, err)
	}
	return s.Checkpoint(), err
}

// CheckLog checks that the log still holds, below the views' last record,
// what the views were built from — which CatchUp, reading on from that
// record, does not see. With whole it reads the log up to that record and
// checks its chain of hashes (eventstore.CheckChain, one read of the log, no
// decoding); without, it asks the log's own counts only
// (eventstore.CheckStat, which JetStream's stale accounting after a damaged
// block can fool). Call it once the views have caught up. It returns an
// *eventstore.IntegrityError, or an error reading the log.
func (s *Store) CheckLog(ctx context.Context, log eventstore.Log, whole bool) error {
	tip := s.LogTip()
	if err := eventstore.CheckStat(ctx, log, tip); err != nil || !whole {
		return err
	}
	discarded, err := s.Discarded()
	if err != nil {
		return err
	}
	return eventstore.CheckChain(ctx, log, tip, discarded)
}

// Follow verifies and applies records as they are appended to log, from the
// checkpoint on, until ctx ends (returning nil), a record does not verify
// (returning an *eventstore.IntegrityError at once: a follower does not wait
// for an acceptance) or fails to apply.
func (s *Store) Follow(ctx context.Context, log eventstore.Log, key *eventstore.LogKey) error {
	v := eventstore.NewLogVerifier(key, s.LogTip())
	err := log.Tail(ctx, s.Checkpoint()+1, func(seq uint64, rec []byte) error {
		if seq <= s.Checkpoint() {
			// Applied meanwhile (the writer applies its own records): go on
			// from what the views verified.
			v = eventstore.NewLogVerifier(key, s.LogTip())
			return nil
		}
		c, err := v.Check(seq, rec)
		switch {
		case errors.Is(err, eventstore.ErrTipDiscarded):
			return fmt.Errorf("%w: %w", ErrDamaged, err)
		case err != nil:
			return err
		case c == nil:
			return v.Err()
		}
		return s.Apply(seq, c)
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// Rebuild builds the views anew in dir from the whole of log, verifying
// every record, and returns the open store. dir should be empty. progress,
// if not nil, is called now and then with the sequence reached and the log's
// last sequence. It returns an error wrapping eventstore.ErrIntegrity if the
// log does not verify (the views in dir then hold its verified prefix only:
// discard them).
func Rebuild(ctx context.Context, log eventstore.Log, key *eventstore.LogKey, dir string, opts Options, progress func(done, total uint64)) (*Store, error) {
	s, err := Open(dir, opts)
	if err != nil {
		return nil, err
	}
	if s.Checkpoint() != 0 {
		_ = s.Close()
		return nil, fmt.Errorf("projections: rebuild into %s: the directory already holds views", dir)
	}
	total, err := log.LastSeq(ctx)
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	_, err = eventstore.ReadVerified(ctx, log, key, eventstore.LogTip{}, func(seq uint64, c *eventstore.Commit) error {
		if err := s.Apply(seq, c); err != nil {
			return err
		}
		if progress != nil && (seq%1000 == 0 || seq == total) {
			progress(seq, total)
		}
		return nil
	})
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// Discarded returns the stretches of log sequences, first and last, that
// acceptances left out of the log (see eventstore.Acceptance), in order.
// Whatever reads the log raw below the checkpoint skips them.
func (s *Store) Discarded() ([][2]uint64, error) {
	var out [][2]uint64
	p := key(pDiscarded, "")
	err := s.scan(p, func(k, v []byte) error {
		if len(k) != len(p)+8 || len(v) != 8 {
			return fmt.Errorf("%w: a discarded stretch %q = %q", ErrDamaged, k, v)
		}
		out = append(out, [2]uint64{binary.BigEndian.Uint64(k[len(p):]), binary.BigEndian.Uint64(v)})
		return nil
	})
	return out, err
}

// CommandsAfter returns "<workspace>/<command id>" of every command whose
// first outcome the views hold from a log record after seq: what would be
// lost if the log ended at seq.
func (s *Store) CommandsAfter(seq uint64) ([]string, error) {
	var out []string
	p := key(pCommand, "")
	err := s.scan(p, func(k, v []byte) error {
		var o CommandOutcome
		if err := json.Unmarshal(v, &o); err != nil {
			return fmt.Errorf("projections: decode %q: %w", k, err)
		}
		if o.Seq > seq {
			ws, ck, _ := strings.Cut(string(k[len(p):]), "/")
			actor, id := domain.SplitCommandKey(ck)
			out = append(out, eventstore.CommandName(ws, actor, id))
		}
		return nil
	})
	return out, err
}
