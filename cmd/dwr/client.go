package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"

	"github.com/dwr-run/dwr/handlers"
)

// client talks to the dwr service over NATS.
type client struct {
	g       *globals
	nc      *nats.Conn
	timeout time.Duration
}

func (g *globals) connect() (*client, error) {
	d, err := time.ParseDuration(g.timeout)
	if err != nil {
		return nil, fail(exitInvalid, "--timeout %q: %v", g.timeout, err)
	}
	nc, err := nats.Connect(g.server, nats.Name("dwr-cli"), nats.Timeout(d), nats.NoReconnect())
	if err != nil {
		return nil, fail(exitUnavailable, "cannot reach NATS at %s: %v\nstart the service with `dwr serve`, or point --server (DWR_SERVER) at it", g.server, err)
	}
	return &client{g: g, nc: nc, timeout: d}, nil
}

func (c *client) close() { c.nc.Close() }

// call sends a request and returns the result of an ok reply, or an error
// with the exit code for the reply's error.
func (c *client) call(subject string, body any, hdr nats.Header) (json.RawMessage, uint64, error) {
	var data []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		data = b
	default:
		var err error
		if data, err = json.Marshal(b); err != nil {
			return nil, 0, err
		}
	}
	m := nats.NewMsg(subject)
	m.Data = data
	if hdr != nil {
		m.Header = hdr
	}
	resp, err := c.nc.RequestMsg(m, c.timeout)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, 0, fail(exitUnavailable, "no dwr service answers on %s (subject %s): start it with `dwr serve`", c.g.server, subject)
	case errors.Is(err, nats.ErrTimeout):
		return nil, 0, fail(exitUnavailable, "the dwr service did not answer within %s: it may be overloaded or restarting; retry (with the same --command-id)", c.timeout)
	case err != nil:
		return nil, 0, fail(exitUnavailable, "request failed: %v", err)
	}
	var r handlers.Response
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return nil, 0, fail(exitError, "the service answered something that is not a dwr reply: %v", err)
	}
	if !r.OK {
		return nil, 0, replyError(r.Error)
	}
	return r.Result, r.Seq, nil
}

func replyError(e *handlers.WireError) error {
	if e == nil {
		return fail(exitError, "the service refused the request without saying why")
	}
	code := exitError
	switch e.Code {
	case "invalid", "too_large":
		code = exitInvalid
	case "not_found":
		code = exitNotFound
	case "conflict", "forbidden":
		code = exitConflict
	case "unavailable":
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
	h.Set(handlers.HeaderCommandID, id)
	h.Set(handlers.HeaderActor, "cli")
	return c.call("dwr.cmd."+c.g.workspace+"."+name, body, h)
}

// query sends query name; minSeq > 0 asks the views to reflect that log
// sequence first.
func (c *client) query(name string, q handlers.Query, minSeq uint64) (json.RawMessage, error) {
	var h nats.Header
	if minSeq > 0 {
		h = nats.Header{}
		h.Set(handlers.HeaderMinSeq, fmt.Sprint(minSeq))
	}
	r, _, err := c.call("dwr.q."+c.g.workspace+"."+name, q, h)
	return r, err
}
