package handlers

import (
	"encoding/json"
	"net/http"

	"github.com/nats-io/nats.go"
)

// Health is what a replica says of itself: whether it serves, and if not,
// why.
type Health struct {
	// Ready: the replica serves queries (and commands, as the writer): its
	// views are caught up, it is connected to NATS and reaches JetStream.
	Ready bool `json:"ready"`
	// Reason says why it is not ready; empty when it is.
	Reason string `json:"reason,omitempty"`
	// NATS is the connection's state ("CONNECTED", "RECONNECTING", ...) and
	// Server the URL of the node it is connected to.
	NATS   string `json:"nats"`
	Server string `json:"server,omitempty"`
	// Writer: this replica holds the writer lease and serves commands.
	Writer bool `json:"writer"`
	// ViewsSeq is the log sequence the views stand at.
	ViewsSeq uint64 `json:"views_seq"`
}

// Health returns the replica's health now.
func (s *Service) Health() Health {
	h := Health{NATS: s.nc.Status().String(), Writer: s.holdsLease(), ViewsSeq: s.store.Checkpoint()}
	if s.nc.IsConnected() {
		h.Server = s.nc.ConnectedUrlRedacted()
	}
	select {
	case <-s.ready:
		h.Ready = true
	default:
		h.Reason = "starting: the views are catching up with the log"
	}
	switch {
	case !h.Ready:
	case s.nc.Status() != nats.CONNECTED:
		h.Ready, h.Reason = false, "no NATS node reachable (reconnecting)"
	case s.jsUnreachable.Load():
		h.Ready, h.Reason = false, "JetStream unreachable: the writer lease cannot be read"
	}
	return h
}

// HealthHandler serves the replica's health over HTTP: GET /readyz answers
// 200 when it is ready and 503 when not, GET /livez 200 while the process
// runs; both with the Health as JSON. It is what --health-listen serves;
// the HTTP server of Serve (--http) serves the same handlers as /readyz and
// /healthz.
func (s *Service) HealthHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /readyz", s.ReadyHandler())
	mux.Handle("GET /livez", s.LiveHandler())
	return mux
}

// ReadyHandler answers 200 when the replica is ready and 503 when not, with
// its Health as JSON (the reason in it).
func (s *Service) ReadyHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h := s.Health()
		code := http.StatusOK
		if !h.Ready {
			code = http.StatusServiceUnavailable
		}
		writeHealth(w, code, h)
	})
}

// LiveHandler answers 200 while the process runs, with the replica's Health
// as JSON: a replica that is not ready is still alive.
func (s *Service) LiveHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { writeHealth(w, http.StatusOK, s.Health()) })
}

func writeHealth(w http.ResponseWriter, code int, h Health) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(h)
}
