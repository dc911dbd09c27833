package projections

import (
	"context"
	"fmt"

	"github.com/dwr-run/dwr/eventstore"
)

func (s *Store) applyRaw(seq uint64, rec []byte) error {
	if seq <= s.Checkpoint() {
		return nil // applied already (the writer applies its own records)
	}
	c, err := eventstore.DecodeCommit(rec)
	if err != nil {
		return fmt.Errorf("projections: record %d: %w", seq, err)
	}
	return s.Apply(seq, c)
}

// CatchUp applies every record of log after the checkpoint, up to the log's
// end when CatchUp was called, and returns the new checkpoint.
func (s *Store) CatchUp(ctx context.Context, log eventstore.Log) (uint64, error) {
	if err := log.Read(ctx, s.Checkpoint()+1, s.applyRaw); err != nil {
		return s.Checkpoint(), err
	}
	return s.Checkpoint(), nil
}

// Follow applies records as they are appended to log, from the checkpoint
// on, until ctx ends (returning nil) or a record fails to apply.
func (s *Store) Follow(ctx context.Context, log eventstore.Log) error {
	err := log.Tail(ctx, s.Checkpoint()+1, s.applyRaw)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// Rebuild builds the views anew in dir from the whole of log and returns the
// open store. dir should be empty. progress, if not nil, is called now and then
// with the sequence reached and the log's last sequence.
func Rebuild(ctx context.Context, log eventstore.Log, dir string, opts Options, progress func(done, total uint64)) (*Store, error) {
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
	err = log.Read(ctx, 1, func(seq uint64, rec []byte) error {
		if err := s.applyRaw(seq, rec); err != nil {
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
