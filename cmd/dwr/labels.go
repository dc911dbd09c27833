package main

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/schemas"
)

// parseLabels reads NAME=VALUE pairs (the value may be empty, and may hold
// '='); none gives nil.
func parseLabels(pairs []string) (schemas.Labels, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	labels := schemas.Labels{}
	for _, p := range pairs {
		name, value, ok := strings.Cut(p, "=")
		if !ok || name == "" {
			return nil, fail(exitInvalid, "label %q: want NAME=VALUE, such as customer=acme", p)
		}
		labels[name] = value
	}
	return labels, nil
}

// formatLabels prints labels as name=value pairs by name, comma-separated;
// none as "-".
func formatLabels(labels schemas.Labels) string {
	if len(labels) == 0 {
		return "-"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		parts = append(parts, k+"="+labels[k])
	}
	return strings.Join(parts, ",")
}

// labelCmd is dwr goal label or dwr task label (what): ID NAME=VALUE...
// [--remove NAME]..., sent by send.
func labelCmd(g *globals, what, finds string, send func(cl *client.Client, ctx context.Context, id string, set schemas.Labels, remove []string,
	opts ...client.CallOption) (*client.Result, error)) *cobra.Command {
	var remove []string
	var set schemas.Labels
	cmd := sendCmd(g, &cobra.Command{Use: "label ID [NAME=VALUE]... [--remove NAME]...",
		Short: "set and remove a " + what + "'s labels, whatever its state (" + finds + " finds them by them)", Args: cobra.MinimumNArgs(1)}, what,
		func(args []string) (err error) {
			if set, err = parseLabels(args[1:]); err != nil {
				return err
			}
			if len(set) == 0 && len(remove) == 0 {
				return fail(exitInvalid, "give labels to set (NAME=VALUE) or --remove NAME, or both")
			}
			return nil
		},
		func(ctx context.Context, cl *client.Client, args []string, id client.CallOption) (*client.Result, error) {
			return send(cl, ctx, args[0], set, remove, id)
		})
	cmd.Flags().StringArrayVar(&remove, "remove", nil, "a label to remove, by name (repeatable)")
	return cmd
}
