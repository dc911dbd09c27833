// Package web is the HTTP face of `dwr serve`: one server, on one listener,
// with the replica's health (GET /healthz, GET /readyz), its Prometheus
// metrics (GET /metrics) and the web console (everything else, at /).
//
// The server only routes and bounds: it owns the listener, the mux and the
// timeouts, and takes what it serves as http.Handlers from the service
// (handlers.Serve builds the Config), so that it never reaches into the
// service's state itself. Whoever reaches the port is not trusted by that
// alone: the health and metrics endpoints show states and counts, never
// payloads, ids or names; the console authenticates its users itself.
//
// It may import the standard library only.
package web
