package eventstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/eventstore/logtest"
)

const waitTimeout = 10 * time.Second

var errRejected = errors.New("rejected")

// req is a test command: add one event to counter agg.
type req struct {
	id     string
	agg    string
	pad    int  // payload bytes
	reject bool // Decide rejects it
	noop   bool // accepted, but appends nothing
	// estimate, when set, is its eventstore.Sized estimate of its bytes in
	// a record.
	estimate int
	done     chan outcome
}

func (r *req) RecordBytes() int { return r.estimate }

type outcome struct {
	seq uint64
	err error
}

func newReq(id, agg string) *req {
	return &req{id: id, agg: agg, done: make(chan outcome, 1)}
}

func (r *req) wait(t *testing.T) outcome {
	t.Helper()
	select {
	case o := <-r.done:
		return o
	case <-time.After(waitTimeout):
		require.FailNow(t, "request not answered", r.id)
		return outcome{}
	}
}

// counters is a Decider over counters; committed state is the number of
// committed events per counter.
type counters struct {
	mu       sync.Mutex
	count    map[string]int
	replayed []uint64
	answered atomic.Int64
	decided  atomic.Int64 // requests decided, each time they are
}

func newCounters() *counters { return &counters{count: make(map[string]int)} }

func (d *counters) Decide(items []*req) ([]eventstore.Event, []eventstore.CommandResult, []error) {
	var evs []eventstore.Event
	var res []eventstore.CommandResult
	errs := make([]error, len(items))
	d.decided.Add(int64(len(items)))
	for i, r := range items {
		switch {
		case r.reject:
			errs[i] = errRejected
		case r.noop:
		default:
			evs = append(evs, eventstore.Event{
				Type: "counter.incremented", SchemaVersion: 1, Workspace: "ws",
				AggregateType: "counter", AggregateID: r.agg, CommandID: r.id,
				Data: json.RawMessage(fmt.Sprintf(`{"pad":%q}`, strings.Repeat("x", r.pad))),
			})
			res = append(res, eventstore.CommandResult{Workspace: "ws", CommandID: r.id, Reply: json.RawMessage(`{"ok":true}`)})
		}
	}
	return evs, res, errs
}

func (d *counters) Committed(items []*req, c *eventstore.Commit, seq uint64, itemErrs []error, err error) {
	if err == nil && seq > 0 {
		d.apply(c)
	}
	for i, r := range items {
		o := outcome{seq: seq, err: err}
		if itemErrs[i] != nil {
			o = outcome{err: itemErrs[i]}
		}
		d.answered.Add(1) // before the answer: a test that saw every answer sees every count
		r.done <- o
	}
}

func (d *counters) Replay(seq uint64, c *eventstore.Commit) error {
	d.mu.Lock()
	d.replayed = append(d.replayed, seq)
	d.mu.Unlock()
	d.apply(c)
	return nil
}

func (d *counters) apply(c *eventstore.Commit) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, e := range c.Events {
		d.count[e.AggregateID]++
	}
}

// hookLog wraps a Log to count appends and to hold or fail them.
type hookLog struct {
	eventstore.Log
	appends atomic.Int64
	hold    atomic.Pointer[gate]
	fail    atomic.Pointer[error]
}

// gate holds the next append: entered is closed once it arrives, and it
// proceeds when release is closed.
type gate struct{ entered, release chan struct{} }

func (l *hookLog) Append(ctx context.Context, rec []byte, expectedLast uint64) (uint64, error) {
	if g := l.hold.Swap(nil); g != nil {
		close(g.entered)
		<-g.release
	}
	if err := l.fail.Load(); err != nil {
		return 0, *err
	}
	l.appends.Add(1)
	return l.Log.Append(ctx, rec, expectedLast)
}

// holdNext arms a gate for the next append.
func (l *hookLog) holdNext() *gate {
	g := &gate{entered: make(chan struct{}), release: make(chan struct{})}
	l.hold.Store(g)
	return g
}

func (g *gate) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(waitTimeout):
		require.FailNow(t, "append never started")
	}
}

