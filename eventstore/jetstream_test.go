package eventstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/eventstore/logtest"
)

// jsFixture is one embedded server shared by the logs of a test; each log
// gets its own stream and subject prefix.
type jsFixture struct {
	nc *nats.Conn
	js jetstream.JetStream
	n  atomic.Int64
}

func setupJetStream(t testing.TB) *jsFixture {
	ns := logtest.StartServer(t)
	nc, js := logtest.Connect(t, ns)
	return &jsFixture{nc: nc, js: js}
}

func (f *jsFixture) newLog(t testing.TB) *eventstore.JetStreamLog {
	t.Helper()
	i := f.n.Add(1)
	l, err := eventstore.NewJetStreamLog(context.Background(), f.js, eventstore.JetStreamConfig{
		Stream: fmt.Sprintf("LOG_%d", i),
		Prefix: fmt.Sprintf("t%d", i),
	})
	require.NoError(t, err)
	return l
}

func TestJetStreamLog(t *testing.T) {
	f := setupJetStream(t)
	logtest.Run(t, func(t *testing.T) eventstore.Log { return f.newLog(t) })
}

func TestJetStreamLogStreamConfig(t *testing.T) {
	f := setupJetStream(t)
	ctx := t.Context()
	l, err := eventstore.NewJetStreamLog(ctx, f.js, eventstore.JetStreamConfig{})
	require.NoError(t, err)
	require.Equal(t, "DWR_LOG", l.Stream())
	require.Equal(t, "dwr.log.0", l.Subject())

	s, err := f.js.Stream(ctx, "DWR_LOG")
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	require.Equal(t, []string{"dwr.log.>"}, cfg.Subjects)
	require.Equal(t, jetstream.FileStorage, cfg.Storage)
	require.Equal(t, jetstream.LimitsPolicy, cfg.Retention)
	require.Equal(t, 1, cfg.Replicas)
	require.Equal(t, 2*time.Minute, cfg.Duplicates)
	require.True(t, cfg.AllowDirect)
	require.True(t, cfg.DenyDelete)
	require.True(t, cfg.DenyPurge)
	require.Greater(t, int(cfg.MaxMsgSize), eventstore.MaxRecordBytes)
	require.Less(t, int(cfg.MaxMsgSize), 1<<20, "below the default max_payload")

	_, err = eventstore.NewJetStreamLog(ctx, f.js, eventstore.JetStreamConfig{})
	require.NoError(t, err, "ensuring the stream again is a no-op")

	_, err = eventstore.NewJetStreamLog(ctx, f.js, eventstore.JetStreamConfig{Prefix: "a.*", Partition: "x.y", Replicas: 9})
	require.ErrorContains(t, err, "prefix")
	require.ErrorContains(t, err, "partition")
	require.ErrorContains(t, err, "replicas")
}

// TestJetStreamExpectedZero pins what nats-server does with an expected
// per-subject sequence of 0: it means "no message on this subject yet", even
// when other subjects of the stream have messages.
func TestJetStreamExpectedZero(t *testing.T) {
	f := setupJetStream(t)
	ctx := t.Context()
	p0, err := eventstore.NewJetStreamLog(ctx, f.js, eventstore.JetStreamConfig{Partition: "0"})
	require.NoError(t, err)
	p1, err := eventstore.NewJetStreamLog(ctx, f.js, eventstore.JetStreamConfig{Partition: "1"})
	require.NoError(t, err)

	s0, err := p0.Append(ctx, []byte(`{"p":0}`), 0)
	require.NoError(t, err)
	s1, err := p1.Append(ctx, []byte(`{"p":1}`), 0)
	require.NoError(t, err, "expected 0 on an empty subject of a non-empty stream")
	require.Equal(t, s0+1, s1, "partitions share the stream's sequences")

	_, err = p0.Append(ctx, []byte(`{"p":0,"n":2}`), 0)
	require.ErrorIs(t, err, eventstore.ErrConflict, "expected 0 on a subject that has a message")
	var apiErr *jetstream.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, jetstream.JSErrCodeStreamWrongLastSequence, apiErr.ErrorCode)

	s2, err := p0.Append(ctx, []byte(`{"p":0,"n":2}`), s0)
	require.NoError(t, err, "the partition's own last sequence, not the stream's")
	require.Equal(t, s1+1, s2)

	var got []uint64
	require.NoError(t, p0.Read(ctx, 1, func(seq uint64, _ []byte) error { got = append(got, seq); return nil }))
	require.Equal(t, []uint64{s0, s2}, got, "a partition reads only its own records")
	st, err := p0.Stat(ctx)
	require.NoError(t, err)
	require.Equal(t, eventstore.LogStat{Records: 2, First: s0, Last: s2}, st, "a partition counts only its own records")
}

