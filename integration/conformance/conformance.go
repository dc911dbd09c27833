// Package conformance is the language-neutral contract of the executor
// conformance suite (integration/conformance_test.go): the scenarios a
// task's input names, what an executor under test reads from its
// environment, and the observations it writes. An executor implementation
// — the Go SDK, `dwr worker`, an SDK in another language — passes the suite
// by doing, for each scenario, what Input's documentation says, through
// its own API.
package conformance

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// The scenarios: Input.Scenario.
const (
	// Succeed returns {"value": Value, "attempt", "operation_key"}.
	Succeed = "succeed"
	// Retry fails, retryably, while the attempt is at most FailTimes,
	// then succeeds with {"attempt", "operation_key"}.
	Retry = "retry"
	// PermanentFailure fails with Message and must not be retried.
	PermanentFailure = "permanent"
	// OutliveLease works for Millis (several leases), keeping its lease,
	// then succeeds with {"attempt", "operation_key"}.
	OutliveLease = "outlive_lease"
	// CheckpointResume: without a checkpoint, saves {"step": 1, "attempt"},
	// observes EventStarted and blocks (the suite kills the executor); with
	// one, succeeds with {"resumed_from": <the checkpoint>, "attempt", ...}.
	CheckpointResume = "checkpoint_resume"
	// Fencing saves a checkpoint (so the attempt is claimed: the suite
	// waits until the log holds it), observes
	// EventStarted, and waits until the suite releases the task (Released)
	// — then observes EventReleased and succeeds with {"attempt", ...} — or
	// until the attempt is stopped (EventStopped, detail the cause). The
	// suite freezes the first executor past its lease; a second one takes
	// the task over; the first one's report must then be refused.
	Fencing = "fencing"
	// Cancel saves a checkpoint, observes EventStarted and waits until
	// the attempt is stopped: it observes EventStopped with detail
	// CauseCancelled when the task is cancelled.
	Cancel = "cancel"
	// Sleep: without a checkpoint, saves {"until": now + Millis} and sleeps
	// durably until then (the attempt ends; the task waits on a timer);
	// with one, succeeds with {"woke_at", "attempt", ...}.
	Sleep = "sleep"
	// Signal: without a signal, waits for the signal Name; with one,
	// succeeds with {"signal": <its payload>, "attempt", ...}.
	Signal = "signal"
	// Approval asks for a decision on Action (of Role's approvers); once
	// decided, succeeds with {"response", "approver", "action_digest", ...}.
	Approval = "approval"
	// TwoApprovals asks each of Roles in turn to approve the same Action:
	// one role's decision never stands for another's, so each is an
	// approval of its own. Once every role approved, it succeeds with
	// {"approvers": [the approver of each role's decision, in Roles'
	// order], ...}; a response other than approve fails it permanently.
	TwoApprovals = "two_approvals"
	// FourEyes asks Quorum distinct approvers of Role to approve Action in
	// one request; once the last of them approved, it succeeds with
	// {"approvers": [every approver, in order], "approver": the last, ...}.
	FourEyes = "four_eyes"
	// NotByRequester is FourEyes with the request excluding its requester
	// (ExcludeRequester): the identity that created the task may not be one
	// of the approvers.
	NotByRequester = "not_by_requester"
	// Artifact stores Content as an artifact named Name and succeeds with
	// it attached to the result.
	Artifact = "artifact"
	// ModelStep succeeds with one model step recorded: Model,
	// PromptVersion, Tokens.
	ModelStep = "model_step"
	// Verified succeeds with {"attempt", "verdicts": Verdicts, ...}; the
	// task names a verification queue whose verifier judges the result:
	// verdicts[attempt-1] (PASS past their end), with evidence {"checked":
	// "<attempt>"} (VerifiedResult).
	Verified = "verified"
)

