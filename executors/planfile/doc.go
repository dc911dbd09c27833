// Package planfile reads plan files: a goal's plan written by hand as YAML
// or JSON — a list of tasks, or an object with a "tasks" list — into the
// task specs that client.SubmitPlan sends. It is what `dwr plan submit -f`
// reads, for any caller that keeps its plans in files.
//
// A plan file may say when a task starts or must end relative to the
// moment it is read (start_after: 4s, deadline_after: 48h); Read resolves
// them into the start_at and deadline the wire carries. Anything else in a
// task must be a field of schemas.TaskSpec: an unknown field is an error,
// not something silently dropped.
//
// A ritual file (ReadRitual, what `dwr ritual define -f` reads) is the
// body of a ritual.define written the same way: its name, description,
// parameters (a JSON Schema) and the goal and tasks templates, whose
// "${name}" strings the service fills in on each run.
//
// A schedule's file (ReadSchedule, what `dwr schedule create -f` reads) is
// {goal: {...}, tasks: [...]}: the goal each slot starts, as goal.create
// takes it without goal_id and tasks, and its first plan.
//
// Options are one task's settings as plain values, the way a command line
// gives them (`dwr task create`'s flags): Options.TaskSpec resolves them
// into the spec, and its *OptionError names the options it refuses so that
// the caller can say them in its own words.
//
// It may import schemas, the YAML parser (go.yaml.in/yaml/v3) and the
// standard library.
package planfile
