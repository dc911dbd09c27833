// Package endpoints serves request endpoints on NATS as a NATS micro
// service — discoverable with `nats micro ls|info|stats|ping` through the
// $SRV.PING, $SRV.INFO and $SRV.STATS subjects, in the formats of
// nats.go's micro package — for handlers that answer after they return.
//
// nats.go's micro counts a request, its processing time and its error when
// the endpoint's handler returns. dwr's handlers hand a request on (a
// command to the writer's next batch) and answer it later, so micro would
// count the hand-off, never the commit, and no refusal: here a request is
// counted when its reply leaves — its processing time is the time to the
// reply, and a reply that carries the Nats-Service-Error-Code header is an
// error.
package endpoints

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"
)

// Config names a service, as micro.Config does.
type Config struct {
	Name        string // required: letters, digits, - and _
	Version     string // required: semantic version
	Description string
	// QueueGroup is the queue group of every endpoint; "" for none (each
	// instance gets every request).
	QueueGroup string
	// PendingLimit bounds the requests each endpoint holds received and
	// not yet handed to its handler (its subscription's pending limit: the
	// newest past it are dropped, and the connection's error handler told
	// of a slow consumer); 0 for nats.go's default, 512 Ki. Its bytes stay
	// bounded by nats.go's default, 64 MiB.
	PendingLimit int
}

// Handler answers a request, at once or later from another goroutine.
type Handler func(micro.Request)

// Service is a running service: its endpoints and its control subjects.
type Service struct {
	nc      *nats.Conn
	cfg     Config
	id      string
	started time.Time

	mu        sync.Mutex
	endpoints []*endpoint
	subs      []*nats.Subscription
	stopped   bool
}

type endpoint struct {
	name, subject string
	sub           *nats.Subscription

	mu    sync.Mutex // guards stats
	stats micro.EndpointStats
}

// New starts the service's control subjects on nc.
func New(nc *nats.Conn, cfg Config) (*Service, error) {
	if cfg.Name == "" || cfg.Version == "" {
		return nil, fmt.Errorf("endpoints: %w: a service needs a name and a version", micro.ErrConfigValidation)
	}
	s := &Service{nc: nc, cfg: cfg, id: nuid.Next(), started: time.Now().UTC()}
	for verb, value := range map[micro.Verb]func() any{
		micro.PingVerb:  func() any { return micro.Ping{ServiceIdentity: s.identity(), Type: micro.PingResponseType} },
		micro.InfoVerb:  func() any { return s.Info() },
		micro.StatsVerb: func() any { return s.Stats() },
	} {
		for _, kind := range [][2]string{{"", ""}, {cfg.Name, ""}, {cfg.Name, s.id}} {
			subject, err := micro.ControlSubject(verb, kind[0], kind[1])
			if err != nil {
				_ = s.Stop()
				return nil, err
			}
			sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
				b, err := json.Marshal(value())
				if err == nil {
					_ = m.Respond(b)
				}
			})
			if err != nil {
				_ = s.Stop()
				return nil, fmt.Errorf("endpoints: %s: %w", subject, err)
			}
			s.subs = append(s.subs, sub)
		}
	}
	return s, nil
}