// An existing log stream is checked, never updated: a change that lets it
// lose records, or fewer replicas than configured, refuses to open naming
// each setting; the maintenance open never creates one.
func TestJetStreamLogStreamChecked(t *testing.T) {
	f := setupJetStream(t)
	ctx := t.Context()
	_, err := eventstore.OpenJetStreamLog(ctx, f.js, eventstore.JetStreamConfig{})
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound, "the maintenance open does not create the stream")
	_, err = eventstore.NewJetStreamLog(ctx, f.js, eventstore.JetStreamConfig{})
	require.NoError(t, err)
	_, err = eventstore.OpenJetStreamLog(ctx, f.js, eventstore.JetStreamConfig{})
	require.NoError(t, err)

	_, err = eventstore.NewJetStreamLog(ctx, f.js, eventstore.JetStreamConfig{Replicas: 3})
	var ce *eventstore.StreamConfigError
	require.ErrorAs(t, err, &ce, "fewer replicas than configured")
	require.ErrorIs(t, err, eventstore.ErrIntegrity)
	require.Equal(t, []eventstore.ConfigDiff{{Field: "num_replicas", Want: ">= 3", Got: "1"}}, ce.Diffs)

	s, err := f.js.Stream(ctx, "DWR_LOG")
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	cfg.MaxMsgs, cfg.MaxAge = 3, time.Hour
	_, err = f.js.UpdateStream(ctx, cfg)
	require.NoError(t, err, "anyone with JetStream API access can do this")
	_, err = eventstore.NewJetStreamLog(ctx, f.js, eventstore.JetStreamConfig{})
	require.ErrorAs(t, err, &ce)
	require.Equal(t, []eventstore.ConfigDiff{
		{Field: "max_msgs", Want: "-1 (unlimited)", Got: "3"},
		{Field: "max_age", Want: "0 (unlimited)", Got: "1h0m0s"},
	}, ce.Diffs)
	require.ErrorContains(t, err, "max_msgs is 3, want -1 (unlimited)")
	_, err = eventstore.OpenJetStreamLog(ctx, f.js, eventstore.JetStreamConfig{})
	require.ErrorAs(t, err, &ce)
	s, err = f.js.Stream(ctx, "DWR_LOG")
	require.NoError(t, err)
	require.Equal(t, int64(3), s.CachedInfo().Config.MaxMsgs, "the stream was left as it was found")
}

// TestJetStreamRetryOnSingleServer pins that a single server checks the
// expectation before deduplicating: a raw retry of a landed publish (same
// message id and expectation) fails with 10071 instead of returning a
// duplicate ack, which is why Append looks the record up on a conflict.
func TestJetStreamRetryOnSingleServer(t *testing.T) {
	f := setupJetStream(t)
	ctx := t.Context()
	l := f.newLog(t)
	publish := func() (*jetstream.PubAck, error) {
		return f.js.Publish(ctx, l.Subject(), []byte(`{}`),
			jetstream.WithMsgID("same"), jetstream.WithExpectLastSequencePerSubject(0))
	}
	ack, err := publish()
	require.NoError(t, err)
	_, err = publish()
	var apiErr *jetstream.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, jetstream.JSErrCodeStreamWrongLastSequence, apiErr.ErrorCode)

	// Without an expectation the same id is a duplicate.
	dup, err := f.js.Publish(ctx, l.Subject(), []byte(`{}`), jetstream.WithMsgID("same"))
	require.NoError(t, err)
	require.True(t, dup.Duplicate)
	require.Equal(t, ack.Sequence, dup.Sequence)
}

