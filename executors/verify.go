package executors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/schemas"
)

// Verification outcomes.
const (
	Pass         = schemas.OutcomePass
	Fail         = schemas.OutcomeFail
	Inconclusive = schemas.OutcomeInconclusive
)

// Check is a result to judge: what a verifier receives for a task whose
// attempt succeeded and whose spec names a verification queue.
type Check struct {
	TaskID, Workspace, Queue, GoalID, Key, Title string
	// Attempt is the attempt whose result is judged.
	Attempt int
	// Input is the task's input; Result the attempt's result.
	Input, Result json.RawMessage
	// Artifacts are the attempt's artifacts, by reference.
	Artifacts []Artifact
	// ResultDigest names the result judged ("sha256:<hex>"); it is part of
	// the verification's replay-safe identity.
	ResultDigest string
	// PriorAttempts are the attempts before this one; Verifications the
	// outcomes recorded for them.
	PriorAttempts []PriorAttempt
	Verifications []Verification

	artifacts *client.Client
}

// GetArtifact opens one of the judged attempt's artifacts (or any of the
// workspace's) by its digest, as Job.GetArtifact does: read to the end
// before trusting the bytes.
func (c *Check) GetArtifact(ctx context.Context, sha256 string) (*client.ArtifactReader, error) {
	return getArtifact(ctx, c.artifacts, sha256)
}

// PutArtifact stores evidence too bulky for the verdict as an artifact and
// returns its reference for Verdict.EvidenceRefs, as Job.PutArtifact does.
func (c *Check) PutArtifact(ctx context.Context, name string, r io.Reader) (Artifact, error) {
	return putArtifact(ctx, c.artifacts, name, c.TaskID, r)
}

// Verdict is a verifier's judgment: PASS accepts the task; FAIL starts a new
// attempt handed the evidence (or rejects the task when attempts are spent);
// INCONCLUSIVE puts it in needs_review for a person (`dwr review`).
type Verdict struct {
	Outcome  string
	Evidence any // marshalled to JSON; at most MaxPayloadBytes
	// EvidenceRefs reference evidence too bulky or sensitive for the log,
	// stored by content hash.
	EvidenceRefs []Artifact
}

// VerifyHandler judges a result. An error (not a verdict) leaves the work
// item to be delivered again.
type VerifyHandler func(ctx context.Context, c *Check) (Verdict, error)

// NewVerifier returns a worker for cfg's queue — a verification queue — that
// runs v for every result to judge and records its verdict (task.verify,
// under the identity of the task, attempt, result digest and this
// verifier's name and version: recording it again is harmless). It returns
// the errors NewWorker does.
func NewVerifier(cfg Config, v VerifyHandler) (*Worker, error) {
	if v == nil {
		return nil, errors.New("executors: the verify handler is nil")
	}
	w, err := NewWorker(cfg, func(context.Context, *Job) (Result, error) {
		return Result{}, Permanent(errors.New("executors: a verifier got a work item to execute"))
	})
	if err != nil {
		return nil, err
	}
	w.verify = v
	return w, nil
}

// judge runs the verifier on a verify item and records its verdict, keeping
// the item's lease meanwhile; the item is acknowledged once the verdict is
// recorded or found stale, and left to be redelivered otherwise.
func (d *delivery) judge(hard context.Context, msg jetstream.Msg) {
	hbCtx, stopHB := context.WithCancel(context.Background())
	var hb sync.WaitGroup
	hb.Go(func() { d.heartbeat(hbCtx) })
	defer func() { stopHB(); hb.Wait() }()

	it := &d.item
	if d.encrypted {
		if err := d.openCheck(hard); err != nil {
			d.done(outcomeUnsettled, it.Attempt, logErr, err)
			_ = msg.NakWithDelay(d.w.leaseOf())
			return
		}
	}
	c := &Check{TaskID: it.TaskID, Workspace: it.Workspace, Queue: it.Queue, GoalID: it.GoalID, Key: it.Key,
		Title: it.Title, Attempt: it.Attempt, Input: it.Input, Result: it.Result, Artifacts: it.Artifacts,
		ResultDigest: it.ResultDigest, PriorAttempts: it.PriorAttempts, Verifications: it.Verifications, artifacts: d.w.c.c}
	verdict, err := callVerifier(hard, d.w.verify, c)
	if err != nil {
		d.done(outcomeUnsettled, it.Attempt, logErr, err)
		_ = msg.NakWithDelay(d.w.leaseOf())
		return
	}
	evidence, err := encodeJSON(verdict.Evidence)
	if err == nil && len(evidence) > MaxPayloadBytes {
		err = fmt.Errorf("the evidence is %d bytes; at most %d are allowed (store it as an artifact)", len(evidence), MaxPayloadBytes)
	}
	if err != nil || (verdict.Outcome != Pass && verdict.Outcome != Fail && verdict.Outcome != Inconclusive) {
		if err == nil {
			err = fmt.Errorf("outcome %q is not PASS, FAIL or INCONCLUSIVE", verdict.Outcome)
		}
		d.w.log.Error("executors: an unusable verdict; the item is delivered again", logTask, it.TaskID, logErr, err)
		d.done(outcomeUnsettled, it.Attempt, logErr, err)
		_ = msg.NakWithDelay(d.w.leaseOf())
		return
	}
	r, err := d.w.c.command(hard, "task.verify", schemas.RecordVerification{TaskID: it.TaskID, Verdict: schemas.Verdict{Attempt: it.Attempt,
		Outcome: verdict.Outcome, Evidence: evidence, EvidenceRefs: verdict.EvidenceRefs, Verifier: d.w.cfg.Executor, VerifierVersion: d.w.cfg.Version,
		ResultDigest: it.ResultDigest}},
		fmt.Sprintf("verify.%s.%d.%s", it.TaskID, it.Attempt, d.w.cfg.Executor))
	switch {
	case err != nil:
		d.done(outcomeUnsettled, it.Attempt, logErr, err)
	case r.OK:
		d.ack()
		d.done(outcomeVerified, it.Attempt, "verdict", verdict.Outcome)
	case r.Error.Code == schemas.CodeConflict || r.Error.Code == schemas.CodeNotFound:
		d.ack() // the task moved on: the item is stale
		d.done(outcomeRefused, it.Attempt, logReason, r.Error.Message)
	default:
		d.done(outcomeUnsettled, it.Attempt, logReason, "verdict refused: "+r.Error.Code+": "+r.Error.Message)
	}
}

// callVerifier runs v, turning a panic into an error.
func callVerifier(ctx context.Context, v VerifyHandler, c *Check) (verdict Verdict, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("executors: the verifier panicked: %v", p)
		}
	}()
	return v(ctx, c)
}

// openCheck replaces the sealed payloads of the verify item by the task's
// as task.get answers them, opened: its input, the result judged (its
// digest stays the item's: the one the service compares), the earlier
// attempts and the verifications.
func (d *delivery) openCheck(ctx context.Context) error {
	it := &d.item
	// The item left before the views applied the result it judges: read
	// them at least as of the item's record.
	t, err := d.getTask(ctx, it.TaskID, client.MinSeq(it.Seq))
	if err != nil {
		return err
	}
	a := t.Attempt(it.Attempt)
	if a == nil {
		return fmt.Errorf("executors: task %s has no attempt %d to judge", it.TaskID, it.Attempt)
	}
	it.Input, it.Result, it.Verifications = t.Spec.Input, a.Result, t.Verifications
	it.PriorAttempts = nil
	for _, p := range t.Attempts {
		if p.N < it.Attempt {
			it.PriorAttempts = append(it.PriorAttempts, p)
		}
	}
	return nil
}