// Add serves h on subject as the endpoint name.
func (s *Service) Add(name, subject string, h Handler) error {
	e := &endpoint{name: name, subject: subject,
		stats: micro.EndpointStats{Name: name, Subject: subject, QueueGroup: s.cfg.QueueGroup}}
	handle := func(m *nats.Msg) { h(&request{msg: m, e: e, start: time.Now()}) }
	var err error
	if s.cfg.QueueGroup != "" {
		e.sub, err = s.nc.QueueSubscribe(subject, s.cfg.QueueGroup, handle)
	} else {
		e.sub, err = s.nc.Subscribe(subject, handle)
	}
	if err != nil {
		return fmt.Errorf("endpoints: %s: %w", subject, err)
	}
	if s.cfg.PendingLimit > 0 {
		if err := e.sub.SetPendingLimits(s.cfg.PendingLimit, nats.DefaultSubPendingBytesLimit); err != nil {
			_ = e.sub.Unsubscribe()
			return fmt.Errorf("endpoints: %s: %w", subject, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		_ = e.sub.Unsubscribe()
		return errors.New("endpoints: the service is stopped")
	}
	s.endpoints = append(s.endpoints, e)
	return nil
}

// Backlog returns how many requests the endpoints hold received and not
// yet handled: those that wait, in the process, for the handlers to take
// them in, and (as nats.go counts) the one each handler has.
func (s *Service) Backlog() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.endpoints {
		if msgs, _, err := e.sub.Pending(); err == nil {
			n += msgs
		}
	}
	return n
}

// Stop drains the endpoints' subscriptions (the requests received are
// still handled) and ends the control subjects'.
func (s *Service) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil
	}
	s.stopped = true
	var errs []error
	for _, e := range s.endpoints {
		if err := e.sub.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			errs = append(errs, err)
		}
	}
	for _, sub := range s.subs {
		if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *Service) identity() micro.ServiceIdentity {
	return micro.ServiceIdentity{Name: s.cfg.Name, ID: s.id, Version: s.cfg.Version, Metadata: map[string]string{}}
}

// Info describes the service and its endpoints ($SRV.INFO).
func (s *Service) Info() micro.Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	info := micro.Info{ServiceIdentity: s.identity(), Type: micro.InfoResponseType, Description: s.cfg.Description,
		Endpoints: make([]micro.EndpointInfo, 0, len(s.endpoints))}
	for _, e := range s.endpoints {
		info.Endpoints = append(info.Endpoints, micro.EndpointInfo{Name: e.name, Subject: e.subject, QueueGroup: s.cfg.QueueGroup})
	}
	return info
}

// Stats are the endpoints' counts so far ($SRV.STATS).
func (s *Service) Stats() micro.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	stats := micro.Stats{ServiceIdentity: s.identity(), Type: micro.StatsResponseType, Started: s.started,
		Endpoints: make([]*micro.EndpointStats, 0, len(s.endpoints))}
	for _, e := range s.endpoints {
		e.mu.Lock()
		st := e.stats
		e.mu.Unlock()
		stats.Endpoints = append(stats.Endpoints, &st)
	}
	return stats
}

// count records a request answered after took; code and desc are the
// service error its reply carries, if any.
func (e *endpoint) count(took time.Duration, code, desc string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stats.NumRequests++
	e.stats.ProcessingTime += took
	e.stats.AverageProcessingTime = e.stats.ProcessingTime / time.Duration(e.stats.NumRequests)
	if code != "" {
		e.stats.NumErrors++
		e.stats.LastError = code + ":" + desc
	}
}

// request is a micro.Request counted when its reply leaves.
type request struct {
	msg   *nats.Msg
	e     *endpoint
	start time.Time
	once  sync.Once
}

func (r *request) Respond(data []byte, opts ...micro.RespondOpt) error {
	m := &nats.Msg{Data: data}
	for _, opt := range opts {
		opt(m)
	}
	err := r.msg.RespondMsg(m)
	r.once.Do(func() {
		code, desc := m.Header.Get(micro.ErrorCodeHeader), m.Header.Get(micro.ErrorHeader)
		if err != nil && code == "" {
			code, desc = "500", "the reply could not be sent: "+err.Error()
		}
		r.e.count(time.Since(r.start), code, desc)
	})
	return err
}

func (r *request) RespondJSON(v any, opts ...micro.RespondOpt) error {
	b, err := json.Marshal(v)
	if err != nil {
		return micro.ErrMarshalResponse
	}
	return r.Respond(b, opts...)
}

func (r *request) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	return r.Respond(data, append(opts, micro.WithHeaders(micro.Headers{
		micro.ErrorHeader: {description}, micro.ErrorCodeHeader: {code}}))...)
}

func (r *request) Data() []byte           { return r.msg.Data }
func (r *request) Headers() micro.Headers { return micro.Headers(r.msg.Header) }
func (r *request) Subject() string        { return r.msg.Subject }
func (r *request) Reply() string          { return r.msg.Reply }
