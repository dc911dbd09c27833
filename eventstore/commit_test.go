package eventstore_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/eventstore"
)

func sampleCommit() *eventstore.Commit {
	at := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.FixedZone("CET", 3600))
	return &eventstore.Commit{
		Kind: eventstore.KindEvents, Epoch: 3, Writer: "w1", Time: at, N: 4, Prev: "c0ffee",
		Events: []eventstore.Event{
			{ID: "01J0000000000000000000000A", Type: "task.created", SchemaVersion: 1, Workspace: "ws1",
				AggregateType: "task", AggregateID: "t1", Version: 1, CommandID: "c1", Time: at,
				Data: json.RawMessage(`{ "title": "a <b> & c" }`)},
			{ID: "01J0000000000000000000000B", Type: "task.started", SchemaVersion: 2, Workspace: "ws1",
				AggregateType: "task", AggregateID: "t1", Version: 2, CommandID: "c2", CorrelationID: "r1",
				Actor: "bob", Time: at, PrevHash: "abc", Data: json.RawMessage(`{}`)},
		},
		Results: []eventstore.CommandResult{{Workspace: "ws1", CommandID: "c1", Reply: json.RawMessage(`{"ok":true}`)}},
	}
}

func TestCommitRoundTrip(t *testing.T) {
	c := sampleCommit()
	b, err := eventstore.EncodeCommit(c, testKey)
	require.NoError(t, err)
	require.Equal(t, time.UTC, c.Time.Location(), "times are stored in UTC")
	require.True(t, testKey.Authentic(b))

	got, err := eventstore.DecodeCommit(b)
	require.NoError(t, err)
	require.Equal(t, eventstore.FormatChained, got.Format)
	require.Equal(t, uint64(4), got.N)
	require.Equal(t, "c0ffee", got.Prev)
	require.Equal(t, testKey.ID(), got.KeyID)
	require.Equal(t, c.Hash, got.Hash, "the hash of the stored bytes")
	require.Len(t, got.Hash, 64)
	require.Equal(t, c.Kind, got.Kind)
	require.Equal(t, c.Epoch, got.Epoch)
	require.Equal(t, c.Writer, got.Writer)
	require.True(t, c.Time.Equal(got.Time))
	require.Equal(t, c.Results, got.Results)
	require.Len(t, got.Events, 2)
	for i := range got.Events {
		require.Equal(t, c.Events[i].Raw, got.Events[i].Raw, "decoded Raw is the stored bytes")
		require.Equal(t, c.Events[i].Hash(), got.Events[i].Hash())
		require.True(t, bytes.Contains(b, got.Events[i].Raw), "the record embeds each event's Raw")
		require.Equal(t, c.Events[i].Version, got.Events[i].Version)
		require.Equal(t, c.Events[i].PrevHash, got.Events[i].PrevHash)
	}
	require.JSONEq(t, `{"title":"a <b> & c"}`, string(got.Events[0].Data))

	again, err := eventstore.EncodeCommit(got, testKey)
	require.NoError(t, err)
	require.Equal(t, b, again, "encoding is deterministic")

	other := mustKey(bytes.Repeat([]byte{8}, eventstore.LogKeySize))
	require.NotEqual(t, testKey.ID(), other.ID())
	require.False(t, other.Authentic(b), "another key does not authenticate the record")
	for _, i := range []int{0, len(b) / 3, len(b) / 2, len(b) - 80, len(b) - 3} {
		flipped := bytes.Clone(b)
		flipped[i] ^= 0x01
		require.False(t, testKey.Authentic(flipped), "a flipped byte at %d of %d", i, len(b))
	}
}

// A record of the first format (before the log was chained) still decodes,
// without position, previous hash or key.
func TestDecodeLegacyRecord(t *testing.T) {
	c, err := eventstore.DecodeCommit([]byte(`{"f":1,"kind":"events","epoch":2,"writer":"w","time":"2026-01-01T00:00:00Z",` +
		`"events":[{"id":"e","type":"x.y","v":1,"ws":"w","agg":"x","agg_id":"1","ver":1,"cmd":"c","time":"2026-01-01T00:00:00Z","data":{}}],` +
		`"results":[{"ws":"w","cmd":"c","reply":{}}]}`))
	require.NoError(t, err)
	require.Equal(t, eventstore.FormatLegacy, c.Format)
	require.Zero(t, c.N)
	require.Empty(t, c.KeyID)
	require.Equal(t, []string{"w/c"}, c.Commands())
}

