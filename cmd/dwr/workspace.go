package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/schemas"
)

func workspaceCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "workspace", Short: "create and list workspaces"}
	var desc, cmdID string
	create := &cobra.Command{
		Use: "create NAME", Short: "create a workspace", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return g.withClient(func(ctx context.Context, cl *client.Client) error {
				r, err := command(ctx, cl.In(args[0]), "workspace.create", schemas.CreateWorkspace{Name: args[0], Description: desc}, cmdID)
				if err != nil {
					return err
				}
				return printReply(g, &r.CommandResult, "workspace")
			})
		},
	}
	create.Flags().StringVar(&desc, "description", "", "what the workspace is for")
	create.Flags().StringVar(&cmdID, "command-id", "", "idempotency key (default: a fresh ULID); resend the same id to retry safely")
	list := listCmd(g, &cobra.Command{Use: "list", Short: "list workspaces", Args: cobra.NoArgs}, nil, "workspaces", "workspace.list", everything,
		columns([]string{"NAME", "CREATED", "DESCRIPTION"}, func(w domain.Workspace) []string {
			return []string{w.Name, ago(w.CreatedAt), dash(w.Description)}
		}))
	cmd.AddCommand(create, list)
	return cmd
}
