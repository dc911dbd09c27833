package executors

// PauseHeartbeats stops (true) or resumes (false) the renewal of the leases
// of w's work items, so that a test can make a lease lapse while a job runs.
func (w *Worker) PauseHeartbeats(pause bool) { w.pauseHeartbeats.Store(pause) }

// ErrClosed is what Run returns once its connection is closed for good.
var ErrClosed = errClosed