func TestEventHash(t *testing.T) {
	var e eventstore.Event
	require.Empty(t, e.Hash(), "no stored bytes, no hash")
	e.Raw = []byte("abc")
	require.Equal(t, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", e.Hash())
}

func TestEncodeCommitRejects(t *testing.T) {
	for name, c := range map[string]*eventstore.Commit{
		"unknown kind":     {Kind: "other", Epoch: 1, N: 1},
		"no epoch":         {Kind: eventstore.KindEpoch, N: 1},
		"no position":      {Kind: eventstore.KindEpoch, Epoch: 1},
		"accept without":   {Kind: eventstore.KindAccept, Epoch: 1, N: 1},
		"events accepting": {Kind: eventstore.KindEvents, Epoch: 1, N: 1, Accept: &eventstore.Acceptance{}},
		"epoch with event": {Kind: eventstore.KindEpoch, Epoch: 1, N: 1, Events: sampleCommit().Events},
		"event no type":    {Kind: eventstore.KindEvents, Epoch: 1, N: 1, Events: []eventstore.Event{{AggregateType: "t", AggregateID: "1", Version: 1}}},
		"event no version": {Kind: eventstore.KindEvents, Epoch: 1, N: 1, Events: []eventstore.Event{{Type: "x", AggregateType: "t", AggregateID: "1"}}},
		"bad data":         {Kind: eventstore.KindEvents, Epoch: 1, N: 1, Events: []eventstore.Event{{Type: "x", AggregateType: "t", AggregateID: "1", Version: 1, Data: json.RawMessage(`{`)}}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := eventstore.EncodeCommit(c, testKey)
			require.ErrorContains(t, err, "eventstore: ")
		})
	}

	big := sampleCommit()
	big.Events[0].Data = json.RawMessage(`"` + strings.Repeat("x", eventstore.MaxRecordBytes) + `"`)
	_, err := eventstore.EncodeCommit(big, testKey)
	require.ErrorIs(t, err, eventstore.ErrTooLarge)
	_, err = eventstore.EncodeCommit(sampleCommit(), nil)
	require.ErrorContains(t, err, "no log key")
}

func TestDecodeCommitRejects(t *testing.T) {
	_, err := eventstore.DecodeCommit(bytes.Repeat([]byte(" "), eventstore.MaxRecordBytes+1))
	require.ErrorIs(t, err, eventstore.ErrTooLarge, "refused before decoding")
	for name, b := range map[string]string{
		"not json":       `{`,
		"no format":      `{"kind":"epoch","epoch":1}`,
		"future format":  `{"f":3,"kind":"epoch","epoch":1}`,
		"unknown kind":   `{"f":1,"kind":"x","epoch":1}`,
		"v1 with a mac":  `{"f":1,"kind":"epoch","epoch":1,"n":1}`,
		"v2 no position": `{"f":2,"kind":"epoch","epoch":1,"kid":"k","mac":"` + strings.Repeat("0", 64) + `"}`,
		"v2 no mac":      `{"f":2,"kind":"epoch","epoch":1,"n":1,"kid":"k"}`,
		"v2 mac inside":  `{"f":2,"kind":"epoch","epoch":1,"n":1,"kid":"k","mac":"` + strings.Repeat("0", 64) + `","x":1}`,
		"bad event":      `{"f":1,"kind":"events","epoch":1,"events":[{"type":"x"}]}`,
		"event not json": `{"f":1,"kind":"events","epoch":1,"events":[1]}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := eventstore.DecodeCommit([]byte(b))
			require.ErrorIs(t, err, eventstore.ErrCorrupt)
		})
	}
}

func FuzzDecodeCommit(f *testing.F) {
	b, err := eventstore.EncodeCommit(sampleCommit(), testKey)
	require.NoError(f, err)
	f.Add(b)
	f.Add([]byte(`{"f":1,"kind":"epoch","epoch":1,"writer":"w","time":"2026-01-01T00:00:00Z"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := eventstore.DecodeCommit(b)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes, and each event keeps its stored bytes.
		raws := make([][]byte, len(c.Events))
		for i := range c.Events {
			raws[i] = c.Events[i].Raw
		}
		if c.N == 0 {
			c.N = 1 // a record of the first format has no position
		}
		if _, err := eventstore.EncodeCommit(c, testKey); err != nil {
			t.Fatalf("decoded record does not re-encode: %v", err)
		}
		for i := range c.Events {
			if !json.Valid(raws[i]) {
				t.Fatalf("event %d raw is not JSON", i)
			}
		}
	})
}
