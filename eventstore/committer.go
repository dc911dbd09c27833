package eventstore

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"
)

// Log keys used by the committer.
const (
	logKeyWriter = "writer"
	logKeyEpoch  = "epoch"
	logKeySeq    = "seq"
	logKeyItems  = "items"
	logKeyEvents = "events"
	logKeyBytes  = "bytes"
	logKeyErr    = "err"
)

// GroupConfig configures a Committer. The zero value gives the defaults
// documented on each field.
type GroupConfig struct {
	// WriterID identifies this writer in the records it appends. Default: a
	// fresh ULID.
	WriterID string
	// MaxBatch is the most requests decided together. Default 1024.
	MaxBatch int
	// QueueSize bounds the requests waiting for the loop; Submit blocks when
	// it is full. Default 4 × MaxBatch.
	QueueSize int
	// MaxRecordBytes is the largest record the committer appends; larger
	// batches are split. At most (and by default) the package's
	// MaxRecordBytes.
	MaxRecordBytes int
	// AppendTimeout bounds one append. The append does not stop when Run's
	// context is cancelled, so a shutdown does not leave its outcome unknown.
	// Default 10 seconds.
	AppendTimeout time.Duration
	// Clock gives the time of records and events. Default time.Now.
	Clock func() time.Time
	// Logger receives the committer's logs. Default: discarded.
	Logger *slog.Logger
	// Chain holds the aggregates' tips as of Resume; the committer
	// verifies the records it catches up on with it and numbers and chains
	// the events it writes. Default: an empty verifier (Resume must be zero).
	Chain *ChainVerifier
	// Resume is the last record that Chain and the Decider's state already
	// reflect, as verified (the zero LogTip: none). Start checks that the log
	// still holds it, then verifies and replays the records after it.
	Resume LogTip
	// LogKey authenticates the records the committer reads and writes.
	// Required.
	LogKey *LogKey
	// OnAppended, when set, is called on the committer's loop after each
	// record it durably appended: the log sequence of the record, the
	// requests it answers (0 for Start's epoch record), its size in bytes,
	// and how long it took from the moment the loop took its batch's first
	// request to the append's acknowledgement (deciding, encoding and the
	// append; for the epoch record, the append alone). It must not block:
	// metrics count with it.
	OnAppended func(seq uint64, requests, bytes int, took time.Duration)
}

