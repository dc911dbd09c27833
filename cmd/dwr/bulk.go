package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/schemas"
)

// bulk lets dwr task retry and dwr task cancel act on every task a filter
// selects (--state, --queue, --goal), each by a command of its own, instead
// of on one task by its id. Without --yes it only shows what it would do.
type bulk struct {
	verb, done string   // "retry", "retried"
	states     []string // the states the action takes tasks from
	state      string
	queue      string
	goal       string
	yes        bool
}

// bulkOutcome is what became of one task; --json prints the list.
type bulkOutcome struct {
	TaskID  string `json:"task_id"`
	Key     string `json:"key,omitempty"`
	Queue   string `json:"queue"`
	State   string `json:"state"`            // after the command, or the task's when it was not sent
	Outcome string `json:"outcome"`          // done, skipped (the task had changed), or would (without --yes)
	Reason  string `json:"reason,omitempty"` // why it was skipped
}

// bulkCmd gives cmd, a command on one task by its id made by sendCmd, the
// filters of b: with them and no id it acts on every task they select,
// with act, each command's id derived from --command-id when given.
func bulkCmd(g *globals, cmd *cobra.Command, b *bulk, act func(ctx context.Context, cl *client.Client, id string, opt client.CallOption) (*client.Result, error)) *cobra.Command {
	one := cmd.RunE
	cmd.Args = cobra.MaximumNArgs(1)
	cmd.Use = fmt.Sprintf("%s (ID | [--state S] [--queue Q] [--goal ID] [--yes])", b.verb)
	f := cmd.Flags()
	if id := f.Lookup("command-id"); id != nil {
		id.Usage += "; with no ID, each task's is KEY.<task id>"
	}
	f.StringVar(&b.state, "state", "", fmt.Sprintf("with no ID: %s the tasks in this state (%s; default: all of them)", b.verb, strings.Join(b.states, ", ")))
	f.StringVar(&b.queue, "queue", "", "with no ID: only the tasks of this queue")
	f.StringVar(&b.goal, "goal", "", "with no ID: only the tasks of this goal")
	f.BoolVar(&b.yes, "yes", false, fmt.Sprintf("with no ID: %s them (without it, show what would be done)", b.verb))
	cmd.RunE = func(c *cobra.Command, args []string) error {
		filtered := b.state != "" || b.queue != "" || b.goal != ""
		switch {
		case len(args) == 1 && !filtered && !b.yes:
			return one(c, args)
		case len(args) == 1 && filtered:
			return fail(exitInvalid, "give a task's ID or filters (--state, --queue, --goal), not both")
		case len(args) == 1:
			return fail(exitInvalid, "--yes goes with filters (--state, --queue, --goal): a task's ID alone is acted on at once")
		case !filtered:
			return fail(exitInvalid, "give a task's ID, or filters (--state, --queue, --goal) to %s every task they select", b.verb)
		case b.state != "" && !slices.Contains(b.states, b.state):
			return fail(exitInvalid, "--state %s: %s takes tasks in %s", b.state, b.verb, strings.Join(b.states, ", "))
		}
		cmdID, _ := c.Flags().GetString("command-id")
		return g.withClient(func(ctx context.Context, cl *client.Client) error {
			return b.run(ctx, g, cl, cmdID, act)
		})
	}
	return cmd
}

// run acts on each task b selects, a state at a time (a listing by state
// is a walk that lists a task once, and the tasks acted on leave it),
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
		for t, err := range cl.Tasks(ctx, client.TaskFilter{State: st, GoalID: b.goal, Queue: b.queue}) {
			if err != nil {
				stop = err
				break walk
			}
			o := bulkOutcome{TaskID: t.ID, Key: t.Key, Queue: t.Spec.Queue, State: t.State, Outcome: "would"}
			if b.yes {
				opt := client.CommandID("")
				if cmdID != "" {
					opt = client.CommandID(cmdID + "." + t.ID)
				}
				r, err := act(ctx, cl, t.ID, opt)
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
		at := fmt.Sprintf("stopped after %d tasks (%s); the same command again goes on from there", len(out), b.summary(counts))
		var ce *cliError
		if err := g.clientError(stop); errors.As(err, &ce) {
			return fail(ce.code, "%s\n%s", ce.msg, at)
		}
		return fmt.Errorf("%w\n%s", stop, at)
	case !b.yes:
		fmt.Fprintf(g.errOut, "%d tasks would be %s: add --yes to %s them\n", counts["would"], b.done, b.verb)
	default:
		fmt.Fprintln(g.errOut, b.summary(counts))
	}
	return nil
}

// print prints one outcome for people.
func (b *bulk) print(g *globals, o bulkOutcome) {
	task := o.TaskID
	if o.Key != "" {
		task += " (" + o.Key + ")"
	}
	switch o.Outcome {
	case "would":
		fmt.Fprintf(g.out, "would %s task %s on queue %s, %s\n", b.verb, task, o.Queue, o.State)
	case "skipped":
		fmt.Fprintf(g.out, "skipped task %s: %s\n", task, o.Reason)
	default:
		fmt.Fprintf(g.out, "%s task %s on queue %s: %s\n", b.done, task, o.Queue, o.State)
	}
}

// summary says how many tasks each outcome had.
func (b *bulk) summary(counts map[string]int) string {
	s := fmt.Sprintf("%s %d tasks", b.done, counts["done"])
	if n := counts["skipped"]; n > 0 {
		s += fmt.Sprintf(", skipped %d that had changed meanwhile", n)
	}
	return s
}

// openStates are the states a task can be cancelled in.
var openStates = slices.DeleteFunc(slices.Clone(domain.TaskStates), domain.Terminal)
