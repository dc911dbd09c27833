package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/schemas"
)

func queueCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "queue", Short: "list queues, set their lease, deliveries, limit of jobs running at once, rate and order, pause and resume them, and delete them"}
	list := listCmd(g, &cobra.Command{Use: "list", Short: "list the workspace's queues: those configured, then those its tasks opened, with their work items waiting and out, and their settings", Args: cobra.NoArgs}, nil, "queues", nil,
		func(ctx context.Context, cl *client.Client, _ []string, opts ...client.CallOption) iter.Seq2[*schemas.Queue, error] {
			return cl.Queues(ctx, opts...)
		}, columns([]string{"QUEUE", "PENDING", "IN FLIGHT", "POLLING", "PAUSED", "LEASE", "MAX DELIVER", "MAX RUNNING", "RATE", "ORDER"}, func(q schemas.Queue) []string {
			return []string{q.Name, fmt.Sprint(q.Pending), fmt.Sprint(q.InFlight), fmt.Sprint(q.WaitingPulls), yesNo(q.Paused),
				(time.Duration(q.LeaseMS) * time.Millisecond).String(), fmt.Sprint(q.MaxDeliver), maxRunning(q.MaxRunning), rate(q.RateLimit, q.RatePeriodMS),
				cmp.Or(q.Order, schemas.QueueOrderFIFO)}
		}))
	cmd.AddCommand(list, queueSetCmd(g), queuePauseCmd(g, true), queuePauseCmd(g, false), queueDeleteCmd(g))
	return cmd
}

// queueSetCmd is dwr queue set: a queue's settings, those not given kept.
func queueSetCmd(g *globals) *cobra.Command {
	var lease time.Duration
	var deliver, running int
	var unlimited, unrated bool
	var rateSpec, order, cmdID string
	set := &cobra.Command{Use: "set NAME [--lease D] [--max-deliver N] [--max-running N | --no-limit] [--rate N/PERIOD | --no-rate-limit] [--order fifo|priority]",
		Short: "set a queue's settings; those not given stay as they are (a new queue's: 30s, 5, no limit)", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if unlimited && running != 0 {
				return fail(exitInvalid, "--max-running and --no-limit say different things: give one")
			}
			if running < 0 {
				return fail(exitInvalid, "--max-running must be positive (--no-limit removes the limit)")
			}
			if unrated && rateSpec != "" {
				return fail(exitInvalid, "--rate and --no-rate-limit say different things: give one")
			}
			if order != "" && order != schemas.QueueOrderFIFO && order != schemas.QueueOrderPriority {
				return fail(exitInvalid, "--order %s: want fifo (as the tasks became ready) or priority (by the tasks' --priority, then as they became ready)", order)
			}
			limit, period, err := parseRate(rateSpec)
			if err != nil {
				return err
			}
			return g.withClient(func(ctx context.Context, cl *client.Client) error {
				c := schemas.ConfigureQueue{Queue: args[0], LeaseMS: handlers.DefaultQueueLease.Milliseconds(),
					MaxDeliver: handlers.DefaultQueueMaxDeliver, MaxRunning: running}
				for q, err := range cl.Queues(ctx) {
					if err != nil {
						return err
					}
					if q.Name == c.Queue {
						c.LeaseMS, c.MaxDeliver = q.LeaseMS, q.MaxDeliver
					}
				}
				if lease != 0 {
					c.LeaseMS = lease.Milliseconds()
				}
				if deliver != 0 {
					c.MaxDeliver = deliver
				}
				if unlimited {
					c.MaxRunning = -1
				}
				c.RateLimit, c.RatePeriodMS, c.Order = limit, period, order
				if unrated {
					c.RateLimit = -1
				}
				r, err := cl.ConfigureQueue(ctx, c, client.CommandID(cmdID))
				if err != nil {
					return err
				}
				return show(g, &r.CommandResult, func(w io.Writer, r *schemas.CommandResult) error {
					_, err := fmt.Fprintf(w, "queue %s: %s\n", r.Queue, queueSettings(r))
					return err
				})
			})
		},
	}
	commandIDFlag(set, &cmdID)
	f := set.Flags()
	f.DurationVar(&lease, "lease", 0, "how long an executor holds a job before it is delivered again without a heartbeat (1s to 24h)")
	f.IntVar(&deliver, "max-deliver", 0, "how many times a job is delivered before it is quarantined (1 to 1000)")
	f.IntVar(&running, "max-running", 0, "how many of the queue's jobs may run at once, across all its executors")
	f.BoolVar(&unlimited, "no-limit", false, "remove the queue's limit of jobs running at once")
	f.StringVar(&rateSpec, "rate", "", "at most N of the queue's jobs handed out in any PERIOD, across all its executors, such as 60/1m or 5/1s (PERIOD 1s to 24h)")
	f.BoolVar(&unrated, "no-rate-limit", false, "remove the queue's rate limit")
	f.StringVar(&order, "order", "", "the order the queue hands out its jobs in: fifo, as their tasks became ready, or priority, by their tasks' priority (1 first, 3 when not given) first")
	return set
}