func (c GroupConfig) withDefaults() GroupConfig {
	if c.WriterID == "" {
		c.WriterID = ulid.Make().String()
	}
	c.MaxBatch = cmp.Or(c.MaxBatch, 1024)
	c.QueueSize = cmp.Or(c.QueueSize, 4*c.MaxBatch)
	c.MaxRecordBytes = cmp.Or(c.MaxRecordBytes, MaxRecordBytes)
	c.AppendTimeout = cmp.Or(c.AppendTimeout, 10*time.Second)
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c GroupConfig) validate() error {
	var errs []error
	if c.MaxBatch < 1 {
		errs = append(errs, fmt.Errorf("MaxBatch %d < 1", c.MaxBatch))
	}
	if c.QueueSize < 1 {
		errs = append(errs, fmt.Errorf("QueueSize %d < 1", c.QueueSize))
	}
	if c.MaxRecordBytes < 1 || c.MaxRecordBytes > MaxRecordBytes {
		errs = append(errs, fmt.Errorf("MaxRecordBytes %d not in 1..%d", c.MaxRecordBytes, MaxRecordBytes))
	}
	if c.AppendTimeout < 0 {
		errs = append(errs, fmt.Errorf("negative AppendTimeout %v", c.AppendTimeout))
	}
	if c.Chain == nil && c.Resume.Seq != 0 {
		errs = append(errs, fmt.Errorf("resuming after %s without a Chain", c.Resume))
	}
	if c.LogKey == nil {
		errs = append(errs, errors.New("no LogKey"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("eventstore: invalid committer config: %w", err)
	}
	return nil
}

// Decider is the domain side of a Committer: it decides batches of requests
// of type T and answers them.
type Decider[T any] interface {
	// Decide builds the events and command results for a batch of requests
	// against the committed state plus the earlier requests of the same
	// batch, WITHOUT changing committed state: the committer may drop the
	// outcome and decide the halves of the batch again. itemErrs is nil or
	// holds one entry per item; a non-nil entry rejects that item, which
	// contributes nothing to events or results. Events may leave ID, Time,
	// Version and PrevHash empty for the committer to fill.
	Decide(items []T) (events []Event, results []CommandResult, itemErrs []error)

	// Committed reports the outcome of a batch; it must answer every item.
	// itemErrs has one entry per item: Decide's rejections, if any.
	// With err nil and seq > 0 the record c was durably appended at seq (its
	// events now have ID, Time, Version, PrevHash and Raw set): apply it to
	// the committed state. With err nil and seq 0 nothing needed appending
	// (every item was rejected, or produced no events or results). With err
	// non-nil nothing was appended (or, if err wraps ErrUnknownOutcome,
	// perhaps it was): leave the state as it was and answer the items not
	// rejected with err. c is nil unless seq > 0. Committed runs on the
	// committer's loop: it must not block on Submit.
	Committed(items []T, c *Commit, seq uint64, itemErrs []error, err error)
}

// Replayer is implemented by a Decider that catches up on records appended
// by earlier writers: Start calls Replay for each record after
// GroupConfig.Resume, in order, after verifying the log's chain and the
// aggregates' hash chains. An error aborts Start.
type Replayer interface {
	Replay(seq uint64, c *Commit) error
}

// Committer is the single writer's group-commit loop. Requests submitted while
// an append is in flight are decided together and appended as one record, so
// batches grow with load by themselves; under light load a request is
// committed alone at once. Exactly one append is in flight at a time.
//
// Use: NewCommitter, Start (catch up and fence older writers), then Run in a
// goroutine and Submit from any number of goroutines. A Committer is used for
// one epoch: once Run returns, it is stopped for good.
type Committer[T any] struct {
	log   Log
	d     Decider[T]
	cfg   GroupConfig
	chain *ChainVerifier

	queue     chan T
	stopping  chan struct{}
	closeOnce sync.Once
	mu        sync.RWMutex // held for writing once to set stopped
	stopped   bool

	started atomic.Bool
	running atomic.Bool
	lastSeq atomic.Uint64
	epoch   atomic.Uint64
	tip     LogTip // the last record appended or caught up on; Start's and then the loop's

	entropy *ulid.MonotonicEntropy // used by the loop only
	lastMs  uint64
	// next, when held, is the item taken from the queue that did not fit
	// in the last batch: it starts the next one (the loop's only).
	next T
	held bool
}

// Sized is implemented by requests that can estimate the bytes they add to
// a record. The commit loop stops filling a batch before the estimates of
// its items pass MaxRecordBytes — the item that would pass it starts the
// next batch — instead of deciding a batch of large items only to find its
// record too large, and deciding its halves again, and theirs. A batch whose
// record is too large all the same is split as it is without estimates.
type Sized interface {
	RecordBytes() int
}

// recordBytes returns item's estimate of its bytes in a record, 0 without one.
func recordBytes[T any](item T) int {
	if s, ok := any(item).(Sized); ok {
		return s.RecordBytes()
	}
	return 0
}

// NewCommitter returns a committer appending to log the decisions of d. The
// configuration is checked by Start.
func NewCommitter[T any](log Log, d Decider[T], cfg GroupConfig) *Committer[T] {
	cfg = cfg.withDefaults()
	chain := cfg.Chain
	if chain == nil {
		chain = NewChainVerifier()
	}
	return &Committer[T]{
		log:      log,
		d:        d,
		cfg:      cfg,
		chain:    chain,
		queue:    make(chan T, max(cfg.QueueSize, 1)),
		stopping: make(chan struct{}),
		entropy:  ulid.Monotonic(rand.Reader, 0),
	}
}

// LastSeq returns the sequence of the last record this committer appended
// (its epoch record after Start), or 0 before Start.
func (c *Committer[T]) LastSeq() uint64 { return c.lastSeq.Load() }

// Epoch returns this committer's epoch, or 0 before Start.
func (c *Committer[T]) Epoch() uint64 { return c.epoch.Load() }

// Start catches up and takes over the log. It checks that the log still holds
// the record GroupConfig.Resume names, verifies the records after it (the
// log's chain and MACs, and the aggregates' hash chains) and passes them to
// the Decider if it is a Replayer, following the highest epoch, which is the
// last record's since epochs never decrease along the log. The cost is one
// read from the Resume record on. It then appends an epoch record one above,
// chained on the last record and expecting its sequence: from then on any
// older writer's append fails.
//
// Start returns nil if the committer had already started. It returns an
// error for an invalid configuration; an *IntegrityError (wrapping
// ErrIntegrity) for a log that does not verify; a *ChainError for an event
// that breaks its aggregate's chain; an error wrapping ErrTipDiscarded; a
// failing Replay's error; an error wrapping ErrFenced and ErrConflict if
// another writer appended meanwhile; ErrStopped after Run ended; or an error
// wrapping ErrUnknownOutcome if the epoch append's outcome is unknown. After
// an error the committer is stopped and queued requests are answered with
// ErrStopped.
func (c *Committer[T]) Start(ctx context.Context) (err error) {
	if c.started.Load() {
		return nil
	}
	if c.isStopped() {
		return ErrStopped
	}
	defer func() {
		if err != nil {
			c.shutdown()
		}
	}()
	if err := c.cfg.validate(); err != nil {
		return err
	}
	tip, err := c.catchUp(ctx)
	if err != nil {
		return err
	}
	epoch := tip.Epoch + 1
	cm := &Commit{Kind: KindEpoch, Epoch: epoch, Writer: c.cfg.WriterID, Time: c.cfg.Clock(), N: tip.N + 1, Prev: tip.Hash}
	rec, err := EncodeCommit(cm, c.cfg.LogKey)
	if err != nil {
		return err
	}
	began := time.Now()
	seq, err := c.append(ctx, rec, tip.Seq)
	switch {
	case errors.Is(err, ErrConflict):
		return fmt.Errorf("%w: epoch %d after sequence %d: %w", ErrFenced, epoch, tip.Seq, err)
	case err != nil:
		return unknownOutcome(err)
	}
	if c.cfg.OnAppended != nil {
		c.cfg.OnAppended(seq, 0, len(rec), time.Since(began))
	}
	c.tip = tip.Next(seq, cm)
	c.lastSeq.Store(seq)
	c.epoch.Store(epoch)
	c.started.Store(true)
	c.cfg.Logger.Info("eventstore: writer started", logKeyWriter, c.cfg.WriterID, logKeyEpoch, epoch, logKeySeq, seq)
	return nil
}

// catchUp verifies and replays the records after Resume and returns the
// last one.
func (c *Committer[T]) catchUp(ctx context.Context) (LogTip, error) {
	replayer, _ := c.d.(Replayer)
	return ReadVerified(ctx, c.log, c.cfg.LogKey, c.cfg.Resume, func(seq uint64, cm *Commit) error {
		for i := range cm.Events {
			if err := c.chain.Check(&cm.Events[i]); err != nil {
				return fmt.Errorf("eventstore: record %d: %w", seq, err)
			}
		}
		if replayer != nil {
			if err := replayer.Replay(seq, cm); err != nil {
				return fmt.Errorf("eventstore: replay record %d: %w", seq, err)
			}
		}
		return nil
	})
}

// Submit queues item for the next batch. It blocks only while the queue is
// full. It returns nil once the item is queued (the Decider's Committed will
// answer it exactly once), ErrStopped if the committer has stopped, or ctx's
// error.
func (c *Committer[T]) Submit(ctx context.Context, item T) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.stopped {
		return ErrStopped
	}
	select {
	case c.queue <- item:
		return nil
	case <-c.stopping:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run is the commit loop: it waits for at least one request, takes every
// queued one (up to MaxBatch, and while the estimates of Sized ones fit in
// a record), decides them, appends one record expecting the
// last sequence it appended, and reports the outcome to the Decider; then
// again. When it returns, the committer is stopped and queued requests are
// answered with ErrStopped.
//
// Run returns nil when ctx is done. It returns an error wrapping ErrFenced
// when an append fails its expectation (a newer writer took over: step down),
// an error wrapping ErrUnknownOutcome when an append's outcome is unknown
// (re-read the log before writing again), ErrStopped if it already ran, or an
// error if Start has not succeeded.
func (c *Committer[T]) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrStopped
	}
	defer c.shutdown()
	if c.isStopped() {
		return ErrStopped
	}
	if !c.started.Load() {
		return errors.New("eventstore: committer Run before a successful Start")
	}
	for {
		if ctx.Err() != nil { // stop before taking more work
			return nil
		}
		first := c.next
		if !c.held {
			select {
			case <-ctx.Done():
				return nil
			case first = <-c.queue:
			}
		}
		var none T
		c.next, c.held = none, false
		batch := append(make([]T, 0, min(len(c.queue)+1, c.cfg.MaxBatch)), first)
		size := recordBytes(first)
		var began time.Time // when the batch's first request was taken: OnAppended's start
		if c.cfg.OnAppended != nil {
			began = time.Now()
		}
	fill:
		for len(batch) < c.cfg.MaxBatch {
			select {
			case item := <-c.queue:
				if size += recordBytes(item); size > c.cfg.MaxRecordBytes {
					c.next, c.held = item, true
					break fill
				}
				batch = append(batch, item)
			default:
				break fill
			}
		}
		if err := c.commit(ctx, batch, began); err != nil {
			c.cfg.Logger.Error("eventstore: writer stopped", logKeyWriter, c.cfg.WriterID, logKeyEpoch, c.Epoch(), logKeyErr, err)
			return err
		}
	}
}

func (c *Committer[T]) isStopped() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.stopped
}

// shutdown stops accepting requests and answers the queued ones.
func (c *Committer[T]) shutdown() {
	c.closeOnce.Do(func() { close(c.stopping) })
	c.mu.Lock() // waits for Submits in flight, which see stopping
	c.stopped = true
	c.mu.Unlock()
	var left []T
	if c.held {
		left, c.held = append(left, c.next), false
	}
	for {
		select {
		case item := <-c.queue:
			left = append(left, item)
		default:
			if len(left) > 0 {
				c.d.Committed(left, nil, 0, make([]error, len(left)), ErrStopped)
			}
			return
		}
	}
}

// append appends rec with a context that survives the cancellation of ctx
// (bounded by AppendTimeout), so that stopping does not make an outcome
// unknown.
func (c *Committer[T]) append(ctx context.Context, rec []byte, expectedLast uint64) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.AppendTimeout)
	defer cancel()
	return c.log.Append(ctx, rec, expectedLast)
}

func unknownOutcome(err error) error {
	if errors.Is(err, ErrUnknownOutcome) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
}
