// Package executors is the executor SDK: the client side of the work an
// executor does for dwr (claiming work items, keeping the lease, recording
// checkpoints and reporting results), and the built-in executors.
//
// An executor is written against the wire contract only. This package may
// import the standard library, schemas (the JSON Schemas of work items and
// results) and the NATS client libraries; never domain, eventstore,
// projections or handlers, so that an executor in any language can rely on
// exactly what a Go executor relies on.
package executors
