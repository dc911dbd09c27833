package eventstore

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// internalKey authenticates the records of the package's internal tests.
func internalKey(t testing.TB) *LogKey {
	k, err := NewLogKey([]byte("0123456789abcdef0123456789abcdef"))
	require.NoError(t, err)
	return k
}

// EncodeCommit splices the encoded events into the record: the bytes must be
// exactly those json.Marshal gives for the record's wire shape, whatever the
// events hold (HTML characters, line separators, nested JSON, no results),
// and the MAC covers everything before it.
func TestEncodeCommitIsTheWireShapeMarshalled(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600))
	key := internalKey(t)
	for _, c := range []*Commit{
		{Kind: KindEpoch, Epoch: 7, Writer: "w<1>", Time: at, N: 1},
		{Kind: KindAccept, Epoch: 7, Writer: "w", Time: at, N: 9, Prev: "ab", Accept: &Acceptance{AfterSeq: 7, AfterN: 8,
			Problem: "hmac <mismatch>", UpToSeq: 12, Discarded: 4, Lost: []string{"ws/c&1"}}},
		{Kind: KindEvents, Epoch: 1, Writer: "w", Time: at, N: 2, Prev: "cd", Events: []Event{
			{ID: "e1", Type: "task.created", SchemaVersion: 2, Workspace: "ws", AggregateType: "task", AggregateID: "t1",
				Version: 1, CommandID: "c&1", Time: at, Data: json.RawMessage(` {"a": "<b> & \u2028", "n": [1, 2.50, {"x": null}]} `)},
			{ID: "e2", Type: "task.ready", SchemaVersion: 1, Workspace: "ws", AggregateType: "task", AggregateID: "t1",
				Version: 2, CommandID: "c&1", Time: at, Data: json.RawMessage(`{}`), PrevHash: "abc"},
		}, Results: []CommandResult{{Workspace: "ws", CommandID: "c&1", Reply: json.RawMessage(`{"id": "t1", "note": "<ok>"}`)}}},
		{Kind: KindEvents, Epoch: 1, Writer: "w", Time: at, N: 3, Prev: "ef", Events: []Event{
			{ID: "e3", Type: "goal.created", SchemaVersion: 1, Workspace: "ws", AggregateType: "goal", AggregateID: "g",
				Version: 1, Time: at, Data: json.RawMessage(`{"title":"é"}`)}}},
	} {
		got, err := EncodeCommit(c, key)
		require.NoError(t, err)
		_, mac, err := splitMAC(got)
		require.NoError(t, err)
		w := commitWire{Format: FormatChained, Kind: c.Kind, Epoch: c.Epoch, Writer: c.Writer, Time: c.Time, N: c.N, Prev: c.Prev,
			Results: c.Results, Accept: c.Accept, KeyID: key.ID(), MAC: mac}
		for _, e := range c.Events {
			w.Events = append(w.Events, e.Raw)
		}
		want, err := json.Marshal(&w)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
		require.True(t, key.Authentic(got))
		back, err := DecodeCommit(got)
		require.NoError(t, err)
		require.Len(t, back.Events, len(c.Events))
		require.Equal(t, c.Accept, back.Accept)
		require.Equal(t, hashBytes(got), back.Hash)
	}
}

// BenchmarkEncodeCommit encodes a record of 8 events of ~300 bytes with their
// command results, as a busy writer's batch holds.
func BenchmarkEncodeCommit(b *testing.B) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	data := json.RawMessage(`{"goal_id":"01JWTD0Q80H4QX4FR84G98PBSK","plan_version":1,"spec":{"key":"extract","queue":"shell","input":{"doc":"s3://bucket/acme.pdf"},"retry":{"max_attempts":5}},"state":"ready"}`)
	key := internalKey(b)
	mk := func() *Commit {
		c := &Commit{Kind: KindEvents, Epoch: 1, Writer: "w", Time: at, N: 1}
		for i := range 8 {
			c.Events = append(c.Events, Event{ID: "01JWTN5C28CB1VEX7BA94DPG5F", Type: "task.created", SchemaVersion: 2, Workspace: "default",
				AggregateType: "task", AggregateID: "01JWTD0Q80H4QX4FR84G98PBSK", Version: uint64(i + 1), CommandID: "01JWTN5C28B3ATPB6K3VHHA4M8",
				Time: at, Data: data})
			c.Results = append(c.Results, CommandResult{Workspace: "default", CommandID: "01JWTN5C28B3ATPB6K3VHHA4M8",
				Reply: json.RawMessage(`{"id":"01JWTD0Q80H4QX4FR84G98PBSK","state":"ready","version":1}`)})
		}
		return c
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeCommit(mk(), key); err != nil {
			b.Fatal(err)
		}
	}
}

