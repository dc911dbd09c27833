// Package client is the Go client of dwr for callers: a service or a tool
// that starts work (goals, plans, tasks, rituals' runs, schedules), steers it (signals, reviews,
// approvals, cancellation) and reads it (queries, the event feed). Executors
// take work with the executor SDK (package executors) instead, which sends
// its own commands and queries through this package.
//
//	c, err := client.Connect("nats://127.0.0.1:4222", client.Credentials("dwr-data/admin.creds"))
//	if err != nil { ... }
//	defer c.Close()
//	g, err := c.CreateGoal(ctx, schemas.CreateGoal{Title: "ship the release"})
//	_, err = c.SubmitPlan(ctx, g.ID, []schemas.TaskSpec{{Key: "build", Queue: "ci"}})
//	done, err := c.WaitGoal(ctx, g.ID) // achieved, failed or cancelled
//
// What a Client does for its caller:
//
//   - Command ids. Every command carries a Dwr-Command-Id: a fresh ULID, or
//     the one CommandID gives. The service answers a retry of an id (from
//     the same identity) with the first outcome, so sending again is safe.
//   - Retries. A request the service could not take (no responder, no
//     writer, a timeout) is sent again, with the same command id, until the
//     context ends; NoRetry turns this off for a Client, Once for one call,
//     and OnRetry is told of every retry (to log a request that waits long).
//   - Read-your-writes. Each query carries the highest log sequence the
//     Client's commands were answered with (Dwr-Min-Seq), so it sees them.
//   - Typed errors. A refusal is the service's *schemas.Error; branch on it
//     with errors.Is(err, client.ErrConflict) (ErrInvalid, ErrNotFound,
//     ErrTooLarge, ErrForbidden, ErrUnavailable); its Fields name the
//     offending fields by JSON pointer.
//   - The feed. Watch follows one aggregate's events from a version: its
//     history, then the live feed, with no event missed or repeated across
//     reconnections.
//   - Artifacts. PutArtifact streams bytes into the workspace's store in
//     chunks and returns their digest; GetArtifact reads them back, checking
//     the digest (ErrArtifactCorrupt); SaveArtifact writes them to a file
//     only once checked.
//
// Request sends a message as it is (its subject, headers and data) and
// returns the service's reply, accepted or refused: for tests and tools that
// speak the wire itself.
//
// Every type on the wire is in package schemas, shared with the service
// and the executor SDK.
package client
