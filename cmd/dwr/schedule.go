package main

import (
	"context"
	"fmt"
	"io"
	"iter"
	"time"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/executors/planfile"
	"github.com/dwr-run/dwr/schemas"
)

func scheduleCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "schedule", Short: "start a goal and its plan at each slot of a cron spec or a period"}
	cmd.AddCommand(scheduleCreateCmd(g), scheduleListCmd(g), scheduleGetCmd(g),
		scheduleNameCmd(g, "pause", "stop a schedule from firing until it is resumed", "paused", (*client.Client).PauseSchedule),
		scheduleNameCmd(g, "resume", "let a paused schedule fire again, from its next slot after now", "resumed", (*client.Client).ResumeSchedule),
		scheduleNameCmd(g, "delete", "end a schedule (its goals stay)", "deleted", (*client.Client).DeleteSchedule))
	return cmd
}

// scheduleFlags are the flags of dwr schedule create.
type scheduleFlags struct {
	file, cron, tz, catchUp, overlap, cmdID string
	every                                   time.Duration
}

func scheduleCreateCmd(g *globals) *cobra.Command {
	var f scheduleFlags
	create := &cobra.Command{
		Use:   "create NAME (--cron SPEC | --every D) -f FILE [--tz ZONE] [--catch-up skip|one|all] [--overlap skip|allow]",
		Short: "start the goal of FILE (YAML or JSON: {goal: {...}, tasks: [...]}) at each slot, once per slot", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			c, err := f.command(g, args[0])
			if err != nil {
				return err
			}
			return g.withClient(func(ctx context.Context, cl *client.Client) error {
				r, err := cl.CreateSchedule(ctx, c, client.CommandID(f.cmdID))
				if err != nil {
					return err
				}
				return show(g, &r.CommandResult, func(w io.Writer, r *schemas.CommandResult) error {
					if r.Duplicate {
						_, err := fmt.Fprintf(w, "schedule %s is unchanged: it has this spec\n", r.ID)
						return err
					}
					_, err := fmt.Fprintf(w, "schedule %s created\n", r.ID)
					return err
				})
			})
		},
	}
	fl := create.Flags()
	fl.StringVarP(&f.file, "file", "f", "", "the goal file (YAML or JSON: goal, tasks); - reads standard input")
	fl.StringVar(&f.cron, "cron", "", `a cron spec: 5 fields, minute hour day-of-month month day-of-week ("*/5 * * * *"), or @hourly, @daily...`)
	fl.DurationVar(&f.every, "every", 0, "a period (at least 1s): a slot every D from the schedule's creation")
	fl.StringVar(&f.tz, "tz", "", "the IANA time zone the cron spec is read in (default UTC)")
	fl.StringVar(&f.catchUp, "catch-up", "", "slots missed while the service was down: skip, one (default: the latest) or all")
	fl.StringVar(&f.overlap, "overlap", "", "a slot while the previous goal is open: skip (default) or allow")
	commandIDFlag(create, &f.cmdID)
	return create
}

// command returns the schedule.create the flags ask for, or an invalid
// input error naming the flag.
func (f *scheduleFlags) command(g *globals, name string) (schemas.CreateSchedule, error) {
	var c schemas.CreateSchedule
	switch {
	case f.file == "":
		return c, fail(exitInvalid, "-f FILE is required: the goal file (YAML or JSON: {goal: {...}, tasks: [...]}; - reads standard input)")
	case (f.cron == "") == (f.every == 0):
		return c, fail(exitInvalid, "give --cron SPEC or --every D, one of them")
	}
	var sg planfile.ScheduleGoal
	var err error
	if f.file == "-" {
		sg, err = planfile.ReadSchedule(f.file, g.stdin)
	} else {
		sg, err = planfile.ReadScheduleFile(f.file)
	}
	if err != nil {
		return c, fail(exitInvalid, "%v", err)
	}
	c.Name = name
	c.ScheduleSpec = schemas.ScheduleSpec{Cron: f.cron, Every: schemas.Duration(f.every), TimeZone: f.tz,
		CatchUp: f.catchUp, Overlap: f.overlap, Goal: sg.Goal, Tasks: sg.Tasks}
	return c, nil
}

// scheduleNameCmd is a command of one schedule by name: pause, resume or
// delete, which done names in its answer.
func scheduleNameCmd(g *globals, verb, short, done string,
	send func(*client.Client, context.Context, string, ...client.CallOption) (*client.Result, error)) *cobra.Command {
	var cmdID string
	cmd := &cobra.Command{
		Use: verb + " NAME", Short: short, Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return g.withClient(func(ctx context.Context, cl *client.Client) error {
				r, err := send(cl, ctx, args[0], client.CommandID(cmdID))
				if err != nil {
					return err
				}
				return show(g, &r.CommandResult, func(w io.Writer, r *schemas.CommandResult) error {
					_, err := fmt.Fprintf(w, "schedule %s %s\n", r.ID, done)
					return err
				})
			})
		},
	}
	commandIDFlag(cmd, &cmdID)
	return cmd
}

func scheduleListCmd(g *globals) *cobra.Command {
	return listCmd(g, &cobra.Command{Use: "list [--all | --limit N --after CURSOR]", Short: "list schedules with their next slots", Args: cobra.NoArgs},
		&paging{}, "schedules", nil, func(ctx context.Context, cl *client.Client, _ []string, opts ...client.CallOption) iter.Seq2[*schemas.Schedule, error] {
			return cl.Schedules(ctx, opts...)
		}, columns([]string{"NAME", "WHEN", "ZONE", "CATCH-UP", "OVERLAP", "NEXT SLOT", "LAST GOAL"}, func(s schemas.Schedule) []string {
			return []string{s.Name, when(&s), s.TimeZone, s.CatchUp, s.Overlap, nextSlot(&s), dash(s.LastGoal)}
		}))
}

func scheduleGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "get NAME", Short: "show a schedule: its spec, policies, slots and last goal", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return g.withClient(func(ctx context.Context, cl *client.Client) error {
				s, err := cl.Schedule(ctx, args[0])
				if err != nil {
					return err
				}
				return show(g, s, printSchedule)
			})
		},
	}
}

// printSchedule prints a schedule for people.
func printSchedule(w io.Writer, s *schemas.Schedule) error {
	fmt.Fprintf(w, "schedule %s: %s in %s, catch-up %s, overlap %s\n", s.Name, when(s), s.TimeZone, s.CatchUp, s.Overlap)
	fmt.Fprintf(w, "next slot: %s\n", nextSlot(s))
	last := "-"
	if s.LastSlot != nil {
		last = s.LastSlot.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(w, "last slot: %s   last goal: %s   fired: %d   skipped: %d\n", last, dash(s.LastGoal), s.Fired, s.Skipped)
	_, err := fmt.Fprintf(w, "goal: %s\ntasks: %s\n", s.Goal, short(string(s.Tasks), 200))
	return err
}

// when says when a schedule's slots come.
func when(s *schemas.Schedule) string {
	if s.Cron != "" {
		return "cron " + s.Cron
	}
	return "every " + s.Every.D().String()
}

// nextSlot says when a schedule fires next, in UTC: "paused" when it does
// not, "when goal ... ends" while its last goal, still open at a slot,
// holds it (overlap skip).
func nextSlot(s *schemas.Schedule) string {
	switch {
	case s.Paused:
		return "paused"
	case s.WaitsFor != "":
		return "when goal " + s.WaitsFor + " ends"
	case s.NextSlot == nil:
		return "-"
	}
	return s.NextSlot.UTC().Format(time.RFC3339)
}
