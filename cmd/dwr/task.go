package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/executors/planfile"
	"github.com/dwr-run/dwr/schemas"
)

func taskCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "task", Short: "create, inspect, list and cancel tasks"}
	cmd.AddCommand(taskCreateCmd(g), taskGetCmd(g), taskListCmd(g), taskCancelCmd(g), taskRetryCmd(g),
		labelCmd(g, "task", "dwr task list --label", (*client.Client).LabelTask))
	return cmd
}

func taskCreateCmd(g *globals) *cobra.Command {
	o := planfile.Options{Spec: domain.TaskSpec{Approval: &domain.ApprovalSpec{}}}
	var spec domain.TaskSpec
	var labels []string
	var labelSet schemas.Labels
	create := sendCmd(g, &cobra.Command{Use: "create --queue Q [--input JSON]", Short: "create a standalone task", Args: cobra.NoArgs}, "task",
		func([]string) error {
			var err error
			if labelSet, err = parseLabels(labels); err != nil {
				return err
			}
			spec, err = o.TaskSpec(time.Now())
			var oe *planfile.OptionError
			if errors.As(err, &oe) {
				return fail(exitInvalid, "%s", oe.Message(func(opt string) string { return "--" + taskFlagOf[opt] }))
			}
			return err
		}, func(ctx context.Context, cl *client.Client, _ []string, id client.CallOption) (*client.Result, error) {
			return cl.CreateTaskWith(ctx, schemas.CreateTask{Spec: spec, Labels: labelSet}, id)
		})
	f := create.Flags()
	f.StringArrayVar(&labels, "label", nil, "a label, NAME=VALUE (repeatable): dwr task list --label finds the task by it")
	f.StringVar(&o.Spec.Queue, "queue", "", "the work queue executors take it from (required)")
	f.StringVar(&o.Spec.Title, "title", "", "a short title")
	f.IntVar(&o.Spec.Priority, "priority", 0, "1 (first) to 5 (last): its turn in a queue whose order is priority (dwr queue set --order priority; default 3)")
	f.StringVar(&o.Input, "input", "", "the task's input, as JSON")
	f.StringSliceVar(&o.Spec.DependsOn, "depends-on", nil, "ids of tasks that must be accepted first")
	f.IntVar(&o.MaxAttempts, "max-attempts", 0, "attempts in all before the task fails (default 3)")
	f.StringVar(&o.Timeout, "timeout-attempt", "", "per-attempt timeout, e.g. 5m")
	f.StringVar(&o.VerifyQueue, "verify-queue", "", "queue of the verifier that must PASS the result")
	f.StringVar(&o.VerifyOnFail, "verify-on-fail", "", "what a FAIL verdict does: retry (default: a new attempt, handed the evidence), reject, review")
	f.StringVar(&o.VerifyOnInconclusive, "verify-on-inconclusive", "", "what an INCONCLUSIVE verdict does: review (default: dwr review decides), retry, reject")
	f.StringVar(&o.StartAfter, "start-after", "", "make the task ready only after this long, e.g. 4s")
	f.StringVar(&o.StartAt, "start-at", "", "make the task ready only at this time (RFC 3339)")
	f.StringVar(&o.Deadline, "deadline", "", "fail the task (reason deadline) if it has not ended by this time (RFC 3339)")
	f.StringVar(&o.DeadlineAfter, "deadline-after", "", "fail the task (reason deadline) if it has not ended this long from now, e.g. 48h")
	f.BoolVar(&o.Approval, "approval", false, "gate the task on a person's signed approval before its first attempt (implied by any --approval-* flag)")
	f.StringVar(&o.Spec.Approval.Role, "approval-role", "", "the role whose approvers may decide the gate (default: any registered approver)")
	f.StringVar(&o.ApprovalExpiresIn, "approval-expires-in", "", "how long the approval request stands, e.g. 1h (default: until decided)")
	f.StringSliceVar(&o.Spec.Approval.Responses, "approval-responses", nil, "the permitted responses: "+strings.Join(domain.Responses, ",")+" (default approve,reject)")
	f.StringVar(&o.Spec.Approval.OnExpiry, "approval-on-expiry", "", "what follows an expiry: "+strings.Join(domain.Branches, ", ")+" (default fail)")
	f.StringVar(&o.Spec.Approval.EscalateTo, "approval-escalate-to", "", "the role an escalation asks next")
	f.IntVar(&o.Spec.Approval.Quorum, "approval-quorum", 0, "how many distinct approvers of the role must approve (four eyes: 2; default 1)")
	f.BoolVar(&o.Spec.Approval.ExcludeRequester, "approval-exclude-requester", false, "whoever creates the task may not approve it: another approver must (separation of duties)")
	return create
}

