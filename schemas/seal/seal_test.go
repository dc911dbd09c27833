package seal_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/schemas/seal"
)

func key(t *testing.T, b byte) *seal.DataKey {
	t.Helper()
	k, err := seal.NewDataKey(bytes.Repeat([]byte{b}, seal.DataKeyBytes))
	require.NoError(t, err)
	return k
}

// A queue key is the same for the same workspace key, workspace, queue and
// day, and another for any other.
func TestQueueKeysAreDerivedPerWorkspaceQueueAndDay(t *testing.T) {
	k := key(t, 1)
	a := k.QueueKey("ws", "build", 20000)
	require.Len(t, a, seal.DataKeyBytes)
	require.Equal(t, a, key(t, 1).QueueKey("ws", "build", 20000))
	for _, other := range [][]byte{k.QueueKey("ws", "build", 20001), k.QueueKey("ws", "deploy", 20000),
		k.QueueKey("ws2", "build", 20000), key(t, 2).QueueKey("ws", "build", 20000), k.QueueKey("w", "sbuild", 20000)} {
		require.NotEqual(t, a, other)
	}
}

func TestQueueScopes(t *testing.T) {
	day := seal.QueueEpoch(time.Date(2026, 12, 2, 23, 59, 0, 0, time.UTC))
	require.Equal(t, seal.QueueEpoch(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)), day)
	require.Equal(t, day+1, seal.QueueEpoch(time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)))
	n, ok := seal.ParseQueueScope(seal.QueueScope(day))
	require.True(t, ok)
	require.Equal(t, day, n)
	for _, bad := range []string{"w", "g.01ABC", "q.", "q.-1", "q.01", "q.1x", "q"} {
		_, ok := seal.ParseQueueScope(bad)
		require.False(t, ok, bad)
	}
}

// Reseal seals again, with the queue's key, exactly the values of the scope
// it is given: the others stay as they are, and the result opens to the
// same document.
func TestResealSealsOneScopeAgain(t *testing.T) {
	ws, wk, gk := "ws", key(t, 1), key(t, 2)
	qk, err := seal.NewDataKey(wk.QueueKey(ws, "build", 7))
	require.NoError(t, err)
	doc := []byte(`{"input":` + string(wk.Seal(ws, "w", json.RawMessage(`{"a":1}`))) +
		`,"goal":` + string(gk.Seal(ws, "g.G1", json.RawMessage(`"mine"`))) +
		`,"text":"a \"dwr:sealed:1:w:not-a-value\" in a string","result":` + string(wk.Seal(ws, "w", json.RawMessage(`[2]`))) + `}`)
	out, err := seal.Reseal(doc, ws, "w", wk, qk, seal.QueueScope(7))
	require.NoError(t, err)
	require.Equal(t, []string{"q.7", "g.G1"}, seal.Scopes(out))
	keys := map[string]*seal.DataKey{"w": wk, "g.G1": gk, "q.7": qk}
	open := func(_, scope string) (*seal.DataKey, error) { return keys[scope], nil }
	before, err := seal.OpenAll(doc, ws, open)
	require.NoError(t, err)
	after, err := seal.OpenAll(out, ws, open)
	require.NoError(t, err)
	require.JSONEq(t, string(before), string(after))
	require.JSONEq(t, `{"input":{"a":1},"goal":"mine","text":"a \"dwr:sealed:1:w:not-a-value\" in a string","result":[2]}`, string(after))

	same, err := seal.Reseal([]byte(`{"plain":1}`), ws, "w", wk, qk, "q.7")
	require.NoError(t, err)
	require.Equal(t, `{"plain":1}`, string(same))
	_, err = seal.Reseal(doc, ws, "w", gk, qk, "q.7")
	require.Error(t, err, "a value that does not open with the key given is an error")
}

// Sealing is deterministic: these values, which the Python SDK's tests
// open (executors/python/tests/test_seal.py), stay what this code seals.
// A change of the format fails here and there alike.
func TestSealedValuesStayAsOtherSDKsOpenThem(t *testing.T) {
	raw := make([]byte, seal.DataKeyBytes)
	for i := range raw {
		raw[i] = byte(i)
	}
	k, err := seal.NewDataKey(raw)
	require.NoError(t, err)
	for _, v := range []struct{ ws, scope, plain, sealed string }{
		{"default", "q.20424", `{"secret":"secret-a","n":[1,2.5,null,true]}`,
			"dwr:sealed:1:q.20424:KtkPWt-uRVZ9qZRxVsMOuB6cadrg5LXVXZsTGBVMd6uX9Yg4Wf5_RDXm7w-X9hZIbjteSufCa6Iy-NbfMqpT6JUoRe156eUcywboAxAJk2vm8cw"},
		{"default", "q.20424", `"é\u2028 \"x\""`,
			"dwr:sealed:1:q.20424:4Yj-CLq0uBe87wT8ON0JRGOZCOAAzvb293VBa8br5nPw5AzT0IVUyFEcdyZEwB3GeNdYDedwmxM"},
		{"default", "q.20424", `[]`, "dwr:sealed:1:q.20424:8dnxRE1e1KOKqKW6ohVgR8HItAkR2VIGHwGDjkTqMUfqmkHmx6T5NUeS"},
		{"ws-2", "g.01JGOAL", `42`, "dwr:sealed:1:g.01JGOAL:yAUW8hkN2McVb8eK1jgONUz2TGilDKfWaYEeJksV_Gjok0ZI5DqE2OAC"},
	} {
		require.Equal(t, `"`+v.sealed+`"`, string(k.Seal(v.ws, v.scope, json.RawMessage(v.plain))), v.plain)
	}
}