// parseRate reads --rate N/PERIOD: "" is none (0, 0).
func parseRate(spec string) (int, int64, error) {
	if spec == "" {
		return 0, 0, nil
	}
	n, per, ok := strings.Cut(spec, "/")
	limit, err := strconv.Atoi(n)
	if !ok || err != nil || limit < 1 {
		return 0, 0, fail(exitInvalid, "--rate %s: want N/PERIOD, N jobs (1 or more) in any PERIOD, such as 60/1m or 5/1s", spec)
	}
	d, err := time.ParseDuration(per)
	if err != nil || d <= 0 {
		return 0, 0, fail(exitInvalid, "--rate %s: the period %q is not a duration such as 1s, 1m or 1h", spec, per)
	}
	return limit, d.Milliseconds(), nil
}

// rate prints a queue's rate limit, "60/1m", or "-" for none.
func rate(limit int, periodMS int64) string {
	if limit == 0 {
		return "-"
	}
	p := (time.Duration(periodMS) * time.Millisecond).String()
	for _, zero := range []string{"0s", "0m"} { // 1m0s is 1m, 1h0m0s is 1h
		if q, ok := strings.CutSuffix(p, zero); ok && len(q) > 0 && q[len(q)-1] >= 'a' {
			p = q
		}
	}
	return fmt.Sprintf("%d/%s", limit, p)
}

// queuePauseCmd is dwr queue pause (pause true) or dwr queue resume: an
// admin stops a queue handing out jobs, or lets it again.
func queuePauseCmd(g *globals, pause bool) *cobra.Command {
	var cmdID string
	cmd := &cobra.Command{Use: "resume NAME", Short: "let a paused queue hand out its jobs again, those that joined it meanwhile first", Args: cobra.ExactArgs(1)}
	if pause {
		cmd = &cobra.Command{Use: "pause NAME", Args: cobra.ExactArgs(1),
			Short: "stop a queue handing out jobs until it is resumed; the jobs already out run on, and tasks keep joining it"}
	}
	cmd.RunE = func(_ *cobra.Command, args []string) error {
		return g.withClient(func(ctx context.Context, cl *client.Client) error {
			send := cl.ResumeQueue
			if pause {
				send = cl.PauseQueue
			}
			r, err := send(ctx, args[0], client.CommandID(cmdID))
			if err != nil {
				return err
			}
			return show(g, &r.CommandResult, func(w io.Writer, r *schemas.CommandResult) error {
				var err error
				switch {
				case r.Queue == "": // resumed a queue that stands without settings: never paused
					_, err = fmt.Fprintf(w, "queue %s is not paused: nothing changed\n", args[0])
				case r.Duplicate:
					_, err = fmt.Fprintf(w, "queue %s, nothing changed: %s\n", r.Queue, queueSettings(r))
				default:
					_, err = fmt.Fprintf(w, "queue %s %s: %s\n", r.Queue, map[bool]string{true: "paused", false: "resumed"}[pause], queueSettings(r))
				}
				return err
			})
		})
	}
	commandIDFlag(cmd, &cmdID)
	return cmd
}

// queueSettings says a queue's settings in effect, as a command's reply
// has them.
func queueSettings(r *schemas.CommandResult) string {
	s := fmt.Sprintf("lease %s, max deliver %d, max running: %s", time.Duration(r.LeaseMS)*time.Millisecond, r.MaxDeliver, maxRunning(r.MaxRunning))
	if r.RateLimit > 0 {
		s += ", rate: " + rate(r.RateLimit, r.RatePeriodMS)
	}
	if r.Order == schemas.QueueOrderPriority {
		s += ", order: by priority"
	}
	if r.Paused {
		s += ", paused: no job goes out until dwr queue resume " + r.Queue
	}
	return s
}

// queueDeleteCmd is dwr queue delete: an admin removes a queue no
// unfinished task is given.
func queueDeleteCmd(g *globals) *cobra.Command {
	var delID string
	del := &cobra.Command{Use: "delete NAME", Short: "remove a queue no unfinished task is given, so that it no longer counts against the workspace's bound",
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return g.withClient(func(ctx context.Context, cl *client.Client) error {
				r, err := cl.DeleteQueue(ctx, args[0], client.CommandID(delID))
				if err != nil {
					return err
				}
				return show(g, &r.CommandResult, func(w io.Writer, r *schemas.CommandResult) error {
					_, err := fmt.Fprintf(w, "queue %s deleted from workspace %s\n", args[0], r.ID)
					return err
				})
			})
		},
	}
	commandIDFlag(del, &delID)
	return del
}

// maxRunning says a queue's limit of jobs running at once.
func maxRunning(n int) string {
	if n == 0 {
		return "no limit"
	}
	return fmt.Sprint(n)
}
