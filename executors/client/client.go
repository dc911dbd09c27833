package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	fastjson "github.com/go-json-experiment/json/v1"

	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
	"go.opentelemetry.io/otel/propagation"

	"github.com/dwr-run/dwr/schemas"
)

// Defaults of the options.
const (
	DefaultWorkspace = "default"
	DefaultPrefix    = "dwr"
	// DefaultTimeout bounds one try of a request.
	DefaultTimeout = 5 * time.Second
)

// Retry pacing of a request the service could not take (a timeout, no
// responder, an "unavailable" reply): backing off from retryFirst to
// retryMax, unless the reply names when to retry (retry_after).
const (
	retryFirst = 100 * time.Millisecond
	retryMax   = 2 * time.Second
)

// Client sends commands and queries to a dwr service for a caller: a
// service that starts work, a tool that reads it. It is safe for concurrent
// use. Commands carry a fresh command id unless one is given, and are sent
// again with the same id while the service is unavailable, so a retry never
// does the work twice. Queries see the caller's own writes: each carries the
// highest log sequence this Client's commands were answered with
// (Dwr-Min-Seq), and the service answers from views at least that fresh.
type Client struct {
	nc      *nats.Conn
	own     bool // Close closes nc
	ws      string
	prefix  string
	timeout time.Duration
	retry   bool
	onRetry func(Retry)
	seq     *atomic.Uint64 // shared by In's copies
	denied  <-chan error   // the server's permission violations, when this Client dialled
}

type options struct {
	ws, prefix string
	timeout    time.Duration
	noRetry    bool
	onRetry    func(Retry)
	name       string
	creds      string
	tlsCA      string
	tlsCert    string
	tlsKey     string
	nats       []nats.Option
}

// Option configures a Client.
type Option func(*options)

// Workspace is the workspace the Client addresses. Default "default".
func Workspace(ws string) Option { return func(o *options) { o.ws = ws } }

// Prefix is the first token of every subject. Default "dwr".
func Prefix(p string) Option { return func(o *options) { o.prefix = p } }

// Timeout bounds one try of a request. Default DefaultTimeout.
func Timeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// NoRetry makes a request try once: a timeout, a missing responder or an
// "unavailable" reply is returned at once (as an error that matches
// ErrUnavailable) instead of being tried again until the context ends.
func NoRetry() Option { return func(o *options) { o.noRetry = true } }

// Retry is a request the service could not take, about to be sent again:
// what an OnRetry function is told.
type Retry struct {
	// Subject is the request's subject.
	Subject string
	// CommandID is the command's id, which the next try sends again ("" for
	// a query).
	CommandID string
	// Tries is how many tries were made so far: 1 after the first.
	Tries int
	// Err is why the last try failed: a *RequestError, or the service's
	// "unavailable" *schemas.Error. errors.Is(Err, ErrUnavailable) holds.
	Err error
	// Wait is how long the Client pauses before the next try.
	Wait time.Duration
}

// OnRetry has fn called each time a request is to be sent again, after a
// try the service could not take and before the pause that follows it: a
// caller that retries for long logs it there. fn runs on the goroutine of
// the request and should return quickly. Default: nothing is called.
func OnRetry(fn func(Retry)) Option { return func(o *options) { o.onRetry = fn } }

// Name names the connection Connect opens (shown by the NATS server).
func Name(name string) Option { return func(o *options) { o.name = name } }

// Credentials connects with a dwr credential file: what `dwr users add
// --out FILE` writes, or the admin.creds `dwr serve` creates. Connect only.
func Credentials(file string) Option { return func(o *options) { o.creds = file } }

// TLS connects over TLS, trusting the certificates of caFile (PEM), and, when
// certFile and keyFile are given, presenting that client certificate (for
// a server that verifies clients). Empty arguments are left out. Connect
// only.
func TLS(caFile, certFile, keyFile string) Option {
	return func(o *options) { o.tlsCA, o.tlsCert, o.tlsKey = caFile, certFile, keyFile }
}