func TestJetStreamReadDeletesItsConsumer(t *testing.T) {
	f := setupJetStream(t)
	ctx := t.Context()
	l := f.newLog(t)
	_, err := l.Append(ctx, []byte(`{}`), 0)
	require.NoError(t, err)
	require.NoError(t, l.Read(ctx, 1, func(uint64, []byte) error { return nil }))
	s, err := f.js.Stream(ctx, l.Stream())
	require.NoError(t, err)
	require.Zero(t, s.CachedInfo().State.Consumers)
}

// The end of a read whose replica lags is asked of the stream's leader,
// record by record: it gives the partition's records from from to until,
// in order, with their data, and none of another partition's.
func TestJetStreamReadFromLeader(t *testing.T) {
	f := setupJetStream(t)
	ctx := t.Context()
	open := func(partition string) *eventstore.JetStreamLog {
		l, err := eventstore.NewJetStreamLog(ctx, f.js, eventstore.JetStreamConfig{Stream: "SHARED", Prefix: "s", Partition: partition})
		require.NoError(t, err)
		return l
	}
	a, b := open("a"), open("b")
	type rec struct {
		seq  uint64
		data string
	}
	var want []rec
	var lastA, lastB uint64
	for i := range 6 {
		seq, err := a.Append(ctx, []byte(fmt.Sprintf("a%d", i)), lastA)
		require.NoError(t, err)
		lastA = seq
		want = append(want, rec{seq, fmt.Sprintf("a%d", i)})
		lastB, err = b.Append(ctx, []byte(fmt.Sprintf("b%d", i)), lastB)
		require.NoError(t, err)
	}
	read := func(from, until uint64) []rec {
		var got []rec
		require.NoError(t, a.ReadFromLeaderForTest(ctx, from, until, func(seq uint64, r []byte) error {
			got = append(got, rec{seq, string(r)})
			return nil
		}))
		return got
	}
	require.Equal(t, want, read(1, lastA), "the whole partition")
	require.Equal(t, want[2:4], read(want[1].seq+1, want[3].seq), "from after a record to another")
	require.Empty(t, read(lastA+1, lastB), "nothing after the partition's last record")
}

// An append that an account's JetStream limit refuses (an operator's
// cluster sets them) is ErrStorageFull, as one the server's store limit
// refuses: nothing was appended.
func TestAppendRefusedByTheAccountsLimitIsStorageFull(t *testing.T) {
	o := &server.Options{ServerName: "dwr-test", Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		SyncAlways: true, NoSigs: true, NoLog: true}
	require.NoError(t, o.ProcessConfigString(`accounts: { A: { jetstream: { max_file: 262144, max_mem: 1048576 }, users: [{user: a, password: a}] } }`))
	o.JetStream, o.StoreDir = true, t.TempDir()
	ns, err := server.NewServer(o)
	require.NoError(t, err)
	ns.Start()
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	require.True(t, ns.ReadyForConnections(10*time.Second))
	nc, err := nats.Connect("", nats.InProcessServer(ns), nats.UserInfo("a", "a"))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := t.Context()
	l, err := eventstore.NewJetStreamLog(ctx, js, eventstore.JetStreamConfig{Stream: "LOG_ACC", Prefix: "acc"})
	require.NoError(t, err)
	var last uint64
	for i := 0; ; i++ {
		seq, err := l.Append(ctx, make([]byte, 32<<10), last)
		if err != nil {
			require.ErrorIs(t, err, eventstore.ErrStorageFull)
			break
		}
		last = seq
		require.Less(t, i, 64, "the account has a limit")
	}
	now, err := l.LastSeq(ctx)
	require.NoError(t, err)
	require.Equal(t, last, now, "nothing of the refused append")
}

