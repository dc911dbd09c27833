package executors_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/schemas"
)

// paymentsAPI stands in for an external system that deduplicates requests
// by an idempotency key, as payment providers do.
type paymentsAPI struct {
	mu      sync.Mutex
	charges map[string]int // idempotency key -> cents
	calls   int
}

func (p *paymentsAPI) charge(key string, cents int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if _, done := p.charges[key]; !done {
		p.charges[key] = cents
	}
}

// A worker whose handler charges a list of orders. It keys every charge by
// the task's operation key, so that a charge repeated by a later attempt
// (after a crash between charging and checkpointing) is made only once, and
// it checkpoints after each order, so that a retry resumes where the failed
// attempt stopped.
func ExampleWorker() {
	dwr := startDevService() // `dwr serve`, in-process
	defer dwr.stop()
	nc := dwr.connect() // in production: nats.Connect(url, nats.MaxReconnects(-1))
	defer nc.Close()

	api := &paymentsAPI{charges: map[string]int{}}
	flaky := true
	charge := func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		var in struct{ Orders []int }
		if err := job.Decode(&in); err != nil {
			return executors.Result{}, executors.Permanent(err) // bad input: retrying cannot help
		}
		var done struct{ Charged int } // how many orders are charged
		if job.Checkpoint != nil {
			if err := json.Unmarshal(job.Checkpoint, &done); err != nil {
				return executors.Result{}, executors.Permanent(err)
			}
		}
		fmt.Printf("attempt %d starts at order %d\n", job.Attempt, done.Charged)
		for i := done.Charged; i < len(in.Orders); i++ {
			api.charge(fmt.Sprintf("%s/order-%d", job.OperationKey, i), in.Orders[i])
			done.Charged = i + 1
			if err := job.SaveCheckpoint(ctx, done); err != nil {
				return executors.Result{}, err // the attempt lost the task: stop
			}
			if flaky && i == 0 {
				flaky = false
				return executors.Result{}, errors.New("connection reset") // retried
			}
		}
		return executors.Result{Output: done}, nil
	}

	w, err := executors.NewWorker(executors.Config{Conn: nc, Queue: "payments"}, charge)
	if err != nil {
		panic(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()

	id := dwr.createTask(schemas.TaskSpec{Queue: "payments", Input: json.RawMessage(`{"orders": [100, 200, 300]}`),
		Retry: &schemas.RetryPolicy{InitialBackoff: schemas.Duration(100 * time.Millisecond)}})
	dwr.waitState(id, "accepted")
	stop()
	if err := <-stopped; err != nil {
		panic(err)
	}
	fmt.Printf("%d orders charged once each, %d calls\n", len(api.charges), api.calls)
	// Output:
	// attempt 1 starts at order 0
	// attempt 2 starts at order 1
	// 3 orders charged once each, 3 calls
}
