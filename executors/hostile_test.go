package executors_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/executors/executortest"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
)

// A forged cancellation on the feed never reaches a running job: on a
// closed service the event subjects are the service's to publish, even for
// an admin of the workspace.
func TestAForgedFeedEventDoesNotStopAJob(t *testing.T) {
	st := servicetest.Start(t, "", servicetest.Options{Secure: true, Config: handlers.Config{WriterID: "test-writer"}})
	c := st.Client("default")
	taskID := c.CreateTask(t, map[string]any{"queue": "work"})
	started, release := make(chan string, 1), make(chan struct{})
	cancelled := make(chan error, 1)
	w, err := executors.NewWorker(executors.Config{Conn: st.Member(t, "default", "worker-1", "executor", "work"),
		Queue: "work", Lease: 5 * time.Second},
		func(ctx context.Context, job *executors.Job) (executors.Result, error) {
			started <- job.TaskID
			select {
			case <-release:
			case <-ctx.Done():
				cancelled <- context.Cause(ctx)
				return executors.Result{}, ctx.Err()
			}
			return executors.Result{Output: json.RawMessage(`{"done":true}`)}, nil
		})
	require.NoError(t, err)
	executortest.StartWorker(t, w)
	require.Equal(t, taskID, recv(t, started), "the job started")

	mallory := st.Member(t, "default", "mallory", "admin") // even an admin of the workspace
	errs := make(chan error, 4)
	mallory.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err })
	for _, ev := range []string{"cancelled", "failed", "attempt_abandoned"} {
		require.NoError(t, mallory.Publish("dwr.ev.default.task."+taskID+"."+ev, []byte(`{"type":"task.cancelled"}`)))
	}
	require.NoError(t, mallory.Flush())
	require.ErrorIs(t, recv(t, errs), nats.ErrPermissionViolation, "publishing on the feed is refused")
	close(release)
	c.WaitState(t, taskID, "accepted", 20*time.Second)
	select {
	case err := <-cancelled:
		t.Fatalf("the job's context was cancelled: %v", err)
	default:
	}
}
