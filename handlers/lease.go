package handlers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// DefaultLeaseTTL is the writer lease's default time to live: the holder
// renews it every quarter of it, a standby takes it over once it has seen
// no renewal for that long, so a writer that dies is replaced about this
// long after its last renewal.
const DefaultLeaseTTL = 2 * time.Second

// lease is the writer lease: a key in a KV bucket whose entries expire after
// the TTL unless renewed. It only chooses which replica writes; safety comes
// from the log's epoch fencing, so two holders can never both commit.
//
// The holder counts its lease from the moment it sent its last successful
// renewal (or its acquisition); a standby counts it from the moment it saw
// that revision, which is later, and takes over only by a compare-and-set
// on the revision it saw. So once a standby holds the lease, the deposed
// holder's own clock already says its lease has run out: it refuses every
// command from then on (valid), and steps down (lost) at the same moment,
// renewal or no renewal — also after a pause (SIGSTOP), which the monotonic
// clock counts.
type lease struct {
	kv  jetstream.KeyValue
	key string
	me  string
	ttl time.Duration
	rev uint64

	// base and until: the lease is valid while time.Since(base) < until.
	base  time.Time
	until atomic.Int64
	lost  chan struct{}
	stop  context.CancelFunc
	done  chan struct{}

	// standby is told, while another replica holds the lease, whether that
	// writer looks gone (no renewal seen for half the TTL, or no lease):
	// the service then answers commands "unavailable" until a writer serves.
	standby func(writerGone bool)
	// paused, when set, stops the renewals (tests: a writer that cannot
	// reach the KV bucket, or is stopped past its lease).
	paused *atomic.Bool
	logger *slog.Logger
}

func newLease(ctx context.Context, js jetstream.JetStream, cfg Config) (*lease, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: cfg.Prefix + "-writer", Description: "dwr writer lease, one key per log partition",
		TTL: cfg.LeaseTTL, History: 1, Replicas: cfg.Replicas, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("handlers: writer lease bucket: %w", err)
	}
	return &lease{kv: kv, key: "partition-" + cfg.Partition, me: cfg.WriterID, ttl: cfg.LeaseTTL,
		base: time.Now(), paused: new(atomic.Bool), logger: cfg.Logger}, nil
}

// renewEvery is how often the holder renews its lease.
func (l *lease) renewEvery() time.Duration { return l.ttl / 4 }

// valid reports whether this replica holds the lease now, by its own clock.
func (l *lease) valid() bool { return int64(time.Since(l.base)) < l.until.Load() }

// extend makes the lease valid until ttl after sent.
func (l *lease) extend(sent time.Time) { l.until.Store(int64(sent.Sub(l.base) + l.ttl)) }

// acquire returns once this replica holds the lease (re-taking its own
// lease after a restart at once), or an error when the lease's bucket could
// not be read for a TTL, or ctx's. While another holds it, it reads the key
// every TTL/8 and takes it over by compare-and-set once it has seen no
// renewal for the TTL, or as soon as it finds the key deleted (a writer
// that stopped released it) or gone. (It polls rather than watches: a
// watch's consumer can stall through a node's failure without a word, and
// a standby must never wait on it.)
func (l *lease) acquire(ctx context.Context) error {
	var (
		rev    uint64 // the revision last seen; 0: no lease
		holder string
		seenAt = time.Now()
		okAt   = time.Now() // when the bucket last answered
	)
	every := max(l.ttl/8, 10*time.Millisecond)
	for {
		gctx, cancel := context.WithTimeout(ctx, max(l.ttl/2, 100*time.Millisecond))
		e, err := l.kv.Get(gctx, l.key)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, jetstream.ErrKeyNotFound):
			rev, holder, okAt = 0, "", time.Now()
		case err != nil:
			if time.Since(okAt) > l.ttl {
				return err
			}
		case e.Revision() != rev:
			rev, holder, seenAt, okAt = e.Revision(), string(e.Value()), time.Now(), time.Now()
		default:
			okAt = time.Now()
		}
		if err == nil || errors.Is(err, jetstream.ErrKeyNotFound) {
			sent := time.Now()
			var ok bool
			var terr error
			switch {
			case rev == 0:
				ok, terr = l.take(ctx, 0)
			case holder == l.me || time.Since(seenAt) >= l.ttl:
				ok, terr = l.take(ctx, rev)
			}
			if terr != nil {
				return terr
			}
			if ok {
				l.hold(ctx, sent)
				if holder != "" && holder != l.me {
					l.logger.Info("handlers: writer lease taken over", "from", holder,
						"renewal_unseen_for", time.Since(seenAt).Round(time.Millisecond))
				}
				return nil
			}
			if l.standby != nil {
				l.standby(rev == 0 || time.Since(seenAt) >= l.ttl/2)
			}
		}
		if !sleepCtx(ctx, every) {
			return ctx.Err()
		}
	}
}