// Lasting makes the connection Connect opens outlive restarts of the
// service and of NATS, as a worker must: it is made even when no server
// answers yet (and tried until one does), and it reconnects every
// LastingReconnectWait without end, also after the server refused the
// credential (a member removed and added again gets in once the service has
// applied the change; a restarted dwr serve keeps its port closed until it
// has read its members). Each disconnection and connection is logged to log, its
// messages prefixed with name (as "dwr worker"). Connect only.
func Lasting(log *slog.Logger, name string) Option {
	return func(o *options) {
		o.nats = append(o.nats, nats.MaxReconnects(-1), nats.IgnoreAuthErrorAbort(),
			nats.ReconnectWait(LastingReconnectWait), nats.RetryOnFailedConnect(true),
			nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
				if err == nil || nc.IsClosed() {
					log.Info(name + ": disconnected from NATS") // a stop, not a loss
					return
				}
				log.Warn(name+": disconnected from NATS; reconnecting", "err", err)
			}),
			nats.ReconnectHandler(func(nc *nats.Conn) { log.Info(name+": reconnected", "url", nc.ConnectedUrl()) }),
			nats.ConnectHandler(func(nc *nats.Conn) { log.Info(name+": connected", "url", nc.ConnectedUrl()) }))
	}
}

// LastingReconnectWait is the pause between two tries of a Lasting
// connection.
const LastingReconnectWait = 250 * time.Millisecond

// NATSOptions adds options to the connection Connect opens.
func NATSOptions(opts ...nats.Option) Option {
	return func(o *options) { o.nats = append(o.nats, opts...) }
}

func apply(opts []Option) options {
	o := options{ws: DefaultWorkspace, prefix: DefaultPrefix, timeout: DefaultTimeout, name: "dwr-client"}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Connect connects to the NATS server at url (a comma-separated list for a
// cluster) and returns a Client that owns the connection: Close closes it.
// The connection reconnects for ever, so a Client rides out restarts of
// the server. It returns an *OptionError, before dialling, when a
// credential or TLS file cannot be used, and otherwise NATS's error wrapped
// (errors.Is(err, nats.ErrAuthorization) when the server refused the
// credential).
func Connect(url string, opts ...Option) (*Client, error) {
	o := apply(opts)
	nopts, err := o.connectOptions()
	if err != nil {
		return nil, err
	}
	denied := make(chan error, 8)
	nopts = append(nopts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			select {
			case denied <- err:
			default:
			}
		}
	}))
	nc, err := nats.Connect(url, append(nopts, o.nats...)...)
	if err != nil {
		return nil, fmt.Errorf("client: connect to %s: %w", url, err)
	}
	c := newClient(nc, o)
	c.own, c.denied = true, denied
	return c, nil
}

