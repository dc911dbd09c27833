package schemas_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/schemas"
)

// The canonical form an action digest is taken of, which the service and
// every client produce byte for byte: object keys sorted, no insignificant
// space, numbers as written, no HTML escaping.
func TestCanonicalJSON(t *testing.T) {
	for doc, want := range map[string]string{
		`{"b":2,"a":1}`: `{"a":1,"b":2}`,
		`{ "to": "ada@example.com", "amount": 1.50, "tags": ["<b>", "x&y"], "n": 1e3, "nested": {"z": null, "y": [true, false]} }`: `{"amount":1.50,"n":1e3,"nested":{"y":[true,false],"z":null},"tags":["<b>","x&y"],"to":"ada@example.com"}`,
		`"caf\u00e9 \u2028 <script>"`:         `"café \u2028 <script>"`,
		`[1, 10.0, -0, 12345678901234567890]`: `[1,10.0,-0,12345678901234567890]`,
		" null\n":                             `null`,
	} {
		got, err := schemas.CanonicalJSON(json.RawMessage(doc))
		require.NoError(t, err, doc)
		require.Equal(t, want, string(got), doc)
	}
	for _, doc := range []string{``, `{"a":`, `{"a":1} {"b":2}`, `nope`} {
		_, err := schemas.CanonicalJSON(json.RawMessage(doc))
		require.Error(t, err, doc)
	}
}

// Fixed answers: the digest every client computes for these documents.
func TestActionDigest(t *testing.T) {
	for doc, want := range map[string]string{
		`{"b":2,"a":1}`: "sha256:43258cff783fe7036d8a43033f830adfc60ec037382473548ac742b888292777",
		`{ "to": "ada@example.com", "amount": 1.50, "tags": ["<b>", "x&y"], "n": 1e3, "nested": {"z": null, "y": [true, false]} }`: "sha256:9bbbe27c4f07cd5a74eb44c0abcece75eca454bb564c8822f4cc2f9feeb58603",
		`"caf\u00e9 \u2028 <script>"`:              "sha256:2052267902a999d7478786262951e2cb256c9d22416a1764678599262fc5c1c0",
		`[1, 10.0, -0, 12345678901234567890]`:      "sha256:28bf6a6c5d5c3f46df04e4f44d6d18e6c3461320751065631a12d39aa1eafb92",
		`null`:                                     "sha256:74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b",
		`{"refund":{"order":"A-17","cents":1250}}`: "sha256:79b413d8bddc4b91c41c2aefe93000b54f8fcc307c08de8d3217653d0a80cf3e",
	} {
		got, err := schemas.ActionDigest(json.RawMessage(doc))
		require.NoError(t, err, doc)
		require.Equal(t, want, got, doc)
	}
	a, err := schemas.ActionDigest(json.RawMessage(`{"b":2,"a":1}`))
	require.NoError(t, err)
	b, err := schemas.ActionDigest(json.RawMessage("{ \"a\": 1,\n \"b\": 2 }"))
	require.NoError(t, err)
	require.Equal(t, a, b, "key order and space do not change the digest")
	c, err := schemas.ActionDigest(json.RawMessage(`{"b":2,"a":1.0}`))
	require.NoError(t, err)
	require.NotEqual(t, a, c, "numbers are digested as written")
	_, err = schemas.ActionDigest(json.RawMessage(`{"a":1} {"b":2}`))
	require.Error(t, err)
}
