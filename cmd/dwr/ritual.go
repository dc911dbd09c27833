package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/executors/planfile"
	"github.com/dwr-run/dwr/schemas"
)

func ritualCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "ritual", Short: "define versioned templates of a goal and its plan, and run them"}
	cmd.AddCommand(ritualDefineCmd(g), ritualRunCmd(g), ritualListCmd(g), ritualGetCmd(g))
	return cmd
}

func ritualDefineCmd(g *globals) *cobra.Command {
	var file, cmdID string
	define := &cobra.Command{
		Use: "define -f FILE", Short: "store the next version of a ritual (YAML or JSON: name, description, parameters, goal, tasks)", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if file == "" {
				return fail(exitInvalid, "-f FILE is required: the ritual file (YAML or JSON; - reads standard input)")
			}
			def, err := readRitual(g, file)
			if err != nil {
				return fail(exitInvalid, "%v", err)
			}
			return g.withClient(func(ctx context.Context, cl *client.Client) error {
				r, err := cl.DefineRitual(ctx, def, client.CommandID(cmdID))
				if err != nil {
					return err
				}
				return show(g, &r.CommandResult, func(w io.Writer, r *schemas.CommandResult) error {
					if r.Duplicate {
						_, err := fmt.Fprintf(w, "ritual %s is unchanged: version %d has this content\n", r.ID, r.Version)
						return err
					}
					_, err := fmt.Fprintf(w, "ritual %s version %d defined\n", r.ID, r.Version)
					return err
				})
			})
		},
	}
	define.Flags().StringVarP(&file, "file", "f", "", "ritual file (YAML or JSON); - reads standard input")
	commandIDFlag(define, &cmdID)
	return define
}

// readRitual reads ritual file file ("-": standard input).
func readRitual(g *globals, file string) (schemas.DefineRitual, error) {
	if file == "-" {
		return planfile.ReadRitual(file, g.stdin)
	}
	return planfile.ReadRitualFile(file)
}

func ritualRunCmd(g *globals) *cobra.Command {
	var version uint64
	var pairs, labels []string
	var key, ifOpen string
	var paramsFile, cmdID string
	run := &cobra.Command{
		Use: "run NAME [--version V] [--param NAME=VALUE]... [--params-file FILE] [--label NAME=VALUE]... [--key KEY [--if-open refuse|use]]", Args: cobra.ExactArgs(1),
		Short: "create a goal and its plan from a ritual (its latest version, or --version)",
		RunE: func(_ *cobra.Command, args []string) error {
			base, err := readParamsFile(paramsFile)
			if err != nil {
				return fail(exitInvalid, "%v", err)
			}
			set, err := parseLabels(labels)
			if err != nil {
				return err
			}
			return g.withClient(func(ctx context.Context, cl *client.Client) error {
				rv, err := cl.Ritual(ctx, args[0], version)
				if err != nil {
					return err
				}
				params, err := planfile.Params(rv, base, pairs)
				if err != nil {
					return fail(exitInvalid, "%v", err)
				}
				// The version the params were read against, even if another
				// is defined meanwhile.
				r, err := cl.RunRitual(ctx, schemas.RunRitual{Name: rv.Name, Version: rv.Version, Params: params, Labels: set, Key: key, IfOpen: ifOpen}, client.CommandID(cmdID))
				if err != nil {
					return err
				}
				return show(g, &r.CommandResult, func(w io.Writer, r *schemas.CommandResult) error {
					fmt.Fprintf(w, "goal %s created from ritual %s version %d, with plan version %d\n", r.ID, rv.Name, rv.Version, r.PlanVersion)
					return planTasks(w, r.Tasks)
				})
			})
		},
	}
	f := run.Flags()
	f.Uint64Var(&version, "version", 0, "the version to run (default: the latest)")
	f.StringArrayVar(&pairs, "param", nil, "a parameter's value, NAME=VALUE (repeatable): text for a string parameter, else JSON")
	f.StringArrayVar(&labels, "label", nil, "a label of the goal, NAME=VALUE (repeatable), over those of the ritual's goal template")
	f.StringVar(&key, "key", "", "the goal's key, over the one the ritual's goal template renders: at most one open goal holds it")
	f.StringVar(&ifOpen, "if-open", "", "while an open goal holds the key: refuse (the default) or use (answer that goal, creating nothing)")
	f.StringVar(&paramsFile, "params-file", "", "a YAML or JSON object of parameters (--param overrides its values)")
	commandIDFlag(run, &cmdID)
	return run
}

