// Package integration holds dwr's end-to-end tests: the whole runtime on
// real embedded NATS servers (handlers/embedded) with their data on temp
// dirs, driven through its public subjects as a client would drive it.
// They cover what unit tests cannot: restarts and crashes of the writer and
// the server, recovery of derived streams and views from the log, leader
// changes and a three-node cluster. Slow suites are skipped under -short.
//
// This package may import everything; nothing imports it. Its
// sub-package bench holds the benchmark harnesses that `dwr bench` runs.
package integration
