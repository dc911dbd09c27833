package domain

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWireForm checks that wireForm brings an event to what encoding and
// decoding it gives back, without changing its encoding, and that it leaves
// an event in that form alone.
func TestWireForm(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	events := map[string]Event{
		"raw json with space and html": &TaskCreated{Spec: TaskSpec{Queue: "q", Input: json.RawMessage(" {\"a\" : [1, 2],\n \"h\": \"<b>&amp;\u2028\" } "),
			Approval: &ApprovalSpec{Basis: json.RawMessage(`[ "x" ]`), Branches: map[string]string{}}}, DependsOn: []string{}, State: "ready"},
		"nil raw json not omitted": &CheckpointSaved{Attempt: 1},
		"raw json already compact": &CheckpointSaved{Attempt: 1, Checkpoint: json.RawMessage(`{"at":1}`)},
		"empty lists omitted": &AttemptSucceeded{Attempt: 2, Result: json.RawMessage(`"ok"`), Artifacts: []ArtifactRef{},
			ModelSteps: []ModelStep{{Model: "m", Parsed: json.RawMessage(`{ "p": true }`)}}},
		"empty list kept":  &PlanCommitted{Version: 1, Tasks: []PlanTask{}, Kept: []string{}},
		"no lists":         &BackoffScheduled{Attempt: 1, Until: at},
		"a pointer to one": &TaskFailed{Reason: "r", Error: &ErrorInfo{Message: "m"}},
	}
	for name, e := range events {
		t.Run(name, func(t *testing.T) {
			before, err := json.Marshal(e)
			require.NoError(t, err)
			back, err := DecodeEvent(e.EventType(), before)
			require.NoError(t, err)

			wireForm(e)
			require.Equal(t, back, e, "the wire form is what the log gives back")
			after, err := json.Marshal(e)
			require.NoError(t, err)
			require.Equal(t, string(before), string(after), "the wire form encodes as the event did")

			again, err := DecodeEvent(e.EventType(), after)
			require.NoError(t, err)
			wireForm(again)
			require.Equal(t, back, again, "an event in its wire form stays as it is")
		})
	}
}

// inWireForm says a raw JSON value needs no change exactly when compacting
// and escaping it would change nothing.
func FuzzInWireForm(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"a": 1}`, `"<b>"`, `"\u003cb\u003e"`, "\"\u2028\"", `"a\"b c"`,
		`"—“quoted”"`, `[1,2,{"k":"v w"}]`, "\n1", `"\\"`, `{"a":"x\\\"<"}`, `"\u2029"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		var c, esc bytes.Buffer
		require.NoError(t, json.Compact(&c, b))
		json.HTMLEscape(&esc, c.Bytes())
		require.Equal(t, bytes.Equal(esc.Bytes(), b), inWireForm(b), "%q", b)
	})
}

// BenchmarkWireFormLargeInput brings a task's 256 KiB input to its wire form.
func BenchmarkWireFormLargeInput(b *testing.B) {
	input, err := json.Marshal(map[string]string{"blob": strings.Repeat("lorem ipsum dolor sit amet ", 256<<10/27)})
	require.NoError(b, err)
	b.SetBytes(int64(len(input)))
	for b.Loop() {
		wireForm(&TaskCreated{Spec: TaskSpec{Queue: "q", Input: input}, State: "ready"})
	}
}
