package servicetest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dwr-run/dwr/eventstore"
)

// OnStopped runs fn with a JetStream context on the data directory of a
// stopped service (OpenStopped), as someone with JetStream API access (or a
// fault) would change it. The server is shut down when fn returns; fn has
// 20 seconds.
func OnStopped(t testing.TB, dir string, fn func(ctx context.Context, js jetstream.JetStream)) {
	t.Helper()
	srv, nc := OpenStopped(t, dir)
	defer srv.Shutdown()
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("servicetest: JetStream: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fn(ctx, js)
}

// Forge publishes on the log subject (dwr.log.0) a record that is chained
// exactly as the writer would chain the next one and authenticated under
// key, by writer (the last record's writer when empty) — or, when key is nil, a copy of the last record:
// what a client able to publish on dwr.log.> could do. It returns the
// forged record's stream sequence.
func Forge(t testing.TB, ctx context.Context, js jetstream.JetStream, key *eventstore.LogKey, writer string) uint64 {
	t.Helper()
	fatal := func(what string, err error) {
		if err != nil {
			t.Fatalf("servicetest: forge: %s: %v", what, err)
		}
	}
	s, err := js.Stream(ctx, "DWR_LOG")
	fatal("the log stream", err)
	last, err := s.GetLastMsgForSubject(ctx, "dwr.log.0")
	fatal("the last record", err)
	rec := last.Data
	if key != nil {
		prev, err := eventstore.DecodeCommit(last.Data)
		fatal("decode the last record", err)
		now := time.Now()
		if writer == "" {
			writer = prev.Writer
		}
		rec, err = eventstore.EncodeCommit(&eventstore.Commit{Kind: eventstore.KindEvents, Epoch: prev.Epoch, Writer: writer, Time: now,
			N: prev.N + 1, Prev: prev.Hash, Events: []eventstore.Event{{ID: "01FORGED00000000000000000000", Type: "workspace.created",
				SchemaVersion: 1, Workspace: "evil", AggregateType: "workspace", AggregateID: "evil", Version: 1, CommandID: "forged",
				Time: now, Data: json.RawMessage(`{"name":"evil"}`)}},
			Results: []eventstore.CommandResult{{Workspace: "evil", CommandID: "forged", Reply: json.RawMessage(`{}`)}}}, key)
		fatal("encode", err)
	}
	ack, err := js.Publish(ctx, "dwr.log.0", rec)
	fatal("publish", err)
	return ack.Sequence
}
