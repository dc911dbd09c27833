package executortest_test

import (
	"context"
	"fmt"

	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/executors/executortest"
)

// greet is the handler under test.
func greet(ctx context.Context, job *executors.Job) (executors.Result, error) {
	var in struct{ Name string }
	if err := job.Decode(&in); err != nil {
		return executors.Result{}, executors.Permanent(err)
	}
	if in.Name == "" {
		return executors.Result{}, executors.Failure{Code: "missing_name", Message: "input.name is required"}
	}
	if err := job.SaveCheckpoint(ctx, map[string]string{"greeted": in.Name}); err != nil {
		return executors.Result{}, err
	}
	return executors.Result{Output: map[string]string{"greeting": "hello, " + in.Name}}, nil
}

// Test a handler without a server: hand it a job, look at what a worker
// would report and at the checkpoints it saved.
func Example() {
	ctx := context.Background()
	out, err := executortest.Run(ctx, greet, executortest.Job{Input: map[string]string{"name": "Ada"}})
	if err != nil {
		panic(err)
	}
	fmt.Println(string(out.Report.Output), string(out.Checkpoints[0]))

	out, _ = executortest.Run(ctx, greet, executortest.Job{Input: map[string]string{}})
	fmt.Println(out.Report.Failure.Code, "retryable:", out.Retryable())
	// Output:
	// {"greeting":"hello, Ada"} {"greeted":"Ada"}
	// missing_name retryable: false
}
