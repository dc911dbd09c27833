package executors

import (
	"errors"
	"fmt"
	"time"
)

// Sleep parks the task until t, holding no process: return it from a handler
// (return executors.Result{}, executors.Sleep(t)) after saving what the next
// attempt needs with Job.SaveCheckpoint. The attempt ends parked; when t
// comes, the service's durable timer makes the task ready and a new attempt
// runs, handed the last checkpoint — also if the service was down at t. A
// parked attempt does not count against the retry policy.
func Sleep(until time.Time) error { return &WaitError{Until: until.UTC()} }

// AwaitSignal parks the task until the signal named name arrives (`dwr signal
// TASK NAME`, or the task.signal command from any service), holding no
// process; then a new attempt runs, handed the last checkpoint.
func AwaitSignal(name string) error { return &WaitError{Signal: name} }

// WaitError is what Sleep and AwaitSignal return: a request to park the
// task, which the worker reports as task.wait instead of a failure.
type WaitError struct {
	Until  time.Time // a timed wait, when Signal is empty
	Signal string    // the signal waited for
}

func (e *WaitError) Error() string {
	if e.Signal != "" {
		return fmt.Sprintf("executors: waiting for signal %q", e.Signal)
	}
	return "executors: sleeping until " + e.Until.Format(time.RFC3339Nano)
}

// waitOf returns the wait err asks for, or nil.
func waitOf(err error) *WaitError {
	var w *WaitError
	if errors.As(err, &w) {
		return w
	}
	return nil
}

// waitBody is the task.wait command.
type waitBody struct {
	TaskID  string     `json:"task_id"`
	Attempt int        `json:"attempt"`
	Kind    string     `json:"kind"`
	Signal  string     `json:"signal,omitempty"`
	Until   *time.Time `json:"until,omitempty"`
}

func waitBodyOf(taskID string, attempt int, w *WaitError) waitBody {
	if w.Signal != "" {
		return waitBody{TaskID: taskID, Attempt: attempt, Kind: "signal", Signal: w.Signal}
	}
	until := w.Until
	return waitBody{TaskID: taskID, Attempt: attempt, Kind: "timer", Until: &until}
}
