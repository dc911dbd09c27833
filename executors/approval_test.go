package executors_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/executors/executortest"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// The SDK computes an action's digest as the service does
// (schemas.ActionDigest, whose tests freeze it): a document as it is, and a
// Go value as its JSON, HTML characters and key order notwithstanding.
func TestActionDigestIsTheServices(t *testing.T) {
	got, err := executors.ActionDigest(json.RawMessage(`{"b":2,"a":1}`))
	require.NoError(t, err)
	require.Equal(t, "sha256:43258cff783fe7036d8a43033f830adfc60ec037382473548ac742b888292777", got)
	got, err = executors.ActionDigest(nil)
	require.NoError(t, err)
	require.Equal(t, "sha256:74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b", got, "nil is null")
	got, err = executors.ActionDigest(map[string]any{"tags": []string{"<b>", "x&y"}, "to": "ada@example.com",
		"amount": json.Number("1.50"), "n": json.Number("1e3"), "nested": map[string]any{"y": []bool{true, false}, "z": nil}})
	require.NoError(t, err)
	require.Equal(t, "sha256:9bbbe27c4f07cd5a74eb44c0abcece75eca454bb564c8822f4cc2f9feeb58603", got)
	got, err = executors.ActionDigest(refund{Order: "A-17", Cents: 1250}.action())
	require.NoError(t, err)
	require.Equal(t, "sha256:79b413d8bddc4b91c41c2aefe93000b54f8fcc307c08de8d3217653d0a80cf3e", got)

	_, err = executors.ActionDigest(json.RawMessage(`{"a":`))
	require.Error(t, err)
}

type refund struct {
	Order string `json:"order"`
	Cents int    `json:"cents"`
}

func (r refund) action() map[string]refund { return map[string]refund{"refund": r} }

// refunder asks approval of a refund, revises it as a "revise" decision's
// comment says ("cap N"), and makes it once approved: the pattern of
// doc.go. performed records the refunds made.
func refunder(performed *sync.Map) executors.Handler {
	return func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		var in refund
		if err := job.Decode(&in); err != nil {
			return executors.Result{}, executors.Permanent(err)
		}
		if in.Order == "" { // other work of the same queue
			return executors.Result{Output: "done"}, nil
		}
		action := in
		for {
			d, err := job.RequestApproval(ctx, executors.ApprovalRequest{Action: action.action(),
				Summary: fmt.Sprintf("refund %d cents on order %s", action.Cents, action.Order), Role: "finance",
				Basis:     map[string]string{"reason": "damaged in transit"},
				Responses: []string{executors.ResponseApprove, executors.ResponseReject, executors.ResponseRevise}})
			if err != nil {
				return executors.Result{}, err // waiting for the decision, or a failure
			}
			switch d.Response {
			case executors.ResponseApprove:
				performed.Store(job.OperationKey, action) // exactly the approved action
				return executors.Result{Output: map[string]any{"refunded": action, "approval": d.ApprovalID,
					"digest": d.ActionDigest, "attempt": job.Attempt, "latest": job.Approval().ApprovalID}}, nil
			case executors.ResponseRevise:
				var limit int
				if _, err := fmt.Sscanf(d.Comment, "cap %d", &limit); err != nil {
					return executors.Result{}, executors.Permanent(fmt.Errorf("cannot revise as %q asks", d.Comment))
				}
				action.Cents = min(action.Cents, limit) // an altered action: asked again
			default:
				return executors.Result{}, executors.Permanent(errors.New("refund " + d.Response + "ed"))
			}
		}
	}
}

// approvalTask returns the task, with its approvals, as task.get does.
func (b *bundle) approvalTask(t *testing.T, id string) schemas.Task {
	t.Helper()
	var tk schemas.Task
	b.Query(t, "task.get", schemas.Query{ID: id}, &tk)
	return tk
}

// waitApproval waits until the task waits on approval approvalID.
func (b *bundle) waitApproval(t *testing.T, id, approvalID string) schemas.Task {
	t.Helper()
	var tk schemas.Task
	servicetest.Eventually(t, 10*time.Second, func() bool {
		tk = b.approvalTask(t, id)
		return tk.State == "waiting" && tk.Wait != nil && tk.Wait.Kind == "approval" && tk.Wait.ApprovalID == approvalID
	}, func() string { return fmt.Sprintf("task %s does not wait on approval %s: %+v", id, approvalID, tk) })
	return tk
}

