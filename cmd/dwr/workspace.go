package main

import (
	"context"
	"iter"

	"github.com/spf13/cobra"

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
				r, err := cl.In(args[0]).CreateWorkspace(ctx, schemas.CreateWorkspace{Name: args[0], Description: desc}, client.CommandID(cmdID))
				if err != nil {
					return err
				}
				return printReply(g, &r.CommandResult, "workspace")
			})
		},
	}
	create.Flags().StringVar(&desc, "description", "", "what the workspace is for")
	create.Flags().StringVar(&cmdID, "command-id", "", "idempotency key (default: a fresh ULID); resend the same id to retry safely")
	list := listCmd(g, &cobra.Command{Use: "list", Short: "list workspaces", Args: cobra.NoArgs}, nil, "workspaces", nil,
		func(ctx context.Context, cl *client.Client, _ []string, opts ...client.CallOption) iter.Seq2[*schemas.Workspace, error] {
			return cl.Workspaces(ctx, opts...)
		}, columns([]string{"NAME", "CREATED", "DESCRIPTION"}, func(w schemas.Workspace) []string {
			return []string{w.Name, ago(w.CreatedAt), dash(w.Description)}
		}))
	cmd.AddCommand(create, list)
	return cmd
}
