// Package embedded runs a NATS server with JetStream inside the dwr process.
//
// It is what `dwr serve` uses when no external NATS URL is given, and what the
// tests and integration tests start instead of a mocked broker: a real
// nats-server, configured for durability, with its files under one data
// directory.
//
// Start builds the server options from a small Config, starts the server,
// waits until it accepts connections and then checks, on the running server,
// that JetStream fsyncs every write before acknowledging it (SyncAlways). The
// nats-server default is to fsync every two minutes, which loses acknowledged
// writes on a power failure; dwr refuses to run that way. Clients in the same
// process connect through Server.Connect without a TCP port; Config.Listen
// opens one for clients in other processes, and Config.Cluster joins the
// server to a cluster of peers over routes.
//
// SyncAlways is a server-wide default that a stream can relax: a stream with
// PersistMode async never fsyncs before acknowledging (dwr uses that for its
// derived streams only), and a replicated stream (R>1) syncs its store when
// it snapshots, relying on its Raft log, whose writes are fsynced.
//
// The server's own log lines are routed to a log/slog logger at quiet levels
// (see Config.Logger).
//
// This package may import the standard library, nats.go and nats-server only.
package embedded