// forEachLog runs fn on the memory log and on a JetStream log.
func forEachLog(t *testing.T, fn func(t *testing.T, newLog func(t *testing.T) eventstore.Log)) {
	t.Run("memory", func(t *testing.T) {
		fn(t, func(*testing.T) eventstore.Log { return eventstore.NewMemoryLog() })
	})
	t.Run("jetstream", func(t *testing.T) {
		f := setupJetStream(t)
		fn(t, func(t *testing.T) eventstore.Log { return f.newLog(t) })
	})
}

type runner struct {
	c      *eventstore.Committer[*req]
	cancel context.CancelFunc
	done   chan error
}

// startCommitter starts c and runs it until the test ends.
func startCommitter(t testing.TB, l eventstore.Log, d eventstore.Decider[*req], cfg eventstore.GroupConfig) *runner {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	if cfg.LogKey == nil {
		cfg.LogKey = testKey
	}
	c := eventstore.NewCommitter(l, d, cfg)
	require.NoError(t, c.Start(t.Context()))
	ctx, cancel := context.WithCancel(context.Background())
	r := &runner{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-r.done; err != nil {
			t.Logf("committer stopped: %v", err)
		}
	})
	return r
}

// submit submits each of reqs, which the committer must take.
func (r *runner) submit(t *testing.T, reqs ...*req) {
	t.Helper()
	for _, q := range reqs {
		require.NoError(t, r.c.Submit(t.Context(), q))
	}
}

// appending holds l's next append, submits lead and returns once the
// committer is appending lead's record, held there until the gate's
// release is closed: what is submitted meanwhile queues behind it.
func (r *runner) appending(t *testing.T, l *hookLog, lead *req) *gate {
	t.Helper()
	g := l.holdNext()
	r.submit(t, lead)
	g.waitEntered(t)
	return g
}

// submitBig submits n requests to counter "a" of pad bytes each, each
// estimating its bytes in a record at estimate (0: no estimate).
func (r *runner) submitBig(t *testing.T, n, pad, estimate int) []*req {
	t.Helper()
	reqs := make([]*req, n)
	for i := range reqs {
		reqs[i] = newReq(fmt.Sprintf("big%d", i), "a")
		reqs[i].pad, reqs[i].estimate = pad, estimate
		require.NoError(t, r.c.Submit(t.Context(), reqs[i]))
	}
	return reqs
}

func (r *runner) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // keep it for cleanup
		return err
	case <-time.After(waitTimeout):
		require.FailNow(t, "Run did not return")
		return nil
	}
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// readLog verifies the log's chain and every aggregate's chain, and returns
// every record.
func readLog(t *testing.T, l eventstore.Log) (seqs []uint64, commits []*eventstore.Commit) {
	t.Helper()
	v := eventstore.NewChainVerifier()
	_, err := eventstore.ReadVerified(t.Context(), l, testKey, eventstore.LogTip{}, func(seq uint64, c *eventstore.Commit) error {
		for i := range c.Events {
			if err := v.Check(&c.Events[i]); err != nil {
				return err
			}
		}
		seqs, commits = append(seqs, seq), append(commits, c)
		return nil
	})
	require.NoError(t, err)
	return seqs, commits
}

func TestCommitterBatchesWhileAppending(t *testing.T) {
	forEachLog(t, func(t *testing.T, newLog func(t *testing.T) eventstore.Log) {
		l := &hookLog{Log: newLog(t)}
		r := startCommitter(t, l, newCounters(), eventstore.GroupConfig{})
		base := l.appends.Load()

		first := newReq("c0", "a")
		g := r.appending(t, l, first)

		const n = 100
		reqs := make([]*req, n)
		for i := range reqs {
			reqs[i] = newReq(fmt.Sprintf("c%d", i+1), fmt.Sprintf("agg%d", i%7))
			require.NoError(t, r.c.Submit(t.Context(), reqs[i]))
		}
		close(g.release)

		o := first.wait(t)
		require.NoError(t, o.err)
		second := reqs[0].wait(t)
		require.NoError(t, second.err)
		require.Greater(t, second.seq, o.seq)
		for _, q := range reqs[1:] {
			require.Equal(t, second, q.wait(t), "requests queued behind one append share the next")
		}
		require.Equal(t, int64(2), l.appends.Load()-base)
		require.Equal(t, second.seq, r.c.LastSeq())

		_, commits := readLog(t, l)
		require.Len(t, commits, 3, "epoch, the lone request, the batch")
		require.Equal(t, eventstore.KindEpoch, commits[0].Kind)
		require.Len(t, commits[2].Events, n)
		require.Len(t, commits[2].Results, n)
	})
}

