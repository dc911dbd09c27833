package eventstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/eventstore/logtest"
	"github.com/dwr-run/dwr/schemas"
)

func newKey(t *testing.T) *eventstore.DataKey {
	raw := make([]byte, eventstore.DataKeyBytes)
	_, _ = rand.Read(raw)
	k, err := eventstore.NewDataKey(raw)
	require.NoError(t, err)
	return k
}

// A sealed payload is a JSON string that opens to the payload, only in its
// workspace and scope; sealing is deterministic; its size is its
// plaintext's.
func TestSealOpens(t *testing.T) {
	k := newKey(t)
	payload := json.RawMessage(`{"card": "4111 1111 1111 1111", "note": "a \"quoted\" word"}`)
	sealed := k.Seal("acme", "w", payload)
	require.True(t, schemas.IsSealed(sealed))
	require.True(t, json.Valid(sealed))
	require.NotContains(t, string(sealed), "4111")
	require.Equal(t, len(payload), schemas.PayloadSize(sealed))
	require.Equal(t, string(sealed), string(k.Seal("acme", "w", payload)), "deterministic")
	require.NotEqual(t, string(sealed), string(k.Seal("acme", "g.01K", payload)), "bound to its scope")
	require.Equal(t, string(sealed), string(k.Seal("acme", "w", sealed)), "sealed once")
	require.Equal(t, "null", string(k.Seal("acme", "w", json.RawMessage("null"))))

	keys := func(ws, scope string) (*eventstore.DataKey, error) { return k, nil }
	doc := []byte(`{"input":` + string(sealed) + `,"other":"x","again":[` + string(sealed) + `]}`)
	out, err := eventstore.OpenAll(doc, "acme", keys)
	require.NoError(t, err)
	require.JSONEq(t, `{"input":`+string(payload)+`,"other":"x","again":[`+string(payload)+`]}`, string(out))

	// Elsewhere it does not open: another workspace, another key, a flipped byte.
	_, err = eventstore.OpenAll(doc, "other", keys)
	require.Error(t, err)
	_, err = eventstore.OpenAll(doc, "acme", func(string, string) (*eventstore.DataKey, error) { return newKey(t), nil })
	require.Error(t, err)
	flipped := bytes.Replace(doc, sealed[20:24], []byte("AAAA"), 1)
	_, err = eventstore.OpenAll(flipped, "acme", keys)
	require.Error(t, err)

	// Shredded, it reads as "[shredded]"; a sealed value quoted inside a
	// string is text.
	out, err = eventstore.OpenAll(doc, "acme", func(string, string) (*eventstore.DataKey, error) { return nil, eventstore.ErrShredded })
	require.NoError(t, err)
	require.JSONEq(t, `{"input":"[shredded]","other":"x","again":["[shredded]"]}`, string(out))
	quoted, err := json.Marshal(map[string]string{"message": string(sealed)})
	require.NoError(t, err)
	out, err = eventstore.OpenAll(quoted, "acme", keys)
	require.NoError(t, err)
	require.Equal(t, string(quoted), string(out))
}

// Keys are made once, survive a new keyring over the same stream, do not
// unwrap with another master key, and once shredded are gone from the
// stream's files on disk; a rotation rewraps them.
func TestKeyringShredErasesTheKey(t *testing.T) {
	ns := logtest.StartServer(t)
	_, js := logtest.Connect(t, ns)
	ctx := context.Background()
	master := bytes.Repeat([]byte{7}, eventstore.MasterKeyBytes)
	r, err := eventstore.OpenKeyring(ctx, js, "dwr", 1, master)
	require.NoError(t, err)

	_, err = r.Key(ctx, "acme", "w", false)
	require.ErrorIs(t, err, eventstore.ErrNoKey)
	k, err := r.Key(ctx, "acme", "w", true)
	require.NoError(t, err)
	g, err := r.Key(ctx, "acme", eventstore.GoalScope("01K0000000000000000000000G"), true)
	require.NoError(t, err)
	sealed := g.Seal("acme", eventstore.GoalScope("01K0000000000000000000000G"), json.RawMessage(`"marker-payload"`))

	again, err := eventstore.OpenKeyring(ctx, js, "dwr", 1, master)
	require.NoError(t, err)
	k2, err := again.Key(ctx, "acme", "w", true)
	require.NoError(t, err)
	require.Equal(t, string(k.Seal("acme", "w", json.RawMessage(`1`))), string(k2.Seal("acme", "w", json.RawMessage(`1`))), "the same key")
	_, err = eventstore.OpenKeyring(ctx, js, "dwr", 1, bytes.Repeat([]byte{8}, eventstore.MasterKeyBytes))
	require.ErrorIs(t, err, eventstore.ErrMasterKey, "another master key is refused at once")

	// What the goal key wraps is in the stream's files; shredded, it is not.
	st, err := js.Stream(ctx, eventstore.KeysStream("dwr"))
	require.NoError(t, err)
	m, err := st.GetLastMsgForSubject(ctx, "dwr.keys.acme.g.01K0000000000000000000000G")
	require.NoError(t, err)
	wrapped := m.Data
	dir := ns.JetStreamConfig().StoreDir
	require.True(t, contains(t, dir, wrapped), "the wrapped key is on disk before the shred")
	require.NoError(t, r.Shred(ctx, "acme", eventstore.GoalScope("01K0000000000000000000000G")))
	require.False(t, contains(t, dir, wrapped), "the wrapped key's bytes are erased")
	_, err = again.Key(ctx, "acme", eventstore.GoalScope("01K0000000000000000000000G"), true)
	require.ErrorIs(t, err, eventstore.ErrShredded, "shredded, also for another keyring: never made again")
	out, err := eventstore.OpenAll(sealed, "acme", func(ws, scope string) (*eventstore.DataKey, error) {
		return r.Key(ctx, ws, scope, false)
	})
	require.NoError(t, err)
	require.Equal(t, `"[shredded]"`, string(out))
	require.NoError(t, r.Shred(ctx, "acme", eventstore.GoalScope("01K0000000000000000000000G")), "idempotent")

	// Rotation: the workspace key unwraps with the new master key only.
	n, err := r.Rewrap(ctx, bytes.Repeat([]byte{9}, eventstore.MasterKeyBytes))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	rotated, err := eventstore.OpenKeyring(ctx, js, "dwr", 1, bytes.Repeat([]byte{9}, eventstore.MasterKeyBytes))
	require.NoError(t, err)
	k3, err := rotated.Key(ctx, "acme", "w", false)
	require.NoError(t, err)
	require.Equal(t, string(k.Seal("acme", "w", json.RawMessage(`1`))), string(k3.Seal("acme", "w", json.RawMessage(`1`))))
	_, err = eventstore.OpenKeyring(ctx, js, "dwr", 1, master)
	require.ErrorIs(t, err, eventstore.ErrMasterKey, "the old master key opens nothing any more")
}

// contains reports whether any file below dir holds b.
func contains(t *testing.T, dir string, b []byte) bool {
	t.Helper()
	found := false
	require.NoError(t, filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || found {
			return err
		}
		data, err := os.ReadFile(p) //nolint:gosec // the test's own store
		if err != nil {
			return err
		}
		found = bytes.Contains(data, b) && !strings.HasSuffix(p, ".lock")
		return nil
	}))
	return found
}
