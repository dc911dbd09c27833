package main

import (
	"context"
	"fmt"
	"io"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/executors/planfile"
	"github.com/dwr-run/dwr/schemas"
)

func goalCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "goal", Short: "create, inspect and list goals"}
	var c schemas.CreateGoal
	var queues, labels []string
	var ownKey bool
	create := sendCmd(g, &cobra.Command{Use: "create --title TITLE", Short: "create a goal", Args: cobra.NoArgs}, "goal",
		func([]string) (err error) {
			c.Labels, err = parseLabels(labels)
			return err
		},
		func(ctx context.Context, cl *client.Client, _ []string, id client.CallOption) (*client.Result, error) {
			c.Envelope.Permissions.Queues = queues
			if ownKey {
				c.Envelope.Privacy = &schemas.Privacy{Key: schemas.PrivacyKeyGoal}
			}
			return cl.CreateGoal(ctx, c, id)
		})
	f := create.Flags()
	f.StringVar(&c.Title, "title", "", "what the goal is (required)")
	f.StringVar(&c.Description, "description", "", "longer description")
	f.StringArrayVar(&c.SuccessCriteria, "criterion", nil, "a success criterion (repeatable)")
	f.StringSliceVar(&queues, "allow-queue", nil, "queues the goal's tasks may use (default: any)")
	f.IntVar(&c.Envelope.Budget.Attempts, "budget-attempts", 0, "most attempts in all (0: no limit)")
	f.Int64Var(&c.Envelope.Budget.Tokens, "budget-tokens", 0, "most model tokens in all (0: no limit)")
	f.Float64Var(&c.Envelope.Budget.Cost, "budget-cost", 0, "most cost in all (0: no limit)")
	f.StringVar(&c.Envelope.OnExhausted, "on-exhausted", "", "when the budget is used up: fail the task (fail, the default), or ask an approver to extend it (approval)")
	f.BoolVar(&ownKey, "own-key", false, "seal the goal's payloads with its own data key, so that dwr shred --goal can shred them alone")
	f.StringArrayVar(&labels, "label", nil, "a label, NAME=VALUE (repeatable): dwr goal list --label finds the goal by it")
	f.StringVar(&c.Key, "key", "", "your own name for the goal (an order id): at most one open goal holds it; dwr goal get --key reads it")
	f.StringVar(&c.IfOpen, "if-open", "", "with --key, while an open goal holds it: refuse (the default) or use (answer that goal, creating nothing)")
	f.IntVar(&c.Priority, "priority", 0, "1 (first) to 5 (last): the turn of the goal's tasks that give no --priority in a queue whose order is priority (default 3)")
	f.StringVar(&c.Envelope.ExtensionRole, "extension-role", "", "with --on-exhausted approval: the approver role that may extend the budget (default: any)")

	get := goalGetCmd(g)
	var filter client.GoalFilter
	var newest bool
	var byLabel []string
	list := listCmd(g, &cobra.Command{Use: "list [--state S] [--schedule NAME] [--label NAME=VALUE]... [--newest] [--all | --limit N --after CURSOR]", Short: "list goals, oldest first (a page; --all for every one)", Args: cobra.NoArgs},
		&paging{}, "goals", func([]string) (err error) {
			filter.Labels, err = parseLabels(byLabel)
			return err
		}, func(ctx context.Context, cl *client.Client, _ []string, opts ...client.CallOption) iter.Seq2[*schemas.GoalView, error] {
			if newest {
				opts = append(opts, client.NewestFirst())
			}
			return cl.GoalsWhere(ctx, filter, opts...)
		}, goalTable)
	list.Flags().StringVar(&filter.State, "state", "", "only the goals in this state: open, achieved, failed or cancelled")
	list.Flags().StringVar(&filter.Schedule, "schedule", "", "only the goals this schedule's slots started")
	list.Flags().StringArrayVar(&byLabel, "label", nil, "only the goals that hold this label, NAME=VALUE (repeatable: every one)")
	list.Flags().BoolVar(&newest, "newest", false, "the newest goals first")
	var reason string
	cancelOne := func(ctx context.Context, cl *client.Client, id string, opt client.CallOption) (*client.Result, error) {
		return cl.CancelGoal(ctx, id, reason, opt)
	}
	cancel := bulkCmd(g, sendCmd(g, &cobra.Command{Use: "cancel", Short: "cancel a goal, or every open goal a filter selects, with their unfinished tasks (their running attempts are told to stop)"}, "goal", nil,
		func(ctx context.Context, cl *client.Client, args []string, id client.CallOption) (*client.Result, error) {
			return cancelOne(ctx, cl, args[0], id)
		}), &bulk{verb: "cancel", done: "cancelled", noun: "goal", states: []string{schemas.GoalStateOpen}}, cancelOne)
	cancel.Flags().StringVar(&reason, "reason", "", "why: recorded with the cancellation")
	prioritize := sendCmd(g, &cobra.Command{Use: "prioritize ID PRIORITY", Args: cobra.ExactArgs(2),
		Short: "set a goal's priority, 1 (first) to 5 (last): its tasks that give none take their turn by it in a queue whose order is priority, those waiting at once"},
		"goal", func(args []string) error {
			if _, err := strconv.Atoi(args[1]); err != nil {
				return fail(exitInvalid, "priority %q: want a whole number, 1 (first) to 5 (last)", args[1])
			}
			return nil
		}, func(ctx context.Context, cl *client.Client, args []string, id client.CallOption) (*client.Result, error) {
			p, _ := strconv.Atoi(args[1])
			return cl.PrioritizeGoal(ctx, args[0], p, id)
		})
	cmd.AddCommand(create, get, list, cancel, labelCmd(g, "goal", "dwr goal list --label", (*client.Client).LabelGoal), prioritize)
	return cmd
}