// taskFlagOf names the flag of each option of planfile.Options.
var taskFlagOf = map[string]string{
	planfile.OptInput: "input", planfile.OptTimeout: "timeout-attempt", planfile.OptVerifyQueue: "verify-queue",
	planfile.OptVerifyOnFail: "verify-on-fail", planfile.OptVerifyOnInconclusive: "verify-on-inconclusive",
	planfile.OptStartAt: "start-at", planfile.OptStartAfter: "start-after", planfile.OptDeadline: "deadline",
	planfile.OptDeadlineAfter: "deadline-after", planfile.OptApprovalExpiresIn: "approval-expires-in",
}

func taskGetCmd(g *globals) *cobra.Command {
	return getCmd(g, "get ID", "show a task with its attempts", (*client.Client).Task, printTask)
}

// printTask prints a task for people: what it is, its approvals,
// verifications and attempts.
func printTask(w io.Writer, t *schemas.Task) error {
	fmt.Fprintf(w, "task %s  key %s  queue %s\nstate: %s", t.ID, dash(t.Key), t.Spec.Queue, t.State)
	if t.Reason != "" {
		fmt.Fprintf(w, " (%s)", t.Reason)
	}
	if (t.State == domain.StateFailed || t.State == domain.StateRejected) && t.Reason != domain.ReasonDependencyFailed {
		fmt.Fprintf(w, " — to run it again: dwr task retry %s", t.ID)
	}
	by := ""
	if t.CreatedBy != "" {
		by = " by " + t.CreatedBy
	}
	fmt.Fprintf(w, "\ngoal: %s   depends on: %s\ncreated %s%s, updated %s\n", dash(t.GoalID), dash(strings.Join(t.DependsOn, ",")), ago(t.CreatedAt), by, ago(t.UpdatedAt))
	if len(t.Labels) > 0 {
		fmt.Fprintf(w, "labels: %s\n", formatLabels(t.Labels))
	}
	if t.Spec.Priority != 0 {
		fmt.Fprintf(w, "priority: %d\n", t.Spec.Priority)
	}
	if len(t.Spec.Input) > 0 {
		fmt.Fprintf(w, "input: %s\n", t.Spec.Input)
	}
	printTaskTimes(w, t)
	if len(t.Omitted) > 0 {
		fmt.Fprintf(w, "too large to show whole; left out (dwr events %s has them): %s\n", t.ID, short(strings.Join(t.Omitted, " "), 200))
	}
	if len(t.Approvals) > 0 {
		fmt.Fprintln(w)
		if err := columns([]string{"APPROVAL", "STATE", "ROLE", "SUMMARY", "DECISION", "REFUSED"}, func(a schemas.Approval) []string {
			decision := "-"
			if d := a.Decision; d != nil {
				decision = fmt.Sprintf("%s by %s → %s", d.Response, d.Approver, d.Branch)
			}
			return []string{a.ID, a.State, dash(a.Role), dash(short(a.Summary, 40)), decision, fmt.Sprint(len(a.Refusals))}
		})(w, t.Approvals); err != nil {
			return err
		}
	}
	if len(t.Verifications) > 0 {
		fmt.Fprintln(w)
		if err := columns([]string{"ATTEMPT", "VERDICT", "VERIFIER", "EVIDENCE"}, func(v schemas.Verification) []string {
			return []string{fmt.Sprint(v.Attempt), v.Outcome, v.Verifier, dash(short(string(v.Evidence), 60))}
		})(w, t.Verifications); err != nil {
			return err
		}
	}
	if len(t.Delegations) > 0 {
		fmt.Fprintln(w)
		if err := columns([]string{"DELEGATED", "BY ATTEMPT", "GOAL", "STATE", "ON FAILURE"}, func(d schemas.Delegation) []string {
			return []string{d.Key, fmt.Sprint(d.Attempt), d.GoalID, d.State, d.OnFailure}
		})(w, t.Delegations); err != nil {
			return err
		}
	}
	if len(t.Attempts) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	if e := t.Earlier; e != nil {
		fmt.Fprintf(w, "attempts 1-%d not listed (dwr events %s has them): %d used the retry budget since the last retry\n", e.Count, t.ID, e.Spent)
	}
	return printAttempts(w, t)
}

// printAttempts prints a task's attempts as a table.
func printAttempts(w io.Writer, t *schemas.Task) error {
	return columns([]string{"ATTEMPT", "STATE", "EXECUTOR", "STARTED", "TOOK", "RESULT / ERROR"}, func(a schemas.Attempt) []string {
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
		return []string{fmt.Sprint(a.N), a.State, a.Executor, ago(a.StartedAt), dur, outcome}
	})(w, t.Attempts)
}

