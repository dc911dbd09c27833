package handlers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// lease is the writer lease: a key in a KV bucket whose entries expire after
// the TTL unless renewed. It only chooses which replica writes; safety comes
// from the log's epoch fencing, so two holders can never both commit.
type lease struct {
	kv      jetstream.KeyValue
	key     string
	me      string
	ttl     time.Duration
	rev     uint64
	lost    chan struct{}
	stop    context.CancelFunc
	standby func()
}

func newLease(ctx context.Context, js jetstream.JetStream, cfg Config) (*lease, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: cfg.Prefix + "-writer", Description: "dwr writer lease, one key per log partition",
		TTL: cfg.LeaseTTL, History: 1, Replicas: cfg.Replicas, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("handlers: writer lease bucket: %w", err)
	}
	return &lease{kv: kv, key: "partition-" + cfg.Partition, me: cfg.WriterID, ttl: cfg.LeaseTTL}, nil
}

// acquire returns true once this replica holds the lease (re-taking its own
// lease after a restart at once), false when another holds it now, or ctx's
// error.
func (l *lease) acquire(ctx context.Context) (bool, error) {
	for {
		ok, err := l.try(ctx)
		if err != nil {
			return false, err
		}
		if ok {
			lctx, cancel := context.WithCancel(ctx)
			l.lost, l.stop = make(chan struct{}), cancel
			go l.renew(lctx)
			return true, nil
		}
		if l.standby != nil {
			l.standby()
		}
		if !sleepCtx(ctx, l.ttl/4) {
			return false, ctx.Err()
		}
	}
}

func (l *lease) try(ctx context.Context) (bool, error) {
	e, err := l.kv.Get(ctx, l.key)
	var rev uint64
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		rev, err = l.kv.Create(ctx, l.key, []byte(l.me))
	case err != nil:
		return false, err
	case string(e.Value()) == l.me:
		rev, err = l.kv.Update(ctx, l.key, []byte(l.me), e.Revision())
	default:
		return false, nil
	}
	if errors.Is(err, jetstream.ErrKeyExists) { // another took it first
		return false, nil
	}
	if err != nil {
		return false, err
	}
	l.rev = rev
	return true, nil
}

// renew keeps the lease alive; it closes lost when it cannot.
func (l *lease) renew(ctx context.Context) {
	defer close(l.lost)
	last := time.Now()
	for sleepCtx(ctx, l.ttl/3) {
		rctx, cancel := context.WithTimeout(ctx, l.ttl/3)
		rev, err := l.kv.Update(rctx, l.key, []byte(l.me), l.rev)
		cancel()
		switch {
		case err == nil:
			l.rev, last = rev, time.Now()
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyNotFound):
			return
		case time.Since(last) > l.ttl:
			return
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
	<-l.lost
	l.stop = nil
	ctx, cancel := context.WithTimeout(context.Background(), l.ttl/3)
	defer cancel()
	_ = l.kv.Delete(ctx, l.key, jetstream.LastRevision(l.rev))
}
