package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/schemas"
)

// taskOut is a task as the CLI prints it with --json: the task itself, its
// plan key included.
type taskOut = domain.Task

func taskCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "task", Short: "create, inspect, list and cancel tasks"}
	var spec domain.TaskSpec
	var input, cmdID, startAfter, startAt, timeout string
	var maxAttempts int
	var verifyQueue, verifyOnFail, verifyOnInconclusive string
	var deadline, deadlineAfter string
	var gate bool
	var approval domain.ApprovalSpec
	var approvalExpiresIn string
	create := &cobra.Command{
		Use: "create --queue Q [--input JSON]", Short: "create a standalone task", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if input != "" {
				if !json.Valid([]byte(input)) {
					return fail(exitInvalid, "--input is not valid JSON")
				}
				spec.Input = json.RawMessage(input)
			}
			if maxAttempts > 0 {
				spec.Retry = &domain.RetryPolicy{MaxAttempts: maxAttempts}
			}
			if timeout != "" {
				d, err := time.ParseDuration(timeout)
				if err != nil {
					return fail(exitInvalid, "--timeout-attempt %q: %v", timeout, err)
				}
				spec.Timeout = domain.Duration(d)
			}
			switch {
			case verifyQueue != "":
				spec.Verification = &domain.VerificationSpec{Queue: verifyQueue, OnFail: verifyOnFail, OnInconclusive: verifyOnInconclusive}
			case verifyOnFail != "" || verifyOnInconclusive != "":
				return fail(exitInvalid, "--verify-on-fail and --verify-on-inconclusive need --verify-queue")
			}
			now := time.Now()
			var err error
			if spec.StartAt, err = momentFlags("start-at", startAt, "start-after", startAfter, math.MinInt64, now); err != nil {
				return err
			}
			if spec.Deadline, err = momentFlags("deadline", deadline, "deadline-after", deadlineAfter, 1, now); err != nil {
				return err
			}
			if approvalExpiresIn != "" {
				d, err := time.ParseDuration(approvalExpiresIn)
				if err != nil || d <= 0 {
					return fail(exitInvalid, "--approval-expires-in %q is not a positive duration such as 1h", approvalExpiresIn)
				}
				approval.ExpiresIn = domain.Duration(d)
			}
			if gate || approval.Role != "" || approval.ExpiresIn != 0 || len(approval.Responses) > 0 ||
				approval.OnExpiry != "" || approval.EscalateTo != "" {
				spec.Approval = &approval
			}
			cl, err := g.connect()
			if err != nil {
				return err
			}
			defer cl.close()
			res, _, err := cl.command("task.create", map[string]any{"spec": spec}, cmdID)
			if err != nil {
				return err
			}
			return printReply(g, res, "task")
		},
	}
	f := create.Flags()
	f.StringVar(&spec.Queue, "queue", "", "the work queue executors take it from (required)")
	f.StringVar(&spec.Title, "title", "", "a short title")
	f.StringVar(&input, "input", "", "the task's input, as JSON")
	f.StringSliceVar(&spec.DependsOn, "depends-on", nil, "ids of tasks that must be accepted first")
	f.IntVar(&maxAttempts, "max-attempts", 0, "attempts in all before the task fails (default 3)")
	f.StringVar(&timeout, "timeout-attempt", "", "per-attempt timeout, e.g. 5m")
	f.StringVar(&verifyQueue, "verify-queue", "", "queue of the verifier that must PASS the result")
	f.StringVar(&verifyOnFail, "verify-on-fail", "", "what a FAIL verdict does: retry (default: a new attempt, handed the evidence), reject, review")
	f.StringVar(&verifyOnInconclusive, "verify-on-inconclusive", "", "what an INCONCLUSIVE verdict does: review (default: dwr review decides), retry, reject")
	f.StringVar(&startAfter, "start-after", "", "make the task ready only after this long, e.g. 4s")
	f.StringVar(&startAt, "start-at", "", "make the task ready only at this time (RFC 3339)")
	f.StringVar(&deadline, "deadline", "", "fail the task (reason deadline) if it has not ended by this time (RFC 3339)")
	f.StringVar(&deadlineAfter, "deadline-after", "", "fail the task (reason deadline) if it has not ended this long from now, e.g. 48h")
	f.BoolVar(&gate, "approval", false, "gate the task on a person's signed approval before its first attempt (implied by any --approval-* flag)")
	f.StringVar(&approval.Role, "approval-role", "", "the role whose approvers may decide the gate (default: any registered approver)")
	f.StringVar(&approvalExpiresIn, "approval-expires-in", "", "how long the approval request stands, e.g. 1h (default: until decided)")
	f.StringSliceVar(&approval.Responses, "approval-responses", nil, "the permitted responses: "+strings.Join(domain.Responses, ",")+" (default approve,reject)")
	f.StringVar(&approval.OnExpiry, "approval-on-expiry", "", "what follows an expiry: "+strings.Join(domain.Branches, ", ")+" (default fail)")
	f.StringVar(&approval.EscalateTo, "approval-escalate-to", "", "the role an escalation asks next")
	f.StringVar(&cmdID, "command-id", "", "idempotency key (default: a fresh ULID)")

	get := &cobra.Command{
		Use: "get ID", Short: "show a task with its attempts", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			cl, err := g.connect()
			if err != nil {
				return err
			}
			defer cl.close()
			res, err := cl.query("task.get", schemas.Query{ID: args[0]}, 0)
			if err != nil {
				return err
			}
			var t taskOut
			if err := json.Unmarshal(res, &t); err != nil {
				return err
			}
			if g.json {
				return printJSON(g.out, t)
			}
			fmt.Fprintf(g.out, "task %s  key %s  queue %s\nstate: %s", t.ID, dash(t.Key), t.Spec.Queue, t.State)
			if t.Reason != "" {
				fmt.Fprintf(g.out, " (%s)", t.Reason)
			}
			fmt.Fprintf(g.out, "\ngoal: %s   depends on: %s\ncreated %s, updated %s\n", dash(t.GoalID), dash(strings.Join(t.DependsOn, ",")), ago(t.CreatedAt), ago(t.UpdatedAt))
			if len(t.Spec.Input) > 0 {
				fmt.Fprintf(g.out, "input: %s\n", t.Spec.Input)
			}
			printTaskTimes(g.out, &t)
			if len(t.Approvals) > 0 {
				fmt.Fprintln(g.out)
				rows := make([][]string, len(t.Approvals))
				for i, a := range t.Approvals {
					decision := "-"
					if d := a.Decision; d != nil {
						decision = fmt.Sprintf("%s by %s → %s", d.Response, d.Approver, d.Branch)
					}
					rows[i] = []string{a.ID, a.State, dash(a.Role), dash(short(a.Summary, 40)), decision, fmt.Sprint(len(a.Refusals))}
				}
				if err := table(g.out, []string{"APPROVAL", "STATE", "ROLE", "SUMMARY", "DECISION", "REFUSED"}, rows); err != nil {
					return err
				}
			}
			if len(t.Verifications) > 0 {
				fmt.Fprintln(g.out)
				rows := make([][]string, len(t.Verifications))
				for i, v := range t.Verifications {
					rows[i] = []string{fmt.Sprint(v.Attempt), v.Outcome, v.Verifier, dash(short(string(v.Evidence), 60))}
				}
				if err := table(g.out, []string{"ATTEMPT", "VERDICT", "VERIFIER", "EVIDENCE"}, rows); err != nil {
					return err
				}
			}
			if len(t.Attempts) == 0 {
				return nil
			}
			fmt.Fprintln(g.out)
			rows := make([][]string, len(t.Attempts))
			for i, a := range t.Attempts {
				dur, outcome := "-", "-"
				if a.EndedAt != nil {
					dur = a.EndedAt.Sub(a.StartedAt).Round(time.Millisecond).String()
				}
				switch {
				case a.Error != nil:
					outcome = a.Error.Message
				case len(a.Result) > 0:
					outcome = string(a.Result)
				case a.Reason != "":
					outcome = a.Reason
				}
				if len(outcome) > 60 {
					outcome = outcome[:57] + "..."
				}
				rows[i] = []string{fmt.Sprint(a.N), a.State, a.Executor, ago(a.StartedAt), dur, outcome}
			}
			return table(g.out, []string{"ATTEMPT", "STATE", "EXECUTOR", "STARTED", "TOOK", "RESULT / ERROR"}, rows)
		},
	}
	var state, goal string
	var pages paging
	list := &cobra.Command{
		Use: "list [--state S] [--goal ID] [--all | --limit N --after CURSOR]", Short: "list tasks (a page; --all for every one)",
		Long: "list lists the tasks of the workspace, a page at a time: by state, then id (by id with --state or --goal).\n" +
			"When more follow it says so on stderr, with the --after cursor of the next page; --all lists every page.",
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			cl, err := g.connect()
			if err != nil {
				return err
			}
			defer cl.close()
			res, err := pages.list(g, cl, "tasks", "task.list", schemas.Query{State: state, GoalID: goal})
			if err != nil {
				return err
			}
			var ts []taskOut
			if err := json.Unmarshal(res, &ts); err != nil {
				return err
			}
			if g.json {
				return printJSON(g.out, ts)
			}
			rows := make([][]string, len(ts))
			for i, t := range ts {
				rows[i] = []string{t.ID, dash(t.Key), t.State, t.Spec.Queue, fmt.Sprint(len(t.Attempts)), dash(t.GoalID), ago(t.UpdatedAt)}
			}
			return table(g.out, []string{"ID", "KEY", "STATE", "QUEUE", "ATTEMPTS", "GOAL", "UPDATED"}, rows)
		},
	}
	list.Flags().StringVar(&state, "state", "", "only tasks in this state ("+strings.Join(domain.TaskStates, ", ")+")")
	list.Flags().StringVar(&goal, "goal", "", "only the tasks of this goal")
	pages.flags(list, "tasks")

	var reason, cancelID string
	cancel := &cobra.Command{
		Use: "cancel ID", Short: "cancel a task (a running attempt is told to stop)", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			cl, err := g.connect()
			if err != nil {
				return err
			}
			defer cl.close()
			res, _, err := cl.command("task.cancel", domain.CancelTask{TaskID: args[0], Reason: reason}, cancelID)
			if err != nil {
				return err
			}
			return printReply(g, res, "task")
		},
	}
	cancel.Flags().StringVar(&reason, "reason", "", "why")
	cancel.Flags().StringVar(&cancelID, "command-id", "", "idempotency key (default: a fresh ULID)")
	cmd.AddCommand(create, get, list, cancel)
	return cmd
}