// goalTable prints goals for people, and below them what they spent
// together: what the goals of one label — a customer's — cost.
func goalTable(w io.Writer, goals []schemas.GoalView) error {
	err := columns([]string{"ID", "STATE", "PLAN", "TASKS", "LABELS", "TITLE"}, func(v schemas.GoalView) []string {
		return []string{v.ID, v.State, fmt.Sprint(v.PlanVersion), counts(v.Counts), formatLabels(v.Labels), v.Title}
	})(w, goals)
	if err != nil || len(goals) == 0 {
		return err
	}
	var sum schemas.Spend
	for _, g := range goals {
		sum.Add(g.Spent)
	}
	_, err = fmt.Fprintf(w, "\nspent by these %d goals: %s\n", len(goals), spent(sum, schemas.Budget{}))
	return err
}

// printGoal prints a goal for people: what it is, and its plan's tasks.
func printGoal(w io.Writer, v *schemas.GoalView) error {
	fmt.Fprintf(w, "goal %s: %s\nstate: %s   plan version: %d\n", v.ID, v.Title, v.State, v.PlanVersion)
	if v.Ritual != nil {
		fmt.Fprintf(w, "from ritual %s version %d\n", v.Ritual.Name, v.Ritual.Version)
	}
	if v.Schedule != nil {
		fmt.Fprintf(w, "from schedule %s, slot %s\n", v.Schedule.Name, v.Schedule.Slot.UTC().Format(time.RFC3339))
	}
	if p := v.Parent; p != nil {
		fmt.Fprintf(w, "delegated by task %s as %q (goal %s, depth %d)\n", p.TaskID, p.Key, dash(p.GoalID), p.Depth)
	}
	if v.Reason != "" {
		fmt.Fprintf(w, "reason: %s\n", v.Reason)
	}
	if len(v.Labels) > 0 {
		fmt.Fprintf(w, "labels: %s\n", formatLabels(v.Labels))
	}
	if v.Key != "" {
		fmt.Fprintf(w, "key: %s\n", v.Key)
	}
	if v.Priority != 0 {
		fmt.Fprintf(w, "priority: %d\n", v.Priority)
	}
	for _, c := range v.SuccessCriteria {
		fmt.Fprintf(w, "criterion: %s\n", c)
	}
	fmt.Fprintf(w, "tasks by state: %s\n", counts(v.Counts))
	fmt.Fprintf(w, "spent: %s\n\n", spent(v.Spent, v.Envelope.Budget))
	return columns([]string{"KEY", "TASK", "STATE", "DEPENDS ON"}, func(n schemas.PlanNode) []string {
		return []string{n.Key, n.TaskID, n.State, dash(strings.Join(n.DependsOn, ","))}
	})(w, v.Nodes)
}

func goalGetCmd(g *globals) *cobra.Command {
	var key string
	cmd := &cobra.Command{
		Use: "get (ID | --key KEY)", Short: "show a goal with its plan, and the tree of goals its tasks delegated to", Args: cobra.MaximumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if (len(args) == 1) == (key != "") {
				return fail(exitInvalid, "give a goal's ID or its --key, one of the two")
			}
			return g.withClient(func(ctx context.Context, cl *client.Client) error {
				var v *schemas.GoalView
				var err error
				if key != "" {
					v, err = cl.GoalByKey(ctx, key)
				} else {
					v, err = cl.Goal(ctx, args[0])
				}
				if err != nil {
					return err
				}
				return show(g, v, func(w io.Writer, v *schemas.GoalView) error {
					if err := printGoal(w, v); err != nil || !delegates(v) {
						return err
					}
					fmt.Fprintln(w, "\ndelegations:")
					return printTree(ctx, w, cl, v, "  ", &treeBudget{goals: maxTreeGoals})
				})
			})
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "the goal made last with this key (dwr goal create --key)")
	return cmd
}

