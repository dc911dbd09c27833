package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/schemas"
)

// client talks to the dwr service over NATS.
type client struct {
	g       *globals
	nc      *nats.Conn
	timeout time.Duration
	// denied receives the server's permission violations, which NATS
	// reports only asynchronously: a request then fails at once instead of
	// waiting out its timeout.
	denied chan error
}

func (g *globals) connect() (*client, error) {
	d, err := time.ParseDuration(g.timeout)
	if err != nil {
		return nil, fail(exitInvalid, "--timeout %q: %v", g.timeout, err)
	}
	c, err := newClient(g, d, func(opts ...nats.Option) (*nats.Conn, error) {
		return g.dial("dwr-cli", append([]nats.Option{nats.Timeout(d), nats.NoReconnect()}, opts...)...)
	})
	if err != nil {
		var ce *cliError
		if errors.As(err, &ce) {
			return nil, err
		}
		return nil, fail(exitUnavailable, "cannot reach NATS at %s: %v\nstart the service with `dwr serve`, or point --server (DWR_SERVER) at it", g.server, err)
	}
	return c, nil
}

// newClient returns a client on the connection dial opens with the options
// it is given (they report the server's permission violations to the
// client's requests), waiting up to timeout for each reply. It returns
// dial's error.
func newClient(g *globals, timeout time.Duration, dial func(...nats.Option) (*nats.Conn, error)) (*client, error) {
	denied := make(chan error, 8)
	nc, err := dial(nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			select {
			case denied <- err:
			default:
			}
		}
	}))
	if err != nil {
		return nil, err
	}
	return &client{g: g, nc: nc, timeout: timeout, denied: denied}, nil
}

// dial connects to g.server with g's credential and TLS settings, then opts.
func (g *globals) dial(name string, opts ...nats.Option) (*nats.Conn, error) {
	auth, err := natsAuth(g.credsFile(), g.tlsCA, g.tlsCert, g.tlsKey)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(g.server, append(append([]nats.Option{nats.Name(name)}, auth...), opts...)...)
	if errors.Is(err, nats.ErrAuthorization) && g.credsFile() == "" {
		return nil, fail(exitConflict, "NATS at %s wants a credential and none was found: give --creds FILE (or DWR_CREDS); on the server's machine, dwr-data/admin.creds is the admin's", g.server)
	}
	if errors.Is(err, nats.ErrAuthorization) {
		return nil, fail(exitConflict, "NATS at %s refused the credential %q: %v\nuse a credential of this server (dwr-data/admin.creds on its machine, or one from `dwr users add`) with --creds or DWR_CREDS", g.server, g.credsFile(), err)
	}
	return nc, err
}

func (c *client) close() { c.nc.Close() }

// call sends a request and returns the result of an ok reply, or an error
// with the exit code for the reply's error.
func (c *client) call(subject string, body any, hdr nats.Header) (json.RawMessage, uint64, error) {
	r, err := c.reply(subject, body, hdr)
	if err != nil {
		return nil, 0, err
	}
	return r.Result, r.Seq, nil
}

// reply sends a request and returns an ok reply, or an error with the exit
// code for the reply's error.
func (c *client) reply(subject string, body any, hdr nats.Header) (*schemas.Reply, error) {
	var data []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		data = b
	default:
		var err error
		if data, err = json.Marshal(b); err != nil {
			return nil, err
		}
	}
	m := nats.NewMsg(subject)
	m.Data = data
	if hdr != nil {
		m.Header = hdr
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	var deniedErr error
	go func() {
		select {
		case deniedErr = <-c.denied:
			cancel()
		case <-ctx.Done():
		}
	}()
	resp, err := c.nc.RequestMsgWithContext(ctx, m)
	if err != nil && errors.Is(err, context.Canceled) {
		<-ctx.Done()
		if deniedErr != nil {
			return nil, fail(exitConflict, "forbidden: %v\nyour credential (%s) does not allow %s: ask an admin for a role that does (dwr users add)", deniedErr, dash(c.g.credsFile()), subject)
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = nats.ErrTimeout
	}
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fail(exitUnavailable, "no dwr service answers on %s (subject %s): start it with `dwr serve`", c.g.server, subject)
	case errors.Is(err, nats.ErrTimeout):
		return nil, fail(exitUnavailable, "the dwr service did not answer within %s: it may be overloaded or restarting; retry (with the same --command-id)", c.timeout)
	case err != nil:
		return nil, fail(exitUnavailable, "request failed: %v", err)
	}
	var r schemas.Reply
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return nil, fail(exitError, "the service answered something that is not a dwr reply: %v", err)
	}
	if !r.OK {
		return nil, replyError(r.Error)
	}
	return &r, nil
}