func TestCommitterConcurrentSubmitters(t *testing.T) {
	forEachLog(t, func(t *testing.T, newLog func(t *testing.T) eventstore.Log) {
		l := &hookLog{Log: newLog(t)}
		d := newCounters()
		r := startCommitter(t, l, d, eventstore.GroupConfig{MaxBatch: 64})
		const workers, each = 32, 20
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := range each {
					q := newReq(fmt.Sprintf("w%d-%d", w, i), fmt.Sprintf("agg%d", (w+i)%5))
					if err := r.c.Submit(context.Background(), q); err != nil {
						t.Errorf("submit: %v", err)
						return
					}
					if o := <-q.done; o.err != nil || o.seq == 0 {
						t.Errorf("request %s: %+v", q.id, o)
					}
				}
			})
		}
		wg.Wait()
		require.Equal(t, int64(workers*each), d.answered.Load())

		_, commits := readLog(t, l)
		events := 0
		for _, c := range commits[1:] {
			events += len(c.Events)
			require.LessOrEqual(t, len(c.Events), 64)
		}
		require.Equal(t, workers*each, events)
		t.Logf("%d requests in %d appends", workers*each, len(commits)-1)
	})
}

func TestCommitterRejects(t *testing.T) {
	forEachLog(t, func(t *testing.T, newLog func(t *testing.T) eventstore.Log) {
		l := &hookLog{Log: newLog(t)}
		r := startCommitter(t, l, newCounters(), eventstore.GroupConfig{})

		lead := newReq("lead", "a")
		g := r.appending(t, l, lead)
		ok1, bad, ok2 := newReq("ok1", "a"), newReq("bad", "a"), newReq("ok2", "b")
		bad.reject = true
		r.submit(t, ok1, bad, ok2)
		close(g.release)
		require.NoError(t, lead.wait(t).err)
		require.ErrorIs(t, bad.wait(t).err, errRejected)
		o1, o2 := ok1.wait(t), ok2.wait(t)
		require.NoError(t, o1.err)
		require.Equal(t, o1, o2)

		before := l.appends.Load()
		allBad, noop := newReq("x", "a"), newReq("y", "a")
		allBad.reject, noop.noop = true, true
		require.NoError(t, r.c.Submit(t.Context(), allBad))
		require.ErrorIs(t, allBad.wait(t).err, errRejected)
		require.NoError(t, r.c.Submit(t.Context(), noop))
		require.Equal(t, outcome{}, noop.wait(t), "nothing to append: seq 0, no error")
		require.Equal(t, before, l.appends.Load(), "rejected batches append nothing")

		_, commits := readLog(t, l)
		require.Len(t, commits, 3)
		require.Len(t, commits[2].Events, 2)
		require.Equal(t, uint64(2), commits[2].Events[0].Version, "aggregate a continues at version 2")
	})
}

func TestCommitterSplitsLargeBatches(t *testing.T) {
	forEachLog(t, func(t *testing.T, newLog func(t *testing.T) eventstore.Log) {
		const limit = 4096
		l := &hookLog{Log: newLog(t)}
		r := startCommitter(t, l, newCounters(), eventstore.GroupConfig{MaxRecordBytes: limit})

		lead := newReq("lead", "a")
		g := r.appending(t, l, lead)
		reqs := r.submitBig(t, 8, 1000, 0)
		close(g.release)
		require.NoError(t, lead.wait(t).err)
		for _, q := range reqs {
			require.NoError(t, q.wait(t).err)
		}

		huge := newReq("huge", "a")
		huge.pad = limit
		require.NoError(t, r.c.Submit(t.Context(), huge))
		require.ErrorIs(t, huge.wait(t).err, eventstore.ErrTooLarge)

		var sizes []int
		require.NoError(t, l.Read(t.Context(), 1, func(_ uint64, rec []byte) error {
			sizes = append(sizes, len(rec))
			return nil
		}))
		require.GreaterOrEqual(t, len(sizes), 1+1+3, "the batch of 8 took at least 3 records")
		for _, s := range sizes {
			require.LessOrEqual(t, s, limit)
		}
		_, commits := readLog(t, l)
		lastCommit := commits[len(commits)-1]
		require.Equal(t, uint64(9), lastCommit.Events[len(lastCommit.Events)-1].Version, "the oversized request left no trace")
	})
}

