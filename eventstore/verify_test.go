package eventstore_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/eventstore"
)

// chainer builds the records of one partition as the committer does: each
// one chained on the one before and authenticated under key. It does not
// append them: tests put them in a log as they are, changed, or not at all.
type chainer struct {
	t    testing.TB
	key  *eventstore.LogKey
	tip  eventstore.LogTip
	tips []eventstore.LogTip // after each record
	seq  uint64              // the sequence the next record is assumed to get
}

func newChainer(t testing.TB) *chainer { return &chainer{t: t, key: testKey} }

// next returns the next record, of kind events, holding one new aggregate's
// first event per command.
func (w *chainer) next(cmds ...string) []byte {
	w.t.Helper()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := &eventstore.Commit{Kind: eventstore.KindEvents, Epoch: 1, Writer: "w", Time: at, N: w.tip.N + 1, Prev: w.tip.Hash}
	for _, id := range cmds {
		c.Events = append(c.Events, eventstore.Event{ID: "e-" + id, Type: "thing.created", SchemaVersion: 1, Workspace: "ws",
			AggregateType: "thing", AggregateID: id, Version: 1, CommandID: id, Time: at, Data: json.RawMessage(`{}`)})
		c.Results = append(c.Results, eventstore.CommandResult{Workspace: "ws", CommandID: id, Reply: json.RawMessage(`{}`)})
	}
	if len(cmds) == 0 {
		c.Kind = eventstore.KindEpoch
	}
	rec, err := eventstore.EncodeCommit(c, w.key)
	require.NoError(w.t, err)
	w.seq++
	w.tip = w.tip.Next(w.seq, c)
	w.tips = append(w.tips, w.tip)
	return rec
}

// records returns n records, the i-th holding command "c<i>" (from 1).
func (w *chainer) records(n int) [][]byte {
	var out [][]byte
	for i := 1; i <= n; i++ {
		out = append(out, w.next(fmt.Sprint("c", i)))
	}
	return out
}

// memLog returns a memory log holding recs as they are.
func memLog(t testing.TB, recs ...[]byte) *eventstore.MemoryLog {
	t.Helper()
	l := eventstore.NewMemoryLog()
	for _, r := range recs {
		appendRaw(t, l, r)
	}
	return l
}

func appendRaw(t testing.TB, l eventstore.Log, rec []byte) uint64 {
	t.Helper()
	last, err := l.LastSeq(context.Background())
	require.NoError(t, err)
	seq, err := l.Append(context.Background(), rec, last)
	require.NoError(t, err)
	return seq
}

func flip(rec []byte, at int) []byte {
	out := bytes.Clone(rec)
	out[at] ^= 0x01
	return out
}

// verifyAll verifies l from its start and returns the result.
func verifyAll(t testing.TB, l eventstore.Log) *eventstore.Verification {
	t.Helper()
	v, err := eventstore.VerifyLog(context.Background(), l, testKey, nil)
	require.NoError(t, err)
	return v
}

