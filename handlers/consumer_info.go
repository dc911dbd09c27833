package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/handlers/endpoints"
)

// consumerInfoFresh is how long a work consumer's info, read from
// JetStream, answers the executors that ask for it: its settings change only
// with queue.configure (after which the SDKs use the command's reply, not
// the info) and its counts are a moment's anyway.
const consumerInfoFresh = time.Second

// consumerInfoTimeout bounds one read of a consumer's info from JetStream.
const consumerInfoTimeout = 5 * time.Second

// jsConsumerInfoType is the type of JetStream's reply to a consumer info
// request, which the refusals the service answers in its place carry too.
const jsConsumerInfoType = "io.nats.jetstream.api.v1.consumer_info_response"

// consumerInfos answers the client account's consumer info requests
// (access.ConsumerInfoSubject) in JetStream's place: JetStream's reply for
// the consumer, read at most once at a time per consumer and kept for
// consumerInfoFresh. An error JetStream answers (the consumer not found) is
// passed on and not kept, so that a consumer made a moment later is found.
type consumerInfos struct {
	nc     *nats.Conn
	prefix string           // JetStream's API on nc
	now    func() time.Time // the clock: time.Now but in tests
	mu     sync.Mutex
	m      map[string]*consumerInfo
}

// consumerInfo is one consumer's reply: being read until done is closed.
type consumerInfo struct {
	done chan struct{}
	body []byte
	at   time.Time
	kept bool // body is JetStream's info, not an error
}

func newConsumerInfos(nc *nats.Conn) *consumerInfos {
	return &consumerInfos{nc: nc, prefix: "$JS.API.CONSUMER.INFO.", now: time.Now, m: map[string]*consumerInfo{}}
}

// get returns JetStream's reply to an info request for consumer of stream.
func (c *consumerInfos) get(ctx context.Context, stream, consumer string) []byte {
	key := stream + "." + consumer
	c.mu.Lock()
	e, ok := c.m[key]
	if ok {
		select {
		case <-e.done:
			if !e.kept || c.now().Sub(e.at) >= consumerInfoFresh {
				ok = false
			}
		default: // being read: wait for it
		}
	}
	if !ok {
		e = &consumerInfo{done: make(chan struct{})}
		c.m[key] = e
		c.mu.Unlock()
		e.body, e.kept = c.read(ctx, key)
		e.at = c.now()
		close(e.done)
		if !e.kept {
			c.forget(stream, consumer, e)
		}
		return e.body
	}
	c.mu.Unlock()
	select {
	case <-e.done:
		return e.body
	case <-ctx.Done():
		return consumerInfoError(503, "the consumer's info was not read in time: retry")
	}
}

// read asks JetStream for the info of key (<stream>.<consumer>); kept
// reports whether the reply is the info, not an error.
func (c *consumerInfos) read(ctx context.Context, key string) (body []byte, kept bool) {
	ctx, cancel := context.WithTimeout(ctx, consumerInfoTimeout)
	defer cancel()
	m, err := c.nc.RequestWithContext(ctx, c.prefix+key, nil)
	if err != nil {
		return consumerInfoError(503, "JetStream did not answer for the consumer's info: retry"), false
	}
	var r struct {
		Error *json.RawMessage `json:"error"`
	}
	if json.Unmarshal(m.Data, &r) != nil || r.Error != nil {
		return m.Data, false
	}
	return m.Data, true
}

// forget drops consumer's reply e, unless another replaced it meanwhile;
// with e nil, whichever it holds: the service changed the consumer.
func (c *consumerInfos) forget(stream, consumer string, e *consumerInfo) {
	key := stream + "." + consumer
	c.mu.Lock()
	defer c.mu.Unlock()
	if now, ok := c.m[key]; ok && (e == nil || now == e) {
		delete(c.m, key)
	}
}

