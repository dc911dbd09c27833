package main

import (
	"context"
	"encoding/json"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/schemas"
)

// reviewCmd decides a task in needs_review (a verifier was inconclusive).
func reviewCmd(g *globals) *cobra.Command {
	var reason string
	cmd := sendCmd(g, &cobra.Command{
		Use:   "review TASK accept|reject|retry --reason TEXT",
		Short: "decide a task in needs_review: accept its result, reject it, or run another attempt",
		Args:  cobra.ExactArgs(2),
	}, "task", func(args []string) error {
		switch args[1] {
		case domain.ReviewAccept, domain.ReviewReject, domain.ReviewRetry:
			return nil
		}
		return fail(exitInvalid, "decision %q: use accept, reject or retry", args[1])
	}, func(ctx context.Context, cl *client.Client, args []string, id client.CallOption) (*client.Result, error) {
		return cl.Review(ctx, schemas.ReviewTask{TaskID: args[0], Decision: args[1], Reason: reason}, id)
	})
	cmd.Flags().StringVar(&reason, "reason", "", "why: recorded with the decision")
	return cmd
}

// signalCmd delivers a named signal to a task waiting for it.
func signalCmd(g *globals) *cobra.Command {
	var data string
	var payload any // none: no payload at all, not null
	cmd := sendCmd(g, &cobra.Command{
		Use:   "signal TASK NAME [--data JSON]",
		Short: "deliver a named signal (a payment settled, a vendor answered) to a task waiting for it",
		Args:  cobra.ExactArgs(2),
	}, "task", func([]string) error {
		if data == "" {
			return nil
		}
		if !json.Valid([]byte(data)) {
			return fail(exitInvalid, "--data is not valid JSON")
		}
		payload = json.RawMessage(data)
		return nil
	}, func(ctx context.Context, cl *client.Client, args []string, id client.CallOption) (*client.Result, error) {
		return cl.Signal(ctx, args[0], args[1], payload, id)
	})
	cmd.Flags().StringVar(&data, "data", "", "the signal's payload, as JSON")
	return cmd
}