// Input is a task's input in the suite: the scenario and its parameters.
type Input struct {
	Scenario  string          `json:"scenario"`
	Value     any             `json:"value,omitempty"`
	FailTimes int             `json:"fail_times,omitempty"`
	Message   string          `json:"message,omitempty"`
	Millis    int             `json:"millis,omitempty"`
	Name      string          `json:"name,omitempty"`
	Action    json.RawMessage `json:"action,omitempty"`
	Role      string          `json:"role,omitempty"`
	Roles     []string        `json:"roles,omitempty"`
	Quorum    int             `json:"quorum,omitempty"`
	// ExcludeRequester is passed to the request of NotByRequester.
	ExcludeRequester bool     `json:"exclude_requester,omitempty"`
	Content          string   `json:"content,omitempty"`
	Model            string   `json:"model,omitempty"`
	PromptVersion    string   `json:"prompt_version,omitempty"`
	Tokens           int64    `json:"tokens,omitempty"`
	Verdicts         []string `json:"verdicts,omitempty"`
}

// Events an executor observes, and the causes an EventStopped names.
const (
	EventStarted  = "started"
	EventReleased = "released"
	EventStopped  = "stopped"

	CauseCancelled = "cancelled"
	CauseLeaseLost = "lease_lost"
)

// Observation is one line an executor appends to its observations file.
type Observation struct {
	TaskID  string `json:"task_id"`
	Attempt int    `json:"attempt"`
	Event   string `json:"event"`
	Detail  any    `json:"detail,omitempty"`
}

// Roles of an executor under test: CONFORMANCE_ROLE.
const (
	RoleWorker   = "worker"
	RoleVerifier = "verifier"
)

// Env is what the suite gives an executor under test, from its
// environment.
type Env struct {
	Server       string        // DWR_SERVER: the NATS URL
	Creds        string        // DWR_CREDS: the executor's credential file
	Queue        string        // CONFORMANCE_QUEUE
	Role         string        // CONFORMANCE_ROLE: worker (default) or verifier
	Lease        time.Duration // CONFORMANCE_LEASE_MS
	Observations string        // CONFORMANCE_OBSERVE: the observations file
	Dir          string        // CONFORMANCE_DIR: where release files appear
}

// FromEnv reads Env from the process's environment.
func FromEnv() (*Env, error) {
	e := &Env{Server: os.Getenv("DWR_SERVER"), Creds: os.Getenv("DWR_CREDS"), Queue: os.Getenv("CONFORMANCE_QUEUE"),
		Role: os.Getenv("CONFORMANCE_ROLE"), Observations: os.Getenv("CONFORMANCE_OBSERVE"), Dir: os.Getenv("CONFORMANCE_DIR")}
	if e.Role == "" {
		e.Role = RoleWorker
	}
	ms, err := strconv.Atoi(os.Getenv("CONFORMANCE_LEASE_MS"))
	if err != nil {
		return nil, fmt.Errorf("CONFORMANCE_LEASE_MS: %w", err)
	}
	e.Lease = time.Duration(ms) * time.Millisecond
	for name, v := range map[string]string{"DWR_SERVER": e.Server, "DWR_CREDS": e.Creds, "CONFORMANCE_QUEUE": e.Queue,
		"CONFORMANCE_OBSERVE": e.Observations, "CONFORMANCE_DIR": e.Dir} {
		if v == "" {
			return nil, errors.New(name + " is not set")
		}
	}
	return e, nil
}

// Observe appends o to the observations file (one write of one line).
func (e *Env) Observe(o Observation) {
	b, err := json.Marshal(o)
	if err != nil {
		panic(err)
	}
	f, err := os.OpenFile(e.Observations, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance: observe:", err)
		return
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance: observe:", err)
	}
}

// ReleaseFile is the file whose existence releases task id (Fencing).
func ReleaseFile(dir, taskID string) string { return filepath.Join(dir, "release-"+taskID) }

// Released reports whether the suite released task id.
func (e *Env) Released(taskID string) bool {
	_, err := os.Stat(ReleaseFile(e.Dir, taskID))
	return err == nil
}

// VerifiedResult is what a verifier reads of a Verified task's result.
type VerifiedResult struct {
	Attempt  int      `json:"attempt"`
	Verdicts []string `json:"verdicts"`
}

// Verdict is the outcome the verifier gives the result.
func (r VerifiedResult) Verdict() string {
	if r.Attempt >= 1 && r.Attempt <= len(r.Verdicts) {
		return r.Verdicts[r.Attempt-1]
	}
	return "PASS"
}
