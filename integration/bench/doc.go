// Package bench holds dwr's benchmark harnesses, which `dwr bench` runs:
// Run measures the durable write path (the disk's fsync alone, one
// JetStream message per event, and dwr's group commit through the whole
// service) and RunChain runs chains of three sequential tasks through the
// service and in-process SDK workers. Each run starts the service as `dwr
// serve` runs it (closed, or open) on a fresh directory, and returns a
// report that Print and PrintChain print for people and that marshals to
// JSON for machines.
//
// Like the rest of integration, it may import everything; only cmd/dwr
// imports it.
package bench