// maxTreeGoals bounds how many child goals dwr goal get reads for its tree.
const maxTreeGoals = 200

// treeBudget counts the child goals a tree may still read.
type treeBudget struct{ goals int }

// delegates reports whether a task of v's plan delegated work.
func delegates(v *schemas.GoalView) bool {
	for _, n := range v.Nodes {
		if len(n.Delegations) > 0 {
			return true
		}
	}
	return false
}

// printTree prints the tasks of v's plan and, under each, the goals it
// delegated to with their own tasks, and so down: each level indented
// further.
func printTree(ctx context.Context, w io.Writer, cl *client.Client, v *schemas.GoalView, indent string, b *treeBudget) error {
	for _, n := range v.Nodes {
		fmt.Fprintf(w, "%s%s %s %s\n", indent, n.Key, n.TaskID, n.State)
		for _, d := range n.Delegations {
			fmt.Fprintf(w, "%s  %q -> goal %s %s\n", indent, d.Key, d.GoalID, d.State)
			if b.goals == 0 {
				fmt.Fprintf(w, "%s    (not shown: the tree has more than %d goals; dwr goal get %s)\n", indent, maxTreeGoals, d.GoalID)
				continue
			}
			b.goals--
			child, err := cl.Goal(ctx, d.GoalID)
			if err != nil {
				return err
			}
			if err := printTree(ctx, w, cl, child, indent+"    ", b); err != nil {
				return err
			}
		}
	}
	return nil
}

// spent prints a goal's spend, each dimension beside its budget when it
// has one: "attempts 2/3  tokens 140/100  cost 1/-  wall 3.2s".
func spent(sp schemas.Spend, b schemas.Budget) string {
	of := func(used string, limited bool, limit string) string {
		if !limited {
			return used
		}
		return used + "/" + limit
	}
	return fmt.Sprintf("attempts %s  tokens %s  cost %s  wall %s",
		of(strconv.Itoa(sp.Attempts), b.Attempts > 0, strconv.Itoa(b.Attempts)),
		of(strconv.FormatInt(sp.Tokens, 10), b.Tokens > 0, strconv.FormatInt(b.Tokens, 10)),
		of(strconv.FormatFloat(sp.Cost, 'g', -1, 64), b.Cost > 0, strconv.FormatFloat(b.Cost, 'g', -1, 64)),
		(time.Duration(sp.WallMS) * time.Millisecond).String())
}

func counts(m map[string]int) string {
	var parts []string
	for _, st := range domain.TaskStates {
		if n := m[st]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", st, n))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

func planCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "plan", Short: "submit a goal's plan"}
	var goal, file, cmdID string
	submit := &cobra.Command{
		Use: "submit --goal ID -f FILE", Short: "submit a plan (YAML or JSON: a list of tasks, or {tasks: [...]})", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if goal == "" || file == "" {
				return fail(exitInvalid, "both --goal and -f are required")
			}
			tasks, err := readPlan(g, file)
			if err != nil {
				return fail(exitInvalid, "%v", err)
			}
			return g.withClient(func(ctx context.Context, cl *client.Client) error {
				r, err := cl.SubmitPlan(ctx, goal, tasks, client.CommandID(cmdID))
				if err != nil {
					return err
				}
				return show(g, &r.CommandResult, printPlan)
			})
		},
	}
	submit.Flags().StringVar(&goal, "goal", "", "the goal's id")
	submit.Flags().StringVarP(&file, "file", "f", "", "plan file (YAML or JSON); - reads standard input")
	commandIDFlag(submit, &cmdID)
	cmd.AddCommand(submit)
	return cmd
}

// readPlan reads plan file file ("-": standard input), relative times
// counted from now.
func readPlan(g *globals, file string) ([]schemas.TaskSpec, error) {
	if file == "-" {
		return planfile.Read(file, g.stdin, time.Now())
	}
	return planfile.ReadFile(file, time.Now())
}

// printPlan prints a committed plan for people: its version and its tasks.
func printPlan(w io.Writer, r *schemas.CommandResult) error {
	fmt.Fprintf(w, "plan version %d of goal %s committed\n", r.PlanVersion, r.ID)
	return planTasks(w, r.Tasks)
}

// planTasks prints a committed plan's tasks as a table.
func planTasks(w io.Writer, tasks []schemas.PlanTask) error {
	return columns([]string{"KEY", "TASK", "DEPENDS ON"}, func(t schemas.PlanTask) []string {
		return []string{t.Key, t.TaskID, dash(strings.Join(t.DependsOn, ","))}
	})(w, tasks)
}
