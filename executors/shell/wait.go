package shell

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/schemas"
)

// Error codes of a command's wait (exit 101) that cannot be honoured.
const (
	CodeInvalidWait     = "invalid_wait"             // the wait file is empty or does not say what to wait for
	CodeApprovalDecided = "approval_already_decided" // an approval asked again for an action already decided
	CodeDelegationEnded = "delegation_already_ended" // a delegation asked again under a key whose goal has ended
)

// signalName is what a signal's name may be: the wire contract's "Key"
// (schemas/common.json), which the service checks again.
var signalName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// waitForms says what a wait file may hold: the end of every message about
// one that does not.
const waitForms = `expected one JSON object: {"until": "<RFC 3339 time>"}, {"after": "<duration, e.g. 10m>"}, ` +
	`{"signal": "<name>"}, {"approval": {"action": <the action to approve>, "summary": ..., ...}} or ` +
	`{"delegate": {"key": "<name>", "goal": {"title": ..., "tasks": [...]} | "ritual": {"name": ..., "params": {...}}, "on_failure": "fail|review|resume"}}`

// waitRequest is what a command asked for in its wait file: a durable sleep
// until a time, a signal, an approval, or a child goal's end.
type waitRequest struct {
	until    time.Time
	signal   string
	approval *executors.ApprovalRequest
	delegate *executors.Delegation
}

// waitFile is a wait file as written.
type waitFile struct {
	Until    *string         `json:"until"`
	After    json.RawMessage `json:"after"`
	Signal   *string         `json:"signal"`
	Approval *waitApproval   `json:"approval"`
	Delegate *waitDelegate   `json:"delegate"`
}

// waitDelegate is the delegation of a wait file: task.delegate's body
// after its attempt's fields.
type waitDelegate struct {
	Key       string              `json:"key"`
	Goal      *schemas.CreateGoal `json:"goal"`
	Ritual    *schemas.RunRitual  `json:"ritual"`
	OnFailure string              `json:"on_failure"`
}

// waitApproval is the approval request of a wait file: the wire's
// (task.request_approval's after its attempt's fields), but that its
// expires_in is read here, so that it may be null and a bad one is named.
type waitApproval struct {
	schemas.ApprovalRequest
	ExpiresIn json.RawMessage `json:"expires_in"` // shadows the embedded one
}

