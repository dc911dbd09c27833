// Package projections holds dwr's views: current state derived from the log
// and kept in Pebble — workspaces, goals with their plan graph and counts per
// state, tasks by id, by workspace and state and by goal, each aggregate's
// history, the chain tips that verify it, and the command-id index that lets
// a retried command return its first outcome.
//
// A view's checkpoint (the last log sequence applied, with that record's
// position and hash in the log's chain: its LogTip) is written in the same
// Pebble batch as its rows, so a crash never leaves rows and checkpoint apart.
// The views apply verified records only: CatchUp, Follow and Rebuild verify
// the log's chain and MACs from the checkpoint on, and CatchUp first checks
// that the log still holds the checkpoint's record.
// Views are caches: Rebuild throws them away and replays the log, and a
// rebuilt view equals the live one byte for byte. Views that cannot be opened
// or read (ErrDamaged) are moved aside and rebuilt (Options.OnDamaged, Reset);
// Pebble's corruption reports and panics are turned into errors.
//
// The writer decides commands against a Store (it implements domain.World).
//
// It may import domain and eventstore (and pebble).
package projections
