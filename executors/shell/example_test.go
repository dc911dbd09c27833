package shell_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/executors/executortest"
	"github.com/dwr-run/dwr/executors/shell"
)

// A command is an executor: its stdin is the task's input, its stdout the
// result; it saves a checkpoint by writing DWR_CHECKPOINT_FILE, fails for
// good with exit 100, and parks the task with exit 101 and what it waits
// for in DWR_WAIT_FILE. Here it runs without a server (executortest); a
// worker runs it with executors.NewWorker(cfg, x.Handle).
func Example() {
	script := `
input="$(cat)"
case "$input" in
'"greet"') echo '{"step": 1}' >"$DWR_CHECKPOINT_FILE"; echo '{"greeting": "hello"}' ;;
'"wait"')  echo '{"signal": "approved"}' >"$DWR_WAIT_FILE"; exit 101 ;;
*)         echo "unknown input $input" >&2; exit 100 ;;
esac`
	x, err := shell.New([]string{"sh", "-c", script}, shell.Options{})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	out, _ := executortest.Run(ctx, x.Handle, executortest.Job{Input: "greet"})
	fmt.Println(string(out.Report.Output), string(out.Checkpoints[0]))

	out, _ = executortest.Run(ctx, x.Handle, executortest.Job{Input: "wait"})
	var wait *executors.WaitError
	if errors.As(out.Err, &wait) {
		fmt.Println("parked until signal", wait.Signal)
	}

	out, _ = executortest.Run(ctx, x.Handle, executortest.Job{Input: "other"})
	fmt.Println(out.Report.Failure.Code, out.Report.Failure.Message, "retryable:", out.Retryable())
	// Output:
	// {"greeting": "hello"} {"step": 1}
	// parked until signal approved
	// exit_100 unknown input "other" retryable: false
}