// parseWaitFile returns what the wait file b asks for; "after" counts from
// now.
func parseWaitFile(b []byte, now time.Time) (waitRequest, error) {
	t := bytes.TrimSpace(b)
	if len(t) == 0 {
		return waitRequest{}, fmt.Errorf("%s is empty", EnvWaitFile)
	}
	holds := func(format string, args ...any) error {
		return fmt.Errorf("%s holds %q: %s", EnvWaitFile, short(strings.ToValidUTF8(string(t), "\uFFFD"), 200), fmt.Sprintf(format, args...))
	}
	dec := json.NewDecoder(bytes.NewReader(t))
	dec.DisallowUnknownFields()
	var f waitFile
	if err := dec.Decode(&f); err != nil {
		return waitRequest{}, holds("%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return waitRequest{}, holds("more than one JSON value")
	}
	n := 0
	for _, set := range []bool{f.Until != nil, !isNull(f.After), f.Signal != nil, f.Approval != nil, f.Delegate != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return waitRequest{}, holds("%d waits; name exactly one of until, after, signal, approval, delegate", n)
	}
	switch {
	case f.Until != nil:
		at, err := time.Parse(time.RFC3339Nano, *f.Until)
		if err != nil {
			return waitRequest{}, holds(`"until" is not an RFC 3339 time such as 2026-12-01T09:00:00Z`)
		}
		// A time already passed resumes the task at once (the service
		// ends such a wait in the commit that records it).
		return waitRequest{until: at.UTC()}, nil
	case f.Signal != nil:
		if !signalName.MatchString(*f.Signal) {
			return waitRequest{}, holds(`"signal" is not a valid signal name: letters, digits, '_', '.' and '-', starting with a letter or digit, at most 128`)
		}
		return waitRequest{signal: *f.Signal}, nil
	case f.Approval != nil:
		return approvalOf(f.Approval, holds)
	case f.Delegate != nil:
		return delegationOf(f.Delegate, holds)
	}
	d, err := durationOf(f.After)
	if err != nil || d <= 0 {
		return waitRequest{}, holds(`"after" is not a positive duration such as "10m" or "1h30m" (or a number of seconds)`)
	}
	return waitRequest{until: now.Add(d).UTC()}, nil
}

// approvalOf returns the approval request of a wait file.
func approvalOf(a *waitApproval, holds func(string, ...any) error) (waitRequest, error) {
	if isNull(a.Action) {
		return waitRequest{}, holds(`"approval" has no "action": the concrete action to approve is required`)
	}
	if len(a.Action) > executors.MaxPayloadBytes || len(a.Basis) > executors.MaxPayloadBytes {
		return waitRequest{}, holds("the action and the basis may have at most %d bytes each", executors.MaxPayloadBytes)
	}
	r := &executors.ApprovalRequest{Action: a.Action, Summary: a.Summary, Role: a.Role, Responses: a.Responses,
		Branches: a.Branches, OnExpiry: a.OnExpiry, EscalateTo: a.EscalateTo, Quorum: a.Quorum,
		ExcludeRequester: a.ExcludeRequester}
	if !isNull(a.Basis) {
		r.Basis = a.Basis
	}
	if !isNull(a.ExpiresIn) {
		d, err := durationOf(a.ExpiresIn)
		if err != nil || d < 0 {
			return waitRequest{}, holds(`"approval"."expires_in" is not a duration such as "1h" (or a number of seconds)`)
		}
		r.ExpiresIn = d
	}
	return waitRequest{approval: r}, nil
}

// delegationOf returns the delegation of a wait file.
func delegationOf(d *waitDelegate, holds func(string, ...any) error) (waitRequest, error) {
	switch {
	case !signalName.MatchString(d.Key):
		return waitRequest{}, holds(`"delegate"."key" is not a valid key: letters, digits, '_', '.' and '-', starting with a letter or digit, at most 128`)
	case (d.Goal == nil) == (d.Ritual == nil):
		return waitRequest{}, holds(`"delegate" names "goal" (with its "tasks") or "ritual", one of the two`)
	case d.Goal != nil && len(d.Goal.Tasks) == 0:
		return waitRequest{}, holds(`"delegate"."goal" has no "tasks": a delegated goal needs its plan`)
	}
	del := &executors.Delegation{Key: d.Key, OnFailure: d.OnFailure}
	if d.Goal != nil {
		del.Title, del.Description, del.SuccessCriteria = d.Goal.Title, d.Goal.Description, d.Goal.SuccessCriteria
		del.Envelope, del.Tasks = d.Goal.Envelope, d.Goal.Tasks
	} else {
		del.Ritual = &executors.RitualRun{Name: d.Ritual.Name, Version: d.Ritual.Version}
		if !isNull(d.Ritual.Params) {
			del.Ritual.Params = d.Ritual.Params
		}
	}
	return waitRequest{delegate: del}, nil
}

// durationOf decodes a duration: a string such as "10m", or a number of
// seconds.
func durationOf(raw json.RawMessage) (time.Duration, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return time.ParseDuration(s)
	}
	var secs float64
	if err := json.Unmarshal(raw, &secs); err != nil {
		return 0, err
	}
	if secs > float64(math.MaxInt64/int64(time.Second)) || secs < -float64(math.MaxInt64/int64(time.Second)) {
		return 0, errors.New("out of range")
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// isNull reports whether a JSON field was absent or null.
func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// readWaitFile returns the wait file's content, refusing more than
// MaxWaitFile bytes.
func readWaitFile(path string) ([]byte, error) {
	f, err := os.Open(path) //nolint:gosec // G304: the worker's own temporary file
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %v", EnvWaitFile, err)
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, MaxWaitFile+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("cannot read %s: %v", EnvWaitFile, err)
	case len(b) > MaxWaitFile:
		return nil, fmt.Errorf("%s holds more than %d bytes", EnvWaitFile, MaxWaitFile)
	}
	return b, nil
}

// park honours the wait of a command that exited 101: the task sleeps,
// waits for a signal, asks for an approval, or delegates to a child goal,
// as the wait file at path says. A wait file that does not say fails the task, not retried: the
// command would only ask the same again.
func (x *Command) park(ctx context.Context, job *executors.Job, path string, now time.Time) (executors.Result, error) {
	b, err := readWaitFile(path)
	var w waitRequest
	if err == nil {
		w, err = parseWaitFile(b, now)
	}
	if err != nil {
		return executors.Result{}, executors.Failure{Code: CodeInvalidWait,
			Message: "the command exited " + strconv.Itoa(ExitWait) + " to wait, but " + err.Error() + "; " + waitForms}
	}
	switch {
	case w.delegate != nil:
		out, err := job.Delegate(ctx, *w.delegate)
		if out == nil {
			return executors.Result{}, err // a *executors.WaitError: the delegation parked the task, or its refusal
		}
		// The task's goal under this key has ended already: delegating
		// again would run the command again, which would delegate again.
		return executors.Result{}, executors.Failure{Code: CodeDelegationEnded, Message: fmt.Sprintf(
			"the command exited %d to delegate under key %q, whose goal %s has ended (%s): read %s (or %s) before delegating, "+
				"and delegate again only under another key", ExitWait, out.Key, out.GoalID, out.State, EnvDelegations, EnvDelegationsFile)}
	case w.approval != nil:
		d, err := job.RequestApproval(ctx, *w.approval)
		if err != nil {
			return executors.Result{}, err // a *executors.WaitError: the request parked the task
		}
		// The task holds a decision on exactly this action, asked of this
		// role, already: asking again would run the command again, which
		// would ask again.
		return executors.Result{}, executors.Failure{Code: CodeApprovalDecided, Message: fmt.Sprintf(
			"the command exited %d to ask for approval of an action already decided (%s by %s, approval %s, action %s, asked of role %q): "+
				"read DWR_APPROVAL (its action_digest, asked_role and response) before asking, and ask again only for another action or of another role",
			ExitWait, d.Response, d.Approver, d.ApprovalID, d.ActionDigest, d.AskedRole)}
	case w.signal != "":
		return executors.Result{}, executors.AwaitSignal(w.signal)
	}
	return executors.Result{}, executors.Sleep(w.until)
}

// short cuts s to n characters at most, marking the cut with "...".
func short(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-3]) + "..."
	}
	return s
}
