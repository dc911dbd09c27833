package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/schemas"
)

func eventsCmd(g *globals) *cobra.Command {
	return listCmd(g, &cobra.Command{Use: "events ID", Short: "show the history of a task, goal, workspace, ritual or schedule (by its name)", Args: cobra.ExactArgs(1)},
		nil, "events", nil, func(ctx context.Context, cl *client.Client, args []string, opts ...client.CallOption) iter.Seq2[*json.RawMessage, error] {
			// Each event as the service encoded it: --json prints it whole.
			return client.List[json.RawMessage](ctx, cl, "events", schemas.Query{ID: args[0]}, opts...)
		},
		func(w io.Writer, evs []json.RawMessage) error {
			rows := make([][]string, len(evs))
			for i, raw := range evs {
				var e schemas.Event
				if err := json.Unmarshal(raw, &e); err != nil {
					return err
				}
				rows[i] = []string{fmt.Sprint(e.Version), ago(e.Time), e.Type, dash(e.Actor), e.CommandID, short(string(e.Data), 70)}
			}
			return table(w, []string{"VER", "TIME", "EVENT", "ACTOR", "COMMAND", "DATA"}, rows)
		})
}

func watchCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "watch [SUBJECT-FILTER]", Short: "print events live as they are committed (Ctrl-C to stop)",
		Long: "watch subscribes to dwr.ev.<workspace>.> (or the given filter after the workspace, e.g. 'task.>' or 'task.<ID>.>').",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := g.connect()
			if err != nil {
				return err
			}
			defer cl.Close()
			filter := ">"
			if len(args) == 1 {
				filter = args[0]
			}
			ctx, stop := untilStopped(cmd)
			defer stop()
			unsubscribe, err := cl.Feed(filter, func(raw []byte) {
				if g.json {
					fmt.Fprintln(g.out, string(raw))
					return
				}
				var e schemas.Event
				if json.Unmarshal(raw, &e) != nil {
					return
				}
				fmt.Fprintf(g.out, "%s  %-26s %-9s %s v%d  %s\n", e.Time.Local().Format("15:04:05.000"), e.Type, e.AggregateType, e.AggregateID, e.Version, short(string(e.Data), 80))
			})
			if errors.Is(err, nats.ErrBadSubject) {
				return fail(exitInvalid, "%q is not a subject filter: use tokens separated by dots, * for one token and > for the rest, e.g. 'task.>'", filter)
			}
			if err != nil {
				return fail(exitUnavailable, "subscribe: %v", cause(err))
			}
			defer unsubscribe()
			if !g.json {
				fmt.Fprintf(g.out, "watching workspace %s (Ctrl-C to stop)\n", g.workspace)
			}
			<-ctx.Done()
			return nil
		},
	}
}