// Requests that estimate their bytes fill a batch only while the estimates
// fit in a record: each is decided once (without estimates, a batch of 8
// too large for one record is decided again in halves, and theirs).
func TestCommitterFillsBatchesByTheirEstimates(t *testing.T) {
	forEachLog(t, func(t *testing.T, newLog func(t *testing.T) eventstore.Log) {
		const limit = 4096
		for _, estimated := range []bool{false, true} {
			l := &hookLog{Log: newLog(t)}
			d := newCounters()
			r := startCommitter(t, l, d, eventstore.GroupConfig{MaxRecordBytes: limit})
			lead := newReq("lead", "a")
			g := r.appending(t, l, lead)
			estimate := 0
			if estimated {
				estimate = 1300 // three to a record (~1,200 bytes each with its envelope)
			}
			reqs := r.submitBig(t, 8, 800, estimate)
			close(g.release)
			require.NoError(t, lead.wait(t).err)
			for _, q := range reqs {
				require.NoError(t, q.wait(t).err)
			}
			_, commits := readLog(t, l)
			if !estimated {
				require.Greater(t, d.decided.Load(), int64(1+8), "without estimates the batch is decided again in parts")
				continue
			}
			require.Equal(t, int64(1+8), d.decided.Load(), "each request decided once")
			var per []int
			for _, c := range commits[1:] { // after the epoch record
				per = append(per, len(c.Events))
			}
			require.Equal(t, []int{1, 3, 3, 2}, per, "the lead alone, then batches of what fits")
		}
	})
}

// A request taken from the queue that did not fit in the batch before is
// answered ErrStopped when the committer stops before its batch: it is not
// lost with the loop.
func TestCommitterAnswersTheRequestItHeldOver(t *testing.T) {
	l := &hookLog{Log: eventstore.NewMemoryLog()}
	r := startCommitter(t, l, newCounters(), eventstore.GroupConfig{MaxRecordBytes: 4096})
	lead := newReq("lead", "a")
	g1 := r.appending(t, l, lead)
	a, b := newReq("a", "a"), newReq("b", "a")
	a.estimate, b.estimate = 3000, 3000 // one to a batch
	r.submit(t, a, b)
	g2 := l.holdNext() // a's append
	close(g1.release)
	g2.waitEntered(t) // a is being appended; b was taken and held over
	r.cancel()
	close(g2.release)
	require.NoError(t, lead.wait(t).err)
	require.NoError(t, a.wait(t).err, "an append under way finishes")
	require.ErrorIs(t, b.wait(t).err, eventstore.ErrStopped)
	require.NoError(t, r.wait(t))
}

func TestCommitterFencing(t *testing.T) {
	forEachLog(t, func(t *testing.T, newLog func(t *testing.T) eventstore.Log) {
		l := newLog(t)
		old := startCommitter(t, l, newCounters(), eventstore.GroupConfig{WriterID: "old"})
		q := newReq("before", "a")
		require.NoError(t, old.c.Submit(t.Context(), q))
		require.NoError(t, q.wait(t).err)
		require.Equal(t, uint64(1), old.c.Epoch())

		d := newCounters()
		next := startCommitter(t, l, d, eventstore.GroupConfig{WriterID: "new"})
		require.Equal(t, uint64(2), next.c.Epoch())
		require.Len(t, d.replayed, 2, "the new writer replayed the old one's records")
		require.Equal(t, 1, d.count["a"])

		late := newReq("late", "a")
		require.NoError(t, old.c.Submit(t.Context(), late))
		require.ErrorIs(t, late.wait(t).err, eventstore.ErrFenced)
		require.ErrorIs(t, old.wait(t), eventstore.ErrFenced, "the old writer steps down")
		require.ErrorIs(t, old.c.Submit(t.Context(), newReq("after", "a")), eventstore.ErrStopped)

		q2 := newReq("new1", "a")
		require.NoError(t, next.c.Submit(t.Context(), q2))
		require.NoError(t, q2.wait(t).err)

		_, commits := readLog(t, l)
		var writers []string
		for _, c := range commits {
			writers = append(writers, c.Kind+":"+c.Writer)
			for _, e := range c.Events {
				require.NotEqual(t, "late", e.CommandID, "nothing of the fenced append landed")
			}
		}
		require.Equal(t, []string{"epoch:old", "events:old", "epoch:new", "events:new"}, writers)
		require.Equal(t, uint64(2), commits[3].Events[0].Version)
	})
}

