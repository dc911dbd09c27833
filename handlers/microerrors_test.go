package handlers_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
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

// `nats micro stats dwr` counts the requests an endpoint answered, when
// the reply left (after the commit), and the refusals as its errors; only
// the service's admins reach the monitoring subjects through the trust
// boundary.
func TestNatsMicroStatsCountRequestsWhenAnsweredAndRefusalsAsErrors(t *testing.T) {
	st := servicetest.Start(t, t.TempDir(), servicetest.Options{Secure: true, Listen: "127.0.0.1:0"})
	caller := st.Member(t, "default", "ci", domain.RoleClient)
	for i := range 3 { // refused: invalid
		_, err := caller.Request("dwr.cmd.default.task.create", []byte(`{"spec": {"queue": "Not A Name"}}`), 10*time.Second)
		require.NoError(t, err, "request %d", i)
	}
	for i := range 2 {
		m, err := caller.Request("dwr.cmd.default.task.create", []byte(`{"spec": {"queue": "q"}}`), 10*time.Second)
		require.NoError(t, err)
		require.Empty(t, m.Header.Get(micro.ErrorCodeHeader), "request %d is taken", i)
	}

	stats := func(nc *nats.Conn, subject string) (*micro.Stats, error) {
		m, err := nc.Request(subject, nil, 5*time.Second)
		if err != nil {
			return nil, err
		}
		var s micro.Stats
		if err := json.Unmarshal(m.Data, &s); err != nil {
			return nil, err
		}
		return &s, nil
	}
	s, err := stats(st.Admin, "$SRV.STATS.dwr")
	require.NoError(t, err)
	require.Equal(t, micro.StatsResponseType, s.Type)
	i := slices.IndexFunc(s.Endpoints, func(e *micro.EndpointStats) bool { return e.Name == "task_create" })
	require.GreaterOrEqual(t, i, 0, "the endpoint task_create is listed")
	e := s.Endpoints[i]
	require.Equal(t, "dwr.cmd.*.task.create", e.Subject)
	require.Equal(t, 5, e.NumRequests)
	require.Equal(t, 3, e.NumErrors, "every refusal is an error")
	require.True(t, strings.HasPrefix(e.LastError, "invalid:"), e.LastError)
	require.Contains(t, e.LastError, "/spec/queue")
	require.Positive(t, e.ProcessingTime)
	require.Equal(t, e.ProcessingTime/5, e.AverageProcessingTime)

	q, err := stats(st.Admin, "$SRV.STATS.dwr-query")
	require.NoError(t, err)
	require.NotEmpty(t, q.Endpoints, "the query service is monitored too")
	m, err := st.Admin.Request("$SRV.INFO.dwr", nil, 5*time.Second)
	require.NoError(t, err)
	var info micro.Info
	require.NoError(t, json.Unmarshal(m.Data, &info))
	require.Equal(t, "dwr", info.Name)
	require.Len(t, info.Endpoints, len(s.Endpoints))

	_, err = stats(caller, "$SRV.STATS.dwr")
	require.Error(t, err, "a client may not read the service's counts")
}
