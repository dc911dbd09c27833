package client_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/embedded"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// A service starts work and waits for its goal: it creates a goal, submits
// a plan of two tasks (package after compile), and waits until the goal has
// ended, while a worker runs the tasks.
func Example() {
	nc, stop := devService() // `dwr serve`, in-process, for the example
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The executor: runs every task of queue "build".
	w, err := executors.NewWorker(executors.Config{Conn: nc, Queue: "build", Logger: servicetest.Logger()},
		func(_ context.Context, job *executors.Job) (executors.Result, error) {
			return executors.Result{Output: "built " + job.Key}, nil
		})
	must(err)
	wctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	go func() { _ = w.Run(wctx) }()

	// The caller: usually client.Connect(url, client.Credentials(file)).
	c := client.New(nc)
	g, err := c.CreateGoal(ctx, schemas.CreateGoal{Title: "release 1.2"})
	must(err)
	_, err = c.SubmitPlan(ctx, g.ID, []schemas.TaskSpec{
		{Key: "compile", Queue: "build"},
		{Key: "package", Queue: "build", DependsOn: []string{"compile"}},
	})
	must(err)
	done, err := c.WaitGoal(ctx, g.ID)
	must(err)
	fmt.Println(done.Title, "is", done.State, "with", done.Counts[schemas.StateAccepted], "tasks accepted")
	// Output: release 1.2 is achieved with 2 tasks accepted
}

// devService runs the dwr service in-process, open (as `dwr serve
// --insecure-open` does), and returns a connection to it and how to stop
// it. It panics on errors: an example has no *testing.T.
func devService() (*nats.Conn, func()) {
	dir, err := os.MkdirTemp("", "dwr-example-")
	must(err)
	srv, err := embedded.Start(embedded.Config{DataDir: dir, Logger: servicetest.Logger()})
	must(err)
	nc, err := srv.Connect()
	must(err)
	store, err := projections.Open(filepath.Join(dir, "views"), projections.Options{})
	must(err)
	key, _, err := handlers.LoadLogKey(filepath.Join(dir, handlers.LogKeyFile), true)
	must(err)
	svc, err := handlers.New(nc, store, handlers.Config{Logger: servicetest.Logger(), LogKey: key})
	must(err)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- svc.Run(ctx) }()
	<-svc.Ready()
	return nc, func() {
		cancel()
		must(<-ran)
		nc.Close()
		must(store.Close())
		srv.Shutdown()
		must(os.RemoveAll(dir))
	}
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