// An append whose answer was lost with the stream's old leader publishes
// again as soon as a new leader is announced, not after its attempt's
// timeout (here a minute). The stream is gone and a subscriber that never
// answers stands in for a leader that went away with the publish.
func TestAnAppendTriesAgainWhenTheLeaderChanges(t *testing.T) {
	f := setupJetStream(t)
	ctx := context.Background()
	l, err := eventstore.NewJetStreamLog(ctx, f.js, eventstore.JetStreamConfig{Stream: "LOG_LEADER", Prefix: "leader", AttemptTimeout: time.Minute})
	require.NoError(t, err)
	stop, err := l.RetryOnChange(f.nc)
	require.NoError(t, err)
	defer stop()
	require.NoError(t, f.js.DeleteStream(ctx, "LOG_LEADER"))
	publishes := make(chan struct{}, 16)
	sub, err := f.nc.Subscribe("leader.log.0", func(*nats.Msg) { publishes <- struct{}{} })
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	require.NoError(t, f.nc.Flush())

	actx, cancel := context.WithCancel(ctx)
	appended := make(chan error, 1)
	go func() {
		_, err := l.Append(actx, []byte(`{}`), 0)
		appended <- err
	}()
	wait := func(what string) {
		t.Helper()
		select {
		case <-publishes:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no publish within 10 s (an attempt waits a minute)", what)
		}
	}
	wait("the first attempt")
	require.NoError(t, f.nc.Publish("$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.LOG_LEADER", []byte(`{}`)))
	wait("the attempt after the leader changed")
	require.NoError(t, f.nc.Publish("$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.ANOTHER", []byte(`{}`)))
	select {
	case <-publishes:
		t.Fatal("another stream's leader made the append publish again")
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-appended:
		require.ErrorIs(t, err, eventstore.ErrUnknownOutcome)
	case <-time.After(10 * time.Second):
		t.Fatal("the append did not end with its context")
	}
}

// A read of large records pulls a few MiB at a time: the connection it
// reads on is not cut as a slow consumer, and every record is read. (It
// pulled 256 records at once: 54 MiB of 900 KiB records passed the
// connection's max_pending, the server cut the connection, and the read
// returned none of them, without an error.)
func TestJetStreamLogReadsLargeRecordsAFewAtATime(t *testing.T) {
	ns, err := server.NewServer(&server.Options{ServerName: "dwr-test", Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: t.TempDir(), JetStreamMaxMemory: 64 << 20, JetStreamMaxStore: 1 << 30, NoSigs: true, NoLog: true,
		MaxPending: 16 << 20}) // the default is 64 MiB: a smaller log shows the same
	require.NoError(t, err)
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	require.True(t, ns.ReadyForConnections(10*time.Second))
	var cut atomic.Int64
	nc, err := nats.Connect("", nats.InProcessServer(ns), nats.DisconnectErrHandler(func(*nats.Conn, error) { cut.Add(1) }))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	l, err := eventstore.NewJetStreamLog(t.Context(), js, eventstore.JetStreamConfig{Stream: "LOG_LARGE", Prefix: "large"})
	require.NoError(t, err)

	rec := make([]byte, 900<<10)
	var last uint64
	for range 60 {
		last, err = l.Append(t.Context(), rec, last)
		require.NoError(t, err)
	}
	for _, from := range []uint64{1, 30} {
		var seqs []uint64
		require.NoError(t, l.Read(t.Context(), from, func(seq uint64, _ []byte) error {
			seqs = append(seqs, seq)
			return nil
		}))
		require.Len(t, seqs, int(last-from)+1, "every record from %d", from)
		require.Equal(t, from, seqs[0])
		require.Equal(t, last, seqs[len(seqs)-1])
	}
	require.Zero(t, cut.Load(), "the connection was cut")
}
