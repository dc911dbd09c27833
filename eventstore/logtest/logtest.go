// Package logtest holds the conformance suite that every eventstore.Log
// implementation must pass, and helpers that start an embedded NATS server
// for tests. It is imported by tests only.
package logtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/eventstore"
)

// waitTimeout bounds every wait in the suite.
const waitTimeout = 10 * time.Second

// record is one record as read back.
type record struct {
	seq uint64
	rec []byte
}

// Run runs the conformance suite against logs made by newLog, which must
// return a new, empty log for each call (cleaned up through t).
func Run(t *testing.T, newLog func(t *testing.T) eventstore.Log) {
	for _, c := range []struct {
		name string
		test func(*testing.T, eventstore.Log)
	}{
		{"AppendRead", testAppendRead},
		{"Conflict", testConflict},
		{"ConcurrentAppenders", testConcurrent},
		{"RetryIsIdempotent", testRetry},
		{"ReadFromMiddle", testReadFromMiddle},
		{"ReadStopsOnError", testReadStops},
		{"Record", testRecord},
		{"Tail", testTail},
		{"TailFromEnd", testTailFromEnd},
		{"TailStopsOnError", testTailStops},
		{"LastSeq", testLastSeq},
		{"Stat", testStat},
		{"TooLarge", testTooLarge},
	} {
		t.Run(c.name, func(t *testing.T) { c.test(t, newLog(t)) })
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

func rec(i int) []byte { return fmt.Appendf(nil, `{"n":%d}`, i) }

// appendN appends n records after the log's current end and returns their
// sequences.
func appendN(ctx context.Context, t *testing.T, l eventstore.Log, n int) []uint64 {
	t.Helper()
	last, err := l.LastSeq(ctx)
	require.NoError(t, err)
	seqs := make([]uint64, n)
	for i := range n {
		seq, err := l.Append(ctx, rec(int(last)*1000+i), last) //nolint:gosec // small test sequences
		require.NoError(t, err)
		require.Greater(t, seq, last)
		seqs[i], last = seq, seq
	}
	return seqs
}

func readAll(ctx context.Context, t *testing.T, l eventstore.Log, from uint64) []record {
	t.Helper()
	var got []record
	require.NoError(t, l.Read(ctx, from, func(seq uint64, r []byte) error {
		got = append(got, record{seq, bytes.Clone(r)})
		return nil
	}))
	return got
}

func testAppendRead(t *testing.T, l eventstore.Log) {
	ctx := testCtx(t)
	require.Empty(t, readAll(ctx, t, l, 1), "a new log is empty")
	var want []record
	var last uint64
	for i := range 5 {
		seq, err := l.Append(ctx, rec(i), last)
		require.NoError(t, err)
		require.Greater(t, seq, last, "sequences increase")
		want = append(want, record{seq, rec(i)})
		last = seq
	}
	require.Equal(t, want, readAll(ctx, t, l, 0), "from 0 reads from the start")
	require.Equal(t, want, readAll(ctx, t, l, 1))
	require.Empty(t, readAll(ctx, t, l, last+1))
}

func testConflict(t *testing.T, l eventstore.Log) {
	ctx := testCtx(t)
	seq, err := l.Append(ctx, rec(1), 0)
	require.NoError(t, err)

	_, err = l.Append(ctx, rec(2), 0)
	require.ErrorIs(t, err, eventstore.ErrConflict, "stale expectation")
	_, err = l.Append(ctx, rec(3), seq+1)
	require.ErrorIs(t, err, eventstore.ErrConflict, "expectation beyond the end")

	last, err := l.LastSeq(ctx)
	require.NoError(t, err)
	require.Equal(t, seq, last)
	require.Equal(t, []record{{seq, rec(1)}}, readAll(ctx, t, l, 1), "conflicting appends store nothing")
}

func testConcurrent(t *testing.T, l eventstore.Log) {
	ctx := testCtx(t)
	base := appendN(ctx, t, l, 1)[0]
	const n = 16
	var wg sync.WaitGroup
	seqs, errs := make([]uint64, n), make([]error, n)
	for i := range n {
		wg.Go(func() { seqs[i], errs[i] = l.Append(ctx, rec(100+i), base) })
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		if err == nil {
			require.Equal(t, -1, winner, "two appenders won: %d and %d", winner, i)
			winner = i
			continue
		}
		require.ErrorIs(t, err, eventstore.ErrConflict, "appender %d", i)
	}
	require.NotEqual(t, -1, winner, "one appender wins")
	got := readAll(ctx, t, l, base+1)
	require.Equal(t, []record{{seqs[winner], rec(100 + winner)}}, got)
}

func testRetry(t *testing.T, l eventstore.Log) {
	ctx := testCtx(t)
	first, err := l.Append(ctx, rec(1), 0)
	require.NoError(t, err)
	again, err := l.Append(ctx, rec(1), 0)
	require.NoError(t, err, "a blind retry of a landed append succeeds")
	require.Equal(t, first, again)
	require.Len(t, readAll(ctx, t, l, 1), 1, "and stores nothing")

	_, err = l.Append(ctx, rec(2), 0)
	require.ErrorIs(t, err, eventstore.ErrConflict, "a different record with the same expectation conflicts")
}

func testReadFromMiddle(t *testing.T, l eventstore.Log) {
	ctx := testCtx(t)
	seqs := appendN(ctx, t, l, 5)
	got := readAll(ctx, t, l, seqs[2])
	require.Len(t, got, 3)
	for i, r := range got {
		require.Equal(t, seqs[2+i], r.seq)
	}
}

// testRecord reads single records by their sequence; a sequence the log
// holds no record at is an integrity error.
func testRecord(t *testing.T, l eventstore.Log) {
	ctx := testCtx(t)
	seqs := appendN(ctx, t, l, 3)
	for _, r := range readAll(ctx, t, l, 1) {
		got, err := l.Record(ctx, r.seq)
		require.NoError(t, err)
		require.Equal(t, r.rec, got)
	}
	for _, seq := range []uint64{0, seqs[2] + 1} {
		_, err := l.Record(ctx, seq)
		require.ErrorIs(t, err, eventstore.ErrIntegrity, "seq %d", seq)
	}
}

func testReadStops(t *testing.T, l eventstore.Log) {
	ctx := testCtx(t)
	seqs := appendN(ctx, t, l, 3)
	stop := errors.New("stop")
	calls := 0
	err := l.Read(ctx, 1, func(seq uint64, _ []byte) error {
		calls++
		if seq == seqs[1] {
			return stop
		}
		return nil
	})
	require.ErrorIs(t, err, stop)
	require.Equal(t, 2, calls)
}

func testTail(t *testing.T, l eventstore.Log) {
	ctx := testCtx(t)
	before := appendN(ctx, t, l, 2)
	next, stop := startTail(ctx, t, l, before[1])
	require.Equal(t, before[1], next().seq, "tail starts at from")

	after := appendN(ctx, t, l, 3)
	for _, seq := range after {
		require.Equal(t, seq, next().seq, "tail sees records appended after it started")
	}
	stop()
}

// startTail tails l from in the background. next waits for the tail's next
// record; stop cancels the tail and requires that it ends with the cancel.
func startTail(ctx context.Context, t *testing.T, l eventstore.Log, from uint64) (next func() record, stop func()) {
	tailCtx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	got := make(chan record, 16)
	done := make(chan error, 1)
	go func() {
		done <- l.Tail(tailCtx, from, func(seq uint64, r []byte) error {
			got <- record{seq, bytes.Clone(r)}
			return nil
		})
	}()
	next = func() record {
		t.Helper()
		select {
		case r := <-got:
			return r
		case err := <-done:
			require.FailNow(t, "tail ended early", "%v", err)
		case <-ctx.Done():
			require.FailNow(t, "timed out waiting for a tailed record")
		}
		return record{}
	}
	stop = func() {
		t.Helper()
		cancel()
		select {
		case err := <-done:
			require.ErrorIs(t, err, context.Canceled)
		case <-ctx.Done():
			require.FailNow(t, "tail did not stop on cancel")
		}
	}
	return next, stop
}

func testTailStops(t *testing.T, l eventstore.Log) {
	ctx := testCtx(t)
	appendN(ctx, t, l, 2)
	stop := errors.New("stop")
	err := l.Tail(ctx, 1, func(uint64, []byte) error { return stop })
	require.ErrorIs(t, err, stop)
}

func testLastSeq(t *testing.T, l eventstore.Log) {
	ctx := testCtx(t)
	last, err := l.LastSeq(ctx)
	require.NoError(t, err)
	require.Zero(t, last, "empty log")
	seqs := appendN(ctx, t, l, 3)
	last, err = l.LastSeq(ctx)
	require.NoError(t, err)
	require.Equal(t, seqs[2], last)
}

func testStat(t *testing.T, l eventstore.Log) {
	ctx := testCtx(t)
	st, err := l.Stat(ctx)
	require.NoError(t, err)
	require.Equal(t, eventstore.LogStat{}, st, "empty log")
	seqs := appendN(ctx, t, l, 3)
	st, err = l.Stat(ctx)
	require.NoError(t, err)
	require.Equal(t, eventstore.LogStat{Records: 3, First: seqs[0], Last: seqs[2]}, st)
}

func testTooLarge(t *testing.T, l eventstore.Log) {
	ctx := testCtx(t)
	big := bytes.Repeat([]byte("x"), eventstore.MaxRecordBytes+1)
	_, err := l.Append(ctx, big, 0)
	require.ErrorIs(t, err, eventstore.ErrTooLarge)
	last, err := l.LastSeq(ctx)
	require.NoError(t, err)
	require.Zero(t, last, "nothing appended")

	seq, err := l.Append(ctx, big[:eventstore.MaxRecordBytes], 0)
	require.NoError(t, err, "a record of exactly MaxRecordBytes fits")
	got := readAll(ctx, t, l, 1)
	require.Len(t, got, 1)
	require.Equal(t, seq, got[0].seq)
	require.Len(t, got[0].rec, eventstore.MaxRecordBytes)
}

func testTailFromEnd(t *testing.T, l eventstore.Log) {
	ctx := testCtx(t)
	before := appendN(ctx, t, l, 2)
	next, stop := startTail(ctx, t, l, before[1]+1)
	after := appendN(ctx, t, l, 1)
	require.Equal(t, after[0], next().seq, "a tail past the end waits for the next record")
	stop()
}