// take tries to take the lease: create it (rev 0) or replace revision rev.
// It returns false when another replica was first, or renewed it.
func (l *lease) take(ctx context.Context, rev uint64) (bool, error) {
	tctx, cancel := context.WithTimeout(ctx, l.ttl/2)
	defer cancel()
	var err error
	if rev != 0 {
		rev, err = l.kv.Update(tctx, l.key, []byte(l.me), rev)
		if errors.Is(err, jetstream.ErrKeyExists) {
			// Gone (the bucket's TTL expired it), or renewed since.
			if _, gerr := l.kv.Get(tctx, l.key); errors.Is(gerr, jetstream.ErrKeyNotFound) {
				rev = 0
			}
		}
	}
	if rev == 0 {
		rev, err = l.kv.Create(tctx, l.key, []byte(l.me))
	}
	switch {
	case err == nil:
		l.rev = rev
		return true, nil
	case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyNotFound):
		return false, nil // the next read shows what is there now
	case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		return false, nil
	}
	return false, err
}

// hold starts renewing a lease taken by a request sent at sent.
func (l *lease) hold(ctx context.Context, sent time.Time) {
	l.extend(sent)
	lctx, cancel := context.WithCancel(ctx)
	l.lost, l.stop, l.done = make(chan struct{}), cancel, make(chan struct{})
	go l.renew(lctx)
}

// renew keeps the lease alive; it closes lost as soon as the lease runs out
// by this replica's clock, another took it, or ctx ends. A renewal that gets
// no answer is tried again at once, each try bounded by a renewal's period,
// so that one answer lost with a node (the bucket's leader going away) does
// not take the whole lease with it; and a renewal that landed though its
// answer was lost is recognised as this replica's own.
func (l *lease) renew(ctx context.Context) {
	defer close(l.done)
	defer func() { l.until.Store(0); close(l.lost) }()
	wait := l.renewEvery()
	var pending time.Time // when the first renewal not answered since the last one was sent
	for {
		left := time.Duration(l.until.Load()) - time.Since(l.base)
		if left <= 0 {
			return
		}
		// Wake at the next renewal, or when the lease runs out.
		expiry := time.NewTimer(left)
		next := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			expiry.Stop()
			next.Stop()
			return
		case <-expiry.C:
			next.Stop()
			return
		case <-next.C:
			expiry.Stop()
		}
		if l.paused.Load() {
			continue
		}
		sent := time.Now()
		if pending.IsZero() {
			pending = sent
		}
		left = time.Duration(l.until.Load()) - sent.Sub(l.base)
		if left <= 0 {
			return
		}
		rctx, cancel := context.WithTimeout(ctx, min(left, l.renewEvery()))
		rev, err := l.kv.Update(rctx, l.key, []byte(l.me), l.rev)
		if errors.Is(err, jetstream.ErrKeyExists) {
			// Another renewed it — or an earlier renewal of this replica
			// landed and its answer was lost: then the key holds this
			// replica's name, at a later revision. The lease is counted
			// from the first renewal sent since the last answer, which is
			// no later than the one that landed.
			if e, gerr := l.kv.Get(rctx, l.key); gerr == nil && string(e.Value()) == l.me && e.Revision() > l.rev {
				rev, err, sent = e.Revision(), nil, pending
			}
		}
		cancel()
		switch {
		case err == nil:
			l.rev = rev
			l.extend(sent)
			pending, wait = time.Time{}, l.renewEvery()
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyNotFound):
			return // another holds it
		default:
			wait = 20 * time.Millisecond // no answer: try again at once
		}
	}
}

// release stops renewing and gives the lease up, so a standby can take it
// at once; if that fails the key still expires after its TTL.
func (l *lease) release() {
	if l.stop == nil {
		return
	}
	l.stop()
	<-l.done
	l.stop, l.done = nil, nil
	l.until.Store(0)
	ctx, cancel := context.WithTimeout(context.Background(), l.ttl/2)
	defer cancel()
	_ = l.kv.Delete(ctx, l.key, jetstream.LastRevision(l.rev))
}
