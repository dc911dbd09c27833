package main

import (
	"context"
	"iter"
	"time"

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
	var retain time.Duration
	set := sendCmd(g, &cobra.Command{Use: "set NAME --retain-ended D", Short: "set a workspace's retention: the payloads of goals ended longer than D ago are shredded (0: kept for ever)",
		Args: cobra.ExactArgs(1)}, "workspace", func([]string) error {
		if retain < 0 {
			return fail(exitInvalid, "--retain-ended must not be negative")
		}
		return nil
	}, func(ctx context.Context, cl *client.Client, args []string, id client.CallOption) (*client.Result, error) {
		return cl.In(args[0]).ConfigureWorkspace(ctx, retain, id)
	})
	set.Flags().DurationVar(&retain, "retain-ended", 0, "how long the payloads of an ended goal are kept (e.g. 720h); goals created from then on get their own data keys")
	cmd.AddCommand(create, list, set)
	return cmd
}
