package eventstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"
)

// commit decides and appends one batch, splitting it in halves while its
// record is too large. It returns an error only when the committer must stop
// (fenced, or an append of unknown outcome); every item has been answered.
// began is when the loop took the batch's first request (OnAppended's
// start; zero without it).
func (c *Committer[T]) commit(ctx context.Context, items []T, began time.Time) error {
	events, results, itemErrs := c.d.Decide(items)
	if len(itemErrs) != len(items) {
		itemErrs = make([]error, len(items))
	}
	if len(events) == 0 && len(results) == 0 {
		c.d.Committed(items, nil, 0, itemErrs, nil)
		return nil
	}
	now := c.cfg.Clock().UTC()
	cm := &Commit{Kind: KindEvents, Epoch: c.Epoch(), Writer: c.cfg.WriterID, Time: now, Events: events, Results: results,
		N: c.tip.N + 1, Prev: c.tip.Hash}
	tx := c.chain.Begin()
	for i := range cm.Events {
		e := &cm.Events[i]
		if e.ID == "" {
			e.ID = c.newID(now)
		}
		if e.Time.IsZero() {
			e.Time = now
		}
		if err := tx.Link(e); err != nil {
			c.d.Committed(items, nil, 0, itemErrs, fmt.Errorf("eventstore: batch of %d: %w", len(items), err))
			return nil
		}
	}
	rec, err := encodeCommit(cm, c.cfg.LogKey, true) // Link encoded the events
	if err == nil && len(rec) > c.cfg.MaxRecordBytes {
		err = fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(rec), c.cfg.MaxRecordBytes)
	}
	if err != nil {
		if errors.Is(err, ErrTooLarge) && len(items) > 1 {
			return c.split(ctx, items, began)
		}
		c.d.Committed(items, nil, 0, itemErrs, err)
		return nil
	}

	seq, err := c.append(ctx, rec, c.LastSeq())
	switch {
	case err == nil:
		tx.Commit()
		c.tip = c.tip.Next(seq, cm)
		c.lastSeq.Store(seq)
		c.cfg.Logger.Debug("eventstore: committed", logKeySeq, seq, logKeyItems, len(items), logKeyEvents, len(events), logKeyBytes, len(rec))
		if c.cfg.OnAppended != nil {
			c.cfg.OnAppended(seq, len(items), len(rec), time.Since(began))
		}
		c.d.Committed(items, cm, seq, itemErrs, nil)
		return nil
	case errors.Is(err, ErrConflict):
		err = fmt.Errorf("%w: epoch %d: %w", ErrFenced, c.Epoch(), err)
	case errors.Is(err, ErrTooLarge), errors.Is(err, ErrStorageFull):
		// The log refused what fit our own limit, or had no room for it:
		// nothing landed, go on (room made later lets the next one in).
		c.d.Committed(items, nil, 0, itemErrs, err)
		return nil
	default:
		err = unknownOutcome(err)
	}
	c.d.Committed(items, nil, 0, itemErrs, err)
	return err
}

// split commits the two halves of items one after the other. If the first
// half stops the committer, the second is answered with ErrStopped.
func (c *Committer[T]) split(ctx context.Context, items []T, began time.Time) error {
	h := len(items) / 2
	c.cfg.Logger.Debug("eventstore: splitting a batch too large for one record", logKeyItems, len(items))
	if err := c.commit(ctx, items[:h], began); err != nil {
		c.d.Committed(items[h:], nil, 0, make([]error, len(items)-h), ErrStopped)
		return err
	}
	return c.commit(ctx, items[h:], began)
}

// newID returns a ULID greater than every one this committer made before,
// even if the clock goes backwards.
func (c *Committer[T]) newID(now time.Time) string {
	ms := max(ulid.Timestamp(now), c.lastMs)
	id, err := ulid.New(ms, c.entropy)
	if err != nil { // entropy overflow within one millisecond: move on
		ms++
		id = ulid.MustNew(ms, c.entropy)
	}
	c.lastMs = ms
	return id.String()
}
