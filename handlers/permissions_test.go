package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// who is one identity of the matrix: a connection and what it should reach.
type who struct {
	name   string
	ws     string      // its workspace ("" for the service's admin: every one)
	role   domain.Role // its role there
	queues []string
	global bool // an admin of every workspace: the service's own admin
	nc     *nats.Conn
	denied chan error // the server's permission violations on nc
}

// verdict of one probe.
type verdict int

const (
	deniedV verdict = iota
	allowedV
)

// drain forgets the violations reported so far.
func (w *who) drain() {
	for {
		select {
		case err := <-w.denied:
			_ = err // an earlier probe's
		default:
			return
		}
	}
}

// probe sends a request on subject and tells whether it went through: an
// answer other than a refusal of the identity. A permission violation, no
// responders, a forbidden reply or a JetStream error are denials.
func (w *who) probe(subject string, body []byte) (verdict, string) {
	w.drain()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	go func() {
		select {
		case err := <-w.denied:
			_ = err
			cancel()
		case <-ctx.Done():
		}
	}()
	m := nats.NewMsg(subject)
	m.Data = body
	resp, err := w.nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		return deniedV, err.Error()
	}
	var r struct {
		OK    *bool `json:"ok"`
		Error *struct {
			Code        any    `json:"code"`
			Description string `json:"description"`
			Message     string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(resp.Data, &r) != nil {
		return allowedV, "a non-JSON answer"
	}
	if r.Error != nil {
		if fmt.Sprint(r.Error.Code) == string(domain.CodeForbidden) || r.OK == nil { // dwr's forbidden, or a JetStream API error
			return deniedV, fmt.Sprint(r.Error.Code, " ", r.Error.Message, r.Error.Description)
		}
	}
	return allowedV, string(resp.Data)
}

// TestPermissionMatrix checks every role against every family of subjects on
// a closed service, as RELIABILITY.md's "subject permissions" asks: commands
// and queries of its own workspace and of another, the JetStream API
// (listing, purging, updating and deleting each stream, creating
// consumers), publishing on the log, work and feed subjects, subscribing to
// the command and query subjects, other inboxes and another workspace's
// feed, the work consumers, and membership itself. Unexpected allows must be
// zero; every cell is printed as a figure.
func TestPermissionMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("hundreds of probes")
	}
	st := servicetest.Start(t, "", servicetest.Options{Secure: true})
	admin := st.Admin
	servicetest.Must(t, admin, "other", "workspace.create", domain.CreateWorkspace{Name: "other"})
	servicetest.Must(t, admin, "default", "queue.configure", map[string]any{"queue": "q1", "lease_ms": 30000, "max_deliver": 5})
	servicetest.Must(t, admin, "other", "queue.configure", map[string]any{"queue": "q1", "lease_ms": 30000, "max_deliver": 5})

	connect := func(name, ws string, role domain.Role, queues ...string) *who {
		w := &who{name: name, ws: ws, role: role, queues: queues, denied: make(chan error, 16)}
		kp, err := nkeys.CreateUser()
		require.NoError(t, err)
		pub, _ := kp.PublicKey()
		if ws != "" {
			servicetest.Must(t, admin, ws, "member.add", domain.AddMember{Name: name, Role: role, PublicKey: pub, Queues: queues})
		} else {
			t.Fatal("the service's admin is st.Admin")
		}
		w.nc, err = st.Server.Connect(nats.Name(name), nats.CustomInboxPrefix(schemas.InboxPrefix(pub)),
			nats.Nkey(pub, func(n []byte) ([]byte, error) { return kp.Sign(n) }),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				if errors.Is(err, nats.ErrPermissionViolation) {
					select {
					case w.denied <- err:
					default:
					}
				}
			}))
		require.NoError(t, err)
		t.Cleanup(w.nc.Close)
		return w
	}
	ids := []*who{
		connect("wadmin", "default", domain.RoleAdmin),
		connect("client", "default", domain.RoleClient),
		connect("executor", "default", domain.RoleExecutor, "q1"),
		connect("approver", "default", domain.RoleApprover),
		connect("viewer", "default", domain.RoleViewer),
	}
	// The service's admin (dwr serve's admin.creds): every workspace.
	global := &who{name: "admin", role: domain.RoleAdmin, global: true, nc: admin, denied: make(chan error, 16)}
	admin.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			select {
			case global.denied <- err:
			default:
			}
		}
	})
	ids = append(ids, global)
	// An identity without credentials never gets a connection.
	_, err := nats.Connect("", nats.InProcessServer(st.Server.OtherClients()), nats.Name("anonymous"))
	require.ErrorIs(t, err, nats.ErrAuthorization, "a connection without a credential is refused")

	js, err := jetstream.New(st.Conn)
	require.NoError(t, err)
	streams := []string{"DWR_LOG", "DWR_EVENTS", "DWR_WORK", "DWR_ADVISORIES", "KV_dwr-writer", "KV_dwr-keys", "DWR_UPLOADS", "OBJ_dwr-artifacts"}
	state := func() map[string]uint64 {
		out := map[string]uint64{}
		for _, s := range streams {
			str, err := js.Stream(context.Background(), s)
			require.NoError(t, err, "stream %s still exists", s)
			info, err := str.Info(context.Background())
			require.NoError(t, err)
			out[s] = info.State.Msgs
		}
		return out
	}

	cells, unexpectedAllows, unexpectedDenials := 0, 0, 0
	var allows []string
	check := func(w *who, what string, want, got verdict, detail string) {
		cells++
		switch {
		case got == allowedV && want == deniedV:
			unexpectedAllows++
			allows = append(allows, fmt.Sprintf("%s: %s (%s)", w.name, what, detail))
		case got == deniedV && want == allowedV:
			unexpectedDenials++
			t.Errorf("%s was denied %s: %s", w.name, what, detail)
		}
	}
	expect := func(ok bool) verdict {
		if ok {
			return allowedV
		}
		return deniedV
	}

	var commands []string
	for _, name := range domain.CommandNames() {
		if name != "timer.fire" && name != "task.quarantine" {
			commands = append(commands, name)
		}
	}
	slices.Sort(commands)
	for _, w := range ids {
		for _, ws := range []string{"default", "other"} {
			for _, name := range commands {
				// An empty body: allowed means the service looked at it (and
				// found it invalid), denied that the identity was refused.
				got, detail := w.probe("dwr.cmd."+ws+"."+name, []byte(`{}`))
				check(w, "command "+ws+"."+name, expect(w.global || (ws == w.ws && domain.MayCommand(w.role, name) && name != "workspace.create")), got, detail)
			}
			for _, name := range slices.Concat(handlers.QueryNames, handlers.ArtifactQueries) {
				got, detail := w.probe("dwr.q."+ws+"."+name, []byte(`{"id":"x"}`))
				check(w, "query "+ws+"."+name, expect(w.global || (ws == w.ws && domain.MayQuery(w.role, name))), got, detail)
			}
		}
		// The JetStream API, directly and under the executors' prefix.
		for _, prefix := range []string{"$JS.API.", "dwrjs."} {
			for _, api := range []string{"STREAM.LIST", "STREAM.NAMES", "ACCOUNT.INFO", "CONSUMER.CREATE.DWR_WORK", "CONSUMER.DURABLE.CREATE.DWR_WORK.mine"} {
				got, detail := w.probe(prefix+api, []byte(`{}`))
				check(w, prefix+api, deniedV, got, detail)
			}
			for _, s := range streams {
				for _, op := range []string{"INFO", "PURGE", "DELETE", "UPDATE"} {
					body := []byte(`{}`)
					if op == "UPDATE" {
						body = []byte(`{"name":"` + s + `","subjects":["x.>"],"max_msgs":3}`)
					}
					got, detail := w.probe(prefix+"STREAM."+op+"."+s, body)
					check(w, prefix+"STREAM."+op+"."+s, deniedV, got, detail)
				}
			}
		}
		// The work consumers: an executor reaches its queue's, nobody else's.
		for _, c := range []string{"dwr-default-q1", "dwr-other-q1"} {
			got, detail := w.probe("dwrjs.CONSUMER.INFO.DWR_WORK."+c, nil)
			check(w, "consumer info "+c, expect(w.global || (c == "dwr-default-q1" && w.role == domain.RoleExecutor)), got, detail)
		}
	}

	// Publishing where only the service may: the log, the work queue, the
	// feed, the writer's liveness subject (a client answering or asking it
	// could make standbys think the writer alive, or gone). Nothing may
	// land, nor reach anyone.
	before := state()
	feed := make(chan *nats.Msg, 64)
	sub, err := st.Conn.ChanSubscribe("dwr.ev.>", feed)
	require.NoError(t, err)
	for _, w := range ids {
		for _, subj := range []string{"dwr.log.0", "dwr.work.default.q1", "dwr.ev.default.task.01J0000000000000000000000X.cancelled", "dwr.writer.0",
			"dwr.upload.default.0011223344556677.up", "$O.dwr-artifacts.C.x", "$O.dwr-artifacts.M.x"} {
			w.drain()
			require.NoError(t, w.nc.Publish(subj, []byte(`{"f":1,"kind":"events","epoch":99}`)))
			require.NoError(t, w.nc.Flush())
			got := allowedV
			select {
			case err := <-w.denied:
				require.ErrorIs(t, err, nats.ErrPermissionViolation)
				got = deniedV
			case <-time.After(time.Second):
			}
			check(w, "publish "+subj, deniedV, got, "no permission violation")
		}
	}
	require.Equal(t, before, state(), "nothing published by a client landed in any stream")
	require.NoError(t, sub.Unsubscribe())
	select {
	case m := <-feed:
		t.Fatalf("a forged feed event reached the service's account: %s", m.Subject)
	default:
	}

	// Subscribing where requests, other replies or another workspace's
	// events pass: nothing arrives.
	poke := func() {
		servicetest.Must(t, admin, "default", "goal.create", map[string]any{"title": "poke"})
		servicetest.Must(t, admin, "other", "goal.create", map[string]any{"title": "poke"})
		_, _ = admin.Request("dwr.q.default.goal.list", nil, time.Second)
	}
	// Every identity subscribes to every family at once, and one poke
	// passes a message through each: what an identity's subscription got
	// is read after it (a subscription the server refuses gets nothing).
	type listening struct {
		w         *who
		subj, why string
		want      verdict
		got       chan *nats.Msg
	}
	var ls []listening
	for _, w := range ids {
		for _, subj := range []string{"dwr.cmd.>", "dwr.q.>", "_INBOX.>", "dwr.ev.other.>", "dwr.log.>", "$JS.API.>"} {
			ls = append(ls, listening{w: w, subj: subj, why: "received a message", want: expect(w.global && subj == "dwr.ev.other.>")})
		}
		// Its own workspace's feed: everyone but the approver and the executor.
		ls = append(ls, listening{w: w, subj: "dwr.ev.default.goal.>", why: "feed",
			want: expect(w.role != domain.RoleApprover && w.role != domain.RoleExecutor)})
	}
	for i := range ls {
		ls[i].got = make(chan *nats.Msg, 64)
		sub, err := ls[i].w.nc.ChanSubscribe(ls[i].subj, ls[i].got)
		require.NoError(t, err)
		defer func() { _ = sub.Unsubscribe() }()
	}
	for _, w := range ids {
		require.NoError(t, w.nc.Flush())
	}
	poke()
	// What is allowed gets its message; what is not is given as long to
	// get one (the 300 ms each family was given alone).
	grace, graceOver := time.NewTimer(300*time.Millisecond), false
	for _, l := range ls {
		got := deniedV
		if l.want == allowedV {
			select {
			case <-l.got:
				got = allowedV
			case <-time.After(5 * time.Second):
			}
		} else {
			if !graceOver {
				<-grace.C
				graceOver = true
			}
			if len(l.got) > 0 {
				got = allowedV
			}
		}
		check(l.w, "subscribe "+l.subj, l.want, got, l.why)
	}

	t.Logf("permission matrix: %d identities, %d cells checked, unexpected allows %d, unexpected denials %d",
		len(ids), cells, unexpectedAllows, unexpectedDenials)
	require.Zero(t, unexpectedAllows, "unexpected allows:\n%s", strings.Join(allows, "\n"))
}
