package handlers_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// A refusal is a micro service error: its reply names it in the
// Nats-Service-Error headers (the body is the dwr reply all the same).
func TestRefusalsAreServiceErrors(t *testing.T) {
	st := servicetest.Start(t, "", servicetest.Options{Config: handlers.Config{WriterID: "test-writer"}})
	m, err := st.Conn.Request("dwr.cmd.default.task.create", []byte(`{"spec": {"queue": "Not A Name"}}`), 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, "invalid", m.Header.Get("Nats-Service-Error-Code"))
	require.Contains(t, m.Header.Get("Nats-Service-Error"), "/spec/queue")
	var r schemas.Reply
	require.NoError(t, json.Unmarshal(m.Data, &r))
	require.False(t, r.OK)
	require.Equal(t, schemas.CodeInvalid, r.Error.Code)

}

// A command id names one command: sent again with the same body (in any
// key order) it is answered with the first outcome; with another body it
// is refused, naming the first command.
func TestACommandIDReusedForAnotherCommandIsRefused(t *testing.T) {
	st := servicetest.Start(t, "", servicetest.Options{Config: handlers.Config{WriterID: "test-writer"}})
	send := func(subject, body string) schemas.Reply {
		m := nats.NewMsg(subject)
		m.Header.Set(schemas.HeaderCommandID, "reused-1")
		m.Data = []byte(body)
		reply, err := st.Conn.RequestMsg(m, 10*time.Second)
		require.NoError(t, err)
		var r schemas.Reply
		require.NoError(t, json.Unmarshal(reply.Data, &r))
		return r
	}
	first := send("dwr.cmd.default.task.create", `{"task_id": "01M8TX0000000000000000000A", "spec": {"queue": "q", "input": {"a": 1, "b": 2}}}`)
	require.True(t, first.OK, "%+v", first.Error)
	again := send("dwr.cmd.default.task.create", `{"spec": {"input": {"b": 2, "a": 1}, "queue": "q"}, "task_id": "01M8TX0000000000000000000A"}`)
	require.True(t, again.OK, "the same command, its keys in another order: %+v", again.Error)
	require.JSONEq(t, string(first.Result), string(again.Result))
	other := send("dwr.cmd.default.task.create", `{"task_id": "01M8TX0000000000000000000A", "spec": {"queue": "q", "input": {"a": 2}}}`)
	require.False(t, other.OK)
	require.Equal(t, schemas.CodeConflict, other.Error.Code)
	require.Contains(t, other.Error.Message, "command id reused-1 was used before for another command (task.create, at log sequence")
	cancel := send("dwr.cmd.default.task.cancel", `{"task_id": "01M8TX0000000000000000000A"}`)
	require.False(t, cancel.OK, "nor another kind of command")
	require.Contains(t, cancel.Error.Message, "(task.create,")
}
