// Package handlers is dwr's service: the writer (command endpoints deciding
// in batches on the group-committed log, reactions, the writer lease), the
// query endpoints served from the Pebble views by every replica, and the
// derived public event feed.
//
// It may import domain, eventstore, projections and schemas (and the NATS
// and Pebble libraries).
package handlers
