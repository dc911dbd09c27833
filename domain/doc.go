// Package domain holds dwr's aggregates — Workspace, Goal (with its Plan) and
// Task (with its attempts) — their commands, events and state machines.
//
// Everything here is pure: state is changed only by applying events, and a
// command is decided against state and a time passed in by the caller. The
// package never reads the clock or randomness and never does I/O, so a history
// replays to the same state on every machine.
//
// It may import the standard library and github.com/oklog/ulid/v2 only.
package domain