// printTaskTimes prints what a task waits for and the moments that bound it.
func printTaskTimes(w io.Writer, t *taskOut) {
	if wt := t.Wait; wt != nil {
		switch wt.Kind {
		case domain.WaitApproval:
			fmt.Fprintf(w, "waiting for: approval %s (dwr approvals get %s)\n", wt.ApprovalID, wt.ApprovalID)
		case domain.WaitSignal:
			fmt.Fprintf(w, "waiting for: signal %q (dwr signal %s %s)\n", wt.Signal, t.ID, wt.Signal)
		case domain.WaitTimer:
			if wt.Until != nil {
				fmt.Fprintf(w, "waiting until: %s\n", wt.Until.Local().Format(time.DateTime))
			}
		}
	}
	if t.BackoffUntil != nil {
		fmt.Fprintf(w, "retry at: %s\n", t.BackoffUntil.Local().Format(time.DateTime))
	}
	if t.Spec.Deadline != nil {
		fmt.Fprintf(w, "deadline: %s\n", t.Spec.Deadline.Local().Format(time.DateTime))
	}
}

// momentFlags resolves the pair of flags that name one moment: --atFlag TIME
// (RFC 3339), or --afterFlag DURATION counted from now, at least minAfter.
// It returns nil when neither is given.
func momentFlags(atFlag, at, afterFlag, after string, minAfter time.Duration, now time.Time) (*time.Time, error) {
	switch {
	case at != "" && after != "":
		return nil, fail(exitInvalid, "give --%s or --%s, not both", atFlag, afterFlag)
	case after != "":
		d, err := time.ParseDuration(after)
		if err != nil || d < minAfter {
			kind := "a duration"
			if minAfter > 0 {
				kind = "a positive duration"
			}
			return nil, fail(exitInvalid, "--%s %q is not %s such as 30m or 48h", afterFlag, after, kind)
		}
		t := now.Add(d).UTC()
		return &t, nil
	case at != "":
		t, err := time.Parse(time.RFC3339, at)
		if err != nil {
			return nil, fail(exitInvalid, "--%s %q is not an RFC 3339 time (2026-01-02T15:04:05Z): %v", atFlag, at, err)
		}
		return &t, nil
	}
	return nil, nil
}
