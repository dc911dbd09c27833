package servicetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/schemas"
)

// Client is a test's client of a running service (in-process or not), on one
// connection and in one workspace: executors/client's Client, with a
// testing.TB API. Its commands must be accepted, and its queries read at
// least what its commands wrote (schemas.HeaderMinSeq). It is safe for
// concurrent use.
type Client struct {
	c *client.Client
}

// Request pacing.
const (
	// requestTimeout bounds one request of a Client, and the queries of a
	// Query.
	requestTimeout = 10 * time.Second
	// commandTimeout bounds a Command with its retries.
	commandTimeout = 20 * time.Second
)

// NewClient returns a client of the service that nc reaches, in workspace
// ws ("default" when empty).
func NewClient(nc *nats.Conn, ws string) *Client {
	if ws == "" {
		ws = client.DefaultWorkspace
	}
	return &Client{c: client.New(nc, client.Workspace(ws), client.Timeout(requestTimeout))}
}

// Client returns a client of the service in workspace ws on the admin's
// connection (Service.Admin).
func (s *Service) Client(ws string) *Client { return NewClient(s.Admin, ws) }

// Request sends body (JSON-encoded, or as it is when it is a []byte; nothing
// when nil) to subject with hdr (may be nil), once, and returns the decoded
// reply, accepted or not (client.Client.Request); it fails the test when no
// reply comes or it does not decode. A reply's log sequence counts as the
// client's last write.
func (c *Client) Request(t testing.TB, subject string, body any, hdr nats.Header) schemas.Reply {
	t.Helper()
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
			t.Fatalf("servicetest: %s: %v", subject, err)
		}
		m.Data = b
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	r, err := c.c.Request(ctx, m)
	if err != nil {
		t.Fatalf("servicetest: %s: %v", subject, err)
	}
	return *r
}

// Command sends command name (e.g. "task.create") with body and a new
// command id, fails the test unless it is accepted, and returns the reply's
// result. While the service cannot take it (no writer available yet, no
// one answering: a service starting, a writer taking over) it sends the
// command again with the same id, as a client should, for up to 20 s.
func (c *Client) Command(t testing.TB, name string, body any) json.RawMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	r, err := c.c.Command(ctx, name, body)
	var refused *schemas.Error
	switch {
	case errors.As(err, &refused):
		t.Fatalf("servicetest: %s refused: %+v", name, refused)
	case err != nil:
		t.Fatalf("servicetest: %s: %v", name, err)
	}
	return r.Result
}

// Query sends query name (e.g. "task.get") with q, reading at least the
// client's last write, fails the test unless it is answered within 10 s
// (asked again while the service cannot take it), and decodes its result
// into out.
func (c *Client) Query(t testing.TB, name string, q schemas.Query, out any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	if err := c.query(ctx, name, q, out); err != nil {
		t.Fatalf("servicetest: %v", err)
	}
}

// QueryErr is Query that returns its error instead of failing the test,
// for a goroutine of a test's own: the query is asked again while the
// service cannot take it, until ctx ends.
func (c *Client) QueryErr(ctx context.Context, name string, q schemas.Query, out any) error {
	return c.query(ctx, name, q, out)
}

func (c *Client) query(ctx context.Context, name string, q schemas.Query, out any) error {
	if _, err := c.c.Query(ctx, name, q, out); err != nil {
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
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var tk domain.Task
	var last error
	Eventually(t, d, func() bool {
		tk = domain.Task{}
		last = c.query(ctx, "task.get", schemas.Query{ID: id}, &tk)
		return last == nil && ok(tk)
	}, func() string {
		if last != nil {
			return fmt.Sprintf("task %s: %s: last query: %v", id, what, last)
		}
		return fmt.Sprintf("task %s: %s: it is %s, with %d attempts: %+v", id, what, tk.State, len(tk.Attempts), tk)
	})
	return tk
}

// WaitGoalState asks for goal id every 20 ms until it is in state, and
// returns it as goal.get answers it; it fails the test after d, naming the
// state the goal was last seen in. A query that fails is asked again.
func (c *Client) WaitGoalState(t testing.TB, id, state string, d time.Duration) schemas.GoalView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var g schemas.GoalView
	var last error
	Eventually(t, d, func() bool {
		g = schemas.GoalView{}
		last = c.query(ctx, "goal.get", schemas.Query{ID: id}, &g)
		return last == nil && g.Goal != nil && g.State == state
	}, func() string {
		if last != nil || g.Goal == nil {
			return fmt.Sprintf("goal %s: state %s: last query: %v", id, state, last)
		}
		return fmt.Sprintf("goal %s: state %s: it is %s: %+v", id, state, g.State, g)
	})
	return g
}

// NewLoadClient returns a client for load in the default workspace whose
// tries each wait at most try (executors/client's Timeout); its CreateGoal
// retries under the same command id while the service is unavailable.
func NewLoadClient(nc *nats.Conn, try time.Duration) *Client {
	return &Client{c: client.New(nc, client.Timeout(try))}
}

// CreateGoal sends goal.create titled title under command id id, retried
// with that id while the service is unavailable or unreachable, until ctx
// ends; it returns the log sequence that holds it. For load that must know
// the outcome of every command it sent.
func (c *Client) CreateGoal(ctx context.Context, title, id string) (uint64, error) {
	r, err := c.c.CreateGoal(ctx, schemas.CreateGoal{Title: title}, client.CommandID(id))
	if err != nil {
		return 0, err
	}
	return r.Seq, nil
}
