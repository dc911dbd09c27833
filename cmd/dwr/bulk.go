package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/schemas"
)

// bulk lets dwr task retry, dwr task cancel and dwr goal cancel act on
// every task (--state, --queue, --goal) or goal (--label, --schedule) a
// filter selects, each by a command of its own, instead of on one by its
// id. Without --yes it only shows what it would do.
type bulk struct {
	verb, done string   // "retry", "retried"
	noun       string   // what it acts on: "task" or "goal"
	states     []string // the states the action takes them from
	state      string
	queue      string         // tasks': of this queue
	goal       string         // tasks': of this goal
	labels     []string       // goals': NAME=VALUE, as given
	labelSet   schemas.Labels // and as read
	schedule   string         // goals': started by this schedule
	yes        bool
}

// bulkOutcome is what became of one task or goal; --json prints the list.
type bulkOutcome struct {
	TaskID  string `json:"task_id,omitempty"`
	GoalID  string `json:"goal_id,omitempty"` // of a goal acted on
	Key     string `json:"key,omitempty"`
	Title   string `json:"title,omitempty"`  // a goal's
	Queue   string `json:"queue,omitempty"`  // a task's
	State   string `json:"state"`            // after the command, or before when it was not sent
	Outcome string `json:"outcome"`          // done, skipped (it had changed), or would (without --yes)
	Reason  string `json:"reason,omitempty"` // why it was skipped
}

// filterFlags names b's filters in messages.
func (b *bulk) filterFlags() string {
	if b.noun == "goal" {
		return "--label, --schedule"
	}
	return "--state, --queue, --goal"
}

// filtered reports whether any filter is given.
func (b *bulk) filtered() bool {
	if b.noun == "goal" {
		return len(b.labels) > 0 || b.schedule != ""
	}
	return b.state != "" || b.queue != "" || b.goal != ""
}

// bulkCmd gives cmd, a command on one task or goal by its id made by
// sendCmd, the filters of b: with them and no id it acts on every one they
// select, with act, each command's id derived from --command-id when given.
func bulkCmd(g *globals, cmd *cobra.Command, b *bulk, act func(ctx context.Context, cl *client.Client, id string, opt client.CallOption) (*client.Result, error)) *cobra.Command {
	one := cmd.RunE
	cmd.Args = cobra.MaximumNArgs(1)
	f := cmd.Flags()
	if id := f.Lookup("command-id"); id != nil {
		id.Usage += fmt.Sprintf("; with no ID, each %s's is KEY.<%s id>", b.noun, b.noun)
	}
	if b.noun == "goal" {
		cmd.Use = fmt.Sprintf("%s (ID | [--label NAME=VALUE]... [--schedule NAME] [--yes])", b.verb)
		f.StringArrayVar(&b.labels, "label", nil, fmt.Sprintf("with no ID: %s the %s goals that hold this label, NAME=VALUE (repeatable: every one)", b.verb, strings.Join(b.states, ", ")))
		f.StringVar(&b.schedule, "schedule", "", "with no ID: only the goals this schedule's slots started")
	} else {
		cmd.Use = fmt.Sprintf("%s (ID | [--state S] [--queue Q] [--goal ID] [--yes])", b.verb)
		f.StringVar(&b.state, "state", "", fmt.Sprintf("with no ID: %s the tasks in this state (%s; default: all of them)", b.verb, strings.Join(b.states, ", ")))
		f.StringVar(&b.queue, "queue", "", "with no ID: only the tasks of this queue")
		f.StringVar(&b.goal, "goal", "", "with no ID: only the tasks of this goal")
	}
	f.BoolVar(&b.yes, "yes", false, fmt.Sprintf("with no ID: %s them (without it, show what would be done)", b.verb))
	cmd.RunE = func(c *cobra.Command, args []string) error {
		filtered := b.filtered()
		switch {
		case len(args) == 1 && !filtered && !b.yes:
			return one(c, args)
		case len(args) == 1 && filtered:
			return fail(exitInvalid, "give a %s's ID or filters (%s), not both", b.noun, b.filterFlags())
		case len(args) == 1:
			return fail(exitInvalid, "--yes goes with filters (%s): a %s's ID alone is acted on at once", b.filterFlags(), b.noun)
		case !filtered:
			return fail(exitInvalid, "give a %s's ID, or filters (%s) to %s every %s they select", b.noun, b.filterFlags(), b.verb, b.noun)
		case b.state != "" && !slices.Contains(b.states, b.state):
			return fail(exitInvalid, "--state %s: %s takes tasks in %s", b.state, b.verb, strings.Join(b.states, ", "))
		}
		var err error
		if b.labelSet, err = parseLabels(b.labels); err != nil {
			return err
		}
		cmdID, _ := c.Flags().GetString("command-id")
		return g.withClient(func(ctx context.Context, cl *client.Client) error {
			return b.run(ctx, g, cl, cmdID, act)
		})
	}
	return cmd
}

