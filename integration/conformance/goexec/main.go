// Command goexec is the Go SDK's executor under the conformance suite
// (integration/conformance_test.go): it serves one queue with the
// executors package and does, for each task, what the scenario named in
// the task's input asks. The suite's README table lists the scenarios; an
// executor in another language does the same things through its own SDK.
//
// Environment (set by the suite): DWR_SERVER, DWR_CREDS, CONFORMANCE_QUEUE,
// CONFORMANCE_ROLE (worker or verifier), CONFORMANCE_LEASE_MS,
// CONFORMANCE_OBSERVE (a file to append observations to, one JSON object a
// line) and CONFORMANCE_DIR (where the suite leaves release files).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/integration/conformance"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "goexec:", err)
		os.Exit(1)
	}
}

func run() error {
	env, err := conformance.FromEnv()
	if err != nil {
		return err
	}
	opts, err := executors.Credentials(env.Creds)
	if err != nil {
		return err
	}
	nc, err := nats.Connect(env.Server, append(opts, nats.Name("goexec"))...)
	if err != nil {
		return err
	}
	defer nc.Close()
	cfg := executors.Config{Conn: nc, Queue: env.Queue, Lease: env.Lease, Executor: "goexec", Concurrency: 4}
	var w *executors.Worker
	if env.Role == conformance.RoleVerifier {
		w, err = executors.NewVerifier(cfg, verify)
	} else {
		w, err = executors.NewWorker(cfg, handler(env))
	}
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return w.Run(ctx)
}

