package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/executors/client"
)

// shredCmd destroys the data key of a goal or of a whole workspace.
func shredCmd(g *globals) *cobra.Command {
	var goal, reason string
	var all bool
	var cmd *cobra.Command
	cmd = sendCmd(g, &cobra.Command{
		Use:   "shred --goal ID | --workspace NAME | --all [--reason TEXT]",
		Short: "destroy the data key of a goal (created with --own-key) or every key of a workspace: their payloads read [shredded] for good",
		Long: "shred destroys data keys for good (crypto-shredding): the inputs, results, checkpoints, signals and evidence\n" +
			"they sealed read \"[shredded]\" everywhere from then on — the log included, which still verifies. The spine (ids,\n" +
			"states, times, digests) stays. A goal can be shredded alone only if it was created with its own key (dwr goal\n" +
			"create --own-key); an open goal is cancelled. --workspace NAME (or --all, for the workspace of --workspace or\n" +
			"DWR_WORKSPACE) shreds the whole workspace, which then takes no new payloads. There is no undo.",
		Args: cobra.NoArgs,
	}, "goal", func([]string) error {
		// --workspace NAME given here names the workspace to shred.
		whole := all || (goal == "" && cmd.InheritedFlags().Changed("workspace"))
		if (goal == "") == !whole {
			return fail(exitInvalid, "give --goal ID, or --workspace NAME (or --all) for the whole workspace, one of them")
		}
		all = whole
		return nil
	}, func(ctx context.Context, cl *client.Client, _ []string, id client.CallOption) (*client.Result, error) {
		if goal != "" {
			return cl.ShredGoal(ctx, goal, reason, id)
		}
		return cl.ShredWorkspace(ctx, reason, id)
	})
	f := cmd.Flags()
	f.StringVar(&goal, "goal", "", "the goal whose own data key to destroy")
	f.BoolVar(&all, "all", false, "destroy every data key of the workspace (--workspace, or DWR_WORKSPACE)")
	f.StringVar(&reason, "reason", "", "why: recorded with the shred")
	return cmd
}
