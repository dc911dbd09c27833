package executortest

import (
	"context"
	"sync"
	"testing"

	"github.com/dwr-run/dwr/executors"
)

// StartWorker runs w until the test ends, for a test against a running
// service (`dwr serve`, or one the test started), and fails the test if Run
// returns an error. It returns stop, which stops w (Run's context ends, so
// it drains), waits for Run to return and returns its error. stop may be
// called more than once; the test's cleanup calls it.
func StartWorker(t testing.TB, w *executors.Worker) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("executortest: the worker stopped with an error: %v", err)
		}
	})
	return stop
}
