package seal_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
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

// golden is testdata/sealed.json: values this package sealed, which the
// other SDKs' tests open (executors/typescript/src/test/seal.test.ts,
// executors/python/tests/test_seal.py).
type golden struct {
	Workspace    string
	Queue        string
	Epoch        int64
	WorkspaceKey string `json:"workspace_key"`
	QueueKey     string `json:"queue_key"`
	GoalKey      string `json:"goal_key"`
	GoalScope    string `json:"goal_scope"`
	Values       []struct {
		Scope     string
		Plaintext string
		Sealed    string
	}
	PlainItem string `json:"plain_item"`
	Item      string
	GoalItem  string `json:"goal_item"`
}

// The golden sealed values are still what Seal makes (sealing is
// deterministic), with the queue key QueueKey derives, and the golden work
// items open to the plain one.
func TestGoldenSealedValues(t *testing.T) {
	b, err := os.ReadFile("testdata/sealed.json")
	require.NoError(t, err)
	var g golden
	require.NoError(t, json.Unmarshal(b, &g))
	raw := func(s string) *seal.DataKey {
		b, err := base64.RawURLEncoding.DecodeString(s)
		require.NoError(t, err)
		k, err := seal.NewDataKey(b)
		require.NoError(t, err)
		return k
	}
	require.Equal(t, g.QueueKey, base64.RawURLEncoding.EncodeToString(raw(g.WorkspaceKey).QueueKey(g.Workspace, g.Queue, g.Epoch)))
	keys := map[string]*seal.DataKey{seal.QueueScope(g.Epoch): raw(g.QueueKey), g.GoalScope: raw(g.GoalKey)}
	require.NotEmpty(t, g.Values)
	for _, v := range g.Values {
		sealed, err := json.Marshal(v.Sealed)
		require.NoError(t, err)
		require.Equal(t, string(sealed), string(keys[v.Scope].Seal(g.Workspace, v.Scope, json.RawMessage(v.Plaintext))), v.Scope)
	}
	keyOf := func(_, scope string) (*seal.DataKey, error) { return keys[scope], nil }
	for _, item := range []string{g.Item, g.GoalItem} {
		plain, err := seal.OpenAll([]byte(item), g.Workspace, keyOf)
		require.NoError(t, err)
		require.Equal(t, g.PlainItem, string(plain))
	}
	require.Equal(t, []string{seal.QueueScope(g.Epoch)}, seal.Scopes([]byte(g.Item)))
	require.Equal(t, []string{seal.QueueScope(g.Epoch), g.GoalScope}, seal.Scopes([]byte(g.GoalItem)))
}