// approver is a registered approver and its key.
type approver struct {
	name string
	key  ed25519.PrivateKey
}

func (b *bundle) registerApprover(t *testing.T, name, role string) approver {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	b.Command(t, "approver.register", map[string]string{"name": name, "role": role,
		"public_key": base64.StdEncoding.EncodeToString(pub)})
	return approver{name: name, key: priv}
}

// decision is the approval.decide command, signed as the wire contract says
// (the message domain.DecisionMessage builds).
func (a approver) decision(approvalID, response, digest, comment string) map[string]string {
	msg := "dwr approval decision v1\n" + approvalID + "\n" + response + "\n" + digest
	return map[string]string{"approval_id": approvalID, "approver": a.name, "response": response,
		"action_digest": digest, "comment": comment,
		"signature": base64.StdEncoding.EncodeToString(ed25519.Sign(a.key, []byte(msg)))}
}

// An executor asks approval of a refund; the task waits durably while the
// worker takes other work; once approved, a new attempt is handed the
// decision, makes exactly the approved refund and succeeds.
func TestRequestApprovalWaitsThenResumesOnApproval(t *testing.T) {
	b := setup(t)
	var performed sync.Map
	w := b.startWorker(t, executors.Config{Queue: "refunds"}, refunder(&performed))
	a := refund{Order: "A-17", Cents: 1250}
	digestA, err := executors.ActionDigest(a.action())
	require.NoError(t, err)

	id := b.CreateTask(t, map[string]any{"queue": "refunds", "input": a, "retry": map[string]any{"max_attempts": 1}})
	tk := b.waitApproval(t, id, id+"-1")
	require.Len(t, tk.Approvals, 1)
	ap := tk.Approvals[0]
	require.Equal(t, "pending", ap.State)
	require.Equal(t, 1, ap.Attempt)
	require.Equal(t, digestA, ap.ActionDigest, "the service's digest is the SDK's")
	require.JSONEq(t, `{"refund":{"order":"A-17","cents":1250}}`, string(ap.Action))
	require.Equal(t, "parked", tk.Attempts[0].State)
	w.logs.waitLine(t, 10*time.Second, "outcome=waiting", "approval "+id+"-1")

	// The approval is in the inbox.
	var inbox json.RawMessage
	b.Query(t, "approval.list", schemas.Query{Role: "finance"}, &inbox)
	require.Contains(t, string(inbox), id+"-1")

	// The worker (one slot) is free: it runs other work meanwhile.
	other := b.CreateTask(t, map[string]any{"queue": "refunds"})
	b.WaitState(t, other, "accepted", 10*time.Second)
	require.Equal(t, "waiting", b.Task(t, id).State)

	ada := b.registerApprover(t, "ada", "finance")
	b.Command(t, "approval.decide", ada.decision(id+"-1", executors.ResponseApprove, digestA, "ok"))
	done := b.WaitState(t, id, "accepted", 10*time.Second)
	require.Len(t, done.Attempts, 2, "a new attempt ran, handed the decision")
	require.JSONEq(t, fmt.Sprintf(`{"refunded":{"order":"A-17","cents":1250},"approval":%q,"digest":%q,"attempt":2,"latest":%q}`,
		id+"-1", digestA, id+"-1"), string(done.Attempts[1].Result))
	require.Len(t, b.approvalTask(t, id).Approvals, 1, "the approved action was not asked again")
	got, ok := performed.Load("op-" + id)
	require.True(t, ok)
	require.Equal(t, a, got)
	b.waitSettled(t, "refunds")
}

