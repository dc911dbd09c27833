package executors_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/executors/executortest"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
)

// A worker that stops while its connection stays open (a process that
// stops one of its workers, or is stopping) leaves no pull behind that
// would take the next item: another worker of the queue runs it at once,
// not after the queue's lease — on a closed service too, where the pull
// crosses the accounts' import.
func TestAStoppedWorkersPullDoesNotDelayTheNextItem(t *testing.T) {
	for _, secure := range []bool{false, true} {
		t.Run(map[bool]string{false: "open", true: "closed"}[secure], func(t *testing.T) {
			st := servicetest.Start(t, "", servicetest.Options{Secure: secure, Config: handlers.Config{WriterID: "test-writer"}})
			conn := func(name string) executors.Config {
				cfg := executors.Config{Queue: "relay", Lease: time.Minute, Executor: name, Concurrency: 1}
				if secure {
					cfg.Conn = st.Member(t, "default", name, "executor", "relay")
				} else {
					nc, err := st.Server.Connect()
					require.NoError(t, err)
					t.Cleanup(nc.Close)
					cfg.Conn = nc
				}
				return cfg
			}
			started := make(chan string, 4)
			run := func(name string) executors.Handler {
				return func(ctx context.Context, job *executors.Job) (executors.Result, error) {
					started <- name
					return executors.Result{Output: "ran"}, nil
				}
			}
			c := st.Client("default")
			first, err := executors.NewWorker(conn("first"), run("first"))
			require.NoError(t, err)
			stopFirst := executortest.StartWorker(t, first)
			warm := c.CreateTask(t, map[string]any{"queue": "relay"})
			c.WaitState(t, warm, "accepted", 15*time.Second)
			require.Equal(t, "first", recv(t, started))
			// The first worker waits on a new pull now, which the server
			// holds for up to 15 s; the worker stops, its connection left
			// open.
			js, err := jetstream.New(st.Conn)
			require.NoError(t, err)
			cons, err := js.Consumer(context.Background(), "DWR_WORK", "dwr-default-relay")
			require.NoError(t, err)
			servicetest.Eventually(t, 10*time.Second, func() bool {
				info, err := cons.Info(context.Background())
				return err == nil && info.NumWaiting == 1
			}, func() string { return "the first worker's pull is not waiting in the server" })
			require.NoError(t, stopFirst())

			second, err := executors.NewWorker(conn("second"), run("second"))
			require.NoError(t, err)
			executortest.StartWorker(t, second)
			id := c.CreateTask(t, map[string]any{"queue": "relay"})
			select {
			case who := <-started:
				require.Equal(t, "second", who)
			case <-time.After(20 * time.Second):
				t.Fatalf("task %s was not run within 20 s: its item went to the stopped worker's pull and waits for the lease (a minute)", id)
			}
			c.WaitState(t, id, "accepted", 15*time.Second)
		})
	}
}
