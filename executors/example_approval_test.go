package executors_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dwr-run/dwr/executors"
)

// Payout is the consequential action of the example: money leaves.
type Payout struct {
	Account string `json:"account"`
	Cents   int    `json:"cents"`
}

// A handler asks approval of the exact payout before it makes it. The first
// attempt records the request and returns: the task waits (`dwr approvals
// list`), holding no worker. The decision resumes it as a new attempt, whose
// RequestApproval of the same payout returns the decision: on approve it
// pays exactly that payout; on revise it alters the payout as the comment
// asks, which is a new request (an approval of one action never authorizes
// another); on reject it gives up.
func ExampleJob_RequestApproval() {
	pay := func(ctx context.Context, key string, p Payout) error { return nil } // the payment provider, keyed for idempotency

	handler := func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		var payout Payout
		if err := job.Decode(&payout); err != nil {
			return executors.Result{}, executors.Permanent(err)
		}
		for {
			d, err := job.RequestApproval(ctx, executors.ApprovalRequest{
				Action:    payout,
				Summary:   fmt.Sprintf("pay %d cents to %s", payout.Cents, payout.Account),
				Basis:     map[string]string{"invoice": "INV-7"},
				Role:      "finance",
				Responses: []string{executors.ResponseApprove, executors.ResponseReject, executors.ResponseRevise},
				OnExpiry:  executors.BranchFail,
				ExpiresIn: 24 * time.Hour,
			})
			if err != nil {
				return executors.Result{}, err // a *WaitError: return it, the task waits for the decision
			}
			switch d.Response {
			case executors.ResponseApprove:
				if err := pay(ctx, job.OperationKey, payout); err != nil {
					return executors.Result{}, err
				}
				return executors.Result{Output: map[string]any{"paid": payout, "approval": d.ApprovalID, "by": d.Approver}}, nil
			case executors.ResponseRevise:
				var cents int
				if _, err := fmt.Sscanf(d.Comment, "at most %d", &cents); err != nil || cents >= payout.Cents {
					return executors.Result{}, executors.Permanent(fmt.Errorf("cannot revise as asked: %q", d.Comment))
				}
				payout.Cents = cents // an altered action: the next RequestApproval asks again
			default:
				return executors.Result{}, executors.Permanent(errors.New("the payout was " + d.Response + "ed by " + d.Approver))
			}
		}
	}
	_ = handler // executors.NewWorker(executors.Config{Conn: nc, Queue: "payouts"}, handler)
}