// readParamsFile reads a params file ("" for none: no params).
func readParamsFile(file string) (map[string]any, error) {
	if file == "" {
		return map[string]any{}, nil
	}
	return planfile.ReadParamsFile(file)
}

func ritualListCmd(g *globals) *cobra.Command {
	return listCmd(g, &cobra.Command{Use: "list [--all | --limit N --after CURSOR]", Short: "list rituals with their latest versions", Args: cobra.NoArgs},
		&paging{}, "rituals", nil, func(ctx context.Context, cl *client.Client, _ []string, opts ...client.CallOption) iter.Seq2[*schemas.Ritual, error] {
			return cl.Rituals(ctx, opts...)
		}, columns([]string{"NAME", "VERSION", "UPDATED", "DESCRIPTION"}, func(r schemas.Ritual) []string {
			return []string{r.Name, fmt.Sprint(r.Version), ago(r.UpdatedAt), dash(short(r.Description, 60))}
		}))
}

func ritualGetCmd(g *globals) *cobra.Command {
	var version uint64
	get := &cobra.Command{
		Use: "get NAME [--version V]", Short: "show a ritual's version (the latest by default): its parameters and templates", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return g.withClient(func(ctx context.Context, cl *client.Client) error {
				v, err := cl.Ritual(ctx, args[0], version)
				if err != nil {
					return err
				}
				return show(g, v, printRitual)
			})
		},
	}
	get.Flags().Uint64Var(&version, "version", 0, "the version to show (default: the latest)")
	return get
}

// printRitual prints a ritual's version for people: what it is, its
// parameters, its goal template and its plan template's tasks.
func printRitual(w io.Writer, v *schemas.RitualVersion) error {
	fmt.Fprintf(w, "ritual %s version %d, defined %s by %s (digest %s)\n", v.Name, v.Version, ago(v.DefinedAt), v.DefinedBy, short(v.Digest, 15))
	if v.Description != "" {
		fmt.Fprintf(w, "description: %s\n", v.Description)
	}
	fmt.Fprintf(w, "goal: %s\n\n", v.Goal)
	var required struct {
		Required []string `json:"required"`
	}
	_ = json.Unmarshal(v.Parameters, &required)
	props := planfile.ParamProperties(v.Parameters)
	var rows [][]string
	for _, name := range planfile.ParamNames(v.Parameters) {
		def := "-"
		if d, ok := props[name]["default"]; ok {
			b, _ := json.Marshal(d)
			def = string(b)
		}
		rows = append(rows, []string{name, planfile.ParamType(props[name]), yesNo(slices.Contains(required.Required, name)), def})
	}
	if err := table(w, []string{"PARAMETER", "TYPE", "REQUIRED", "DEFAULT"}, rows); err != nil {
		return err
	}
	fmt.Fprintln(w)
	var tasks []taskTemplate
	_ = json.Unmarshal(v.Tasks, &tasks) // a list of objects: the service checked it
	return columns([]string{"KEY", "QUEUE", "DEPENDS ON"}, func(t taskTemplate) []string {
		deps := make([]string, len(t.DependsOn))
		for i, d := range t.DependsOn {
			deps[i] = fmt.Sprint(d)
		}
		return []string{fmt.Sprint(t.Key), fmt.Sprint(t.Queue), dash(strings.Join(deps, ","))}
	})(w, tasks)
}

// taskTemplate is what printRitual shows of a task of a plan template:
// any of its values may be a parameter reference.
type taskTemplate struct {
	Key       any   `json:"key"`
	Queue     any   `json:"queue"`
	DependsOn []any `json:"depends_on"`
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