// The committer encodes each event once, as ChainTx.Link links it, and
// splices those bytes into the record: the record is the one EncodeCommit
// makes, which encodes the events itself.
func TestALinkedBatchEncodesAsEncodeCommitDoes(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600))
	key := internalKey(t)
	events := func() []Event {
		return []Event{
			{ID: "e1", Type: "task.created", SchemaVersion: 2, Workspace: "ws", AggregateType: "task", AggregateID: "t1",
				CommandID: "c&1", Time: at, Data: json.RawMessage(` {"a": "<b> & \u2028", "n": [1, 2.50]} `)},
			{ID: "e2", Type: "task.ready", SchemaVersion: 1, Workspace: "ws", AggregateType: "task", AggregateID: "t1",
				CommandID: "c&1", Time: at, Data: json.RawMessage(`{}`)},
			{ID: "e3", Type: "goal.created", SchemaVersion: 1, Workspace: "ws", AggregateType: "goal", AggregateID: "g",
				Time: at, Data: json.RawMessage(`{"title":"é"}`)},
		}
	}
	linked := &Commit{Kind: KindEvents, Epoch: 1, Writer: "w", Time: at, N: 2, Prev: "cd", Events: events(),
		Results: []CommandResult{{Workspace: "ws", CommandID: "c&1", Reply: json.RawMessage(`{"id": "t1"}`)}}}
	tx := NewChainVerifier().Begin()
	for i := range linked.Events {
		require.NoError(t, tx.Link(&linked.Events[i]))
	}
	got, err := encodeCommit(linked, key, true)
	require.NoError(t, err)

	plain := *linked
	plain.Events = events()
	for i := range plain.Events { // what Link set, without its encoding
		plain.Events[i].Version, plain.Events[i].PrevHash = linked.Events[i].Version, linked.Events[i].PrevHash
	}
	want, err := EncodeCommit(&plain, key)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))
	require.Equal(t, plain.Hash, linked.Hash)
}

// The record is encoding/json's bytes for any valid text the events and
// results hold — control and HTML characters, line separators — and any
// JSON payload: the encoder on the hot path (encoding/json's behaviour on the
// v2 engine) writes what a record written before it would hold. Invalid
// UTF-8 (a command id from a header, say) is replaced by U+FFFD by both, as
// the character itself rather than encoding/json's \ufffd escape: the same
// values once decoded, and the hash chain covers the stored bytes.
func TestEncodeCommitIsTheWireShapeMarshalledForAnyText(t *testing.T) {
	key := internalKey(t)
	text := rapid.OneOf(rapid.String(), rapid.StringOf(rapid.RuneFrom([]rune{'<', '>', '&', '\u2028', '\u2029', '"', '\\', '\x00', '\x1f', '\x7f', 'é', '\ufffd'})),
		rapid.Map(rapid.SliceOf(rapid.Byte()), func(b []byte) string { return string(b) }))
	rapid.Check(t, func(t *rapid.T) {
		at := time.Unix(rapid.Int64Range(0, 1<<35).Draw(t, "sec"), rapid.Int64Range(0, 999_999_999).Draw(t, "nsec"))
		payload := map[string]any{text.Draw(t, "k"): text.Draw(t, "v"), "n": rapid.Float64().Draw(t, "n"),
			"list": []any{text.Draw(t, "item"), rapid.Int().Draw(t, "i"), nil, true}}
		data, err := json.Marshal(payload)
		require.NoError(t, err)
		c := &Commit{Kind: KindEvents, Epoch: 1, Writer: "w" + text.Draw(t, "writer"), Time: at, N: 2, Prev: "cd", Events: []Event{{
			ID: text.Draw(t, "id"), Type: "task.created", SchemaVersion: 2, Workspace: text.Draw(t, "ws"), AggregateType: "task",
			AggregateID: "t" + text.Draw(t, "agg"), Version: 1, CommandID: text.Draw(t, "cmd"), CorrelationID: text.Draw(t, "corr"),
			Actor: text.Draw(t, "actor"), Time: at, Data: data}},
			Results: []CommandResult{{Workspace: "ws", CommandID: text.Draw(t, "cmd2"), Actor: text.Draw(t, "actor2"), Reply: data,
				Body: text.Draw(t, "body")}}}
		got, err := EncodeCommit(c, key)
		require.NoError(t, err)
		_, mac, err := splitMAC(got)
		require.NoError(t, err)
		w := commitWire{Format: FormatChained, Kind: c.Kind, Epoch: c.Epoch, Writer: c.Writer, Time: c.Time, N: c.N, Prev: c.Prev,
			Results: c.Results, KeyID: key.ID(), MAC: mac}
		for _, e := range c.Events {
			w.Events = append(w.Events, e.Raw)
		}
		want, err := json.Marshal(&w)
		require.NoError(t, err)
		if utf8.Valid(want) && !bytes.Contains(want, []byte(`\ufffd`)) {
			require.Equal(t, string(want), string(got))
		}
		var wantV, gotV any
		require.NoError(t, json.Unmarshal(want, &wantV))
		require.NoError(t, json.Unmarshal(got, &gotV))
		require.Equal(t, wantV, gotV, "the same record once decoded")
		back, err := DecodeCommit(got)
		require.NoError(t, err)
		require.Equal(t, c.Events[0].Raw, back.Events[0].Raw)
	})
}
