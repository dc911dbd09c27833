// Package domain holds dwr's aggregates — Workspace, Goal (with its Plan),
// Task (with its attempts) and Ritual (versioned templates of a goal and its
// plan) — their commands, events and state machines.
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
// It may import the standard library, github.com/oklog/ulid/v2 and
// github.com/dwr-run/dwr/schemas (a leaf of plain types) only.
package domain