func TestCommitterStartRace(t *testing.T) {
	l := &hookLog{Log: eventstore.NewMemoryLog()}
	a := eventstore.NewCommitter(l, newCounters(), eventstore.GroupConfig{WriterID: "a", LogKey: testKey})
	b := eventstore.NewCommitter(l, newCounters(), eventstore.GroupConfig{WriterID: "b", LogKey: testKey})
	g := l.holdNext()
	errA := make(chan error, 1)
	go func() { errA <- a.Start(context.Background()) }()
	g.waitEntered(t) // a has caught up to 0 and is appending its epoch
	require.NoError(t, b.Start(t.Context()))
	close(g.release)
	err := <-errA
	require.ErrorIs(t, err, eventstore.ErrFenced)
	require.ErrorIs(t, err, eventstore.ErrConflict)
	require.ErrorIs(t, a.Run(t.Context()), eventstore.ErrStopped)
}

func TestCommitterUnknownOutcome(t *testing.T) {
	l := &hookLog{Log: eventstore.NewMemoryLog()}
	r := startCommitter(t, l, newCounters(), eventstore.GroupConfig{})
	lost := errors.New("connection lost")
	l.fail.Store(&lost)
	q := newReq("q", "a")
	require.NoError(t, r.c.Submit(t.Context(), q))
	err := q.wait(t).err
	require.ErrorIs(t, err, eventstore.ErrUnknownOutcome)
	require.ErrorIs(t, err, lost)
	require.ErrorIs(t, r.wait(t), eventstore.ErrUnknownOutcome)
}

func TestCommitterStop(t *testing.T) {
	l := &hookLog{Log: eventstore.NewMemoryLog()}
	r := startCommitter(t, l, newCounters(), eventstore.GroupConfig{})
	inFlight := newReq("in-flight", "a")
	g := r.appending(t, l, inFlight)
	queued := newReq("queued", "a")
	r.submit(t, queued)

	r.cancel()
	close(g.release)
	require.NoError(t, r.wait(t), "Run returns nil when its context ends")
	require.NoError(t, inFlight.wait(t).err, "the append in flight completes")
	require.ErrorIs(t, queued.wait(t).err, eventstore.ErrStopped)
	require.ErrorIs(t, r.c.Submit(t.Context(), newReq("late", "a")), eventstore.ErrStopped)
	require.ErrorIs(t, r.c.Run(t.Context()), eventstore.ErrStopped)
}

