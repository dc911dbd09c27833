package eventstore_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/eventstore"
)

func TestUpcast(t *testing.T) {
	u := eventstore.NewUpcasters()
	u.Register("task.created", 1, func(json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{"v":2}`), nil })
	u.Register("task.created", 2, func(d json.RawMessage) (json.RawMessage, error) {
		require.JSONEq(t, `{"v":2}`, string(d), "upcasters chain")
		return json.RawMessage(`{"v":3}`), nil
	})
	u.SetCurrent("task.created", 3)

	e := eventstore.Event{Type: "task.created", SchemaVersion: 1, Data: json.RawMessage(`{"v":1}`), Raw: []byte("stored")}
	require.NoError(t, u.Upcast(&e))
	require.Equal(t, 3, e.SchemaVersion)
	require.JSONEq(t, `{"v":3}`, string(e.Data))
	require.Equal(t, []byte("stored"), e.Raw, "Raw is never rewritten")

	current := eventstore.Event{Type: "task.created", SchemaVersion: 3, Data: json.RawMessage(`{}`)}
	require.NoError(t, u.Upcast(&current))
	other := eventstore.Event{Type: "other", SchemaVersion: 7, Data: json.RawMessage(`{}`)}
	require.NoError(t, u.Upcast(&other), "types without a current version are left alone")
	require.Equal(t, 7, other.SchemaVersion)
}

func TestUpcastErrors(t *testing.T) {
	u := eventstore.NewUpcasters()
	boom := errors.New("boom")
	u.Register("a", 1, func(json.RawMessage) (json.RawMessage, error) { return nil, boom })
	u.Register("b", 1, func(json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{`), nil })
	u.SetCurrent("a", 2)
	u.SetCurrent("b", 2)
	u.SetCurrent("c", 3)

	for name, tc := range map[string]struct {
		e    eventstore.Event
		want error
	}{
		"newer":   {eventstore.Event{Type: "a", SchemaVersion: 5}, eventstore.ErrUnknownSchema},
		"missing": {eventstore.Event{Type: "c", SchemaVersion: 1}, eventstore.ErrUnknownSchema},
		"failing": {eventstore.Event{Type: "a", SchemaVersion: 1}, boom},
		"invalid": {eventstore.Event{Type: "b", SchemaVersion: 1}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			e := tc.e
			e.Data = json.RawMessage(`{}`)
			err := u.Upcast(&e)
			require.Error(t, err)
			if tc.want != nil {
				require.ErrorIs(t, err, tc.want)
			}
			require.Equal(t, tc.e.SchemaVersion, e.SchemaVersion, "unchanged on error")
		})
	}

	require.Panics(t, func() { u.Register("a", 1, func(d json.RawMessage) (json.RawMessage, error) { return d, nil }) })
	require.Panics(t, func() { u.Register("z", 1, nil) })
}
