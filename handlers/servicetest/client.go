package servicetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/schemas"
)

// Client is a test's client of a running service (in-process or not), on one
// connection and in one workspace: it sends commands and requires that they
// are accepted, and its queries read at least what its last command wrote
// (schemas.HeaderMinSeq). It is safe for concurrent use.
type Client struct {
	nc      *nats.Conn
	ws      string
	lastSeq atomic.Uint64
}

// requestTimeout bounds one request of a Client.
const requestTimeout = 10 * time.Second

// NewClient returns a client of the service that nc reaches, in workspace
// ws ("default" when empty).
func NewClient(nc *nats.Conn, ws string) *Client {
	if ws == "" {
		ws = "default"
	}
	return &Client{nc: nc, ws: ws}
}

// Client returns a client of the service in workspace ws on the admin's
// connection (Service.Admin).
func (s *Service) Client(ws string) *Client { return NewClient(s.Admin, ws) }

// Conn returns the client's connection.
func (c *Client) Conn() *nats.Conn { return c.nc }

// Request sends body (JSON-encoded, or as it is when it is a []byte; nothing
// when nil) to subject with hdr (may be nil) and returns the decoded reply,
// accepted or not; it fails the test when no reply comes or it does not
// decode. A reply's log sequence counts as the client's last write.
func (c *Client) Request(t testing.TB, subject string, body any, hdr nats.Header) schemas.Reply {
	t.Helper()
	r, err := c.request(subject, body, hdr)
	if err != nil {
		t.Fatalf("servicetest: %s: %v", subject, err)
	}
	return r
}

func (c *Client) request(subject string, body any, hdr nats.Header) (schemas.Reply, error) {
	m := nats.NewMsg(subject)
	if hdr != nil {
		m.Header = hdr
	}
	switch v := body.(type) {
	case []byte:
		m.Data = v
	case nil:
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return schemas.Reply{}, err
		}
		m.Data = b
	}
	resp, err := c.nc.RequestMsg(m, requestTimeout)
	if err != nil {
		return schemas.Reply{}, err
	}
	var r schemas.Reply
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return schemas.Reply{}, fmt.Errorf("reply %q: %w", resp.Data, err)
	}
	for seq := c.lastSeq.Load(); r.Seq > seq && !c.lastSeq.CompareAndSwap(seq, r.Seq); seq = c.lastSeq.Load() {
	}
	return r, nil
}

// Command sends command name (e.g. "task.create") with body and a new
// command id, fails the test unless it is accepted, and returns the reply's
// result. While the service answers that no writer is available yet, or no
// one answers (a service starting, a writer taking over), it sends the
// command again with the same id, as a client should, for up to 10 s.
func (c *Client) Command(t testing.TB, name string, body any) json.RawMessage {
	t.Helper()
	h := nats.Header{}
	h.Set(schemas.HeaderCommandID, ulid.Make().String())
	subject := "dwr.cmd." + c.ws + "." + name
	var r schemas.Reply
	var err error
	Within(requestTimeout, func() bool {
		r, err = c.request(subject, body, h)
		return !errors.Is(err, nats.ErrNoResponders) && (err != nil || r.OK || r.Error == nil || r.Error.Code != string(domain.CodeUnavailable))
	})
	switch {
	case err != nil:
		t.Fatalf("servicetest: %s: %v", name, err)
	case !r.OK:
		t.Fatalf("servicetest: %s refused: %+v", name, r.Error)
	}
	return r.Result
}

// Query sends query name (e.g. "task.get") with q, reading at least the
// client's last write, fails the test unless it is answered, and decodes its
// result into out.
func (c *Client) Query(t testing.TB, name string, q schemas.Query, out any) {
	t.Helper()
	if err := c.query(name, q, out); err != nil {
		t.Fatalf("servicetest: %v", err)
	}
}

func (c *Client) query(name string, q schemas.Query, out any) error {
	h := nats.Header{}
	if seq := c.lastSeq.Load(); seq > 0 {
		h.Set(schemas.HeaderMinSeq, fmt.Sprint(seq))
	}
	r, err := c.request("dwr.q."+c.ws+"."+name, q, h)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if !r.OK {
		return fmt.Errorf("%s: %+v", name, r.Error)
	}
	if err := json.Unmarshal(r.Result, out); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// CreateTask creates a standalone task from spec (the body's "spec") and
// returns its id.
func (c *Client) CreateTask(t testing.TB, spec map[string]any) string {
	t.Helper()
	var rep domain.Reply
	if err := json.Unmarshal(c.Command(t, "task.create", map[string]any{"spec": spec}), &rep); err != nil {
		t.Fatalf("servicetest: task.create: %v", err)
	}
	return rep.ID
}

// Task returns task id as task.get answers it.
func (c *Client) Task(t testing.TB, id string) domain.Task {
	t.Helper()
	var tk domain.Task
	c.Query(t, "task.get", schemas.Query{ID: id}, &tk)
	return tk
}

// WaitState waits up to d until task id is in state, and returns it.
func (c *Client) WaitState(t testing.TB, id, state string, d time.Duration) domain.Task {
	t.Helper()
	return c.WaitTask(t, id, d, "state "+state, func(tk domain.Task) bool { return tk.State == state })
}

// WaitTask asks for task id every 20 ms until ok holds for it, and returns
// it; it fails the test after d, naming what (what ok waits for) and the
// task as last seen. A query that fails (the service restarting, a task not
// yet in the views) is asked again.
func (c *Client) WaitTask(t testing.TB, id string, d time.Duration, what string, ok func(domain.Task) bool) domain.Task {
	t.Helper()
	var tk domain.Task
	var last error
	Eventually(t, d, func() bool {
		tk = domain.Task{}
		last = c.query("task.get", schemas.Query{ID: id}, &tk)
		return last == nil && ok(tk)
	}, func() string {
		if last != nil {
			return fmt.Sprintf("task %s: %s: last query: %v", id, what, last)
		}
		return fmt.Sprintf("task %s: %s: it is %s, with %d attempts: %+v", id, what, tk.State, len(tk.Attempts), tk)
	})
	return tk
}