// A "revise" decision resumes the task: the new attempt, handed it, alters
// the action and must ask again (another digest, another approval); the
// decision on the first action cannot authorize the second.
func TestRequestApprovalOfARevisedActionIsANewRequest(t *testing.T) {
	b := setup(t)
	var performed sync.Map
	b.startWorker(t, executors.Config{Queue: "refunds"}, refunder(&performed))
	ada := b.registerApprover(t, "ada", "finance")
	a, revised := refund{Order: "B-2", Cents: 1250}, refund{Order: "B-2", Cents: 900}
	digestA, err := executors.ActionDigest(a.action())
	require.NoError(t, err)
	digestB, err := executors.ActionDigest(revised.action())
	require.NoError(t, err)

	id := b.CreateTask(t, map[string]any{"queue": "refunds", "input": a})
	b.waitApproval(t, id, id+"-1")
	b.Command(t, "approval.decide", ada.decision(id+"-1", executors.ResponseRevise, digestA, "cap 900"))

	tk := b.waitApproval(t, id, id+"-2")
	require.Len(t, tk.Approvals, 2)
	first, second := tk.Approvals[0], tk.Approvals[1]
	require.Equal(t, "decided", first.State)
	require.Equal(t, "revise", first.Decision.Response)
	require.Equal(t, "cap 900", first.Decision.Comment)
	require.Equal(t, "pending", second.State)
	require.Equal(t, 2, second.Attempt, "asked by the attempt the revise decision resumed")
	require.Equal(t, digestB, second.ActionDigest)
	require.NotEqual(t, digestA, digestB)
	_, ok := performed.Load("op-" + id)
	require.False(t, ok, "nothing was refunded yet")

	// A decision naming the first action cannot approve the second.
	r := b.Request(t, "dwr.cmd.default.approval.decide", ada.decision(id+"-2", executors.ResponseApprove, digestA, ""), nil)
	require.False(t, r.OK)
	require.Equal(t, "forbidden", string(r.Error.Code))
	require.True(t, strings.HasPrefix(r.Error.Message, "action_mismatch"), r.Error.Message)

	b.Command(t, "approval.decide", ada.decision(id+"-2", executors.ResponseApprove, digestB, ""))
	done := b.WaitState(t, id, "accepted", 10*time.Second)
	require.Len(t, done.Attempts, 3)
	require.JSONEq(t, fmt.Sprintf(`{"refunded":{"order":"B-2","cents":900},"approval":%q,"digest":%q,"attempt":3,"latest":%q}`,
		id+"-2", digestB, id+"-2"), string(done.Attempts[2].Result))
	got, _ := performed.Load("op-" + id)
	require.Equal(t, revised, got, "exactly the approved, revised action was performed")
	b.waitSettled(t, "refunds")
}

// Without a server (executortest), RequestApproval reports the request as
// the wait a worker would record, and returns a decision the job holds.
func TestRequestApprovalWithoutAServer(t *testing.T) {
	ctx := context.Background()
	var performed sync.Map
	in := refund{Order: "C-3", Cents: 500}
	digest, err := executors.ActionDigest(in.action())
	require.NoError(t, err)

	out, err := executortest.Run(ctx, refunder(&performed), executortest.Job{Input: in})
	require.NoError(t, err)
	w := out.Report.Wait
	require.NotNil(t, w, "%+v", out.Report)
	require.NotNil(t, w.Approval)
	require.Equal(t, digest, w.ActionDigest)
	require.Empty(t, w.ApprovalID, "nothing was sent")
	require.Equal(t, "finance", w.Approval.Role)
	require.Contains(t, out.Err.Error(), "waiting for approval of action "+digest)

	decided := executors.Decision{ApprovalID: executortest.DefaultTaskID + "-1", ActionDigest: digest,
		Response: executors.ResponseApprove, Approver: "ada", Role: "finance", DecidedAt: time.Now()}
	out, err = executortest.Run(ctx, refunder(&performed), executortest.Job{Input: in, Attempt: 2,
		Decisions: []executors.Decision{decided}})
	require.NoError(t, err)
	require.True(t, out.Succeeded(), "%+v", out.Report)

	// A decision on another action does not count.
	other := decided
	other.ActionDigest = "sha256:" + strings.Repeat("0", 64)
	out, err = executortest.Run(ctx, refunder(&performed), executortest.Job{Input: in, Attempt: 2,
		Decisions: []executors.Decision{other}})
	require.NoError(t, err)
	require.NotNil(t, out.Report.Wait)

	// Nor does a decision on the action asked of another role.
	legal := decided
	legal.Role = "legal"
	out, err = executortest.Run(ctx, refunder(&performed), executortest.Job{Input: in, Attempt: 2,
		Decisions: []executors.Decision{legal}})
	require.NoError(t, err)
	require.NotNil(t, out.Report.Wait, "a decision asked of legal is not finance's")

	// The latest decision on the action is the one that counts.
	rejected := decided
	rejected.ApprovalID, rejected.Response = executortest.DefaultTaskID+"-2", executors.ResponseReject
	j := executors.NewJob(executors.Job{TaskID: "T", Decisions: []executors.Decision{decided, rejected}}, nil)
	d, err := j.RequestApproval(ctx, executors.ApprovalRequest{Action: in.action()})
	require.NoError(t, err)
	require.Equal(t, executors.ResponseReject, d.Response)
	require.False(t, d.Approved())
	require.Equal(t, rejected.ApprovalID, j.Approval().ApprovalID)
	require.Nil(t, executors.NewJob(executors.Job{}, nil).Approval())

	_, err = j.RequestApproval(ctx, executors.ApprovalRequest{})
	require.ErrorContains(t, err, "the action is required")
	_, err = j.RequestApproval(ctx, executors.ApprovalRequest{Action: make(chan int)})
	require.ErrorContains(t, err, "does not encode")
}

