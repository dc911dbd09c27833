package executors_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
)

// A forged cancellation on the feed never reaches a running job: on a
// closed service the event subjects are the service's to publish, even for
// an admin of the workspace.
func TestAForgedFeedEventDoesNotStopAJob(t *testing.T) {
	st := servicetest.Start(t, "", servicetest.Options{Secure: true, Config: handlers.Config{WriterID: "test-writer"}})
	var task struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal(servicetest.Must(t, st.Admin, "default", "task.create",
		map[string]any{"spec": map[string]any{"queue": "work"}}), &task))
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
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-done)
	})
	select {
	case id := <-started:
		require.Equal(t, task.ID, id)
	case <-time.After(20 * time.Second):
		t.Fatal("the job did not start")
	}

	mallory := st.Member(t, "default", "mallory", "admin") // even an admin of the workspace
	errs := make(chan error, 4)
	mallory.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err })
	for _, ev := range []string{"cancelled", "failed", "attempt_abandoned"} {
		require.NoError(t, mallory.Publish("dwr.ev.default.task."+task.ID+"."+ev, []byte(`{"type":"task.cancelled"}`)))
	}
	require.NoError(t, mallory.Flush())
	select {
	case err := <-errs:
		require.ErrorIs(t, err, nats.ErrPermissionViolation)
	case <-time.After(5 * time.Second):
		t.Fatal("publishing on the feed was not refused")
	}
	close(release)
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := st.Admin.Request("dwr.q.default.task.get", []byte(`{"id":"`+task.ID+`"}`), 5*time.Second)
		require.NoError(t, err)
		var r struct {
			Result struct {
				State string `json:"state"`
			} `json:"result"`
		}
		require.NoError(t, json.Unmarshal(resp.Data, &r))
		if r.Result.State == "accepted" {
			break
		}
		require.True(t, time.Now().Before(deadline), "the task is %s, not accepted", r.Result.State)
		<-tick.C
	}
	select {
	case err := <-cancelled:
		t.Fatalf("the job's context was cancelled: %v", err)
	default:
	}
}
