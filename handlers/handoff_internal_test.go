package handlers

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/eventstore"
)

// The writer's memory of the handed attempts follows the committed
// records: a handed start is remembered (with its workspace and start), an
// attempt that ends or a start that is not handed is forgotten — so that
// the lease sweep, which reads a task only when its lease may have lapsed,
// is not left holding attempts that ended long ago.
func TestHandedAttemptsFollowTheCommittedRecords(t *testing.T) {
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	ev := func(task, typ, data string) eventstore.Event {
		return eventstore.Event{Type: typ, Workspace: "w", AggregateType: "task", AggregateID: task, Time: at, Data: []byte(data)}
	}
	h := newHanded()
	h.add(&eventstore.Commit{Events: []eventstore.Event{
		ev("a", "task.attempt_succeeded", `{"attempt":1}`),
		ev("b", "task.attempt_started", `{"attempt":1,"executor":"x","operation_key":"op-b","handed":true}`),
		ev("c", "task.attempt_started", `{"attempt":2,"executor":"x","operation_key":"op-c","handed":true}`),
		ev("d", "task.attempt_started", `{"attempt":1,"executor":"x","operation_key":"op-d"}`),
	}})
	require.Equal(t, map[string]handedAttempt{"b": {n: 1, ws: "w", started: at}, "c": {n: 2, ws: "w", started: at}}, h.list())

	h.add(&eventstore.Commit{Events: []eventstore.Event{
		ev("b", "task.checkpoint_saved", `{"attempt":1,"checkpoint":1}`), // still running
		ev("c", "task.attempt_abandoned", `{"attempt":2,"reason":"lease_lost"}`),
	}})
	require.Equal(t, map[string]handedAttempt{"b": {n: 1, ws: "w", started: at}}, h.list())

	h.set("b", handedAttempt{n: 2, ws: "w", queue: "q"}) // another attempt than the one remembered: ignored
	h.forget("b", 2)
	require.Len(t, h.list(), 1)
	h.add(&eventstore.Commit{Events: []eventstore.Event{ev("b", "task.accepted", `{"attempt":1}`)}})
	require.Empty(t, h.list())
}