// A handler may return a WaitError naming an approval request it built
// itself: the worker then sends the request when the handler returns.
func TestAWaitErrorWithAnApprovalRequestIsSentByTheWorker(t *testing.T) {
	b := setup(t)
	action := map[string]string{"deploy": "v2"}
	digest, err := executors.ActionDigest(action)
	require.NoError(t, err)
	w := b.startWorker(t, executors.Config{Queue: "deploys"}, func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		if d := job.Approval(); d.Approved() {
			return executors.Result{Output: d.ActionDigest}, nil
		}
		return executors.Result{}, &executors.WaitError{Approval: &executors.ApprovalRequest{Action: action, Summary: "deploy v2"}}
	})
	id := b.CreateTask(t, map[string]any{"queue": "deploys"})
	tk := b.waitApproval(t, id, id+"-1")
	require.Equal(t, digest, tk.Approvals[0].ActionDigest)
	w.logs.waitLine(t, 10*time.Second, "outcome=waiting", "waiting for approval "+id+"-1 of action "+digest)
	ada := b.registerApprover(t, "ada", "ops")
	b.Command(t, "approval.decide", ada.decision(id+"-1", executors.ResponseApprove, digest, ""))
	done := b.WaitState(t, id, "accepted", 10*time.Second)
	require.JSONEq(t, fmt.Sprintf("%q", digest), string(done.Attempts[1].Result))
	b.waitSettled(t, "deploys")
}

// An approval nobody decides expires; with on_expiry resume a new attempt
// runs, and RequestApproval of the same action hands it the expiry
// (ResponseExpired) instead of asking again.
func TestAnExpiredApprovalResumesWithResponseExpired(t *testing.T) {
	clock := servicetest.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	st := servicetest.Start(t, "", servicetest.Options{Clock: clock, Config: handlers.Config{WriterID: "test-writer"}})
	b := bundleOf(st)
	got := make(chan executors.Decision, 1)
	b.startWorker(t, executors.Config{Queue: "reports"}, func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		d, err := job.RequestApproval(ctx, executors.ApprovalRequest{Action: map[string]string{"publish": "q3-report"},
			ExpiresIn: time.Hour, OnExpiry: executors.BranchResume})
		if err != nil {
			return executors.Result{}, err
		}
		got <- *d
		return executors.Result{Output: d.Response}, nil
	})
	id := b.CreateTask(t, map[string]any{"queue": "reports"})
	b.waitApproval(t, id, id+"-1")
	clock.Advance(time.Hour)
	done := b.WaitState(t, id, "accepted", 10*time.Second)
	require.Len(t, done.Attempts, 2)
	d := recv(t, got)
	require.Equal(t, executors.ResponseExpired, d.Response)
	require.Equal(t, id+"-1", d.ApprovalID)
	require.Empty(t, d.Approver, "nobody decided")
	require.True(t, d.DecidedAt.Equal(clock.Now()), "handed at the expiry, %s", d.DecidedAt)
	require.False(t, d.Approved())
	require.Len(t, b.approvalTask(t, id).Approvals, 1, "the expired action was not asked again")
}