func taskListCmd(g *globals) *cobra.Command {
	var state, goal, queue string
	var newest bool
	var labels []string
	var labelSet schemas.Labels
	list := listCmd(g, &cobra.Command{
		Use: "list [--state S] [--goal ID] [--queue Q] [--label NAME=VALUE]... [--newest] [--all | --limit N --after CURSOR]", Short: "list tasks (a page; --all for every one)",
		Long: "list lists the tasks of the workspace, a page at a time: by state, then id (by id with --state, --goal or --label).\n" +
			"When more follow it says so on stderr, with the --after cursor of the next page; --all lists every page.",
		Args: cobra.NoArgs,
	}, &paging{}, "tasks", func([]string) (err error) {
		labelSet, err = parseLabels(labels)
		return err
	}, func(ctx context.Context, cl *client.Client, _ []string, opts ...client.CallOption) iter.Seq2[*schemas.Task, error] {
		if newest {
			opts = append(opts, client.NewestFirst())
		}
		return cl.Tasks(ctx, client.TaskFilter{State: state, GoalID: goal, Queue: queue, Labels: labelSet}, opts...)
	}, columns([]string{"ID", "KEY", "STATE", "QUEUE", "ATTEMPTS", "GOAL", "UPDATED"}, func(t schemas.Task) []string {
		return []string{t.ID, dash(t.Key), t.State, t.Spec.Queue, fmt.Sprint(t.AttemptCount()), dash(t.GoalID), ago(t.UpdatedAt)}
	}))
	list.Flags().StringVar(&state, "state", "", "only tasks in this state ("+strings.Join(domain.TaskStates, ", ")+")")
	list.Flags().StringVar(&goal, "goal", "", "only the tasks of this goal")
	list.Flags().StringVar(&queue, "queue", "", "only the tasks of this queue")
	list.Flags().StringArrayVar(&labels, "label", nil, "only the tasks that hold this label, NAME=VALUE (repeatable: every one)")
	list.Flags().BoolVar(&newest, "newest", false, "with --state, --goal or --label: the newest tasks first")
	return list
}

func taskCancelCmd(g *globals) *cobra.Command {
	var reason string
	cancel := func(ctx context.Context, cl *client.Client, id string, opt client.CallOption) (*client.Result, error) {
		return cl.CancelTask(ctx, id, reason, opt)
	}
	cmd := bulkCmd(g, sendCmd(g, &cobra.Command{Use: "cancel", Short: "cancel a task, or every task a filter selects (a running attempt is told to stop)"}, "task", nil,
		func(ctx context.Context, cl *client.Client, args []string, opt client.CallOption) (*client.Result, error) {
			return cancel(ctx, cl, args[0], opt)
		}), &bulk{verb: "cancel", done: "cancelled", noun: "task", states: openStates}, cancel)
	cmd.Flags().StringVar(&reason, "reason", "", "why")
	return cmd
}

func taskRetryCmd(g *globals) *cobra.Command {
	var reason string
	retry := func(ctx context.Context, cl *client.Client, id string, opt client.CallOption) (*client.Result, error) {
		return cl.RetryTask(ctx, id, reason, opt)
	}
	cmd := bulkCmd(g, sendCmd(g, &cobra.Command{Use: "retry", Short: "give a failed or rejected task, or every one a filter selects, a new attempt (its dependents wait for it again; a failed goal reopens)"}, "task", nil,
		func(ctx context.Context, cl *client.Client, args []string, opt client.CallOption) (*client.Result, error) {
			return retry(ctx, cl, args[0], opt)
		}), &bulk{verb: "retry", done: "retried", noun: "task", states: []string{domain.StateFailed, domain.StateRejected}}, retry)
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded with the retry)")
	return cmd
}

// printTaskTimes prints what a task waits for and the moments that bound it.
func printTaskTimes(w io.Writer, t *schemas.Task) {
	if wt := t.Wait; wt != nil {
		switch wt.Kind {
		case domain.WaitApproval:
			fmt.Fprintf(w, "waiting for: approval %s (dwr approvals get %s)\n", wt.ApprovalID, wt.ApprovalID)
		case domain.WaitSignal:
			fmt.Fprintf(w, "waiting for: signal %q (dwr signal %s %s)\n", wt.Signal, t.ID, wt.Signal)
		case domain.WaitDelegation:
			fmt.Fprintf(w, "waiting for: goal %s, delegated to (dwr goal get %s)\n", wt.GoalID, wt.GoalID)
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
