// Package handlers is dwr's service: the writer (command endpoints deciding
// in batches on the group-committed log, reactions, the writer lease), the
// query endpoints served from the Pebble views by every replica, and the
// derived public event feed. Serve runs it as `dwr serve` does (on the
// embedded NATS server behind its trust boundary, StartEmbedded, or on an
// existing one), and Maintenance is `dwr admin`'s access to a stopped
// service's log: Verify and Rebuild.
//
// The service writes and reads the log through the eventstore.Log interface
// (Config.Log): by default the JetStream log on its connection, or any other
// Log that passes eventstore's conformance suite — tests that do not test
// storage give it the in-memory one. The derived streams (work items, event
// feed, advisories), the writer lease and the token key are JetStream's on
// the connection either way.
//
// Its metrics (metrics.go) are Prometheus's, on a registry private to each
// service (Config.Metrics), served by Service.Metrics on dwr serve's GET
// /metrics; their labels never carry ids, member names or payloads.
//
// It may import domain, eventstore, projections and schemas, its own
// sub-packages (access, embedded), the NATS and Pebble libraries, the
// OpenTelemetry API and the Prometheus client.
package handlers