func replyError(e *schemas.Error) error {
	if e == nil {
		return fail(exitError, "the service refused the request without saying why")
	}
	code := exitError
	switch e.Code {
	case schemas.CodeInvalid, schemas.CodeTooLarge:
		code = exitInvalid
	case schemas.CodeNotFound:
		code = exitNotFound
	case schemas.CodeConflict, schemas.CodeForbidden:
		code = exitConflict
	case schemas.CodeUnavailable:
		code = exitUnavailable
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", e.Code, e.Message)
	for _, f := range e.Fields {
		if !strings.Contains(e.Message, f.Pointer) && !strings.Contains(e.Message, f.Message) {
			fmt.Fprintf(&b, "\n  field %s: %s", f.Pointer, f.Message)
		}
	}
	return fail(code, "%s", b.String())
}

// command sends command name with body and a command id (a fresh ULID when
// id is empty).
func (c *client) command(name string, body any, id string) (json.RawMessage, uint64, error) {
	if id == "" {
		id = ulid.Make().String()
	}
	h := nats.Header{}
	h.Set(schemas.HeaderCommandID, id)
	return c.call("dwr.cmd."+c.g.workspace+"."+name, body, h)
}

// query sends query name; minSeq > 0 asks the views to reflect that log
// sequence first.
func (c *client) query(name string, q schemas.Query, minSeq uint64) (json.RawMessage, error) {
	var h nats.Header
	if minSeq > 0 {
		h = nats.Header{}
		h.Set(schemas.HeaderMinSeq, fmt.Sprint(minSeq))
	}
	r, _, err := c.call("dwr.q."+c.g.workspace+"."+name, q, h)
	return r, err
}

// queryPage sends list query name and returns one page of its result, and
// the cursor of the next page ("" when it is the last).
func (c *client) queryPage(name string, q schemas.Query) (json.RawMessage, string, error) {
	r, err := c.reply("dwr.q."+c.g.workspace+"."+name, q, nil)
	if err != nil {
		return nil, "", err
	}
	return r.Result, r.Next, nil
}

// queryAll sends list query name, following each reply's next to the last
// page, and returns the items of every page as one JSON array.
func (c *client) queryAll(name string, q schemas.Query) (json.RawMessage, error) {
	all := []json.RawMessage{}
	for {
		res, next, err := c.queryPage(name, q)
		if err != nil {
			return nil, err
		}
		var items []json.RawMessage
		if err := json.Unmarshal(res, &items); err != nil {
			return nil, fail(exitError, "the service answered %s with something that is not a list: %v", name, err)
		}
		all = append(all, items...)
		if next == "" || len(items) == 0 {
			return json.Marshal(all)
		}
		q.After = next
	}
}

// paging is the flags of a list command that pages: --limit, --after and
// --all.
type paging struct {
	limit int
	after string
	all   bool
}

func (p *paging) flags(cmd *cobra.Command, what string) {
	f := cmd.Flags()
	f.IntVar(&p.limit, "limit", 0, fmt.Sprintf("at most this many %s a page (0: the service's default, %d; at most %d)", what, handlers.DefaultLimit, handlers.MaxLimit))
	f.StringVar(&p.after, "after", "", "list from the cursor that an earlier page's \"more follow\" note gave")
	f.BoolVar(&p.all, "all", false, "list every "+strings.TrimSuffix(what, "s")+", page after page")
}

// list sends list query name with q as p asks: one page, or with --all
// every page. When more follow one page, it says on g's error output how to
// list them (what names the items, such as "tasks").
func (p *paging) list(g *globals, cl *client, what, name string, q schemas.Query) (json.RawMessage, error) {
	q.Limit, q.After = p.limit, p.after
	if p.all {
		return cl.queryAll(name, q)
	}
	res, next, err := cl.queryPage(name, q)
	if err == nil && next != "" {
		fmt.Fprintf(g.errOut, "more %s follow: repeat with --all to list them all, or with --after %s for the next page\n", what, next)
	}
	return res, err
}
