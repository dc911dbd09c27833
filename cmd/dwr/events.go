package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"time"

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
	var since string
	var fromSeq uint64
	watch := &cobra.Command{
		Use: "watch [SUBJECT-FILTER] [--since TIME|DURATION | --from-seq N]", Short: "print events live as they are committed (Ctrl-C to stop)",
		Long: "watch subscribes to dwr.ev.<workspace>.> (or the given filter after the workspace, e.g. 'task.>' or 'task.<ID>.>').\n" +
			"--since and --from-seq first print the events the feed keeps from then on. watch rides out a restart of the\n" +
			"service or a lost connection: once back, it prints what was published meanwhile, each event once.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			filter := ">"
			if len(args) == 1 {
				filter = args[0]
			}
			from, err := watchFrom(since, fromSeq)
			if err != nil {
				return err
			}
			cl, err := g.follow()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, stop := untilStopped(cmd)
			defer stop()
			if !g.json {
				fmt.Fprintf(g.out, "watching workspace %s (Ctrl-C to stop)\n", g.workspace)
			}
			err = cl.FollowFeed(ctx, filter, from, func(raw json.RawMessage) error {
				printEvent(g, raw)
				return nil
			}, func(n int, err error) {
				if err != nil {
					fmt.Fprintf(g.errOut, "dwr: connection back, but the events published meanwhile cannot be read yet (%v); trying again\n", cause(err))
					return
				}
				fmt.Fprintf(g.errOut, "dwr: connection back; %d events published meanwhile printed\n", n)
			})
			var se *schemas.Error
			switch {
			case errors.Is(err, nats.ErrBadSubject), errors.As(err, &se) && se.Code == schemas.CodeInvalid:
				return fail(exitInvalid, "%q is not a subject filter: use tokens separated by dots, * for one token and > for the rest, e.g. 'task.>'", filter)
			case err != nil:
				return fail(exitUnavailable, "watch: %v", cause(err))
			}
			return nil
		},
	}
	watch.Flags().StringVar(&since, "since", "", "first print the events stored since TIME (RFC 3339) or DURATION ago (e.g. 10m)")
	watch.Flags().Uint64Var(&fromSeq, "from-seq", 0, "first print the events of the log records from sequence N on (the seq of a reply)")
	return watch
}

// watchFrom reads watch's --since and --from-seq.
func watchFrom(since string, fromSeq uint64) (client.FeedFrom, error) {
	switch {
	case since != "" && fromSeq > 0:
		return client.FeedFrom{}, fail(exitInvalid, "--since and --from-seq both say where to start: give one")
	case fromSeq > 0:
		return client.FeedFrom{Seq: fromSeq}, nil
	case since == "":
		return client.FeedFrom{}, nil
	}
	if d, err := time.ParseDuration(since); err == nil && d > 0 {
		return client.FeedFrom{Since: time.Now().Add(-d)}, nil
	}
	t, err := time.Parse(time.RFC3339, since)
	if err != nil {
		return client.FeedFrom{}, fail(exitInvalid, "--since %q is neither a time (RFC 3339, e.g. 2026-12-02T09:00:00Z) nor a duration ago (e.g. 10m)", since)
	}
	return client.FeedFrom{Since: t}, nil
}

// printEvent prints an event of the feed: whole with --json, else a line.
func printEvent(g *globals, raw json.RawMessage) {
	if g.json {
		fmt.Fprintln(g.out, string(raw))
		return
	}
	var e schemas.Event
	if json.Unmarshal(raw, &e) != nil {
		return
	}
	fmt.Fprintf(g.out, "%s  %-26s %-9s %s v%d  %s\n", e.Time.Local().Format("15:04:05.000"), e.Type, e.AggregateType, e.AggregateID, e.Version, short(string(e.Data), 80))
}
