package domain

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"time"
)

// An attempt is a capability. Its claim hands the claimer a secret token
// (made by the service: the domain never makes or sees one); the log, the
// event feed and the views keep only its SHA-256 (Attempt.TokenHash). Every
// later command of the attempt — checkpoint, success, failure, wait,
// approval request, heartbeat — must carry the token and come from the
// identity that claimed it (Attempt.ClaimedBy, the claim's Meta.Actor).
// Anything else is refused, and leaves nothing behind.

// Reasons an attempt's command is refused; each refusal's message opens
// with its reason ("bad_token: ...").
const (
	// RefusedToken: the command does not carry the attempt's token.
	RefusedToken = "bad_token"
	// RefusedClaimer: the command comes from another identity than the
	// one that claimed the attempt.
	RefusedClaimer = "not_claimer"
	// RefusedLeaseHeld: a claim would supersede an attempt that is still
	// alive within its lease.
	RefusedLeaseHeld = "lease_held"
)

// TokenHash returns what is kept of an attempt's token: the hex SHA-256 of
// it. It is what a claim records and what every later command of the
// attempt is checked against.
func TokenHash(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// holds reports whether token is the token of an attempt whose hash is
// want. An attempt without a hash (claimed before attempts had tokens)
// holds no token at all.
func holds(want, token string) bool {
	if want == "" || token == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(want), []byte(TokenHash(token))) == 1
}

// holder returns the task when the command comes from its running attempt
// n: it carries the attempt's token and is sent by the identity that
// claimed it. A command naming an attempt that does not exist or no longer
// runs is refused as a conflict on /attempt (fencing); one without the
// attempt's token, or from another identity, is refused as forbidden on
// /token. dup is true when the holder sent this command already (a retry):
// the attempt is authenticated first, so that a command id another
// identity used is never answered as this one's.
func (x *tx) holder(taskID string, n int, token string) (t *Task, dup bool, err error) {
	t, err = x.task(taskID, "/task_id")
	if err != nil {
		return nil, false, err
	}
	a := t.Attempt(n)
	if a == nil {
		return nil, false, notRunning(t, n)
	}
	if !holds(a.TokenHash, token) {
		return nil, false, &Error{Code: CodeForbidden, Field: "/token", Message: fmt.Sprintf(
			"%s: the token is not attempt %d's of task %s: send the token its claim returned", RefusedToken, n, t.ID)}
	}
	if a.ClaimedBy != x.m.Actor {
		return nil, false, &Error{Code: CodeForbidden, Field: "/token", Message: fmt.Sprintf(
			"%s: attempt %d of task %s was claimed by another identity; only it may send the attempt's commands", RefusedClaimer, n, t.ID)}
	}
	if t.HasCommand(x.m.Key()) {
		return t, true, nil
	}
	if r := t.Running(); r == nil || r.N != n {
		return nil, false, notRunning(t, n)
	}
	return t, false, nil
}

// notRunning refuses a command of attempt n, which is not t's running
// attempt.
func notRunning(t *Task, n int) error {
	cur := 0
	if c := t.Current(); c != nil {
		cur = c.N
	}
	return &Error{Code: CodeConflict, Field: "/attempt", Message: fmt.Sprintf(
		"attempt %d of task %s is not the running attempt (task is %s, latest attempt %d): its report is refused", n, t.ID, t.State, cur)}
}

// leaseHeld refuses a claim that would supersede attempt n of t before
// after, the moment its lease lapses.
func leaseHeld(t *Task, n int, after time.Time) error {
	if after.IsZero() {
		return &Error{Code: CodeConflict, Field: "/supersedes", Message: fmt.Sprintf(
			"%s: when attempt %d of task %s was last alive is not known; it cannot be superseded now", RefusedLeaseHeld, n, t.ID)}
	}
	return &Error{Code: CodeConflict, Field: "/supersedes", RetryAfter: after, Message: fmt.Sprintf(
		"%s: attempt %d of task %s was alive within its lease; it may be superseded from %s", RefusedLeaseHeld, n, t.ID,
		after.UTC().Format(time.RFC3339Nano))}
}

// heartbeat answers that attempt c.Attempt of the task is alive, if it
// is its holder's: it changes nothing.
func (x *tx) heartbeat(c *Heartbeat) (Reply, error) {
	t, _, err := x.holder(c.TaskID, c.Attempt, c.Token)
	if err != nil {
		return Reply{}, err
	}
	if r := t.Running(); r == nil || r.N != c.Attempt { // a heartbeat is never a retry
		return Reply{}, notRunning(t, c.Attempt)
	}
	return taskReply(t), nil
}
