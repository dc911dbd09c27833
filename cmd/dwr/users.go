package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/schemas"
)

func usersCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "users", Short: "who may do what in a workspace: add, list and revoke identities"}
	var role, out, cmdID string
	var queues []string
	var force bool
	add := &cobra.Command{
		Use:   "add NAME --role admin|client|executor|approver|viewer --out FILE [--queue Q]...",
		Short: "add an identity to the workspace (--workspace) and write its credential",
		Long: "add makes a fresh NATS nkey here, adds its public half to the workspace as NAME with the role, and writes the\n" +
			"private half to --out (mode 0600): whoever holds that file connects as NAME (dwr --creds FILE). The seed never\n" +
			"leaves this machine. Adding NAME again replaces its key and role (a rotation). An executor needs --queue.",
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if !domain.ValidRole(domain.Role(role)) {
				return fail(exitInvalid, "--role %q: use one of admin, client, executor, approver, viewer", role)
			}
			if out == "" {
				return fail(exitInvalid, "--out FILE is required: the credential is written there")
			}
			return g.withClient(func(ctx context.Context, cl *client.Client) error {
				m, about, err := addUser(ctx, cl, domain.AddMember{Name: args[0], Role: domain.Role(role), Queues: queues}, out, force, cmdID)
				if err != nil {
					return err
				}
				if g.json {
					return printJSON(g.out, map[string]any{"name": m.Name, "role": role, "workspace": g.workspace,
						"queues": queues, "public_key": m.PublicKey, "credential": out})
				}
				fmt.Fprintf(g.out, "user %s added: %s\ncredential written to %s (keep it secret): dwr --creds %s ...\n", m.Name, about, out, out)
				return nil
			})
		},
	}
	add.Flags().StringVar(&role, "role", "", "admin, client, executor, approver or viewer (required)")
	add.Flags().StringSliceVar(&queues, "queue", nil, "a queue an executor may work (repeatable)")
	add.Flags().StringVar(&out, "out", "", "file to write the credential to (required)")
	add.Flags().BoolVar(&force, "force", false, "replace --out if it exists")
	commandIDFlag(add, &cmdID)

	list := listCmd(g, &cobra.Command{Use: "list", Short: "list the identities of the workspace (--workspace)", Args: cobra.NoArgs},
		nil, "members", nil, func(ctx context.Context, cl *client.Client, _ []string, opts ...client.CallOption) iter.Seq2[*schemas.Member, error] {
			return cl.Members(ctx, opts...)
		}, columns([]string{"NAME", "ROLE", "QUEUES", "KEY", "ADDED"}, func(m schemas.Member) []string {
			return []string{m.Name, string(m.Role), dash(strings.Join(m.Queues, ",")), short(m.PublicKey, 14), ago(m.AddedAt)}
		}))
	revoke := revokeCmd(g, "revoke NAME", "remove an identity from the workspace: its connections lose the workspace at once",
		(*client.Client).RemoveMember, "user %s revoked in workspace %s\n")
	cmd.AddCommand(add, list, revoke)
	return cmd
}

// revokeCmd is the command use ("revoke NAME"): it revokes NAME with
// revoke, and prints the revocation (line names NAME and the workspace).
func revokeCmd(g *globals, use, short string, revoke func(*client.Client, context.Context, string, ...client.CallOption) (*client.Result, error),
	line string) *cobra.Command {
	var cmdID string
	cmd := &cobra.Command{
		Use: use, Short: short, Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return g.withClient(func(ctx context.Context, cl *client.Client) error {
				if _, err := revoke(cl, ctx, args[0], client.CommandID(cmdID)); err != nil {
					return err
				}
				if g.json {
					return printJSON(g.out, map[string]any{"name": args[0], "workspace": g.workspace, "revoked": true})
				}
				fmt.Fprintf(g.out, line, args[0], g.workspace)
				return nil
			})
		},
	}
	commandIDFlag(cmd, &cmdID)
	return cmd
}

// addUser adds member m to the client's workspace with a fresh credential,
// written to out (access.AddUser). It returns m as added and a line saying
// who the credential is.
func addUser(ctx context.Context, cl *client.Client, m domain.AddMember, out string, force bool, cmdID string) (domain.AddMember, string, error) {
	m, about, err := access.AddUser(cl.Workspace(), m, out, force, func(m domain.AddMember) error {
		_, err := cl.AddMember(ctx, m, client.CommandID(cmdID))
		return err
	})
	if errors.Is(err, fs.ErrExist) {
		return m, "", fail(exitInvalid, "%s exists: choose another file, or --force to replace it", out)
	}
	return m, about, err
}
