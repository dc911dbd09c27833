package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// approvalView is an approval as the approval queries answer it.
type approvalView = projections.ApprovalView

// approvalStates are the values of `dwr approvals list --state`.
var approvalStates = append(slices.Clone(projections.ApprovalStates), "all")

// getApproval queries approval.get.
func (c *client) getApproval(id string, minSeq uint64) (approvalView, json.RawMessage, error) {
	res, err := c.query("approval.get", schemas.Query{ID: id}, minSeq)
	if err != nil {
		return approvalView{}, nil, err
	}
	var v approvalView
	if err := json.Unmarshal(res, &v); err != nil {
		return approvalView{}, nil, fail(exitError, "the service answered an approval that does not decode: %v", err)
	}
	return v, res, nil
}

// printRaw prints a query's result as indented JSON, as the service sent it.
func printRaw(w io.Writer, res json.RawMessage) error {
	var b bytes.Buffer
	if err := json.Indent(&b, res, "", "  "); err != nil {
		return err
	}
	b.WriteByte('\n')
	_, err := w.Write(b.Bytes())
	return err
}

func approvalsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "approvals", Short: "the approvals waiting for a person's signed decision, and those decided"}
	cmd.AddCommand(approvalsListCmd(g), approvalsGetCmd(g))
	return cmd
}

func approvalsListCmd(g *globals) *cobra.Command {
	var role, state string
	var pages paging
	list := &cobra.Command{
		Use: "list [--role R] [--state pending|decided|expired|withdrawn|all]", Short: "list approvals (pending by default)", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if !slices.Contains(approvalStates, state) {
				return fail(exitInvalid, "--state %q: use one of %s", state, strings.Join(approvalStates, ", "))
			}
			return g.withClient(func(cl *client) error {
				res, err := pages.list(g, cl, "approvals", "approval.list", schemas.Query{State: state, Role: role})
				if err != nil {
					return err
				}
				var vs []approvalView
				if err := json.Unmarshal(res, &vs); err != nil {
					return fail(exitError, "the service answered approvals that do not decode: %v", err)
				}
				if g.json {
					if vs == nil {
						res = json.RawMessage("[]")
					}
					return printRaw(g.out, res)
				}
				return printApprovals(g.out, vs, state != domain.ApprovalStatePending, time.Now())
			})
		},
	}
	list.Flags().StringVar(&role, "role", "", "only the approvals this role may decide")
	list.Flags().StringVar(&state, "state", domain.ApprovalStatePending, "which approvals: "+strings.Join(approvalStates, ", "))
	pages.flags(list, "approvals")
	return list
}

// printApprovals prints approvals as a table, with their states when
// withState.
func printApprovals(w io.Writer, vs []approvalView, withState bool, now time.Time) error {
	header := []string{"APPROVAL", "TASK", "ROLE", "SUMMARY", "RESPONSES", "EXPIRES"}
	if withState {
		header = append(header, "STATE")
	}
	rows := make([][]string, len(vs))
	for i, v := range vs {
		task := v.TaskKey
		if task == "" {
			task = v.TaskID
		}
		rows[i] = []string{v.ID, task, dash(v.Role), dash(short(v.Summary, 50)), strings.Join(v.Responses, ","), expires(v.ExpiresAt, now)}
		if withState {
			rows[i] = append(rows[i], v.State)
		}
	}
	return table(w, header, rows)
}

func approvalsGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "get APPROVAL", Short: "show an approval: the proposed action and its digest, who may decide, the decision and any refusals", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return g.withClient(func(cl *client) error {
				v, res, err := cl.getApproval(args[0], 0)
				if err != nil {
					return err
				}
				if g.json {
					return printRaw(g.out, res)
				}
				printApproval(g.out, v, time.Now())
				return nil
			})
		},
	}
}

// printApproval prints an approval for people.
func printApproval(w io.Writer, v approvalView, now time.Time) {
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
	who := "any registered approver"
	if v.Role != "" {
		who = "an approver with role " + v.Role
	}
	fmt.Fprintf(w, "decided by: %s\n", who)
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
		rows := make([][]string, len(v.Refusals))
		for i, r := range v.Refusals {
			rows[i] = []string{ago(r.At), dash(r.Approver), dash(r.Response), r.Reason, short(strings.TrimPrefix(r.Message, r.Reason+": "), 100)}
		}
		_ = table(w, []string{"WHEN", "APPROVER", "RESPONSE", "REASON", "MESSAGE"}, rows) // terminal output
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
