package eventstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/eventstore"
)

// benchRecord is a commit record of one small event, as the committer writes
// under light load.
func benchRecord(b *testing.B) []byte {
	rec, err := eventstore.EncodeCommit(&eventstore.Commit{
		Kind: eventstore.KindEvents, Epoch: 1, Writer: "bench", Time: time.Now(), N: 1,
		Events: []eventstore.Event{{
			ID: "01J00000000000000000000000", Type: "counter.incremented", SchemaVersion: 1, Workspace: "ws",
			AggregateType: "counter", AggregateID: "a", Version: 1, CommandID: "c", Time: time.Now(),
			Data: json.RawMessage(`{"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`),
		}},
	}, testKey)
	require.NoError(b, err)
	return rec
}

// BenchmarkJetStreamAppend appends one record per operation, one at a time,
// on an embedded server that fsyncs every write: the cost of a commit of one.
func BenchmarkJetStreamAppend(b *testing.B) {
	f := setupJetStream(b)
	l := f.newLog(b)
	rec := benchRecord(b)
	ctx := context.Background()
	var last uint64
	b.ResetTimer()
	for range b.N {
		seq, err := l.Append(ctx, rec, last)
		if err != nil {
			b.Fatal(err)
		}
		last = seq
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
}

// BenchmarkCommitter submits one request per operation from many goroutines
// (b.RunParallel, 32 per CPU) through the group committer, each waiting for
// its answer: requests/s and requests per append show the group commit.
func BenchmarkCommitter(b *testing.B) {
	b.Run("jetstream", func(b *testing.B) {
		f := setupJetStream(b)
		benchCommitter(b, f.newLog(b))
	})
	b.Run("memory", func(b *testing.B) {
		benchCommitter(b, eventstore.NewMemoryLog())
	})
}

// BenchmarkCommitterSerial submits one request at a time: with no load to
// batch, each request is committed alone at once, at the cost of one append.
func BenchmarkCommitterSerial(b *testing.B) {
	f := setupJetStream(b)
	l := &hookLog{Log: f.newLog(b)}
	r := startCommitter(b, l, newCounters(), eventstore.GroupConfig{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	base := l.appends.Load()
	b.ResetTimer()
	for i := range b.N {
		q := newReq(fmt.Sprint(i), "a")
		if err := r.c.Submit(context.Background(), q); err != nil {
			b.Fatal(err)
		}
		if o := <-q.done; o.err != nil {
			b.Fatal(o.err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "requests/s")
	b.ReportMetric(float64(b.N)/float64(max(l.appends.Load()-base, 1)), "requests/append")
}

func benchCommitter(b *testing.B, log eventstore.Log) {
	l := &hookLog{Log: log}
	r := startCommitter(b, l, newCounters(), eventstore.GroupConfig{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	base := l.appends.Load()
	var n atomic.Int64
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			q := newReq(fmt.Sprint(i), fmt.Sprintf("agg%d", i%100))
			if err := r.c.Submit(context.Background(), q); err != nil {
				b.Error(err)
				return
			}
			if o := <-q.done; o.err != nil {
				b.Error(o.err)
				return
			}
		}
	})
	b.StopTimer()
	appends := l.appends.Load() - base
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "requests/s")
	b.ReportMetric(float64(b.N)/float64(max(appends, 1)), "requests/append")
}

// BenchmarkJetStreamRead reads a log of 2,000 records from its start, as a
// rebuild or a verification does: records/s.
func BenchmarkJetStreamRead(b *testing.B) {
	f := setupJetStream(b)
	l := f.newLog(b)
	rec := benchRecord(b)
	ctx := context.Background()
	const n = 2000
	var last uint64
	for range n {
		seq, err := l.Append(ctx, rec, last)
		if err != nil {
			b.Fatal(err)
		}
		last = seq
	}
	b.ResetTimer()
	for range b.N {
		got := 0
		if err := l.Read(ctx, 1, func(uint64, []byte) error { got++; return nil }); err != nil {
			b.Fatal(err)
		}
		if got != n {
			b.Fatalf("read %d records, want %d", got, n)
		}
	}
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkCheckChain checks the chain of hashes of a log of 2,000 records
// below its last one, as a start does: records/s.
func BenchmarkCheckChain(b *testing.B) {
	f := setupJetStream(b)
	l := f.newLog(b)
	ctx := context.Background()
	const n = 2000
	var tip eventstore.LogTip
	for i := range n {
		c := &eventstore.Commit{Kind: eventstore.KindEvents, Epoch: 1, Writer: "bench", Time: time.Now(), N: tip.N + 1, Prev: tip.Hash,
			Events: []eventstore.Event{{ID: "01J00000000000000000000000", Type: "counter.incremented", SchemaVersion: 1, Workspace: "ws",
				AggregateType: "counter", AggregateID: fmt.Sprint(i), Version: 1, CommandID: "c", Time: time.Now(),
				Data: json.RawMessage(`{"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)}}}
		rec, err := eventstore.EncodeCommit(c, testKey)
		if err != nil {
			b.Fatal(err)
		}
		seq, err := l.Append(ctx, rec, tip.Seq)
		if err != nil {
			b.Fatal(err)
		}
		tip = tip.Next(seq, c)
	}
	b.ResetTimer()
	for range b.N {
		if err := eventstore.CheckChain(ctx, l, tip, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "records/s")
}
