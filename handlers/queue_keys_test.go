package handlers_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
	"github.com/dwr-run/dwr/schemas/seal"
)

// askQueueKey sends queue.key on nc and returns the reply.
func askQueueKey(t *testing.T, nc *nats.Conn, ws string, q schemas.Query) schemas.Reply {
	t.Helper()
	b, err := json.Marshal(q)
	require.NoError(t, err)
	m, err := nc.Request("dwr.q."+ws+".queue.key", b, 10*time.Second)
	require.NoError(t, err)
	var r schemas.Reply
	require.NoError(t, json.Unmarshal(m.Data, &r))
	return r
}

// With encryption on, an execute item at rest in the work stream carries its
// payloads sealed with its queue's key of the day, which only the queue's
// executors (and admins) may read, and which opens the item; nobody else's
// request for it is answered with the key, and what stands on disk is no
// plaintext.
func TestQueueKeysOpenTheirQueuesItemsForTheirExecutorsOnly(t *testing.T) {
	st := servicetest.Start(t, "", servicetest.Options{Secure: true, Config: handlers.Config{WriterID: "test-writer",
		Encryption: true, MasterKey: bytes.Repeat([]byte{7}, 32)}})
	c := servicetest.NewClient(st.Member(t, "default", "caller", domain.RoleClient), "default")
	var g schemas.CommandResult
	require.NoError(t, json.Unmarshal(c.Command(t, "goal.create", map[string]any{"title": "sealed", "tasks": []map[string]any{
		{"key": "a", "queue": "build", "input": map[string]string{"secret": "MARK-QUEUE-INPUT"}}}}), &g))

	// The item as it stands in the stream.
	js, err := jetstream.New(st.Conn)
	require.NoError(t, err)
	stream, err := js.Stream(context.Background(), "DWR_WORK")
	require.NoError(t, err)
	var raw []byte
	require.True(t, servicetest.Within(10*time.Second, func() bool {
		m, err := stream.GetLastMsgForSubject(context.Background(), "dwr.work.default.build")
		if err == nil {
			raw = m.Data
		}
		return err == nil
	}))
	require.NotContains(t, string(raw), "MARK-QUEUE-INPUT")
	epoch := seal.QueueEpoch(time.Now())
	require.Equal(t, []string{seal.QueueScope(epoch)}, seal.Scopes(raw), "sealed with the queue's key of the day only")

	executor := st.Member(t, "default", "builder", domain.RoleExecutor, "build")
	r := askQueueKey(t, executor, "default", schemas.Query{Queue: "build", Epoch: epoch})
	require.True(t, r.OK, "%+v", r.Error)
	var qk schemas.QueueKey
	require.NoError(t, json.Unmarshal(r.Result, &qk))
	key, err := base64.RawURLEncoding.DecodeString(qk.Key)
	require.NoError(t, err)
	k, err := seal.NewDataKey(key)
	require.NoError(t, err)
	plain, err := seal.OpenAll(raw, "default", func(_, scope string) (*seal.DataKey, error) { return k, nil })
	require.NoError(t, err)
	var it schemas.WorkItem
	require.NoError(t, json.Unmarshal(plain, &it))
	require.JSONEq(t, `{"secret":"MARK-QUEUE-INPUT"}`, string(it.Task.Spec.Input), "the executor's key opens the item")

	// Another queue's key does not open it, nor the key in another workspace.
	other := askQueueKey(t, st.Admin, "default", schemas.Query{Queue: "deploy", Epoch: epoch})
	require.True(t, other.OK)
	require.NoError(t, json.Unmarshal(other.Result, &qk))
	key, _ = base64.RawURLEncoding.DecodeString(qk.Key)
	wrong, err := seal.NewDataKey(key)
	require.NoError(t, err)
	_, err = seal.OpenAll(raw, "default", func(_, _ string) (*seal.DataKey, error) { return wrong, nil })
	require.Error(t, err, "queue deploy's key opens nothing of queue build")
	_, err = seal.OpenAll(raw, "elsewhere", func(_, _ string) (*seal.DataKey, error) { return k, nil })
	require.Error(t, err, "a sealed value opens in its own workspace only")

	// Refused: an executor of another queue, a client, a viewer; a day
	// after tomorrow; a queue that is no name.
	for _, who := range []struct {
		name string
		nc   *nats.Conn
	}{
		{"an executor of another queue", st.Member(t, "default", "deployer", domain.RoleExecutor, "deploy")},
		{"a client", st.Member(t, "default", "client2", domain.RoleClient)},
		{"a viewer", st.Member(t, "default", "viewer", domain.RoleViewer)},
	} {
		r := askQueueKey(t, who.nc, "default", schemas.Query{Queue: "build", Epoch: epoch})
		require.False(t, r.OK, who.name)
		require.Equal(t, schemas.CodeForbidden, r.Error.Code, "%s: %s", who.name, r.Error.Message)
	}
	for _, bad := range []int64{epoch + 2, -1} {
		r = askQueueKey(t, executor, "default", schemas.Query{Queue: "build", Epoch: bad})
		require.False(t, r.OK, "epoch %d", bad)
		require.Equal(t, schemas.CodeInvalid, r.Error.Code)
		require.Equal(t, "/epoch", r.Error.Fields[0].Pointer, r.Error.Message)
	}
	r = askQueueKey(t, executor, "default", schemas.Query{Queue: "Build!", Epoch: epoch})
	require.False(t, r.OK)
	require.Equal(t, "/queue", r.Error.Fields[0].Pointer, r.Error.Message)

	// Once the workspace is shredded, no queue key is made from its key.
	servicetest.Must(t, st.Admin, "default", "workspace.shred", map[string]any{"reason": "test"})
	r = askQueueKey(t, executor, "default", schemas.Query{Queue: "build", Epoch: epoch})
	require.False(t, r.OK)
	require.Equal(t, schemas.CodeConflict, r.Error.Code)
	require.True(t, strings.Contains(r.Error.Message, "shredded"), r.Error.Message)
}

