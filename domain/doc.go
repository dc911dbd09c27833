// Package domain holds dwr's aggregates — Workspace, Goal (with its Plan),
// Task (with its attempts), Ritual (versioned templates of a goal and its
// plan) and Schedule (a goal and its plan started at each slot of a cron
// spec or a period) — their commands, events and state machines.
//
// Everything here is pure: state is changed only by applying events, and a
// command is decided against state and a time passed in by the caller. The
// package never reads the clock or randomness and never does I/O, so a history
// replays to the same state on every machine.
//
// The wire data it decides on — command bodies, the states of goals, tasks,
// attempts and approvals, specs, replies — is defined once in schemas, the
// wire contract's plain Go types, and named here by aliases (Task =
// schemas.Task): what the domain adds is behaviour, never a second struct.
//
// It may import the standard library, github.com/oklog/ulid/v2,
// github.com/robfig/cron/v3 (a schedule's slots: pure computation on the
// times it is given; zones come from time.LoadLocation) and
// github.com/dwr-run/dwr/schemas (a leaf of plain types) only.
package domain