// consumerInfoError is a JetStream API error reply to an info request.
func consumerInfoError(code int, description string) []byte {
	b, _ := json.Marshal(struct {
		Type  string `json:"type"`
		Error struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}{Type: jsConsumerInfoType, Error: struct {
		Code        int    `json:"code"`
		Description string `json:"description"`
	}{code, description}})
	return b
}

// startConsumerInfo serves the client account's consumer info requests on
// a NATS connection of their own: a flood of them, tiny as they are, then
// fills no buffer of the queries' connection (the server cuts a connection
// whose backlog passes max_pending). stop stops the endpoint and closes the
// connection.
func (s *Service) startConsumerInfo() (stop func(), err error) {
	nc, err := s.connectionOf("consumer info")
	if err != nil {
		return nil, err
	}
	s.consumerInfos.Store(newConsumerInfos(nc))
	svc, err := endpoints.New(nc, endpoints.Config{Name: "dwr-jsapi", Version: s.cfg.Version, QueueGroup: micro.DefaultQueueGroup,
		PendingLimit: endpointPending(s.cfg), Description: "dwr: the work consumers' info, answered for the clients' account in JetStream's place"})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("handlers: the consumer info service: %w", err)
	}
	s.consumerInfoEP.Store(svc)
	stop = func() { s.consumerInfoEP.Store(nil); _ = svc.Stop(); nc.Close() }
	if err := svc.Add("consumer_info", access.ConsumerInfoSubject(s.cfg.Prefix), s.serveConsumerInfo); err != nil {
		stop()
		return nil, fmt.Errorf("handlers: the consumer info endpoint: %w", err)
	}
	return stop, nil
}

// serveConsumerInfo answers a consumer info request from the client
// account: admitted under its caller's limits as a query is (a refusal is a
// JetStream error reply, 503, naming the limit), then JetStream's reply for
// the consumer the subject names. NATS permissions let an executor ask only
// for its own queues' consumers.
func (s *Service) serveConsumerInfo(req micro.Request) {
	stream, consumer, ok := consumerOfInfoSubject(req.Subject(), s.cfg.Prefix)
	if !ok {
		_ = req.Respond(consumerInfoError(400, fmt.Sprintf("%s is not a work consumer's info subject", req.Subject())))
		return
	}
	s.admit(req, true, s.workspaceOfConsumer(consumer), func(r *cannedRefusal) { _ = req.Respond(r.jsAPI) }, func(who sender) ([]byte, micro.Headers) {
		if !who.known {
			return consumerInfoError(403, "a request without the identity the NATS server stamps (it did not come through the client account's import) is refused"), nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), consumerInfoTimeout)
		defer cancel()
		return s.consumerInfos.Load().get(ctx, stream, consumer), nil
	})
}

// workspaceOfConsumer returns the workspace whose queue's work consumer is
// named consumer (<prefix>-<workspace>-<queue>), for its share of the
// requests in flight: the one workspace whose name, followed by '-', begins
// what follows the prefix (no workspace's name extends another's with '-':
// domain.checkNameApart), or consumer itself when none does (its info is
// then not found).
func (s *Service) workspaceOfConsumer(consumer string) string {
	rest, ok := strings.CutPrefix(consumer, s.cfg.Prefix+"-")
	if !ok {
		return consumer
	}
	for i := range len(rest) {
		if rest[i] != '-' {
			continue
		}
		if w, err := s.store.Workspace(rest[:i]); err == nil && w != nil {
			return rest[:i]
		}
	}
	return consumer
}

// consumerOfInfoSubject parses <prefix>.jsapi.CONSUMER.INFO.<stream>.<consumer>.
func consumerOfInfoSubject(subject, prefix string) (stream, consumer string, ok bool) {
	rest, ok := strings.CutPrefix(subject, strings.TrimSuffix(access.ConsumerInfoSubject(prefix), "*"))
	if !ok || rest == "" || strings.ContainsAny(rest, ".*>") {
		return "", "", false
	}
	return access.WorkStream(prefix), rest, true
}
