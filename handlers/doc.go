// Package handlers is dwr's service: the writer (command endpoints deciding
// in batches on the group-committed log, reactions, the writer lease), the
// query endpoints served from the Pebble views by every replica, and the
// derived public event feed. Serve runs it as `dwr serve` does (on the
// embedded NATS server behind its trust boundary, StartEmbedded, or on an
// existing one), and Maintenance is `dwr admin`'s access to a stopped
// service's log: Verify and Rebuild.
//
// It may import domain, eventstore, projections and schemas, its own
// sub-packages (access, embedded), and the NATS and Pebble libraries.
package handlers
