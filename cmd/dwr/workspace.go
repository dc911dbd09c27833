package main

import (
	"encoding/json"
	"io"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/schemas"
)

func workspaceCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "workspace", Short: "create and list workspaces"}
	var desc, cmdID string
	create := &cobra.Command{
		Use: "create NAME", Short: "create a workspace", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return g.withClient(func(c *client) error {
				gg := *g
				gg.workspace = args[0]
				c.g = &gg
				res, _, err := c.command("workspace.create", domain.CreateWorkspace{Name: args[0], Description: desc}, cmdID)
				if err != nil {
					return err
				}
				return printReply(g, res, "workspace")
			})
		},
	}
	create.Flags().StringVar(&desc, "description", "", "what the workspace is for")
	create.Flags().StringVar(&cmdID, "command-id", "", "idempotency key (default: a fresh ULID); resend the same id to retry safely")
	list := &cobra.Command{
		Use: "list", Short: "list workspaces", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return g.withClient(func(c *client) error {
				res, err := c.query("workspace.list", schemas.Query{}, 0)
				if err != nil {
					return err
				}
				return show(g, res, func(out io.Writer, ws []domain.Workspace) error {
					rows := make([][]string, len(ws))
					for i, w := range ws {
						rows[i] = []string{w.Name, ago(w.CreatedAt), dash(w.Description)}
					}
					return table(out, []string{"NAME", "CREATED", "DESCRIPTION"}, rows)
				})
			})
		},
	}
	cmd.AddCommand(create, list)
	return cmd
}

// printReply prints a command's reply: JSON as is, or a line for people.
func printReply(g *globals, res json.RawMessage, what string) error {
	var r domain.Reply
	if err := json.Unmarshal(res, &r); err != nil {
		return err
	}
	if g.json {
		return printJSON(g.out, r)
	}
	line := what + " " + r.ID
	if r.State != "" {
		line += " is " + r.State
	}
	if r.Attempt > 0 {
		line += " (attempt " + itoa(r.Attempt) + ")"
	}
	if r.Duplicate {
		line += " (already applied: nothing changed)"
	}
	_, err := g.out.Write([]byte(line + "\n"))
	return err
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
