package client_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// A service starts work and waits for its goal: it creates a goal, submits
// a plan of two tasks (package after compile), and waits until the goal has
// ended, while a worker runs the tasks.
func Example() {
	dev, err := servicetest.StartDev() // `dwr serve`, in-process, for the example
	must(err)
	defer func() { must(dev.Stop()) }()
	nc := dev.Conn
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The executor: runs every task of queue "build".
	w, err := executors.NewWorker(executors.Config{Conn: nc, Queue: "build", Logger: servicetest.Logger()},
		func(_ context.Context, job *executors.Job) (executors.Result, error) {
			return executors.Result{Output: "built " + job.Key}, nil
		})
	must(err)
	wctx, stopWorker := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(wctx) }()
	defer func() { stopWorker(); must(<-ran) }() // drained before the service stops

	// The caller: usually client.Connect(url, client.Credentials(file)).
	c := client.New(nc)
	// The goal and its first plan in one command (one commit); a revision
	// of the plan goes with SubmitPlan.
	g, err := c.CreateGoal(ctx, schemas.CreateGoal{Title: "release 1.2", Tasks: []schemas.TaskSpec{
		{Key: "compile", Queue: "build"},
		{Key: "package", Queue: "build", DependsOn: []string{"compile"}},
	}})
	must(err)
	done, err := c.WaitGoal(ctx, g.ID)
	must(err)
	fmt.Println(done.Title, "is", done.State, "with", done.Counts[schemas.StateAccepted], "tasks accepted")
	// Output: release 1.2 is achieved with 2 tasks accepted
}

// must panics on errors: an example has no *testing.T.
func must(err error) {
	if err != nil {
		panic(err)
	}
}