func TestCommitterStart(t *testing.T) {
	ctx := t.Context()
	t.Run("invalid config", func(t *testing.T) {
		c := eventstore.NewCommitter(eventstore.NewMemoryLog(), newCounters(),
			eventstore.GroupConfig{MaxBatch: -1, MaxRecordBytes: eventstore.MaxRecordBytes + 1, Resume: eventstore.LogTip{N: 3, Seq: 3}})
		err := c.Start(ctx)
		require.ErrorContains(t, err, "MaxBatch")
		require.ErrorContains(t, err, "MaxRecordBytes")
		require.ErrorContains(t, err, "without a Chain")
		require.ErrorContains(t, err, "LogKey")
	})
	t.Run("run before start", func(t *testing.T) {
		c := eventstore.NewCommitter(eventstore.NewMemoryLog(), newCounters(), eventstore.GroupConfig{LogKey: testKey})
		require.ErrorContains(t, c.Run(ctx), "before a successful Start")
		require.ErrorIs(t, c.Submit(ctx, newReq("x", "a")), eventstore.ErrStopped)
	})
	t.Run("idempotent", func(t *testing.T) {
		l := eventstore.NewMemoryLog()
		c := eventstore.NewCommitter(l, newCounters(), eventstore.GroupConfig{LogKey: testKey})
		require.NoError(t, c.Start(ctx))
		require.NoError(t, c.Start(ctx))
		last, err := l.LastSeq(ctx)
		require.NoError(t, err)
		require.Equal(t, uint64(1), last, "one epoch record")
	})
	t.Run("resume from a checkpoint", func(t *testing.T) {
		l := eventstore.NewMemoryLog()
		first := startCommitter(t, l, newCounters(), eventstore.GroupConfig{})
		for i := range 3 {
			q := newReq(fmt.Sprint(i), "a")
			require.NoError(t, first.c.Submit(ctx, q))
			require.NoError(t, q.wait(t).err)
		}
		// A checkpoint taken after record 3 (epoch, events v1, events v2).
		seqs, commits := readLog(t, l)
		chain := eventstore.NewChainVerifier()
		chain.Seed("counter", "a", 2, commits[2].Events[0].Hash())
		var resume eventstore.LogTip
		for i := range 3 {
			resume = resume.Next(seqs[i], commits[i])
		}
		d := newCounters()
		second := startCommitter(t, l, d, eventstore.GroupConfig{Chain: chain, Resume: resume})
		require.Equal(t, []uint64{4}, d.replayed, "only records after the checkpoint are replayed")
		require.Equal(t, uint64(2), second.c.Epoch(), "the epoch comes from the last record")
		ver, _ := chain.Tip("counter", "a")
		require.Equal(t, uint64(3), ver)

		beyond := resume
		beyond.Seq = 99
		c := eventstore.NewCommitter(l, newCounters(), eventstore.GroupConfig{Chain: chain, Resume: beyond, LogKey: testKey})
		err := c.Start(ctx)
		var ie *eventstore.IntegrityError
		require.ErrorAs(t, err, &ie, "a log that ends before the checkpoint is damaged")
		require.Equal(t, eventstore.ProblemTruncated, ie.Problem)

		changed := resume
		changed.Hash = commits[0].Hash
		c = eventstore.NewCommitter(l, newCounters(), eventstore.GroupConfig{Chain: chain, Resume: changed, LogKey: testKey})
		require.ErrorAs(t, c.Start(ctx), &ie, "the checkpoint's record must be the one verified")
		require.Equal(t, eventstore.ProblemCheckpointChanged, ie.Problem)
	})
	t.Run("broken chain", func(t *testing.T) {
		l := eventstore.NewMemoryLog()
		rec, err := eventstore.EncodeCommit(&eventstore.Commit{Kind: eventstore.KindEvents, Epoch: 1, N: 1, Events: []eventstore.Event{
			{ID: "x", Type: "t", AggregateType: "counter", AggregateID: "a", Version: 2, Data: json.RawMessage(`{}`)},
		}}, testKey)
		require.NoError(t, err)
		_, err = l.Append(ctx, rec, 0)
		require.NoError(t, err)
		var ce *eventstore.ChainError
		require.ErrorAs(t, eventstore.NewCommitter(l, newCounters(), eventstore.GroupConfig{LogKey: testKey}).Start(ctx), &ce)
		require.Equal(t, eventstore.ChainGap, ce.Problem)
	})
}

func TestCommitterAssignsIDsAndTimes(t *testing.T) {
	l := eventstore.NewMemoryLog()
	var tick atomic.Int64
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { // goes backwards every other call
		n := tick.Add(1)
		return base.Add(time.Duration(n%2) * -time.Second)
	}
	r := startCommitter(t, l, newCounters(), eventstore.GroupConfig{Clock: clock})
	for i := range 6 {
		q := newReq(fmt.Sprint(i), "a")
		require.NoError(t, r.c.Submit(t.Context(), q))
		require.NoError(t, q.wait(t).err)
	}
	_, commits := readLog(t, l)
	prev := ""
	for _, c := range commits[1:] {
		e := c.Events[0]
		require.Greater(t, e.ID, prev, "ULIDs increase even when the clock goes back")
		prev = e.ID
		require.Equal(t, c.Time, e.Time)
		require.Equal(t, uint64(1), c.Epoch)
	}
}

