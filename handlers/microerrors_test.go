package handlers_test

import (
	"encoding/json"
	"testing"
	"time"

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
