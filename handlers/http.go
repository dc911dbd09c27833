package handlers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/dwr-run/dwr/handlers/web"
)

// httpFace is Serve's HTTP server (--http): bound before anything else is
// opened, so that a taken address is found at once, and answering for the
// service from the moment it exists (until then /readyz says it is
// starting).
type httpFace struct {
	srv     *web.Server
	svc     atomic.Pointer[Service]
	console atomic.Pointer[http.Handler]
	metrics atomic.Pointer[http.Handler]
	done    chan struct{}
}

// startHTTP binds and serves cfg.HTTP, or returns nil when it is off. An
// address the operator gave that cannot be bound is an error naming the
// flag; the default address taken (another replica on this machine) is a
// warning, and Serve goes on without HTTP.
func startHTTP(cfg *ServeConfig, logger *slog.Logger) (*httpFace, error) {
	if cfg.HTTP == "" {
		return nil, nil
	}
	f := &httpFace{done: make(chan struct{})}
	wcfg := web.Config{Addr: cfg.HTTP, Flag: "--http", Logger: logger,
		Healthz: http.HandlerFunc(f.healthz), Readyz: http.HandlerFunc(f.readyz)}
	if cfg.Console != nil {
		wcfg.Console = attached(&f.console)
	}
	if cfg.Service.Metrics != nil {
		wcfg.Metrics = attached(&f.metrics)
	}
	srv, err := web.New(wcfg)
	switch {
	case err != nil && cfg.HTTPIsDefault && errors.Is(err, web.ErrBind):
		logger.Warn("dwr: no console and metrics: the default --http address is taken (another dwr serve on this machine?); "+
			"give another with --http HOST:PORT, or none with --http \"\"", "err", err)
		return nil, nil
	case err != nil:
		return nil, classed{ErrInvalidConfig, err}
	}
	f.srv = srv
	go func() {
		defer close(f.done)
		if err := srv.Serve(); err != nil {
			logger.Error("dwr: the HTTP server stopped", "err", err)
		}
	}()
	logger.Info("dwr: console and metrics on " + srv.URL())
	return f, nil
}

// attach makes the face answer for svc; console is the console's handler
// for it (nil without one).
func (f *httpFace) attach(svc *Service, console http.Handler) {
	if f == nil {
		return
	}
	if console != nil {
		f.console.Store(&console)
	}
	if h := svc.Metrics(); h != nil {
		f.metrics.Store(&h)
	}
	f.svc.Store(svc)
}

// stop shuts the server down, giving requests in flight a moment; once it
// returns, no request is served. Stopping it again does nothing.
func (f *httpFace) stop() {
	if f == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = f.srv.Shutdown(ctx)
	<-f.done
}

// starting is the Health of a replica whose service is not made yet.
var starting = Health{Reason: "starting: opening the views and connecting to NATS"}

func (f *httpFace) healthz(w http.ResponseWriter, r *http.Request) {
	if svc := f.svc.Load(); svc != nil {
		svc.LiveHandler().ServeHTTP(w, r)
		return
	}
	writeHealth(w, http.StatusOK, starting)
}

func (f *httpFace) readyz(w http.ResponseWriter, r *http.Request) {
	if svc := f.svc.Load(); svc != nil {
		svc.ReadyHandler().ServeHTTP(w, r)
		return
	}
	writeHealth(w, http.StatusServiceUnavailable, starting)
}

// attached returns a handler that passes each request to the handler h
// holds once attach has stored it, and until then answers 503 with
// Retry-After, saying dwr is starting.
func attached(h *atomic.Pointer[http.Handler]) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if next := h.Load(); next != nil {
			(*next).ServeHTTP(w, r)
			return
		}
		w.Header().Set("Retry-After", "1")
		http.Error(w, fmt.Sprintf("dwr is starting: %s", starting.Reason), http.StatusServiceUnavailable)
	})
}