func (o *options) connectOptions() ([]nats.Option, error) {
	// Pings every PingInterval, and a node that misses MaxPingsOut of them
	// is left for another: a client (a worker) on a frozen node of a
	// cluster would otherwise stall for NATS's default two minutes.
	out := []nats.Option{nats.Name(o.name), nats.MaxReconnects(-1), nats.PingInterval(PingInterval), nats.MaxPingsOutstanding(MaxPingsOut)}
	if o.creds != "" {
		cred, err := CredentialOptions(o.creds)
		if err != nil {
			return nil, &OptionError{Option: OptionCredentials, File: o.creds, Err: err}
		}
		out = append(out, cred...)
	}
	if o.tlsCA == "" && o.tlsCert == "" && o.tlsKey == "" {
		return out, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.tlsCA != "" {
		pem, err := os.ReadFile(o.tlsCA)
		if err != nil {
			return nil, &OptionError{Option: OptionTLS, File: o.tlsCA, Err: fmt.Errorf("client: TLS CA: %w", err)}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &OptionError{Option: OptionTLS, File: o.tlsCA, Err: fmt.Errorf("client: TLS CA %s holds no PEM certificate", o.tlsCA)}
		}
		tc.RootCAs = pool
	}
	if o.tlsCert != "" || o.tlsKey != "" {
		cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
		if err != nil {
			return nil, &OptionError{Option: OptionTLS, File: o.tlsCert, Err: fmt.Errorf("client: TLS client certificate: %w", err)}
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return append(out, nats.Secure(tc)), nil
}

// New returns a Client on a connection the caller opened and keeps: Close
// leaves it open. Connect-only options (Credentials, TLS, Name,
// NATSOptions) are ignored. A request the server does not let the
// connection send fails as ErrForbidden once its timeout has passed (a
// Client that dialled with Connect learns it at once), and is not retried.
func New(nc *nats.Conn, opts ...Option) *Client { return newClient(nc, apply(opts)) }

func newClient(nc *nats.Conn, o options) *Client {
	return &Client{nc: nc, ws: o.ws, prefix: o.prefix, timeout: o.timeout, retry: !o.noRetry, onRetry: o.onRetry,
		seq: new(atomic.Uint64)}
}

// Close closes the connection when Connect opened it.
func (c *Client) Close() {
	if c.own {
		c.nc.Close()
	}
}

// Conn returns the Client's NATS connection.
func (c *Client) Conn() *nats.Conn { return c.nc }

// Workspace returns the workspace the Client addresses.
func (c *Client) Workspace() string { return c.ws }

// In returns a Client that addresses workspace ws over the same connection,
// sharing this one's read-your-writes sequence. Closing it closes nothing.
func (c *Client) In(ws string) *Client {
	cp := *c
	cp.ws, cp.own = ws, false
	return &cp
}

// Seq returns the highest log sequence this Client's commands were answered
// with: the point its queries read from.
func (c *Client) Seq() uint64 { return c.seq.Load() }

// observe raises the read-your-writes sequence to seq.
func (c *Client) observe(seq uint64) {
	for {
		cur := c.seq.Load()
		if seq <= cur || c.seq.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// CallOption configures one command or query.
type CallOption func(*call)

type call struct {
	// timeout, when set, replaces the Client's Timeout for each try.
	timeout         time.Duration
	id, correlation string
	minSeq          uint64
	once            bool
	limit           int     // list queries: items a page
	after           string  // list queries: the cursor to start after
	next            *string // list queries: one page only, its next cursor here
	newestFirst     bool    // list queries: the newest first (goal.list, task.list)
}

func callOf(opts []CallOption) call {
	var k call
	for _, f := range opts {
		f(&k)
	}
	return k
}

// CommandID sets a command's id. A retry with the same id (by the same
// identity) is answered with the first outcome instead of being done again.
// Default: a fresh ULID per call.
func CommandID(id string) CallOption { return func(c *call) { c.id = id } }

// CorrelationID groups the events of this command with others of one
// original request.
func CorrelationID(id string) CallOption { return func(c *call) { c.correlation = id } }

// Once makes this one call try once, as NoRetry does for every call of a
// Client: a timeout, a missing responder or an "unavailable" reply is
// returned at once (as an error that matches ErrUnavailable). For a request
// that the caller sends again anyway, such as a periodic heartbeat.
func Once() CallOption { return func(c *call) { c.once = true } }

// MinSeq asks a query to be answered from views that have applied at least
// log sequence seq (besides this Client's own writes, which it always
// waits for).
func MinSeq(seq uint64) CallOption { return func(c *call) { c.minSeq = seq } }

// Limit bounds the items of each page a list query reads: 0 means the
// service's default (100), at most 10,000. A larger page is one request
// fewer, and a larger reply.
func Limit(n int) CallOption { return func(c *call) { c.limit = n } }

// After starts a list query after cursor: the next cursor an earlier page
// gave (OnePage), to go on from there.
func After(cursor string) CallOption { return func(c *call) { c.after = cursor } }

// NewestFirst makes a list query that can list the newest items first:
// goal.list (Goals, GoalsIn), and task.list (Tasks) with a state or a goal;
// the service refuses it for the others.
func NewestFirst() CallOption { return func(c *call) { c.newestFirst = true } }

// OnePage makes a list query read one page only, and sets *next to the
// cursor of the page that follows it ("" when it was the last): a caller
// that shows a page at a time goes on with After(*next).
func OnePage(next *string) CallOption { return func(c *call) { c.next = next } }

// Reply is an accepted command's or query's answer.
type Reply struct {
	// Result is the reply's result, as the service encoded it.
	Result json.RawMessage
	// Seq is the log sequence the reply reflects.
	Seq uint64
	// Next, for a list query, is the cursor of the next page ("" on the
	// last one).
	Next string
}

// Command sends command name (the last tokens of dwr.cmd.<workspace>.<name>)
// with body (encoded to JSON unless it is []byte or json.RawMessage) and
// returns the accepted reply, or the service's refusal as a *schemas.Error
// (errors.Is(err, ErrConflict), …).
func (c *Client) Command(ctx context.Context, name string, body any, opts ...CallOption) (*Reply, error) {
	k := callOf(opts)
	if k.id == "" {
		k.id = ulid.Make().String()
	}
	m := nats.NewMsg(c.prefix + ".cmd." + c.ws + "." + name)
	m.Header.Set(schemas.HeaderCommandID, k.id)
	if k.correlation != "" {
		m.Header.Set(schemas.HeaderCorrelationID, k.correlation)
	}
	r, err := c.request(ctx, m, body, k)
	if err != nil {
		return nil, err
	}
	c.observe(r.Seq)
	return r, nil
}

// Query sends query name (the last tokens of dwr.q.<workspace>.<name>) and
// decodes its result into out (unless out is nil). It returns the reply,
// whose Next continues a list.
func (c *Client) Query(ctx context.Context, name string, q schemas.Query, out any, opts ...CallOption) (*Reply, error) {
	return c.query(ctx, name, q, out, callOf(opts))
}

// query sends body on the query subject name and decodes the result into
// out (unless out is nil).
func (c *Client) query(ctx context.Context, name string, body, out any, k call) (*Reply, error) {
	m := nats.NewMsg(c.prefix + ".q." + c.ws + "." + name)
	if seq := max(k.minSeq, c.seq.Load()); seq > 0 {
		m.Header.Set(schemas.HeaderMinSeq, strconv.FormatUint(seq, 10))
	}
	r, err := c.request(ctx, m, body, k)
	if err != nil {
		return nil, err
	}
	if out != nil {
		if err := fastjson.Unmarshal(r.Result, out); err != nil {
			return nil, fmt.Errorf("client: %s: the result does not decode: %w", name, err)
		}
	}
	return r, nil
}

// Request sends m once as it is (its subject, headers and data: no command
// id is added, nothing is retried) and returns the service's reply, accepted
// or refused: for tests and tools that speak the wire itself. A reply's Seq
// counts as this Client's own write, which its later queries read. It
// returns an error only when no dwr reply came: a *RequestError, or ctx's
// cause when ctx ended first.
func (c *Client) Request(ctx context.Context, m *nats.Msg) (*schemas.Reply, error) {
	r, err := c.roundTrip(ctx, m, 0)
	if err != nil {
		return nil, err
	}
	c.observe(r.Seq)
	return r, nil
}

// request sends m with body and returns the accepted reply. It tries again
// (unless NoRetry or Once) while the service cannot take it, until ctx ends.
func (c *Client) request(ctx context.Context, m *nats.Msg, body any, k call) (*Reply, error) {
	switch b := body.(type) {
	case nil:
	case []byte:
		m.Data = b
	case json.RawMessage:
		m.Data = b
	default:
		data, err := fastjson.Marshal(b)
		if err != nil {
			return nil, fmt.Errorf("client: encode %s: %w", m.Subject, err)
		}
		m.Data = data
	}
	// The trace ctx belongs to, if any, goes with the request (W3C trace
	// context): the service's span for it is a child of the caller's.
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	traceContext.Inject(ctx, schemas.TraceCarrier(m.Header))
	var r *Reply
	err := c.retrying(ctx, m.Subject, k, func() (err error) {
		r, err = c.try(ctx, m, k.timeout)
		return err
	})
	return r, err
}

// retrying runs try (a request to subject) and runs it again (unless
// NoRetry or Once) while it fails with ErrUnavailable, backing off, until
// ctx ends.
func (c *Client) retrying(ctx context.Context, subject string, k call, try func() error) error {
	wait := retryFirst
	var last error // the last try's error, when the service could not take it
	gaveUp := func() error {
		return fmt.Errorf("client: %s: gave up retrying: %w; the last try: %w", subject, context.Cause(ctx), last)
	}
	for tries := 1; ; tries++ {
		err := try()
		switch {
		case err != nil && ctx.Err() != nil && last != nil:
			return gaveUp()
		case err == nil || !c.retry || k.once || !errors.Is(err, ErrUnavailable):
			return err
		}
		last = err
		pause := wait + rand.N(wait/2+1) //nolint:gosec // G404: jitter, not a secret
		var se *schemas.Error
		if errors.As(err, &se) && se.RetryAfter != nil {
			// The service said when to come back (no writer while a new
			// one is elected): then, with a little jitter, without backing
			// off further.
			d := min(max(time.Until(*se.RetryAfter), 0), retryMax)
			pause, wait = d+rand.N(d/4+time.Millisecond), retryFirst //nolint:gosec // G404: jitter, not a secret
		}
		if c.onRetry != nil {
			c.onRetry(Retry{Subject: subject, CommandID: k.id, Tries: tries, Err: err, Wait: pause})
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return gaveUp()
		}
		wait = min(2*wait, retryMax)
	}
}

// try sends m once and returns the accepted reply, or the refusal as the
// service's *schemas.Error.
func (c *Client) try(ctx context.Context, m *nats.Msg, timeout time.Duration) (*Reply, error) {
	r, err := c.roundTrip(ctx, m, timeout)
	if err != nil {
		return nil, err
	}
	if !r.OK {
		return nil, r.Error
	}
	return &Reply{Result: r.Result, Seq: r.Seq, Next: r.Next}, nil
}

// deniedOn returns nc's last error when it is the server's refusal to let
// this connection publish on subject, else nil.
func deniedOn(nc *nats.Conn, subject string) error {
	err := nc.LastError()
	if err != nil && errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`) {
		return err
	}
	return nil
}

// roundTrip sends m once and returns the service's reply, accepted or
// refused (a refusal always has its Error).
func (c *Client) roundTrip(ctx context.Context, m *nats.Msg, timeout time.Duration) (*schemas.Reply, error) {
	resp, err := c.exchange(ctx, m, timeout)
	if err != nil {
		return nil, err
	}
	return decodeReply(m.Subject, resp.Data)
}

// decodeReply decodes a dwr reply to a request on subject.
func decodeReply(subject string, data []byte) (*schemas.Reply, error) {
	var r schemas.Reply
	if err := fastjson.Unmarshal(data, &r); err != nil {
		return nil, &RequestError{Subject: subject, Err: fmt.Errorf("the answer is not a dwr reply: %w", err)}
	}
	if !r.OK && r.Error == nil {
		r.Error = &schemas.Error{Code: schemas.CodeInternal, Message: "the service refused the request without saying why"}
	}
	return &r, nil
}

// exchange sends m once and returns the answer as it came, or a
// *RequestError when none came within timeout (0: the Client's).
func (c *Client) exchange(ctx context.Context, m *nats.Msg, timeout time.Duration) (*nats.Msg, error) {
	if timeout <= 0 {
		timeout = c.timeout
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The server reports a permission violation only asynchronously: the
	// request then fails at once instead of waiting out its timeout.
	var denied error
	settle := cancel
	if c.denied != nil {
		done := make(chan struct{})
		go func() {
			defer close(done)
			select {
			case denied = <-c.denied:
				cancel()
			case <-tctx.Done():
			}
		}()
		settle = func() { cancel(); <-done }
	}
	resp, err := c.nc.RequestMsgWithContext(tctx, m)
	settle() // denied is read only after the watcher ended
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return nil, context.Cause(ctx)
	case denied != nil:
		return nil, &RequestError{Subject: m.Subject, Code: schemas.CodeForbidden, Err: denied}
	case c.denied == nil && deniedOn(c.nc, m.Subject) != nil:
		// A connection the caller opened has its own error handler: the
		// violation shows as the connection's last error, after the
		// request's timeout.
		return nil, &RequestError{Subject: m.Subject, Code: schemas.CodeForbidden, Err: deniedOn(c.nc, m.Subject)}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return nil, &RequestError{Subject: m.Subject, Code: schemas.CodeUnavailable, Err: nats.ErrTimeout, Timeout: timeout}
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrMaxPayload), errors.Is(err, nats.ErrBadSubject):
		return nil, &RequestError{Subject: m.Subject, Err: err}
	default: // no responders, a reconnection under way
		return nil, &RequestError{Subject: m.Subject, Code: schemas.CodeUnavailable, Err: err}
	}
	return resp, nil
}

// The liveness checks of a connection Connect opens (NATSOptions may
// change them): a node that answers no ping for about PingInterval ×
// MaxPingsOut is taken for gone, and the client reconnects to another node
// of the cluster — as dwr serve's own connections do.
const (
	PingInterval = 2 * time.Second
	MaxPingsOut  = 2
)

// traceContext propagates W3C trace context (traceparent, tracestate): the
// wire's format, whatever propagator the program sets globally.
var traceContext = propagation.TraceContext{}
