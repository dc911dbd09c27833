package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/schemas"
)

// approvalView is an approval as the approval queries answer it.
type approvalView = schemas.ApprovalView

// approvalStates are the values of `dwr approvals list --state`.
var approvalStates = append(slices.Clone(schemas.ApprovalStates), "all")

func approvalsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "approvals", Short: "the approvals waiting for a person's signed decision, and those decided"}
	cmd.AddCommand(approvalsListCmd(g), approvalsGetCmd(g))
	return cmd
}

func approvalsListCmd(g *globals) *cobra.Command {
	var role, state string
	list := listCmd(g, &cobra.Command{
		Use: "list [--role R] [--state pending|decided|expired|withdrawn|all]", Short: "list approvals (pending by default)", Args: cobra.NoArgs,
	}, &paging{}, "approvals", func([]string) error {
		if !slices.Contains(approvalStates, state) {
			return fail(exitInvalid, "--state %q: use one of %s", state, strings.Join(approvalStates, ", "))
		}
		return nil
	}, func(ctx context.Context, cl *client.Client, _ []string, opts ...client.CallOption) iter.Seq2[*approvalView, error] {
		return cl.Approvals(ctx, client.ApprovalFilter{State: state, Role: role}, opts...)
	}, func(w io.Writer, vs []approvalView) error {
		return printApprovals(w, vs, state != domain.ApprovalStatePending, time.Now())
	})
	list.Flags().StringVar(&role, "role", "", "only the approvals this role may decide")
	list.Flags().StringVar(&state, "state", domain.ApprovalStatePending, "which approvals: "+strings.Join(approvalStates, ", "))
	return list
}

// approvedBy returns 1 when v's decision approves it, else 0.
func approvedBy(v approvalView) int {
	if v.Decision != nil && v.Decision.Response == domain.ResponseApprove {
		return 1
	}
	return 0
}

// printApprovals prints approvals as a table, with their states when
// withState.
func printApprovals(w io.Writer, vs []approvalView, withState bool, now time.Time) error {
	header := []string{"APPROVAL", "TASK", "ROLE", "SUMMARY", "RESPONSES", "EXPIRES"}
	if withState {
		header = append(header, "STATE")
	}
	return columns(header, func(v approvalView) []string {
		task := v.TaskKey
		if task == "" {
			task = v.TaskID
		}
		exp := "-" // a decided, expired or withdrawn approval expires no more
		if v.State == domain.ApprovalStatePending {
			exp = expires(v.ExpiresAt, now)
		}
		role := dash(v.Role)
		if v.Quorum > 1 { // how many of its approvers have approved
			role += fmt.Sprintf(" (%d/%d)", len(v.SignOffs)+approvedBy(v), v.Quorum)
		}
		row := []string{v.ID, task, role, dash(short(v.Summary, 50)), strings.Join(v.Responses, ","), exp}
		if withState {
			row = append(row, v.State)
		}
		return row
	})(w, vs)
}

func approvalsGetCmd(g *globals) *cobra.Command {
	return getCmd(g, "get APPROVAL", "show an approval: the proposed action and its digest, who may decide, the decision and any refusals",
		(*client.Client).Approval, func(w io.Writer, v *approvalView) error {
			printApproval(w, v, time.Now())
			return nil
		})
}

