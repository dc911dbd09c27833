package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/executors/client"
)

// decisionOut is what `dwr approve --json` prints.
type decisionOut struct {
	ApprovalID   string `json:"approval_id"`
	TaskID       string `json:"task_id"`
	TaskState    string `json:"task_state"`
	Response     string `json:"response"`
	Branch       string `json:"branch,omitempty"`
	Approver     string `json:"approver"`
	KeyID        string `json:"key_id"`
	ActionDigest string `json:"action_digest"`
	Duplicate    bool   `json:"duplicate,omitempty"`
	Waiting      bool   `json:"waiting,omitempty"` // the approval waits for more approvers (its quorum)
}

// approveFlags are the flags of `dwr approve`.
type approveFlags struct {
	response, comment, keyFile, as, cmdID string
}

func approveCmd(g *globals) *cobra.Command {
	var o approveFlags
	cmd := &cobra.Command{
		Use:   "approve APPROVAL --response approve|reject|revise|escalate --key FILE [--comment TEXT]",
		Short: "decide an approval: sign the response and the action's digest with your key, and send it",
		Long: "approve fetches the approval, checks that the action it shows has the digest it names, signs\n" +
			"(approval id, response, action digest) with the Ed25519 key in FILE and sends the decision.\n" +
			"The approver is the one the key file names (its \"# approver:\" line), or --as. A refused decision (wrong key or role,\n" +
			"a response not permitted, already decided, expired) is recorded, and the command exits 5.",
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			key, approver, err := o.signer()
			if err != nil {
				return err
			}
			return g.withClient(func(ctx context.Context, cl *client.Client) error {
				return o.approve(ctx, g, cl, args[0], key, approver)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.response, "response", "", "the decision: "+strings.Join(domain.Responses, ", ")+" (required)")
	f.StringVar(&o.comment, "comment", "", "why: recorded with the decision")
	f.StringVar(&o.keyFile, "key", "", "the approver's private key file, as `dwr keys create` writes it (required)")
	f.StringVar(&o.as, "as", "", "the approver's name (default: the one the key file names, its \"# approver:\" line)")
	commandIDFlag(cmd, &o.cmdID)
	return cmd
}

// signer checks the flags and returns the key that signs and the approver
// who decides.
func (o approveFlags) signer() (*executors.SigningKey, string, error) {
	if !slices.Contains(domain.Responses, o.response) {
		return nil, "", fail(exitInvalid, "--response %q: use one of %s", o.response, strings.Join(domain.Responses, ", "))
	}
	if o.keyFile == "" {
		return nil, "", fail(exitInvalid, "--key FILE is required: the private key `dwr keys create` wrote")
	}
	key, err := executors.ReadSigningKey(o.keyFile)
	if err != nil {
		return nil, "", fail(exitInvalid, "%s", strings.TrimPrefix(err.Error(), "executors: "))
	}
	approver := o.as
	if approver == "" {
		approver = key.Approver
	}
	if approver == "" {
		return nil, "", fail(exitInvalid, "key file %s names no approver (no \"# approver:\" line: a key made by openssl, say): pass --as NAME", o.keyFile)
	}
	return key, approver, nil
}

// approve decides approval id as approver (executors.Decide), then prints
// what it decided.
func (o approveFlags) approve(ctx context.Context, g *globals, cl *client.Client, id string, key *executors.SigningKey, approver string) error {
	d, err := executors.Decide(ctx, cl, id, o.response, o.comment, key, approver, client.CommandID(o.cmdID))
	var mismatch *executors.DigestMismatchError
	if errors.As(err, &mismatch) {
		return fail(exitError, "%s", mismatch.Error())
	}
	if d == nil {
		return err
	}
	v := d.Approval
	if !g.json {
		fmt.Fprintf(g.out, "signing approval %s: %s of action %s, as %s (key %s)\n", v.ID, o.response, d.ActionDigest, approver, d.KeyID)
	}
	if err != nil && key.Workspace != "" && key.Workspace != g.workspace {
		err = g.clientError(err)
		return fail(exitCode(err), "%v\nnote: key file %s was made in workspace %q, and this is workspace %q (--workspace)", err, o.keyFile, key.Workspace, g.workspace)
	}
	if err != nil {
		return err
	}
	r := d.Result
	out := decisionOut{ApprovalID: v.ID, TaskID: r.ID, TaskState: r.State, Response: o.response, Approver: approver,
		KeyID: d.KeyID, ActionDigest: d.ActionDigest, Duplicate: r.Duplicate, Branch: d.Branch, Waiting: d.Waiting}
	if g.json {
		return printJSON(g.out, out)
	}
	line := fmt.Sprintf("approval %s decided: %s by %s → %s; task %s is %s", v.ID, o.response, approver, dash(out.Branch), out.TaskID, out.TaskState)
	if d.Waiting {
		line = fmt.Sprintf("approval %s approved by %s: %d of the %d distinct approvers it needs have approved; it waits for the others (dwr approvals get %s); task %s is %s",
			v.ID, approver, d.SignedOff, v.Quorum, v.ID, out.TaskID, out.TaskState)
	}
	if out.Branch == domain.BranchEscalate && v.EscalateTo != "" {
		line += " (a new approval asks role " + v.EscalateTo + ": dwr approvals list --role " + v.EscalateTo + ")"
	}
	if r.Duplicate {
		line += " (already applied: nothing changed)"
	}
	fmt.Fprintln(g.out, line)
	return nil
}

// exitCode returns the exit code an error carries.
func exitCode(err error) int {
	var ce *cliError
	if errors.As(err, &ce) {
		return ce.code
	}
	return exitError
}