// With encryption off, there is no queue key: items carry payloads as sent.
func TestQueueKeyWithEncryptionOff(t *testing.T) {
	st := servicetest.Start(t, "", servicetest.Options{})
	r := askQueueKey(t, st.Admin, "default", schemas.Query{Queue: "build", Epoch: seal.QueueEpoch(time.Now())})
	require.False(t, r.OK)
	require.Equal(t, schemas.CodeNotFound, r.Error.Code)
}

// Only the service writes sealed values. A client's string that begins
// with the sealed prefix — an input, a title, an object's key — is refused
// (invalid, naming the field) and changes nothing: stored, it would be
// taken for a sealed value and every reply carrying it would fail to open
// (before this, one forged input made the workspace's task.list fail). A
// string that only contains the prefix is text like any other.
func TestForgedSealedValuesAreRefused(t *testing.T) {
	for _, encryption := range []bool{true, false} {
		st := servicetest.Start(t, "", servicetest.Options{Config: handlers.Config{WriterID: "test-writer",
			Encryption: encryption, MasterKey: bytes.Repeat([]byte{7}, 32)}})
		c := st.Client("default")
		forged := schemas.SealedPrefix + "w:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
		for _, tc := range []struct {
			pointer string
			goal    map[string]any
		}{
			{"/tasks/0/input", map[string]any{"title": "t", "tasks": []map[string]any{{"key": "a", "queue": "q", "input": forged}}}},
			{"/tasks/0/input/deep/1", map[string]any{"title": "t", "tasks": []map[string]any{{"key": "a", "queue": "q",
				"input": map[string]any{"deep": []string{"x", forged}}}}}},
			{"/tasks/0/input/" + forged, map[string]any{"title": "t", "tasks": []map[string]any{{"key": "a", "queue": "q",
				"input": map[string]any{forged: 1}}}}},
			{"/title", map[string]any{"title": forged}},
		} {
			r := c.Request(t, "dwr.cmd.default.goal.create", tc.goal, nil)
			require.False(t, r.OK, "encryption %v: %s", encryption, tc.pointer)
			require.Equal(t, schemas.CodeInvalid, r.Error.Code)
			require.Equal(t, tc.pointer, r.Error.Fields[0].Pointer, r.Error.Message)
			require.Contains(t, r.Error.Message, "send it as it is")
		}
		text := "see " + forged
		var g schemas.CommandResult
		require.NoError(t, json.Unmarshal(c.Command(t, "goal.create", map[string]any{"title": text, "tasks": []map[string]any{
			{"key": "a", "queue": "q", "input": map[string]string{"note": text}}}}), &g))
		var tasks []schemas.Task
		c.Query(t, "task.list", schemas.Query{}, &tasks)
		require.Len(t, tasks, 1, "only the goal that was taken has a task, and the listing works")
		require.JSONEq(t, `{"note":"`+text+`"}`, string(tasks[0].Spec.Input))
	}
}
