// Package projections holds dwr's views: current state derived from the log
// and kept in Pebble — workspaces, goals with their plan graph and counts per
// state, tasks by id, by workspace and state and by goal, each aggregate's
// history, the chain tips that verify it, and the command-id index that lets
// a retried command return its first outcome.
//
// A view's checkpoint (the last log sequence applied) is written in the same
// Pebble batch as its rows, so a crash never leaves rows and checkpoint apart.
// Views are caches: Rebuild throws them away and replays the log, and a
// rebuilt view equals the live one byte for byte.
//
// The writer decides commands against a Store (it implements domain.World).
//
// It may import domain and eventstore (and pebble).
package projections
