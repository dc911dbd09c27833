// Command cmdexec is the command `dwr worker` runs under the conformance
// suite (integration/conformance_test.go): it does what the scenario named
// in the task's input asks through the worker's process contract only —
// stdin, DWR_* variables, the checkpoint, wait, artifacts and model-steps
// files, exit statuses and signals — as a script in any language would.
// With CONFORMANCE_ROLE=verifier it judges the result on stdin.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/dwr-run/dwr/integration/conformance"
)

// Exit statuses of the worker's contract.
const (
	exitPermanent = 100
	exitWait      = 101
)

func main() {
	code, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

func run() (int, error) {
	in, err := io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
	if err != nil {
		return 1, err
	}
	if os.Getenv("CONFORMANCE_ROLE") == conformance.RoleVerifier {
		return verify(in)
	}
	var input conformance.Input
	if err := json.Unmarshal(in, &input); err != nil {
		return exitPermanent, fmt.Errorf("input: %w", err)
	}
	attempt, err := strconv.Atoi(os.Getenv("DWR_ATTEMPT"))
	if err != nil {
		return exitPermanent, fmt.Errorf("DWR_ATTEMPT: %w", err)
	}
	taskID := os.Getenv("DWR_TASK_ID")
	dir, observations := os.Getenv("CONFORMANCE_DIR"), os.Getenv("CONFORMANCE_OBSERVE")
	env := &conformance.Env{Dir: dir, Observations: observations}
	observe := func(event string, detail any) {
		env.Observe(conformance.Observation{TaskID: taskID, Attempt: attempt, Event: event, Detail: detail})
	}
	// The worker stops the command with SIGTERM: when the task is
	// cancelled, or the attempt has lost its lease.
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)

	checkpoint, err := os.ReadFile(os.Getenv("DWR_CHECKPOINT_FILE"))
	if err != nil {
		return 1, err
	}
	saveCheckpoint := func(v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		return os.WriteFile(os.Getenv("DWR_CHECKPOINT_FILE"), b, 0o600)
	}
	done := map[string]any{"attempt": attempt, "operation_key": os.Getenv("DWR_OPERATION_KEY")}
	succeed := func() (int, error) { return 0, json.NewEncoder(os.Stdout).Encode(done) }

	switch input.Scenario {
	case conformance.Succeed:
		done["value"] = input.Value
		return succeed()

	case conformance.Retry:
		if attempt <= input.FailTimes {
			return 1, fmt.Errorf("transient failure %d", attempt)
		}
		return succeed()

	case conformance.PermanentFailure:
		return exitPermanent, fmt.Errorf("%s", input.Message)

	case conformance.OutliveLease:
		select {
		case <-time.After(time.Duration(input.Millis) * time.Millisecond):
			return succeed()
		case <-term:
			return 1, fmt.Errorf("stopped")
		}

	case conformance.CheckpointResume:
		if len(checkpoint) > 0 {
			done["resumed_from"] = json.RawMessage(checkpoint)
			return succeed()
		}
		if err := saveCheckpoint(map[string]any{"step": 1, "attempt": attempt}); err != nil {
			return 1, err
		}
		observe(conformance.EventStarted, nil)
		<-term // the suite kills the worker here; the command dies with it
		return 1, fmt.Errorf("stopped")

	case conformance.Fencing, conformance.Cancel:
		if err := saveCheckpoint(map[string]any{"holder": attempt}); err != nil {
			return 1, err
		}
		observe(conformance.EventStarted, nil)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for input.Scenario == conformance.Cancel || !env.Released(taskID) {
			select {
			case <-term:
				// A command is not told why it is stopped: the suite
				// checks the cause on the log.
				observe(conformance.EventStopped, "terminated")
				return 1, fmt.Errorf("stopped")
			case <-tick.C:
			}
		}
		observe(conformance.EventReleased, nil)
		return succeed()

	case conformance.Sleep:
		if len(checkpoint) == 0 {
			until := time.Now().Add(time.Duration(input.Millis) * time.Millisecond).UTC()
			if err := saveCheckpoint(map[string]any{"until": until}); err != nil {
				return 1, err
			}
			return wait(map[string]any{"until": until})
		}
		done["woke_at"] = time.Now().UTC()
		return succeed()

	case conformance.Signal:
		raw := os.Getenv("DWR_SIGNAL")
		if raw == "" {
			return wait(map[string]any{"signal": input.Name})
		}
		var s struct {
			Payload json.RawMessage `json:"payload"`
		}
		if err := json.Unmarshal([]byte(raw), &s); err != nil {
			return 1, fmt.Errorf("DWR_SIGNAL: %w", err)
		}
		done["signal"] = s.Payload
		return succeed()

	case conformance.Approval:
		raw := os.Getenv("DWR_APPROVAL")
		if raw == "" {
			return wait(map[string]any{"approval": map[string]any{"action": input.Action, "summary": "conformance", "role": input.Role}})
		}
		var d struct {
			Response     string `json:"response"`
			Approver     string `json:"approver"`
			ActionDigest string `json:"action_digest"`
		}
		if err := json.Unmarshal([]byte(raw), &d); err != nil {
			return 1, fmt.Errorf("DWR_APPROVAL: %w", err)
		}
		done["response"], done["approver"], done["action_digest"] = d.Response, d.Approver, d.ActionDigest
		return succeed()

	case conformance.FourEyes, conformance.NotByRequester:
		raw := os.Getenv("DWR_APPROVAL")
		if raw == "" {
			return wait(map[string]any{"approval": map[string]any{"action": input.Action, "summary": "conformance: four eyes",
				"role": input.Role, "quorum": input.Quorum, "exclude_requester": input.ExcludeRequester}})
		}
		var d struct {
			Response  string   `json:"response"`
			Approver  string   `json:"approver"`
			Approvers []string `json:"approvers"`
		}
		if err := json.Unmarshal([]byte(raw), &d); err != nil {
			return 1, fmt.Errorf("DWR_APPROVAL: %w", err)
		}
		if d.Response != "approve" {
			return exitPermanent, fmt.Errorf("%s: %s", input.Role, d.Response)
		}
		done["approvers"], done["approver"] = d.Approvers, d.Approver
		return succeed()

	case conformance.TwoApprovals:
		// DWR_APPROVALS_FILE holds every decision on the task's approvals:
		// each role's is found by the role it was asked of.
		var decisions []struct {
			Response  string `json:"response"`
			Approver  string `json:"approver"`
			AskedRole string `json:"asked_role"`
		}
		if path := os.Getenv("DWR_APPROVALS_FILE"); path != "" {
			b, err := os.ReadFile(path) //nolint:gosec // the worker's own file
			if err != nil {
				return 1, err
			}
			if err := json.Unmarshal(b, &decisions); err != nil {
				return 1, fmt.Errorf("DWR_APPROVALS_FILE: %w", err)
			}
		}
		var by []string
	roles:
		for _, role := range input.Roles {
			for i := len(decisions) - 1; i >= 0; i-- {
				if d := decisions[i]; d.AskedRole == role {
					if d.Response != "approve" {
						return exitPermanent, fmt.Errorf("%s: %s", role, d.Response)
					}
					by = append(by, d.Approver)
					continue roles
				}
			}
			return wait(map[string]any{"approval": map[string]any{"action": input.Action, "summary": "conformance: " + role, "role": role}})
		}
		done["approvers"] = by
		return succeed()

	case conformance.Artifact:
		if err := os.WriteFile(filepath.Join(os.Getenv("DWR_ARTIFACTS_DIR"), input.Name), []byte(input.Content), 0o600); err != nil {
			return 1, err
		}
		return succeed()

	case conformance.ModelStep:
		step, err := json.Marshal(map[string]any{"model": input.Model, "prompt_version": input.PromptVersion, "tokens": input.Tokens})
		if err != nil {
			return 1, err
		}
		f, err := os.OpenFile(os.Getenv("DWR_MODEL_STEPS_FILE"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return 1, err
		}
		if _, err := f.Write(append(step, '\n')); err != nil {
			return 1, err
		}
		if err := f.Close(); err != nil {
			return 1, err
		}
		return succeed()

	case conformance.Verified:
		done["verdicts"] = input.Verdicts
		return succeed()
	}
	return exitPermanent, fmt.Errorf("unknown scenario %q", input.Scenario)
}

// wait writes what the task waits for to the wait file and exits 101.
func wait(what map[string]any) (int, error) {
	b, err := json.Marshal(what)
	if err != nil {
		return 1, err
	}
	if err := os.WriteFile(os.Getenv("DWR_WAIT_FILE"), b, 0o600); err != nil {
		return 1, err
	}
	return exitWait, nil
}

// verify judges the result on stdin (conformance.VerifiedResult).
func verify(result []byte) (int, error) {
	var res conformance.VerifiedResult
	if err := json.Unmarshal(result, &res); err != nil {
		return 1, fmt.Errorf("result: %w", err)
	}
	return 0, json.NewEncoder(os.Stdout).Encode(map[string]any{"outcome": res.Verdict(),
		"evidence": map[string]string{"checked": strconv.Itoa(res.Attempt)}})
}