// handler does what each scenario asks (conformance.Input).
func handler(env *conformance.Env) executors.Handler {
	return func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		var in conformance.Input
		if err := job.Decode(&in); err != nil {
			return executors.Result{}, executors.Permanent(err)
		}
		observe := func(event string, detail any) {
			env.Observe(conformance.Observation{TaskID: job.TaskID, Attempt: job.Attempt, Event: event, Detail: detail})
		}
		done := map[string]any{"attempt": job.Attempt, "operation_key": job.OperationKey}
		switch in.Scenario {
		case conformance.Succeed:
			done["value"] = in.Value
			return executors.Result{Output: done}, nil

		case conformance.Retry:
			if job.Attempt <= in.FailTimes {
				return executors.Result{}, fmt.Errorf("transient failure %d", job.Attempt)
			}
			return executors.Result{Output: done}, nil

		case conformance.PermanentFailure:
			return executors.Result{}, executors.Permanent(errors.New(in.Message))

		case conformance.OutliveLease:
			select {
			case <-time.After(time.Duration(in.Millis) * time.Millisecond):
				return executors.Result{Output: done}, nil
			case <-ctx.Done():
				return executors.Result{}, context.Cause(ctx)
			}

		case conformance.CheckpointResume:
			if job.Checkpoint != nil {
				done["resumed_from"] = job.Checkpoint
				return executors.Result{Output: done}, nil
			}
			if err := job.SaveCheckpoint(ctx, map[string]any{"step": 1, "attempt": job.Attempt}); err != nil {
				return executors.Result{}, err
			}
			observe(conformance.EventStarted, nil)
			<-ctx.Done() // the suite kills the process here
			return executors.Result{}, context.Cause(ctx)

		case conformance.Fencing:
			// Save a checkpoint first: the attempt is claimed, so its
			// token is what a later report carries.
			if err := job.SaveCheckpoint(ctx, map[string]any{"holder": job.Attempt}); err != nil {
				return executors.Result{}, err
			}
			observe(conformance.EventStarted, nil)
			for !env.Released(job.TaskID) {
				select {
				case <-ctx.Done():
					observe(conformance.EventStopped, causeName(context.Cause(ctx)))
					return executors.Result{}, context.Cause(ctx)
				case <-time.After(20 * time.Millisecond):
				}
			}
			observe(conformance.EventReleased, nil)
			return executors.Result{Output: done}, nil

		case conformance.Cancel:
			if err := job.SaveCheckpoint(ctx, map[string]any{"running": job.Attempt}); err != nil {
				return executors.Result{}, err
			}
			observe(conformance.EventStarted, nil)
			<-ctx.Done()
			observe(conformance.EventStopped, causeName(context.Cause(ctx)))
			return executors.Result{}, context.Cause(ctx)

		case conformance.Sleep:
			if job.Checkpoint == nil {
				until := time.Now().Add(time.Duration(in.Millis) * time.Millisecond).UTC()
				if err := job.SaveCheckpoint(ctx, map[string]any{"until": until}); err != nil {
					return executors.Result{}, err
				}
				return executors.Result{}, executors.Sleep(until)
			}
			done["woke_at"] = time.Now().UTC()
			return executors.Result{Output: done}, nil

		case conformance.Signal:
			if job.Signal == nil {
				return executors.Result{}, executors.AwaitSignal(in.Name)
			}
			done["signal"] = job.Signal.Payload
			return executors.Result{Output: done}, nil

		case conformance.Approval:
			d, err := job.RequestApproval(ctx, executors.ApprovalRequest{Action: in.Action, Summary: "conformance",
				Role: in.Role})
			if err != nil {
				return executors.Result{}, err
			}
			done["response"], done["approver"], done["action_digest"] = d.Response, d.Approver, d.ActionDigest
			return executors.Result{Output: done}, nil

		case conformance.FourEyes, conformance.NotByRequester:
			d, err := job.RequestApproval(ctx, executors.ApprovalRequest{Action: in.Action, Summary: "conformance: four eyes",
				Role: in.Role, Quorum: in.Quorum, ExcludeRequester: in.ExcludeRequester})
			if err != nil {
				return executors.Result{}, err
			}
			if !d.Approved() {
				return executors.Result{}, executors.Permanent(fmt.Errorf("%s: %s", in.Role, d.Response))
			}
			done["approvers"], done["approver"] = d.Approvers, d.Approver
			return executors.Result{Output: done}, nil

		case conformance.TwoApprovals:
			var by []string
			for _, role := range in.Roles {
				d, err := job.RequestApproval(ctx, executors.ApprovalRequest{Action: in.Action, Summary: "conformance: " + role, Role: role})
				if err != nil {
					return executors.Result{}, err
				}
				if !d.Approved() {
					return executors.Result{}, executors.Permanent(fmt.Errorf("%s: %s", role, d.Response))
				}
				by = append(by, d.Approver)
			}
			done["approvers"] = by
			return executors.Result{Output: done}, nil

		case conformance.Artifact:
			a, err := job.PutArtifact(ctx, in.Name, strings.NewReader(in.Content))
			if err != nil {
				return executors.Result{}, err
			}
			return executors.Result{Output: done, Artifacts: []executors.Artifact{a}}, nil

		case conformance.ModelStep:
			return executors.Result{Output: done, ModelSteps: []executors.ModelStep{{Model: in.Model,
				PromptVersion: in.PromptVersion, Tokens: in.Tokens}}}, nil

		case conformance.Verified:
			done["verdicts"] = in.Verdicts
			return executors.Result{Output: done}, nil
		}
		return executors.Result{}, executors.Permanent(fmt.Errorf("unknown scenario %q", in.Scenario))
	}
}

// verify judges a result by the verdict it carries for its attempt
// (conformance.Verified).
func verify(_ context.Context, c *executors.Check) (executors.Verdict, error) {
	var res conformance.VerifiedResult
	if err := json.Unmarshal(c.Result, &res); err != nil {
		return executors.Verdict{}, err
	}
	return executors.Verdict{Outcome: res.Verdict(), Evidence: map[string]string{"checked": strconv.Itoa(res.Attempt)}}, nil
}

// causeName is how an observation names why a job's context ended.
func causeName(err error) string {
	switch {
	case errors.Is(err, executors.ErrCancelled):
		return conformance.CauseCancelled
	case errors.Is(err, executors.ErrLeaseLost):
		return conformance.CauseLeaseLost
	}
	return fmt.Sprint(err)
}
