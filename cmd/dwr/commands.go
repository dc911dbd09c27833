package main

import (
	"context"
	"fmt"
	"io"
	"iter"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/handlers"
)

// commandIDFlag adds --command-id to cmd.
func commandIDFlag(cmd *cobra.Command, id *string) {
	cmd.Flags().StringVar(id, "command-id", "", "idempotency key (default: a fresh ULID)")
}

// sendCmd makes cmd send a command and print its result about what ("task",
// "goal"): check (nil for none) checks the arguments and flags before
// anything is sent, then send sends the command with the id of
// --command-id, which sendCmd adds.
func sendCmd(g *globals, cmd *cobra.Command, what string, check func(args []string) error,
	send func(ctx context.Context, cl *client.Client, args []string, id client.CallOption) (*client.Result, error)) *cobra.Command {
	var cmdID string
	commandIDFlag(cmd, &cmdID)
	cmd.RunE = func(_ *cobra.Command, args []string) error {
		if check != nil {
			if err := check(args); err != nil {
				return err
			}
		}
		return g.withClient(func(ctx context.Context, cl *client.Client) error {
			r, err := send(ctx, cl, args, client.CommandID(cmdID))
			if err != nil {
				return err
			}
			return printReply(g, &r.CommandResult, what)
		})
	}
	return cmd
}

// getCmd returns the command use ("get ID"), which shows what get returns
// for its argument: as JSON with --json, else as human prints it.
func getCmd[T any](g *globals, use, short string, get func(*client.Client, context.Context, string, ...client.CallOption) (*T, error),
	human func(io.Writer, *T) error) *cobra.Command {
	return &cobra.Command{
		Use: use, Short: short, Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return g.withClient(func(ctx context.Context, cl *client.Client) error {
				v, err := get(cl, ctx, args[0])
				if err != nil {
					return err
				}
				return show(g, v, human)
			})
		},
	}
}

// listCmd makes cmd list the items (what, such as "tasks") that items
// yields for its arguments, and show them: as JSON with --json, else as
// human prints them. check (nil for none) checks the arguments and flags
// before anything is sent. With pages, cmd lists a page at a time and has
// the paging flags; without, every item.
func listCmd[T any](g *globals, cmd *cobra.Command, pages *paging, what string, check func(args []string) error,
	items func(ctx context.Context, cl *client.Client, args []string, opts ...client.CallOption) iter.Seq2[*T, error],
	human func(io.Writer, []T) error) *cobra.Command {
	if pages != nil {
		pages.flags(cmd, what)
	}
	cmd.RunE = func(_ *cobra.Command, args []string) error {
		if check != nil {
			if err := check(args); err != nil {
				return err
			}
		}
		p := paging{all: true}
		if pages != nil {
			p = *pages
		}
		return g.withClient(func(ctx context.Context, cl *client.Client) error {
			var next string
			opts := []client.CallOption{client.Limit(p.limit), client.After(p.after)}
			if !p.all {
				opts = append(opts, client.OnePage(&next))
			}
			out := []T{}
			for v, err := range items(ctx, cl, args, opts...) {
				if err != nil {
					return err
				}
				out = append(out, *v)
			}
			if next != "" {
				fmt.Fprintf(g.errOut, "more %s follow: repeat with --all to list them all, or with --after %s for the next page\n", what, next)
			}
			return show(g, out, human)
		})
	}
	return cmd
}

// paging is the flags of a list command that pages: --limit, --after and
// --all.
type paging struct {
	limit int
	after string
	all   bool
}

func (p *paging) flags(cmd *cobra.Command, what string) {
	f := cmd.Flags()
	f.IntVar(&p.limit, "limit", 0, fmt.Sprintf("at most this many %s a page (0: the service's default, %d; at most %d)", what, handlers.DefaultLimit, handlers.MaxLimit))
	f.StringVar(&p.after, "after", "", "list from the cursor that an earlier page's \"more follow\" note gave")
	f.BoolVar(&p.all, "all", false, "list every "+strings.TrimSuffix(what, "s")+", page after page")
}