// appended is what GroupConfig.OnAppended reported for one record.
type appended struct {
	seq             uint64
	requests, bytes int
	took            time.Duration
}

// OnAppended reports every record the committer appended, the epoch record
// included, with the requests each answers: what the service's metrics
// count (appends, batch sizes, commit latency).
func TestCommitterReportsAppends(t *testing.T) {
	forEachLog(t, func(t *testing.T, newLog func(t *testing.T) eventstore.Log) {
		l := &hookLog{Log: newLog(t)}
		var mu sync.Mutex
		var got []appended
		r := startCommitter(t, l, newCounters(), eventstore.GroupConfig{
			OnAppended: func(seq uint64, requests, bytes int, took time.Duration) {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, appended{seq, requests, bytes, took})
			}})
		first := newReq("c0", "a")
		g := r.appending(t, l, first)
		const n = 10
		reqs := make([]*req, n)
		for i := range reqs {
			reqs[i] = newReq(fmt.Sprintf("c%d", i+1), "b")
			require.NoError(t, r.c.Submit(t.Context(), reqs[i]))
		}
		rejected := &req{id: "bad", agg: "b", reject: true, done: make(chan outcome, 1)}
		close(g.release)
		o1 := first.wait(t)
		var o2 outcome
		for _, q := range reqs {
			o2 = q.wait(t)
		}
		require.NoError(t, r.c.Submit(t.Context(), rejected))
		require.Error(t, rejected.wait(t).err)

		mu.Lock()
		defer mu.Unlock()
		require.Len(t, got, 3, "the epoch record, the lone request, the batch; nothing for a batch that appends nothing: %+v", got)
		require.Equal(t, 0, got[0].requests, "the epoch record answers no request")
		require.Equal(t, appended{seq: o1.seq, requests: 1}, appended{seq: got[1].seq, requests: got[1].requests})
		require.Equal(t, appended{seq: o2.seq, requests: n}, appended{seq: got[2].seq, requests: got[2].requests})
		for _, a := range got {
			require.Positive(t, a.bytes)
			require.Positive(t, a.took)
		}
	})
}

// A log whose store has no room refuses an append, and the committer
// answers its batch ErrStorageFull and goes on writing: once room is made
// (here, another stream deleted), the next batch is appended, and nothing
// of the refused one is in the log.
func TestCommitterGoesOnAfterTheStoreWasFull(t *testing.T) {
	ns := logtest.StartServerWithStore(t, 1<<20)
	_, js := logtest.Connect(t, ns)
	ctx := t.Context()
	l, err := eventstore.NewJetStreamLog(ctx, js, eventstore.JetStreamConfig{Stream: "LOG_FULL", Prefix: "full"})
	require.NoError(t, err)
	r := startCommitter(t, l, newCounters(), eventstore.GroupConfig{})
	first := newReq("first", "a")
	r.submit(t, first)
	require.NoError(t, first.wait(t).err)

	// Another stream takes the rest of the store.
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILLER", Subjects: []string{"filler"}})
	require.NoError(t, err)
	for i := 0; ; i++ {
		if _, err := js.Publish(ctx, "filler", make([]byte, 32<<10)); err != nil {
			break
		}
		require.Less(t, i, 64, "the store has a limit")
	}

	full := newReq("full", "a")
	full.pad = 4 << 10
	r.submit(t, full)
	require.ErrorIs(t, full.wait(t).err, eventstore.ErrStorageFull)

	require.NoError(t, js.DeleteStream(ctx, "FILLER"))
	after := newReq("after", "a")
	r.submit(t, after)
	o := after.wait(t)
	require.NoError(t, o.err, "the committer went on writing")
	_, commits := readLog(t, l)
	require.Len(t, commits, 3, "its epoch, first, after: nothing of the refused one")
	require.Equal(t, uint64(2), commits[2].Events[0].Version, "aggregate a continues at version 2")
}
