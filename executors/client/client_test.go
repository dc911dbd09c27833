package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/executors/executortest"
	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

func start(t *testing.T) *servicetest.Service {
	t.Helper()
	return servicetest.Start(t, t.TempDir(), servicetest.Options{Secure: true, Listen: "127.0.0.1:0"})
}

func within(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// connectAs adds a member of workspace "default" with role, writes its
// credential file and returns a Client that connected with it (and opts),
// closed at cleanup.
func connectAs(t *testing.T, s *servicetest.Service, name string, role domain.Role, opts ...client.Option) *client.Client {
	t.Helper()
	cred, err := access.NewCredential()
	require.NoError(t, err)
	servicetest.Must(t, s.Admin, "default", "member.add", domain.AddMember{Name: name, Role: role, PublicKey: cred.PublicKey})
	path := filepath.Join(t.TempDir(), name+".creds")
	require.NoError(t, cred.Write(path, name, false))
	c, err := client.Connect(s.URL, append([]client.Option{client.Credentials(path)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// A caller starts work with the client and waits for it: the goal, its
// plan, a worker that runs the tasks, and WaitGoal returning the achieved
// goal — over a connection the client opened with a credential file.
func TestClientRunsAGoalToItsEnd(t *testing.T) {
	s := start(t)
	ctx := within(t, 30*time.Second)
	c := connectAs(t, s, "caller", domain.RoleClient)
	// A frozen node of a cluster is left within seconds, not NATS's default
	// two minutes.
	require.Equal(t, client.PingInterval, c.Conn().Opts.PingInterval)
	require.Equal(t, client.MaxPingsOut, c.Conn().Opts.MaxPingsOut)

	w, err := executors.NewWorker(executors.Config{Conn: s.Member(t, "default", "worker", domain.RoleExecutor, "build"),
		Queue: "build", Logger: servicetest.Logger()},
		func(_ context.Context, job *executors.Job) (executors.Result, error) {
			return executors.Result{Output: map[string]string{"built": job.TaskID}}, nil
		})
	require.NoError(t, err)
	executortest.StartWorker(t, w)

	g, err := c.CreateGoal(ctx, schemas.CreateGoal{Title: "release"})
	require.NoError(t, err)
	plan, err := c.SubmitPlan(ctx, g.ID, []schemas.TaskSpec{
		{Key: "compile", Queue: "build"},
		{Key: "package", Queue: "build", DependsOn: []string{"compile"}},
	})
	require.NoError(t, err)
	require.Len(t, plan.Tasks, 2)

	end, err := c.WaitGoal(ctx, g.ID)
	require.NoError(t, err)
	require.Equal(t, schemas.GoalStateAchieved, end.State)
	require.Equal(t, 2, end.Counts[schemas.StateAccepted], "the goal as it stands at its end: %+v", end.Counts)

	var ids []string
	for tk, err := range c.Tasks(ctx, client.TaskFilter{GoalID: g.ID}) {
		require.NoError(t, err)
		require.Equal(t, schemas.StateAccepted, tk.State)
		ids = append(ids, tk.ID)
	}
	require.ElementsMatch(t, []string{plan.Tasks[0].TaskID, plan.Tasks[1].TaskID}, ids)
}

// A query sees the Client's own writes at once: each carries the sequence
// of the last command's reply.
func TestClientReadsItsOwnWrites(t *testing.T) {
	s := start(t)
	ctx := within(t, 30*time.Second)
	c := client.New(s.Admin)
	for i := range 50 {
		r, err := c.CreateTask(ctx, schemas.TaskSpec{Queue: "q", Title: fmt.Sprint("task ", i)})
		require.NoError(t, err)
		require.Equal(t, r.Seq, c.Seq())
		tk, err := c.Task(ctx, r.ID)
		require.NoError(t, err, "task %d is read right after it was created", i)
		require.Equal(t, fmt.Sprint("task ", i), tk.Spec.Title)
		_, err = c.CancelTask(ctx, r.ID, "done with it")
		require.NoError(t, err)
		tk, err = c.Task(ctx, r.ID)
		require.NoError(t, err)
		require.Equal(t, schemas.StateCancelled, tk.State, "the cancel is read right after it")
	}
}

// Refusals come back as typed errors that name the code and the field;
// a command id sent again is answered with the first outcome.
func TestClientErrorsAndCommandIDs(t *testing.T) {
	s := start(t)
	ctx := within(t, 30*time.Second)
	c := client.New(s.Admin)

	_, err := c.CancelTask(ctx, "01J9ZQ3M5W8X2K4N6P7R9T1V3B", "")
	require.ErrorIs(t, err, client.ErrNotFound)

	_, err = c.CreateTask(ctx, schemas.TaskSpec{})
	require.ErrorIs(t, err, client.ErrInvalid)
	var se *schemas.Error
	require.ErrorAs(t, err, &se)
	require.NotEmpty(t, se.Fields)
	require.Equal(t, "/spec/queue", se.Fields[0].Pointer)

	first, err := c.CreateTask(ctx, schemas.TaskSpec{Queue: "q"}, client.CommandID("create-once"))
	require.NoError(t, err)
	again, err := c.CreateTask(ctx, schemas.TaskSpec{Queue: "q"}, client.CommandID("create-once"))
	require.NoError(t, err)
	require.Equal(t, first.ID, again.ID, "the retry is answered with the first outcome")
	require.Equal(t, first.Seq, again.Seq)

	_, err = c.CancelTask(ctx, first.ID, "")
	require.NoError(t, err)
	_, err = c.CancelTask(ctx, first.ID, "")
	require.ErrorIs(t, err, client.ErrConflict, "a cancelled task cannot be cancelled again")

	raw, err := c.Command(ctx, "task.create", json.RawMessage(`{"spec":{"queue":"q"},"extra":1}`))
	require.ErrorIs(t, err, client.ErrInvalid)
	require.Nil(t, raw)
}

// A viewer's client is refused a command by the NATS server itself: at
// once, as ErrForbidden, not after a timeout.
func TestClientForbiddenFailsFast(t *testing.T) {
	s := start(t)
	ctx := within(t, 30*time.Second)
	c := connectAs(t, s, "watcher", domain.RoleViewer, client.Timeout(20*time.Second), client.NoRetry())
	began := time.Now()
	_, err := c.CreateGoal(ctx, schemas.CreateGoal{Title: "not mine to start"})
	require.ErrorIs(t, err, client.ErrForbidden)
	require.ErrorIs(t, err, nats.ErrPermissionViolation)
	require.Less(t, time.Since(began), 20*time.Second, "refused before the request's timeout")
	for _, err := range c.Goals(ctx) {
		require.NoError(t, err, "a viewer may query")
	}
}

// On a connection the caller opened (New), a request the server does not
// let it send fails as ErrForbidden once its timeout has passed, and is not
// retried until the caller's context ends.
func TestClientOnTheCallersConnectionLearnsItIsForbidden(t *testing.T) {
	s := start(t)
	ctx := within(t, 30*time.Second)
	cred, err := access.NewCredential()
	require.NoError(t, err)
	servicetest.Must(t, s.Admin, "default", "member.add", domain.AddMember{Name: "watcher", Role: domain.RoleViewer, PublicKey: cred.PublicKey})
	path := filepath.Join(t.TempDir(), "watcher.creds")
	require.NoError(t, cred.Write(path, "watcher", false))
	opts, err := client.CredentialOptions(path)
	require.NoError(t, err)
	nc, err := nats.Connect(s.URL, opts...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	c := client.New(nc, client.Timeout(time.Second))
	_, err = c.CreateGoal(ctx, schemas.CreateGoal{Title: "not mine to start"})
	require.ErrorIs(t, err, client.ErrForbidden)
	require.ErrorIs(t, err, nats.ErrPermissionViolation)
	require.NoError(t, ctx.Err(), "refused, not retried until the context ended")
}

// With no service on the server, a request fails as unavailable: at once
// with NoRetry, and after retrying until its context ends without.
func TestClientUnavailable(t *testing.T) {
	_, nc := servicetest.StartNATS(t)
	c := client.New(nc, client.NoRetry())
	_, err := c.CreateGoal(within(t, 10*time.Second), schemas.CreateGoal{Title: "nobody listens"})
	require.ErrorIs(t, err, client.ErrUnavailable)
	require.ErrorIs(t, err, nats.ErrNoResponders)

	retrying := client.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = retrying.CreateGoal(ctx, schemas.CreateGoal{Title: "nobody listens"})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, client.ErrUnavailable, "with the last try's error")
}

// A request the service cannot take is sent again with the same command id
// until it is answered, and OnRetry is told of every retry; Once tries one
// call only once.
func TestClientRetriesWithTheSameCommandID(t *testing.T) {
	_, nc := servicetest.StartNATS(t)
	ctx := within(t, 30*time.Second)
	const subject = "dwr.cmd.default.goal.create"

	// The service comes after the second retry: a responder that answers
	// as the service would, and keeps the command ids it was sent.
	ids := make(chan string, 10)
	var sub *nats.Subscription
	var retries []client.Retry
	c := client.New(nc, client.OnRetry(func(r client.Retry) {
		retries = append(retries, r)
		if r.Tries == 2 {
			var serr error
			sub, serr = nc.Subscribe(subject, func(m *nats.Msg) {
				ids <- m.Header.Get(schemas.HeaderCommandID)
				_ = m.Respond([]byte(`{"ok":true,"result":{"id":"g1","state":"open"},"seq":7}`))
			})
			require.NoError(t, serr)
			require.NoError(t, nc.Flush())
		}
	}))
	g, err := c.CreateGoal(ctx, schemas.CreateGoal{Title: "late service"}, client.CommandID("goal-1"))
	require.NoError(t, err)
	require.Equal(t, "g1", g.ID)
	require.Equal(t, uint64(7), c.Seq())
	require.Equal(t, "goal-1", <-ids, "the try that was answered carried the same id")
	require.Len(t, retries, 2)
	for i, r := range retries {
		require.Equal(t, i+1, r.Tries)
		require.Equal(t, subject, r.Subject)
		require.Equal(t, "goal-1", r.CommandID)
		require.ErrorIs(t, r.Err, client.ErrUnavailable)
		require.ErrorIs(t, r.Err, nats.ErrNoResponders)
		require.Positive(t, r.Wait)
	}

	require.NoError(t, sub.Unsubscribe())
	retries = nil
	_, err = c.CreateGoal(ctx, schemas.CreateGoal{Title: "once"}, client.Once())
	require.ErrorIs(t, err, client.ErrUnavailable, "one try, not retried")
	require.Empty(t, retries)
}

// Request sends a message as it is and returns the service's reply,
// accepted or refused; an accepted reply's sequence is the Client's own
// write.
func TestClientRequestSpeaksTheWire(t *testing.T) {
	s := start(t)
	ctx := within(t, 30*time.Second)
	c := client.New(s.Admin)

	m := nats.NewMsg("dwr.cmd.default.task.create")
	m.Header.Set(schemas.HeaderCommandID, "raw-1")
	m.Data = []byte(`{"spec":{"queue":"q","title":"by hand"}}`)
	r, err := c.Request(ctx, m)
	require.NoError(t, err)
	require.True(t, r.OK, "%+v", r.Error)
	require.Equal(t, r.Seq, c.Seq())
	var cr schemas.CommandResult
	require.NoError(t, json.Unmarshal(r.Result, &cr))
	tk, err := c.Task(ctx, cr.ID)
	require.NoError(t, err, "read right after the write")
	require.Equal(t, "by hand", tk.Spec.Title)

	bad := nats.NewMsg("dwr.cmd.default.task.create")
	bad.Data = []byte(`{"spec":{}}`)
	r, err = c.Request(ctx, bad)
	require.NoError(t, err, "a refusal is a reply")
	require.False(t, r.OK)
	require.Equal(t, schemas.CodeInvalid, r.Error.Code)
}

// Watch yields an aggregate's events in version order, none missed or
// repeated: its history first, then the live feed — across a reconnection
// of the watcher's connection.
func TestClientWatchFollowsATask(t *testing.T) {
	s := start(t)
	ctx := within(t, 60*time.Second)
	c := connectAs(t, s, "watcher", domain.RoleClient)
	admin := client.New(s.Admin)

	tk, err := admin.CreateTask(ctx, schemas.TaskSpec{Queue: "q"})
	require.NoError(t, err)
	claim, err := admin.Command(ctx, "task.claim", schemas.ClaimTask{TaskID: tk.ID, Executor: "by-hand"})
	require.NoError(t, err)
	var claimed schemas.CommandResult
	require.NoError(t, json.Unmarshal(claim.Result, &claimed))
	checkpoint := func(i int) {
		t.Helper()
		_, err := admin.Command(ctx, "task.checkpoint", schemas.SaveCheckpoint{TaskID: tk.ID, Attempt: claimed.Attempt,
			Token: claimed.Token, Checkpoint: json.RawMessage(fmt.Sprint(i))})
		require.NoError(t, err)
	}

	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var versions []uint64
	var types []string
	const checkpoints = 20
	for e, err := range c.Watch(wctx, client.AggTask, tk.ID, 0) {
		require.NoError(t, err)
		versions = append(versions, e.Version)
		types = append(types, e.Type)
		require.Positive(t, e.Seq)
		switch e.Type {
		case "task.attempt_started": // the history is read: the rest comes live
			for i := range checkpoints / 2 {
				checkpoint(i)
			}
			require.NoError(t, c.Conn().ForceReconnect())
			for i := checkpoints / 2; i < checkpoints; i++ {
				checkpoint(i)
			}
			_, err := admin.CancelTask(ctx, tk.ID, "seen enough")
			require.NoError(t, err)
		case "task.cancelled":
			stop()
		}
	}
	require.Equal(t, "task.cancelled", types[len(types)-1], "%v", types)
	require.Equal(t, checkpoints, count(types, "task.checkpoint_saved"), "%v", types)
	for i, v := range versions {
		require.Equal(t, uint64(i+1), v, "versions in order, none missed or repeated: %v", versions)
	}

	// From a version: only what follows it.
	var after []uint64
	for e, err := range c.History(ctx, client.AggTask, tk.ID, 5) {
		require.NoError(t, err)
		after = append(after, e.Version)
	}
	require.Equal(t, versions[5:], after)
}

func count(xs []string, x string) int {
	n := 0
	for _, y := range xs {
		if y == x {
			n++
		}
	}
	return n
}

// A credential or TLS file that cannot be used is an *OptionError naming
// the option and the file, returned before anything is dialled.
func TestConnectNamesTheOptionThatCannotBeUsed(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	notPEM := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("not a certificate"), 0o600))
	for _, tc := range []struct {
		opt          client.Option
		option, file string
	}{
		{client.Credentials(missing), client.OptionCredentials, missing},
		{client.Credentials(notPEM), client.OptionCredentials, notPEM},
		{client.TLS(missing, "", ""), client.OptionTLS, missing},
		{client.TLS(notPEM, "", ""), client.OptionTLS, notPEM},
		{client.TLS("", missing, missing), client.OptionTLS, missing},
	} {
		_, err := client.Connect("nats://127.0.0.1:1", tc.opt)
		var oe *client.OptionError
		require.ErrorAs(t, err, &oe)
		require.Equal(t, tc.option, oe.Option)
		require.Equal(t, tc.file, oe.File)
	}
	_, err := client.Connect("nats://127.0.0.1:1", client.NATSOptions(nats.Timeout(time.Second), nats.NoReconnect()))
	var oe *client.OptionError
	require.False(t, errors.As(err, &oe), "an unreachable server is not an option's fault: %v", err)
}

// A caller finds its goals by their labels: given at creation, changed
// with LabelGoal, and listed at once (the client reads its own writes).
func TestClientFindsGoalsByLabel(t *testing.T) {
	s := start(t)
	ctx := within(t, 30*time.Second)
	c := connectAs(t, s, "caller", domain.RoleClient)
	var acme []string
	for i := range 3 {
		g, err := c.CreateGoal(ctx, schemas.CreateGoal{Title: fmt.Sprint("order ", i), Labels: schemas.Labels{"customer": "acme", "order": fmt.Sprint(i)}})
		require.NoError(t, err)
		acme = append(acme, g.ID)
	}
	other, err := c.CreateGoal(ctx, schemas.CreateGoal{Title: "other", Labels: schemas.Labels{"customer": "globex"}})
	require.NoError(t, err)

	found := func(f client.GoalFilter) []string {
		t.Helper()
		var ids []string
		for g, err := range c.GoalsWhere(ctx, f) {
			require.NoError(t, err)
			ids = append(ids, g.ID)
		}
		return ids
	}
	require.Equal(t, acme, found(client.GoalFilter{Labels: schemas.Labels{"customer": "acme"}}))
	require.Equal(t, acme[1:2], found(client.GoalFilter{Labels: schemas.Labels{"customer": "acme", "order": "1"}}))

	r, err := c.LabelGoal(ctx, other.ID, schemas.Labels{"customer": "acme"}, nil)
	require.NoError(t, err)
	require.False(t, r.Duplicate)
	require.Equal(t, append(acme, other.ID), found(client.GoalFilter{Labels: schemas.Labels{"customer": "acme"}}))
	r, err = c.LabelGoal(ctx, other.ID, nil, []string{"absent"})
	require.NoError(t, err)
	require.True(t, r.Duplicate, "nothing changed")
	_, err = c.LabelGoal(ctx, other.ID, schemas.Labels{"Customer": "acme"}, nil)
	require.ErrorIs(t, err, client.ErrInvalid)
	g, err := c.Goal(ctx, other.ID)
	require.NoError(t, err)
	require.Equal(t, schemas.Labels{"customer": "acme"}, g.Labels)

	// A standalone task's, too.
	tk, err := c.CreateTaskWith(ctx, schemas.CreateTask{Spec: schemas.TaskSpec{Queue: "mail"}, Labels: schemas.Labels{"customer": "globex"}})
	require.NoError(t, err)
	_, err = c.LabelTask(ctx, tk.ID, schemas.Labels{"customer": "acme"}, nil)
	require.NoError(t, err)
	var tasks []string
	for x, err := range c.Tasks(ctx, client.TaskFilter{Labels: schemas.Labels{"customer": "acme"}}) {
		require.NoError(t, err)
		tasks = append(tasks, x.ID)
	}
	require.Equal(t, []string{tk.ID}, tasks)
}