// printApproval prints an approval for people.
func printApproval(w io.Writer, v *approvalView, now time.Time) {
	fmt.Fprintf(w, "approval %s is %s\n", v.ID, v.State)
	task := v.TaskID
	if v.TaskKey != "" {
		task += " (key " + v.TaskKey + ")"
	}
	fmt.Fprintf(w, "task:       %s", task)
	if v.Queue != "" {
		fmt.Fprintf(w, " on queue %s", v.Queue)
	}
	if v.TaskState != "" {
		fmt.Fprintf(w, " is %s", v.TaskState)
	}
	if v.Attempt > 0 {
		fmt.Fprintf(w, "; asked by attempt %d", v.Attempt)
	} else {
		fmt.Fprint(w, "; the task's gate (before its first attempt)")
	}
	fmt.Fprintln(w)
	if v.GoalID != "" {
		fmt.Fprintf(w, "goal:       %s\n", v.GoalID)
	}
	if v.Summary != "" {
		fmt.Fprintf(w, "summary:    %s\n", v.Summary)
	}
	printDeciders(w, v)
	br := make([]string, len(v.Responses))
	for i, r := range v.Responses {
		br[i] = r + " → " + dash(v.Branches[r])
		if v.Branches[r] == domain.BranchEscalate && v.EscalateTo != "" {
			br[i] += " (role " + v.EscalateTo + ")"
		}
	}
	fmt.Fprintf(w, "responses:  %s\n", strings.Join(br, ", "))
	fmt.Fprintf(w, "requested:  %s\n", ago(v.RequestedAt))
	switch {
	case v.ExpiresAt != nil && v.State == domain.ApprovalStatePending:
		fmt.Fprintf(w, "expires:    %s (%s); then → %s\n", ago(*v.ExpiresAt), expires(v.ExpiresAt, now), dash(v.OnExpiry))
	case v.ExpiresAt != nil:
		fmt.Fprintf(w, "expires:    %s; then → %s\n", ago(*v.ExpiresAt), dash(v.OnExpiry))
	default:
		fmt.Fprintln(w, "expires:    never")
	}
	fmt.Fprintf(w, "action digest: %s\naction:\n%s\n", v.ActionDigest, indent(v.Action))
	if len(v.Basis) > 0 {
		fmt.Fprintf(w, "basis:\n%s\n", indent(v.Basis))
	}
	if d := v.Decision; d != nil {
		role := ""
		if d.Role != "" {
			role = "role " + d.Role + ", "
		}
		fmt.Fprintf(w, "decision:   %s → %s by %s (%skey %s) at %s\n", d.Response, d.Branch, d.Approver, role, d.KeyID, ago(d.DecidedAt))
		if d.Comment != "" {
			fmt.Fprintf(w, "comment:    %s\n", d.Comment)
		}
	}
	if len(v.Refusals) > 0 {
		fmt.Fprintf(w, "\nrefused decisions (%d):\n", len(v.Refusals))
		_ = columns([]string{"WHEN", "APPROVER", "RESPONSE", "REASON", "MESSAGE"}, func(r schemas.Refusal) []string { // terminal output
			return []string{ago(r.At), dash(r.Approver), dash(r.Response), r.Reason, short(strings.TrimPrefix(r.Message, r.Reason+": "), 100)}
		})(w, v.Refusals)
	}
}

// printDeciders prints who may decide approval v: its role, its quorum and
// who approved so far, the requester it excludes, and the request an
// escalation's approval answers.
func printDeciders(w io.Writer, v *approvalView) {
	who := "any registered approver"
	if v.Role != "" {
		who = "an approver with role " + v.Role
	}
	if v.Quorum > 1 {
		who = fmt.Sprintf("%d distinct approvers (%s)", v.Quorum, strings.TrimPrefix(who, "an "))
	}
	if v.ExcludeRequester && v.RequestedBy != "" {
		who += ", not " + v.RequestedBy + " (who created the task)"
	}
	fmt.Fprintf(w, "decided by: %s\n", who)
	if v.Quorum > 1 {
		var by []string
		for _, s := range v.SignOffs {
			by = append(by, s.Approver+" "+ago(s.DecidedAt))
		}
		fmt.Fprintf(w, "approved:   %d of %d so far (%s)\n", len(v.SignOffs), v.Quorum, dash(strings.Join(by, ", ")))
	}
	if len(v.DroppedSignOffs) > 0 {
		var by []string
		for _, s := range v.DroppedSignOffs {
			by = append(by, s.Approver)
		}
		fmt.Fprintf(w, "not counted: %s (revoked, or registered again with another key, since approving)\n", strings.Join(by, ", "))
	}
	if v.EscalatedFrom != "" {
		asked := "any registered approver"
		if v.AskedRole != "" {
			asked = "role " + v.AskedRole
		}
		fmt.Fprintf(w, "escalated:  from approval %s, asked of %s: the decision answers that request\n", v.EscalatedFrom, asked)
	}
}

// indent pretty-prints a JSON document, two spaces in.
func indent(doc json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Indent(&b, doc, "  ", "  "); err != nil {
		return "  " + string(doc)
	}
	return "  " + b.String()
}

// expires tells when at comes, relative to now: "in 59m", "3m ago", "-".
func expires(at *time.Time, now time.Time) string {
	if at == nil {
		return "-"
	}
	d := at.Sub(now)
	if d < 0 {
		return "expired " + coarse(-d) + " ago"
	}
	return "in " + coarse(d)
}

// coarse writes a duration coarsely: 45s, 59m, 5h3m, 3d4h.
func coarse(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		h, m := int(d/time.Hour), int(d%time.Hour/time.Minute)
		if m == 0 {
			return fmt.Sprintf("%dh", h)
		}
		return fmt.Sprintf("%dh%dm", h, m)
	default:
		days, h := int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour)
		if h == 0 {
			return fmt.Sprintf("%dd", days)
		}
		return fmt.Sprintf("%dd%dh", days, h)
	}
}
