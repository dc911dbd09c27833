package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/domain"
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
			return g.withClient(func(c *client) error {
				pub, about, err := addUser(c, args[0], domain.Role(role), queues, out, force, cmdID)
				if err != nil {
					return err
				}
				if g.json {
					return printJSON(g.out, map[string]any{"name": args[0], "role": role, "workspace": g.workspace,
						"queues": queues, "public_key": pub, "credential": out})
				}
				fmt.Fprintf(g.out, "user %s added: %s\ncredential written to %s (keep it secret): dwr --creds %s ...\n", args[0], about, out, out)
				return nil
			})
		},
	}
	add.Flags().StringVar(&role, "role", "", "admin, client, executor, approver or viewer (required)")
	add.Flags().StringSliceVar(&queues, "queue", nil, "a queue an executor may work (repeatable)")
	add.Flags().StringVar(&out, "out", "", "file to write the credential to (required)")
	add.Flags().BoolVar(&force, "force", false, "replace --out if it exists")
	add.Flags().StringVar(&cmdID, "command-id", "", "idempotency key (default: a fresh ULID)")

	list := &cobra.Command{
		Use: "list", Short: "list the identities of the workspace (--workspace)", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return g.withClient(func(c *client) error {
				res, err := c.queryAll("member.list", schemas.Query{})
				if err != nil {
					return err
				}
				return show(g, res, func(w io.Writer, ms []domain.Member) error {
					rows := make([][]string, len(ms))
					for i, m := range ms {
						rows[i] = []string{m.Name, string(m.Role), dash(strings.Join(m.Queues, ",")), short(m.PublicKey, 14), ago(m.AddedAt)}
					}
					return table(w, []string{"NAME", "ROLE", "QUEUES", "KEY", "ADDED"}, rows)
				})
			})
		},
	}
	revoke := &cobra.Command{
		Use: "revoke NAME", Short: "remove an identity from the workspace: its connections lose the workspace at once", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return g.revoke("member.remove", domain.RemoveMember{Name: args[0]}, cmdID, args[0], "user %s revoked in workspace %s\n")
		},
	}
	revoke.Flags().StringVar(&cmdID, "command-id", "", "idempotency key (default: a fresh ULID)")
	cmd.AddCommand(add, list, revoke)
	return cmd
}

// revoke sends a revocation of name and prints it: line names the name and
// the workspace.
func (g *globals) revoke(command string, body any, cmdID, name, line string) error {
	return g.withClient(func(c *client) error {
		if _, _, err := c.command(command, body, cmdID); err != nil {
			return err
		}
		if g.json {
			return printJSON(g.out, map[string]any{"name": name, "workspace": g.workspace, "revoked": true})
		}
		fmt.Fprintf(g.out, line, name, g.workspace)
		return nil
	})
}

// addUser makes a key pair here, adds its public half to the workspace as
// name with role, and writes the credential to out. It returns the public
// key and a line saying who the credential is.
func addUser(c *client, name string, role domain.Role, queues []string, out string, force bool, cmdID string) (string, string, error) {
	if !force {
		if _, err := os.Lstat(out); err == nil {
			return "", "", fail(exitInvalid, "%s exists: choose another file, or --force to replace it", out)
		}
	}
	cred, err := access.NewCredential()
	if err != nil {
		return "", "", err
	}
	if _, _, err := c.command("member.add", domain.AddMember{Name: name, Role: role,
		PublicKey: cred.PublicKey, Queues: queues}, cmdID); err != nil {
		return "", "", err
	}
	about := fmt.Sprintf("%s, role %s in workspace %s", name, role, c.g.workspace)
	if len(queues) > 0 {
		about += ", queues " + strings.Join(queues, ",")
	}
	if err := cred.Write(out, about, true); err != nil {
		return "", "", err
	}
	return cred.PublicKey, about, nil
}