// Two sign-offs on one action: a job asks finance, then legal, to approve
// the same payment. Finance's decision does not stand for legal's: the
// second request is an approval of its own, and the payment is made once
// both approved. An escalated request still counts for the role it asked:
// legal escalates to the general counsel, whose approval is legal's.
func TestTwoRolesSignOffOnTheSameAction(t *testing.T) {
	b := setup(t)
	payment := map[string]any{"pay": map[string]any{"to": "ACME", "cents": 990_000}}
	digest, err := executors.ActionDigest(payment)
	require.NoError(t, err)
	done := make(chan []string, 1)
	b.startWorker(t, executors.Config{Queue: "payments"}, func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		var by []string
		for _, role := range []string{"finance", "legal"} {
			d, err := job.RequestApproval(ctx, executors.ApprovalRequest{Action: payment, Role: role, EscalateTo: "counsel",
				Responses: []string{executors.ResponseApprove, executors.ResponseReject, executors.ResponseEscalate}})
			if err != nil {
				return executors.Result{}, err
			}
			if !d.Approved() {
				return executors.Result{}, executors.Permanent(errors.New(role + ": " + d.Response))
			}
			by = append(by, d.ApprovalID+" "+d.Approver+" for "+d.AskedRole)
		}
		done <- by
		return executors.Result{Output: by}, nil
	})
	ada := b.registerApprover(t, "ada", "finance")
	lee := b.registerApprover(t, "lee", "legal")
	gc := b.registerApprover(t, "gc", "counsel")

	id := b.CreateTask(t, map[string]any{"queue": "payments"})
	b.waitApproval(t, id, id+"-1")
	b.Command(t, "approval.decide", ada.decision(id+"-1", executors.ResponseApprove, digest, ""))
	tk := b.waitApproval(t, id, id+"-2")
	require.Equal(t, "legal", tk.Approvals[1].Role, "finance's approval was not taken for legal's")
	require.Equal(t, digest, tk.Approvals[1].ActionDigest)
	b.Command(t, "approval.decide", lee.decision(id+"-2", executors.ResponseEscalate, digest, "over my limit"))
	tk = b.waitApproval(t, id, id+"-3")
	require.Equal(t, "counsel", tk.Approvals[2].Role)
	b.Command(t, "approval.decide", gc.decision(id+"-3", executors.ResponseApprove, digest, ""))

	require.Equal(t, []string{id + "-1 ada for finance", id + "-3 gc for legal"}, recv(t, done))
	b.WaitState(t, id, "accepted", 10*time.Second)
	require.Len(t, b.approvalTask(t, id).Approvals, 3, "nothing was asked again once both roles approved")
	b.waitSettled(t, "payments")
}

// Four eyes within one role: a job asks for two of finance's approvers on
// one payment. The first approval leaves the task waiting (the same approver
// cannot count twice); the second decides, and the job is handed both names.
func TestTwoApproversOfOneRoleSignOff(t *testing.T) {
	b := setup(t)
	payment := map[string]any{"pay": map[string]any{"to": "ACME", "cents": 1_250_000}}
	digest, err := executors.ActionDigest(payment)
	require.NoError(t, err)
	done := make(chan *executors.Decision, 1)
	b.startWorker(t, executors.Config{Queue: "payments"}, func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		d, err := job.RequestApproval(ctx, executors.ApprovalRequest{Action: payment, Role: "finance", Quorum: 2})
		if err != nil {
			return executors.Result{}, err
		}
		done <- d
		return executors.Result{Output: d.Approvers}, nil
	})
	ada := b.registerApprover(t, "ada", "finance")
	bo := b.registerApprover(t, "bo", "finance")

	id := b.CreateTask(t, map[string]any{"queue": "payments"})
	b.waitApproval(t, id, id+"-1")
	b.Command(t, "approval.decide", ada.decision(id+"-1", executors.ResponseApprove, digest, "checked"))
	tk := b.approvalTask(t, id)
	require.Equal(t, "waiting", tk.State, "one approval of two")
	require.Equal(t, 2, tk.Approvals[0].Quorum)
	require.Len(t, tk.Approvals[0].SignOffs, 1)
	b.Command(t, "approval.decide", bo.decision(id+"-1", executors.ResponseApprove, digest, ""))

	d := recv(t, done)
	require.True(t, d.Approved())
	require.Equal(t, []string{"ada", "bo"}, d.Approvers)
	require.Equal(t, "bo", d.Approver, "the approval that made the quorum")
	b.WaitState(t, id, "accepted", 10*time.Second)
	b.waitSettled(t, "payments")
}
