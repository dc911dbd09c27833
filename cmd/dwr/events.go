package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/schemas"
)

func eventsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "events ID", Short: "show the history of a task, goal or workspace", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return g.withClient(func(cl *client) error {
				res, err := cl.queryAll("events", schemas.Query{ID: args[0]})
				if err != nil {
					return err
				}
				return show(g, res, func(w io.Writer, evs []json.RawMessage) error {
					rows := make([][]string, len(evs))
					for i, raw := range evs {
						var e eventstore.Event
						if err := json.Unmarshal(raw, &e); err != nil {
							return err
						}
						rows[i] = []string{fmt.Sprint(e.Version), ago(e.Time), e.Type, dash(e.Actor), e.CommandID, short(string(e.Data), 70)}
					}
					return table(w, []string{"VER", "TIME", "EVENT", "ACTOR", "COMMAND", "DATA"}, rows)
				})
			})
		},
	}
}

// short cuts s to n characters at most, marking the cut with "...".
func short(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-3]) + "..."
	}
	return s
}

func watchCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "watch [SUBJECT-FILTER]", Short: "print events live as they are committed (Ctrl-C to stop)",
		Long: "watch subscribes to dwr.ev.<workspace>.> (or the given filter after the workspace, e.g. 'task.>' or 'task.<ID>.>').",
		Args: cobra.MaximumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			cl, err := g.connect()
			if err != nil {
				return err
			}
			defer cl.close()
			filter := ">"
			if len(args) == 1 {
				filter = args[0]
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			sub, err := cl.nc.Subscribe("dwr.ev."+g.workspace+"."+filter, func(m *nats.Msg) {
				if g.json {
					fmt.Fprintln(g.out, string(m.Data))
					return
				}
				var e eventstore.Event
				if json.Unmarshal(m.Data, &e) != nil {
					return
				}
				fmt.Fprintf(g.out, "%s  %-26s %-9s %s v%d  %s\n", e.Time.Local().Format("15:04:05.000"), e.Type, e.AggregateType, e.AggregateID, e.Version, short(string(e.Data), 80))
			})
			if err != nil {
				return fail(exitUnavailable, "subscribe: %v", err)
			}
			defer func() { _ = sub.Unsubscribe() }()
			if err := cl.nc.Flush(); err != nil {
				return fail(exitUnavailable, "subscribe: %v", err)
			}
			if !g.json {
				fmt.Fprintf(g.out, "watching workspace %s (Ctrl-C to stop)\n", g.workspace)
			}
			<-ctx.Done()
			return nil
		},
	}
}