func TestVerifyIntactLog(t *testing.T) {
	w := newChainer(t)
	l := memLog(t, w.records(5)...)
	v := verifyAll(t, l)
	require.Nil(t, v.Damage)
	require.Equal(t, w.tip, v.Tip)
	require.Equal(t, eventstore.LogTip{N: 5, Seq: 5, Hash: w.tip.Hash, First: 1, Epoch: 1, Format: eventstore.FormatChained, KeyID: testKey.ID()}, v.Tip)
	require.Equal(t, 5, v.Records)

	var seen []uint64
	tip, err := eventstore.ReadVerified(t.Context(), l, testKey, eventstore.LogTip{}, func(seq uint64, c *eventstore.Commit) error {
		require.Equal(t, seq, c.N)
		seen = append(seen, seq)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, w.tip, tip)
	require.Equal(t, []uint64{1, 2, 3, 4, 5}, seen)
	require.NoError(t, eventstore.CheckStat(t.Context(), l, tip))
}

// Each kind of damage is found at the record where it shows, naming the
// problem; the verified prefix ends before it and the records after it are
// listed with the commands they hold, as far as they decode.
func TestVerifyFindsDamage(t *testing.T) {
	other := mustKey(bytes.Repeat([]byte{9}, eventstore.LogKeySize))
	for _, tc := range []struct {
		name    string
		build   func(w *chainer) [][]byte
		seq     uint64
		problem eventstore.Problem
		prefix  uint64   // the verified prefix's last position
		lost    []string // commands named after the prefix
	}{
		{"flipped byte in the middle of a record", func(w *chainer) [][]byte {
			recs := w.records(5)
			recs[2] = flip(recs[2], len(recs[2])/2)
			return recs
		}, 3, eventstore.ProblemMAC, 2, []string{"ws/c3", "ws/c4", "ws/c5"}},
		{"flipped byte in the first record", func(w *chainer) [][]byte {
			recs := w.records(3)
			recs[0] = flip(recs[0], bytes.Index(recs[0], []byte(`"writer":"w"`))+10)
			return recs
		}, 1, eventstore.ProblemMAC, 0, []string{"ws/c1", "ws/c2", "ws/c3"}},
		{"flipped byte in the last record, breaking its JSON", func(w *chainer) [][]byte {
			recs := w.records(3)
			recs[2][0] = '['
			return recs
		}, 3, eventstore.ProblemUndecodable, 2, nil},
		{"a record missing", func(w *chainer) [][]byte {
			recs := w.records(5)
			return slices.Delete(recs, 2, 3)
		}, 3, eventstore.ProblemGap, 2, []string{"ws/c4", "ws/c5"}},
		{"the first records missing", func(w *chainer) [][]byte {
			return w.records(5)[3:]
		}, 1, eventstore.ProblemGap, 0, []string{"ws/c4", "ws/c5"}},
		{"a copy of an earlier record appended", func(w *chainer) [][]byte {
			recs := w.records(3)
			return append(recs, recs[1])
		}, 4, eventstore.ProblemRepeated, 3, []string{"ws/c2"}},
		{"a well chained record under another key", func(w *chainer) [][]byte {
			recs := w.records(3)
			w.key = other
			return append(recs, w.next("forged"))
		}, 4, eventstore.ProblemOtherKey, 3, []string{"ws/forged"}},
		{"a well chained record claiming this key's id", func(w *chainer) [][]byte {
			recs := w.records(3)
			w.key = other
			forged := bytes.Replace(w.next("forged"), []byte(other.ID()), []byte(testKey.ID()), 1)
			return append(recs, forged)
		}, 4, eventstore.ProblemMAC, 3, []string{"ws/forged"}},
		{"an authentic record on another chain", func(w *chainer) [][]byte {
			recs := w.records(3)
			w.tip.Hash = "0000"
			return append(recs, w.next("c4"))
		}, 4, eventstore.ProblemPrev, 3, []string{"ws/c4"}},
		{"an unauthenticated record of the old format", func(w *chainer) [][]byte {
			recs := w.records(2)
			return append(recs, legacyRecord(3))
		}, 3, eventstore.ProblemUnauthenticated, 2, []string{"ws/old3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := memLog(t, tc.build(newChainer(t))...)
			v := verifyAll(t, l)
			require.NotNil(t, v.Damage, "the damage is found")
			d := v.Damage
			require.Equal(t, tc.seq, d.Seq)
			require.Equal(t, tc.problem, d.Problem, d.Error())
			require.Equal(t, tc.prefix, d.Prefix.N)
			require.Equal(t, tc.prefix, v.Tip.N)
			require.ErrorIs(t, d, eventstore.ErrIntegrity)
			require.Contains(t, d.Error(), fmt.Sprintf("at seq %d", tc.seq))
			require.Contains(t, d.Error(), string(tc.problem))
			var lost []string
			for _, r := range d.Lost {
				lost = append(lost, r.Commands...)
			}
			require.Equal(t, tc.lost, lost)

			// Reading for views or a writer stops there too.
			var applied []uint64
			_, err := eventstore.ReadVerified(t.Context(), l, testKey, eventstore.LogTip{}, func(seq uint64, _ *eventstore.Commit) error {
				applied = append(applied, seq)
				return nil
			})
			require.ErrorIs(t, err, eventstore.ErrIntegrity)
			require.Len(t, applied, int(tc.prefix), "nothing after the verified prefix is passed on")
		})
	}
}

// legacyRecord is a record of the first format, as dwr wrote before the log
// was chained, holding command "old<i>".
func legacyRecord(i int) []byte {
	return fmt.Appendf(nil, `{"f":1,"kind":"events","epoch":1,"writer":"w","time":"2026-01-01T00:00:00Z",`+
		`"events":[{"id":"e%d","type":"thing.created","v":1,"ws":"ws","agg":"thing","agg_id":"old%d","ver":1,"cmd":"old%d","time":"2026-01-01T00:00:00Z","data":{}}],`+
		`"results":[{"ws":"ws","cmd":"old%d","reply":{}}]}`, i, i, i, i)
}

// A log that begins with records of the first format (written by an older
// dwr) verifies: the chain starts at the first chained record, which counts
// them and carries the hash of the last of them.
func TestVerifyLegacyPrefix(t *testing.T) {
	l := memLog(t, legacyRecord(1), legacyRecord(2))
	tip, err := eventstore.ReadVerified(t.Context(), l, testKey, eventstore.LogTip{}, func(seq uint64, c *eventstore.Commit) error {
		require.Equal(t, seq, c.N, "a legacy record's position is its place")
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, uint64(2), tip.N)
	require.Equal(t, eventstore.FormatLegacy, tip.Format)

	// A committer continues the log, chained.
	r := startCommitter(t, l, newCounters(), eventstore.GroupConfig{})
	q := newReq("new", "a")
	require.NoError(t, r.c.Submit(t.Context(), q))
	require.NoError(t, q.wait(t).err)
	seqs, commits := readLog(t, l)
	require.Equal(t, []uint64{1, 2, 3, 4}, seqs)
	require.Equal(t, uint64(3), commits[2].N, "the epoch record takes position 3")
	require.Equal(t, tip.Hash, commits[2].Prev, "and chains on the last legacy record")
	v := verifyAll(t, l)
	require.Nil(t, v.Damage)
	require.Equal(t, 2, v.Legacy)

	// A legacy record after them is foreign.
	appendRaw(t, l, legacyRecord(5))
	v = verifyAll(t, l)
	require.NotNil(t, v.Damage)
	require.Equal(t, eventstore.ProblemUnauthenticated, v.Damage.Problem)
	require.Equal(t, uint64(5), v.Damage.Seq)
}

// An acceptance appended after a damaged stretch, chained on the verified
// prefix, closes it: the log verifies through it, the stretch is outside the
// history, and a writer carries on after it.
func TestAcceptanceClosesDamage(t *testing.T) {
	ctx := t.Context()
	w := newChainer(t)
	recs := w.records(5)
	recs[2] = flip(recs[2], len(recs[2])/2)
	l := memLog(t, recs...)
	v := verifyAll(t, l)
	require.NotNil(t, v.Damage)
	viewsTip := w.tips[3] // views that had applied up to seq 4 before the damage

	// An acceptance of another prefix closes nothing.
	wrong := v.Tip
	wrong.Seq, wrong.N = 1, 1
	_, _, err := eventstore.AppendAcceptance(ctx, eventstore.NewMemoryLog(), testKey, wrong, 5, eventstore.Acceptance{}, "op", time.Now())
	require.ErrorIs(t, err, eventstore.ErrConflict, "an acceptance expects the log's end")

	seq, c, err := eventstore.AppendAcceptance(ctx, l, testKey, v.Tip, v.Last,
		eventstore.Acceptance{Problem: string(v.Damage.Problem), Discarded: 3, Lost: []string{"ws/c3", "ws/c4", "ws/c5"}, By: "test"}, "op", time.Now())
	require.NoError(t, err)
	require.Equal(t, uint64(6), seq)
	require.Equal(t, uint64(3), c.N)
	require.Equal(t, uint64(5), c.Accept.UpToSeq)

	v = verifyAll(t, l)
	require.Nil(t, v.Damage, "the log verifies through the acceptance")
	require.Equal(t, 1, v.Accepted)
	require.Equal(t, eventstore.LogTip{N: 3, Seq: 6, Hash: c.Hash, First: 1, Epoch: 1, Format: eventstore.FormatChained, Discarded: 3, KeyID: testKey.ID()}, v.Tip)
	require.NoError(t, eventstore.CheckStat(ctx, l, v.Tip), "the log holds N+Discarded records")

	var applied []uint64
	_, err = eventstore.ReadVerified(ctx, l, testKey, eventstore.LogTip{}, func(seq uint64, _ *eventstore.Commit) error {
		applied = append(applied, seq)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2, 6}, applied, "the damaged stretch is skipped")

	// Views that had applied the records up to seq 4 before the damage hold
	// what the acceptance discarded: they must be rebuilt.
	_, err = eventstore.ReadVerified(ctx, l, testKey, viewsTip, func(uint64, *eventstore.Commit) error { return nil })
	require.ErrorIs(t, err, eventstore.ErrTipDiscarded)

	// A writer continues after the acceptance.
	r := startCommitter(t, l, newCounters(), eventstore.GroupConfig{})
	q := newReq("after", "a")
	require.NoError(t, r.c.Submit(ctx, q))
	require.NoError(t, q.wait(t).err)
	v = verifyAll(t, l)
	require.Nil(t, v.Damage)
	require.Equal(t, uint64(5), v.Tip.N)

	// A copy of the acceptance appended later is a repeated record, not a
	// reason to discard anything.
	end := v.Tip
	appendRaw(t, l, recordAt(t, l, 6))
	v = verifyAll(t, l)
	require.NotNil(t, v.Damage)
	require.Equal(t, eventstore.ProblemRepeated, v.Damage.Problem)
	_, err = eventstore.ReadVerified(ctx, l, testKey, end, func(uint64, *eventstore.Commit) error { return nil })
	require.ErrorIs(t, err, eventstore.ErrIntegrity)
	require.NotErrorIs(t, err, eventstore.ErrTipDiscarded)
}

// recordAt returns the record of l at seq.
func recordAt(t testing.TB, l eventstore.Log, seq uint64) []byte {
	t.Helper()
	var out []byte
	require.NoError(t, l.Read(context.Background(), seq, func(s uint64, rec []byte) error {
		if s == seq {
			out = bytes.Clone(rec)
		}
		return nil
	}))
	require.NotNil(t, out)
	return out
}

// sparseLog is a log from which some records vanished, as JetStream drops
// the messages of a damaged block on recovery: their sequences are not
// reused.
type sparseLog struct {
	*eventstore.MemoryLog
	gone map[uint64]bool
}

func (l *sparseLog) LastSeq(ctx context.Context) (uint64, error) {
	last, err := l.MemoryLog.LastSeq(ctx)
	for last > 0 && l.gone[last] {
		last--
	}
	return last, err
}

func (l *sparseLog) Read(ctx context.Context, from uint64, fn func(uint64, []byte) error) error {
	last, err := l.LastSeq(ctx)
	if err != nil {
		return err
	}
	return l.MemoryLog.Read(ctx, from, func(seq uint64, rec []byte) error {
		if l.gone[seq] || seq > last {
			return nil
		}
		return fn(seq, rec)
	})
}

func (l *sparseLog) Stat(ctx context.Context) (eventstore.LogStat, error) {
	var st eventstore.LogStat
	err := l.Read(ctx, 1, func(seq uint64, _ []byte) error {
		st.Records++
		st.First = cmp.Or(st.First, seq)
		st.Last = seq
		return nil
	})
	return st, err
}

// A verifier resuming from a checkpoint (the views' last record) finds what
// reading on from it cannot: the log ending before it, its record gone or
// changed, records lost below it.
func TestResumeFindsLossBelowTheCheckpoint(t *testing.T) {
	ctx := t.Context()
	w := newChainer(t)
	recs := w.records(6)
	tip := w.tips[3] // the views applied up to seq 4
	read := func(l eventstore.Log, tip eventstore.LogTip) error {
		_, err := eventstore.ReadVerified(ctx, l, testKey, tip, func(uint64, *eventstore.Commit) error { return nil })
		return err
	}
	problem := func(err error) eventstore.Problem {
		t.Helper()
		var ie *eventstore.IntegrityError
		require.ErrorAs(t, err, &ie)
		return ie.Problem
	}

	full := memLog(t, recs...)
	require.NoError(t, read(full, tip))
	require.NoError(t, eventstore.CheckStat(ctx, full, w.tip))

	require.Equal(t, eventstore.ProblemTruncated, problem(read(memLog(t, recs[:3]...), tip)), "the log ends before the checkpoint")

	changed := slices.Clone(recs)
	changed[3] = flip(changed[3], len(changed[3])/2)
	require.Equal(t, eventstore.ProblemCheckpointChanged, problem(read(memLog(t, changed...), tip)))

	for _, gone := range []uint64{4} {
		l := &sparseLog{memLog(t, recs...), map[uint64]bool{gone: true}}
		require.Equal(t, eventstore.ProblemCheckpointMissing, problem(read(l, tip)), "the checkpoint's record vanished")
	}
	// Below the checkpoint: only the log's own counts can tell.
	below := &sparseLog{memLog(t, recs...), map[uint64]bool{2: true}}
	require.NoError(t, read(below, w.tip))
	err := eventstore.CheckStat(ctx, below, w.tip)
	require.Equal(t, eventstore.ProblemMissing, problem(err))
	require.ErrorContains(t, err, "1 records below it were lost")
	first := &sparseLog{memLog(t, recs...), map[uint64]bool{1: true}}
	err = eventstore.CheckStat(ctx, first, w.tip)
	require.Equal(t, eventstore.ProblemMissing, problem(err))
	require.ErrorContains(t, err, "first record is at seq 2, it was at seq 1")
	// A log that goes on after the checkpoint is not counted against it.
	require.NoError(t, eventstore.CheckStat(ctx, below, tip))
}

// CheckChain reads below a checkpoint: it finds a record lost or changed
// there even when the log's own counts say nothing is missing (JetStream
// keeps counting a message it lost in a damaged block).
func TestCheckChainBelowTheCheckpoint(t *testing.T) {
	ctx := t.Context()
	w := newChainer(t)
	recs := w.records(6)
	problem := func(err error) (eventstore.Problem, uint64) {
		t.Helper()
		var ie *eventstore.IntegrityError
		require.ErrorAs(t, err, &ie)
		return ie.Problem, ie.Seq
	}
	require.NoError(t, eventstore.CheckChain(ctx, memLog(t, recs...), w.tip, nil))
	require.NoError(t, eventstore.CheckChain(ctx, memLog(t, recs...), w.tips[2], nil), "up to an earlier checkpoint")

	lying := &countingLog{sparseLog{memLog(t, recs...), map[uint64]bool{3: true}}, 6}
	require.NoError(t, eventstore.CheckStat(ctx, lying, w.tip), "the counts miss it")
	p, seq := problem(eventstore.CheckChain(ctx, lying, w.tip, nil))
	require.Equal(t, eventstore.ProblemGap, p)
	require.Equal(t, uint64(4), seq)

	changed := slices.Clone(recs)
	changed[1] = flip(changed[1], len(changed[1])/2)
	p, seq = problem(eventstore.CheckChain(ctx, memLog(t, changed...), w.tip, nil))
	require.Equal(t, eventstore.ProblemPrev, p, "the next record's hash anchors a changed one")
	require.Equal(t, uint64(3), seq)

	p, _ = problem(eventstore.CheckChain(ctx, memLog(t, recs[:4]...), w.tip, nil))
	require.Equal(t, eventstore.ProblemCheckpointMissing, p)

	// Stretches an acceptance discarded are skipped.
	l := memLog(t, changed...)
	v := verifyAll(t, l)
	_, c, err := eventstore.AppendAcceptance(ctx, l, testKey, v.Tip, 6, eventstore.Acceptance{Discarded: 5, FromSeq: 2}, "op", time.Now())
	require.NoError(t, err)
	v = verifyAll(t, l)
	require.Nil(t, v.Damage)
	require.Equal(t, c.Hash, v.Tip.Hash)
	require.NoError(t, eventstore.CheckChain(ctx, l, v.Tip, [][2]uint64{{2, 6}}))
	require.NoError(t, eventstore.CheckStat(ctx, l, v.Tip))
	_, seq = problem(eventstore.CheckChain(ctx, l, v.Tip, nil))
	require.Equal(t, uint64(3), seq, "without the stretch, the record after the changed one breaks the chain")
}

// countingLog reports a fixed number of records, as a stale index does.
type countingLog struct {
	sparseLog
	records uint64
}

func (l *countingLog) Stat(ctx context.Context) (eventstore.LogStat, error) {
	st, err := l.sparseLog.Stat(ctx)
	st.Records = l.records
	return st, err
}

// The header CheckChain reads is the record's own, whatever its events hold.
func TestRecordHeader(t *testing.T) {
	w := newChainer(t)
	recs := w.records(2)
	for i, rec := range recs {
		c, err := eventstore.DecodeCommit(rec)
		require.NoError(t, err)
		h := eventstore.DecodeHeaderForTest(rec)
		require.Equal(t, [3]any{eventstore.FormatChained, c.N, c.Prev}, h, "record %d", i)
	}
	first := recs[0]
	require.Equal(t, [3]any{eventstore.FormatChained, uint64(1), ""}, eventstore.DecodeHeaderForTest(first),
		"the first record has no prev: the events' prev fields are not taken for it")
	require.Equal(t, [3]any{eventstore.FormatLegacy, uint64(0), ""}, eventstore.DecodeHeaderForTest(legacyRecord(1)))
	reordered := []byte(`{"kind":"epoch","events":[{"prev":"no","n":1}],"f":2,"n":7,"prev":"ab","epoch":1}`)
	require.Equal(t, [3]any{eventstore.FormatChained, uint64(7), "ab"}, eventstore.DecodeHeaderForTest(reordered), "another layout is decoded")
}

// A rotated log key: the log's records before the rotation stay under the
// retired key, a writer's epoch record moves the log to the new one, and
// from there a record under the retired key does not verify — whoever holds
// a retired key cannot append. A reader needs the retired keys to verify
// the records before the rotation.
func TestARotatedLogKey(t *testing.T) {
	secret := func(b byte) []byte { return bytes.Repeat([]byte{b}, eventstore.LogKeySize) }
	old, err := eventstore.NewLogKey(secret(1))
	require.NoError(t, err)
	ring, err := eventstore.NewLogKeyRing(secret(2), secret(1))
	require.NoError(t, err)
	require.Equal(t, []string{ring.ID(), old.ID()}, ring.IDs())
	newOnly, err := eventstore.NewLogKey(secret(2))
	require.NoError(t, err)

	w := &chainer{t: t, key: old}
	recs := w.records(2)
	w.key = ring
	recs = append(recs, w.next()) // the epoch record of a writer with the new key
	recs = append(recs, w.next("c3"))
	verify := func(key *eventstore.LogKey, recs ...[]byte) *eventstore.Verification {
		t.Helper()
		v, err := eventstore.VerifyLog(context.Background(), memLog(t, recs...), key, nil)
		require.NoError(t, err)
		return v
	}
	v := verify(ring, recs...)
	require.Nil(t, v.Damage)
	require.Equal(t, ring.ID(), v.Tip.KeyID)

	// Without the retired key, the records before the rotation are foreign.
	v = verify(newOnly, recs...)
	require.NotNil(t, v.Damage)
	require.Equal(t, eventstore.ProblemOtherKey, v.Damage.Problem)
	require.Equal(t, uint64(1), v.Damage.Seq)

	// A record under the retired key after the rotation.
	forged := *w
	forged.key = old
	v = verify(ring, append(slices.Clone(recs), forged.next("forged"))...)
	require.NotNil(t, v.Damage)
	require.Equal(t, eventstore.ProblemRetiredKey, v.Damage.Problem)
	require.Equal(t, uint64(5), v.Damage.Seq)
	require.Equal(t, uint64(4), v.Tip.N, "the records before it verify")

	// The log moves to another key only at an epoch record.
	w2 := &chainer{t: t, key: old}
	early := w2.records(2)
	w2.key = ring
	v = verify(ring, append(early, w2.next("c3"))...)
	require.NotNil(t, v.Damage)
	require.Equal(t, eventstore.ProblemRetiredKey, v.Damage.Problem)
	require.Contains(t, v.Damage.Detail, "epoch")

	// A writer still on the retired key after the rotation.
	oldRing, err := eventstore.NewLogKeyRing(secret(1))
	require.NoError(t, err)
	v = verify(oldRing, recs...)
	require.Equal(t, eventstore.ProblemOtherKey, v.Damage.Problem)
	require.Equal(t, uint64(3), v.Damage.Seq, "the new key's epoch record is foreign to it")
}
