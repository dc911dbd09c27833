package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
)

// minSeqHeader returns headers naming log sequence seq in Dwr-Min-Seq.
func minSeqHeader(seq uint64) nats.Header {
	h := nats.Header{}
	h.Set(handlers.HeaderMinSeq, fmt.Sprint(seq))
	return h
}

// A Dwr-Min-Seq beyond the log's end is refused at once, naming the header
// and the log's end, instead of waiting for views that can never get there.
// The service waits an hour for the views: had the query waited, the request
// would have timed out.
func TestMinSeqBeyondTheLogIsRefusedAtOnce(t *testing.T) {
	b := bundleOf(servicetest.Start(t, "", servicetest.Options{Secure: true, Config: handlers.Config{MinSeqWait: time.Hour}}))
	b.mustCommand(t, "goal.create", map[string]any{"title": "one"})
	end := b.lastSeq(t)

	var goals []json.RawMessage
	b.query(t, "goal.list", handlers.Query{}, end, &goals)
	require.Len(t, goals, 1, "a sequence within the log is waited for and served")

	for _, seq := range []uint64{end + 1, end + 1_000_000} {
		r := b.request(t, "dwr.q.default.goal.list", handlers.Query{}, minSeqHeader(seq))
		require.False(t, r.OK)
		require.Equal(t, string(domain.CodeInvalid), r.Error.Code)
		require.Contains(t, r.Error.Message, handlers.HeaderMinSeq)
		require.Contains(t, r.Error.Message, fmt.Sprintf("beyond the log's end (%d)", end))
	}
}

// A replica that is not the writer asks the log for its end, only when a
// query names a sequence its views have not reached, and refuses one beyond
// it at once too.
func TestMinSeqBeyondTheLogIsRefusedOnAStandby(t *testing.T) {
	nc, b := sharedServer(t)
	startReplicaWith(t, nc, handlers.Config{WriterID: "writer-a", MinSeqWait: 30 * time.Second})
	var first handlers.Response
	eventually(t, 10*time.Second, func() bool {
		first = b.command(t, "goal.create", map[string]any{"title": "first"}, "first")
		return first.OK
	})
	standby := startReplicaWith(t, nc, handlers.Config{WriterID: "writer-b", MinSeqWait: 30 * time.Second})
	end, err := standby.svc.Log().LastSeq(context.Background())
	require.NoError(t, err)

	subject := "dwr.q.default.goal.list"
	r := standby.svc.ServeQuery("goal.list", subject, minSeqHeader(end), nil)
	require.True(t, r.OK, "%+v", r.Error)
	require.GreaterOrEqual(t, r.Seq, end)

	r = standby.svc.ServeQuery("goal.list", subject, minSeqHeader(end+1), nil)
	require.False(t, r.OK)
	require.Equal(t, string(domain.CodeInvalid), r.Error.Code)
	require.Contains(t, r.Error.Message, handlers.HeaderMinSeq)
	require.Contains(t, r.Error.Message, fmt.Sprintf("beyond the log's end (%d)", end))
}
