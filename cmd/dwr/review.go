package main

import (
	"encoding/json"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/domain"
)

// reviewCmd decides a task in needs_review (a verifier was inconclusive).
func reviewCmd(g *globals) *cobra.Command {
	var reason, cmdID string
	cmd := &cobra.Command{
		Use:   "review TASK accept|reject|retry --reason TEXT",
		Short: "decide a task in needs_review: accept its result, reject it, or run another attempt",
		Args:  cobra.ExactArgs(2),
		RunE: func(_ *cobra.Command, args []string) error {
			switch args[1] {
			case domain.ReviewAccept, domain.ReviewReject, domain.ReviewRetry:
			default:
				return fail(exitInvalid, "decision %q: use accept, reject or retry", args[1])
			}
			return g.send("task.review", domain.ReviewTask{TaskID: args[0], Decision: args[1], Reason: reason}, cmdID, "task")
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why: recorded with the decision")
	cmd.Flags().StringVar(&cmdID, "command-id", "", "idempotency key (default: a fresh ULID)")
	return cmd
}

// signalCmd delivers a named signal to a task waiting for it.
func signalCmd(g *globals) *cobra.Command {
	var data, cmdID string
	cmd := &cobra.Command{
		Use:   "signal TASK NAME [--data JSON]",
		Short: "deliver a named signal (a payment settled, a vendor answered) to a task waiting for it",
		Args:  cobra.ExactArgs(2),
		RunE: func(_ *cobra.Command, args []string) error {
			s := domain.SendSignal{TaskID: args[0], Name: args[1]}
			if data != "" {
				if !json.Valid([]byte(data)) {
					return fail(exitInvalid, "--data is not valid JSON")
				}
				s.Payload = json.RawMessage(data)
			}
			return g.send("task.signal", s, cmdID, "task")
		},
	}
	cmd.Flags().StringVar(&data, "data", "", "the signal's payload, as JSON")
	cmd.Flags().StringVar(&cmdID, "command-id", "", "idempotency key (default: a fresh ULID)")
	return cmd
}