// list yields what b's filters select in state st, each as an outcome not
// yet acted on.
func (b *bulk) list(ctx context.Context, cl *client.Client, st string) iter.Seq2[bulkOutcome, error] {
	return func(yield func(bulkOutcome, error) bool) {
		if b.noun == "goal" {
			for g, err := range cl.GoalsWhere(ctx, client.GoalFilter{State: st, Schedule: b.schedule, Labels: b.labelSet}) {
				if err != nil {
					yield(bulkOutcome{}, err)
					return
				}
				if !yield(bulkOutcome{GoalID: g.ID, Title: g.Title, State: g.State, Outcome: "would"}, nil) {
					return
				}
			}
			return
		}
		for t, err := range cl.Tasks(ctx, client.TaskFilter{State: st, GoalID: b.goal, Queue: b.queue}) {
			if err != nil {
				yield(bulkOutcome{}, err)
				return
			}
			if !yield(bulkOutcome{TaskID: t.ID, Key: t.Key, Queue: t.Spec.Queue, State: t.State, Outcome: "would"}, nil) {
				return
			}
		}
	}
}

// run acts on each task or goal b selects, a state at a time (a listing by
// state is a walk that lists each once, and those acted on leave it),
// printing each outcome as it comes; it stops at the first refusal other
// than a conflict (the task changed meanwhile: skipped).
func (b *bulk) run(ctx context.Context, g *globals, cl *client.Client, cmdID string,
	act func(ctx context.Context, cl *client.Client, id string, opt client.CallOption) (*client.Result, error)) error {
	states := b.states
	if b.state != "" {
		states = []string{b.state}
	}
	out := []bulkOutcome{}
	var stop error
	counts := map[string]int{}
walk:
	for _, st := range states {
		for o, err := range b.list(ctx, cl, st) {
			if err != nil {
				stop = err
				break walk
			}
			if b.yes {
				id := cmp.Or(o.TaskID, o.GoalID)
				opt := client.CommandID("")
				if cmdID != "" {
					opt = client.CommandID(cmdID + "." + id)
				}
				r, err := act(ctx, cl, id, opt)
				var se *schemas.Error
				switch {
				case errors.As(err, &se) && se.Code == schemas.CodeConflict:
					o.Outcome, o.Reason = "skipped", se.Message
				case err != nil:
					stop = err
					break walk
				default:
					o.Outcome, o.State = "done", r.State
				}
			}
			counts[o.Outcome]++
			out = append(out, o)
			if !g.json {
				b.print(g, o)
			}
		}
	}
	if g.json {
		if err := printJSON(g.out, out); err != nil {
			return err
		}
	}
	switch {
	case stop != nil:
		at := fmt.Sprintf("stopped after %d %ss (%s); the same command again goes on from there", len(out), b.noun, b.summary(counts))
		var ce *cliError
		if err := g.clientError(stop); errors.As(err, &ce) {
			return fail(ce.code, "%s\n%s", ce.msg, at)
		}
		return fmt.Errorf("%w\n%s", stop, at)
	case !b.yes:
		fmt.Fprintf(g.errOut, "%d %ss would be %s: add --yes to %s them\n", counts["would"], b.noun, b.done, b.verb)
	default:
		fmt.Fprintln(g.errOut, b.summary(counts))
	}
	return nil
}

// print prints one outcome for people.
func (b *bulk) print(g *globals, o bulkOutcome) {
	name := b.noun + " " + cmp.Or(o.TaskID, o.GoalID)
	if n := cmp.Or(o.Key, o.Title); n != "" {
		name += " (" + n + ")"
	}
	where := ""
	if o.Queue != "" {
		where = " on queue " + o.Queue
	}
	switch o.Outcome {
	case "would":
		fmt.Fprintf(g.out, "would %s %s%s, %s\n", b.verb, name, where, o.State)
	case "skipped":
		fmt.Fprintf(g.out, "skipped %s: %s\n", name, o.Reason)
	default:
		fmt.Fprintf(g.out, "%s %s%s: %s\n", b.done, name, where, o.State)
	}
}

// summary says how many each outcome had.
func (b *bulk) summary(counts map[string]int) string {
	s := fmt.Sprintf("%s %d %ss", b.done, counts["done"], b.noun)
	if n := counts["skipped"]; n > 0 {
		s += fmt.Sprintf(", skipped %d that had changed meanwhile", n)
	}
	return s
}

// openStates are the states a task can be cancelled in.
var openStates = slices.DeleteFunc(slices.Clone(domain.TaskStates), domain.Terminal)
