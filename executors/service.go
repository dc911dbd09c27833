package executors

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/schemas"
)

// errClosed is returned when the NATS connection is closed for good.
var errClosed = errors.New("executors: the NATS connection is closed")

// service is the dwr service as a worker talks to it: its commands and
// queries go through a client.Client, which sends each command with the id
// the worker gives it and again with that id on timeouts, missing
// responders and "unavailable" replies, until the service answers or the
// context ends.
type service struct {
	c   *client.Client
	log *slog.Logger
}

func newService(cfg Config, log *slog.Logger) *service {
	return &service{log: log, c: client.New(cfg.Conn, client.Workspace(cfg.Workspace), client.Prefix(cfg.Prefix),
		client.OnRetry(func(r client.Retry) {
			if r.Tries == 3 || r.Tries%20 == 0 {
				log.Warn("executors: the service did not answer; retrying with the same command id",
					logSubject, r.Subject, logCommandID, r.CommandID, logTries, r.Tries, logErr, r.Err)
			}
		}))}
}

// command sends the named command with a deterministic id (a fresh one when
// id is "") and returns the service's reply, accepted or refused. It returns
// an error only when no reply came: ctx's cause when ctx ended, errClosed
// when the connection is closed, or a request that cannot succeed as sent.
func (s *service) command(ctx context.Context, name string, body any, id string) (*schemas.Reply, error) {
	var opts []client.CallOption
	if id != "" {
		opts = append(opts, client.CommandID(id))
	}
	r, err := s.c.Command(ctx, name, body, opts...)
	return replyOf(ctx, r, err)
}

// query sends the named query, with the same retries as command; it reads
// at least what the worker's accepted commands wrote.
func (s *service) query(ctx context.Context, name string, q schemas.Query, opts ...client.CallOption) (*schemas.Reply, error) {
	r, err := s.c.Query(ctx, name, q, nil, opts...)
	return replyOf(ctx, r, err)
}

// heartbeat tells the service that an attempt is alive (task.heartbeat):
// one try, bounded by timeout. A heartbeat that is lost or refused changes
// nothing the worker does — the next one follows — so it is only logged.
func (s *service) heartbeat(ctx context.Context, b *schemas.Heartbeat, timeout time.Duration) {
	tctx, cancel := context.WithTimeout(ctx, min(timeout, client.DefaultTimeout))
	defer cancel()
	_, err := s.c.Command(tctx, "task.heartbeat", b, client.Once())
	var refused *schemas.Error
	switch {
	case err == nil:
	case errors.As(err, &refused):
		s.log.Debug("executors: heartbeat refused", logTask, b.TaskID, logAttempt, b.Attempt, "code", refused.Code, logErr, refused.Message)
	default:
		s.log.Debug("executors: heartbeat not answered", logTask, b.TaskID, logAttempt, b.Attempt, logErr, err)
	}
}

// replyOf returns the client's answer as the wire's reply that the worker
// branches on: a refusal is a reply, not an error.
func replyOf(ctx context.Context, r *client.Reply, err error) (*schemas.Reply, error) {
	var refused *schemas.Error
	switch {
	case err == nil:
		return &schemas.Reply{OK: true, Result: r.Result, Seq: r.Seq, Next: r.Next}, nil
	case ctx.Err() != nil:
		return nil, context.Cause(ctx)
	case errors.Is(err, nats.ErrConnectionClosed):
		return nil, errClosed
	case errors.As(err, &refused):
		return &schemas.Reply{Error: refused}, nil
	}
	return nil, err // the message is larger than the server allows, the answer is not a dwr reply
}
