package handlers_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// The attacks of a credentialed but malicious client, each tried through a
// real embedded server on a closed service (RELIABILITY.md's "hostile
// client"): every one is refused, nothing is appended, and the honest
// clients are unaffected.

// A member that joins the service's queue group on the command subjects
// answers nothing: the subscription is refused, every command of the honest
// client is answered by the service and is in the log.
func TestHostileClientCannotHijackCommands(t *testing.T) {
	b := setup(t)
	hostile := b.peer(t, "mallory").nc
	denied := make(chan error, 8)
	hostile.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { denied <- err })
	for _, subj := range []string{"dwr.cmd.default.task.create", "dwr.cmd.>", "dwr.q.>"} {
		sub, err := hostile.QueueSubscribe(subj, "dwr", func(m *nats.Msg) {
			_ = m.Respond([]byte(`{"ok":true}`)) // the fake answer of the attack
		})
		require.NoError(t, err)
		defer func() { _ = sub.Unsubscribe() }()
		require.NoError(t, hostile.Flush())
		select {
		case err := <-denied:
			require.ErrorIs(t, err, nats.ErrPermissionViolation)
		case <-time.After(5 * time.Second):
			t.Fatalf("subscribing to %s was not refused", subj)
		}
	}
	const n = 30
	for i := range n {
		r := b.command(t, "task.create", map[string]any{"spec": map[string]any{"queue": "q"}}, "")
		require.True(t, r.OK, "%+v", r.Error)
		require.NotZero(t, r.Seq, "command %d was answered by the service, after its commit", i)
		var rep domain.Reply
		require.NoError(t, json.Unmarshal(r.Result, &rep))
		require.Equal(t, domain.StateReady, b.c.Task(t, rep.ID).State, "task %d is in the views", i)
	}
}

// The actor of an event is the identity NATS authenticated: a header that
// names another is ignored.
func TestTheActorIsTheAuthenticatedIdentity(t *testing.T) {
	b := setup(t)
	mallory := b.peer(t, "mallory")
	m := nats.NewMsg("dwr.cmd.default.task.create")
	m.Header.Set("Dwr-Actor", "alice")
	m.Header.Set("Nats-Request-Info", `{"acc":"DWR_CLIENTS","user":"alice"}`)
	m.Data = []byte(`{"spec":{"queue":"q"}}`)
	resp, err := mallory.nc.RequestMsg(m, 10*time.Second)
	require.NoError(t, err)
	var r schemas.Reply
	require.NoError(t, json.Unmarshal(resp.Data, &r))
	require.True(t, r.OK, "%+v", r.Error)
	var rep domain.Reply
	require.NoError(t, json.Unmarshal(r.Result, &rep))
	var raw []struct {
		Actor string `json:"actor"`
	}
	b.query(t, "events", schemas.Query{ID: rep.ID}, r.Seq, &raw)
	require.NotEmpty(t, raw)
	for _, e := range raw {
		require.Equal(t, "mallory", e.Actor, "the server-stamped identity, not the headers the client wrote")
	}
}

// workspace.list shows a member its own workspace only: another
// workspace's members, approvers, queues and command keys are not a
// member's to read. The service's admin sees every workspace.
func TestAMemberListsOnlyItsOwnWorkspace(t *testing.T) {
	b := setup(t)
	servicetest.NewClient(b.st.Admin, "other").Command(t, "workspace.create", schemas.CreateWorkspace{Name: "other"})
	b.st.Member(t, "other", "bob", domain.RoleClient)
	names := func(c *servicetest.Client) (out, members []string) {
		var wss []schemas.Workspace
		c.Query(t, "workspace.list", schemas.Query{}, &wss)
		for _, w := range wss {
			out = append(out, w.Name)
			for _, m := range w.Members {
				members = append(members, m.Name)
			}
		}
		return out, members
	}
	// Every role that may send workspace.list (an executor may not: NATS
	// refuses it the subject).
	for _, role := range []domain.Role{domain.RoleViewer, domain.RoleClient, domain.RoleAdmin} {
		nc := b.st.Member(t, "default", "mallory-"+string(role), role)
		wss, members := names(servicetest.NewClient(nc, "default"))
		require.Equal(t, []string{"default"}, wss, "a %s of default lists its own workspace only", role)
		require.NotContains(t, members, "bob", "a %s of default read a member of another workspace", role)
	}
	wss, members := names(b.st.Client("default"))
	require.ElementsMatch(t, []string{"default", "other"}, wss, "the service's admin lists every workspace")
	require.Contains(t, members, "bob")
}

// Registering an approver is an admin's: a client cannot put its own key
// under alice's name, and alice's key keeps deciding.
func TestHostileClientCannotTakeOverAnApprover(t *testing.T) {
	b := setup(t)
	alicePub, alice, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	b.mustCommand(t, "approver.register", map[string]any{"name": "alice", "role": "ops",
		"public_key": base64.StdEncoding.EncodeToString(alicePub)})
	evilPub, evil, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)

	mallory := &who{name: "mallory", nc: b.st.Member(t, "default", "mallory", domain.RoleClient), denied: make(chan error, 8)}
	mallory.nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { mallory.denied <- err })
	before := b.lastSeq(t)
	body := func(v any) []byte { b, _ := json.Marshal(v); return b }
	v, detail := mallory.probe("dwr.cmd.default.approver.register", body(map[string]any{"name": "alice", "role": "ops",
		"public_key": base64.StdEncoding.EncodeToString(evilPub)}))
	require.Equal(t, deniedV, v, detail)
	v, detail = mallory.probe("dwr.cmd.default.member.add", body(map[string]any{"name": "alice", "role": "approver",
		"public_key": "UDLMXCB2GCXXVTRKKPDJIVXASMJ6JD2DUP5HFRRDPKXQIVFA5PTFMSGK"}))
	require.Equal(t, deniedV, v, "a client adds no member: %s", detail)
	require.Equal(t, before, b.lastSeq(t), "nothing was appended")

	// A gate decided: mallory, even signing with her key as "alice", cannot;
	// alice can.
	tk, _ := b.mustCommand(t, "task.create", map[string]any{"spec": map[string]any{"queue": "q",
		"approval": map[string]any{"role": "ops"}}})
	a := b.approval(t, domain.ApprovalID(tk.ID, 1))
	decide := func(key ed25519.PrivateKey) map[string]any {
		return map[string]any{"approval_id": a.ID, "approver": "alice", "response": "approve",
			"action_digest": a.ActionDigest, "signature": domain.SignDecision(key, a.ID, "approve", a.ActionDigest)}
	}
	v, detail = mallory.probe("dwr.cmd.default.approval.decide", body(decide(evil)))
	require.Equal(t, deniedV, v, "a client may not decide: %s", detail)
	r := b.peer(t, "alice").send(t, "approval.decide", decide(alice), "")
	require.True(t, r.OK, "%+v", r.Error)
	require.Equal(t, "alice", b.approval(t, a.ID).Decision.Approver)
}

// A revoked identity is cut off once its revocation is acknowledged: its
// connection is closed by the server, and it cannot connect again.
func TestARevokedIdentityIsCutOffAtOnce(t *testing.T) {
	b := setup(t)
	nc := b.st.Member(t, "default", "temp", domain.RoleClient)
	r := (&peer{nc: nc, actor: "temp"}).send(t, "goal.create", map[string]any{"title": "before"}, "")
	require.True(t, r.OK, "%+v", r.Error)
	b.mustCommand(t, "member.remove", map[string]any{"name": "temp"})
	servicetest.Eventually(t, 10*time.Second, func() bool {
		_, err := nc.Request("dwr.cmd.default.goal.create", []byte(`{"title":"after"}`), 500*time.Millisecond)
		return err != nil
	})
	var ms []domain.Member
	b.query(t, "member.list", schemas.Query{}, 0, &ms)
	for _, m := range ms {
		require.NotEqual(t, "temp", m.Name)
	}
}

// A queue's work consumer is named <prefix>-<workspace>-<queue>, so
// workspace "acme" with queue "labs-q" and workspace "acme-labs" with queue
// "q" would share one: acme's admin could give its executor that queue
// and take acme-labs' work items. No workspace's name may extend another's
// with '-', whichever comes first; nothing is recorded for the refused one.
func TestWorkspaceNamesCannotShareAQueuesConsumer(t *testing.T) {
	b := setup(t)
	create := func(name string) schemas.Reply {
		return servicetest.NewClient(b.st.Admin, name).Request(t, "dwr.cmd."+name+".workspace.create", schemas.CreateWorkspace{Name: name}, nil)
	}
	require.True(t, create("acme").OK)
	for _, name := range []string{"acme-labs", "acme-labs-x"} {
		r := create(name)
		require.False(t, r.OK, name)
		require.Equal(t, schemas.CodeConflict, r.Error.Code)
		require.Contains(t, r.Error.Message, `beside workspace "acme"`)
		require.Equal(t, "/name", r.Error.Fields[0].Pointer)
	}
	require.True(t, create("zeta-x").OK)
	r := create("zeta")
	require.False(t, r.OK, "a name another's extends")
	require.Contains(t, r.Error.Message, `beside workspace "zeta-x"`)
	for _, name := range []string{"acmelabs", "acme_labs", "zet"} { // no '-' after the other's name
		require.True(t, create(name).OK, name)
	}
	var ws []schemas.Workspace
	servicetest.NewClient(b.st.Admin, "default").Query(t, "workspace.list", schemas.Query{}, &ws)
	var names []string
	for _, w := range ws {
		names = append(names, w.Name)
	}
	require.ElementsMatch(t, []string{"default", "acme", "zeta-x", "acmelabs", "acme_labs", "zet"}, names)

	// So a work consumer's name tells its workspace, whose share of the
	// requests in flight an executor's consumer-info requests count in.
	for consumer, ws := range map[string]string{"dwr-acme-q": "acme", "dwr-acme-labs-q": "acme", "dwr-zeta-x-q-1": "zeta-x",
		"dwr-acme_labs-q": "acme_labs", "dwr-nobody-q": "dwr-nobody-q"} {
		require.Equal(t, ws, b.svc.WorkspaceOfConsumer(consumer), consumer)
	}
}

// Separation of duties over the wire: an admin who is also a registered
// approver creates a gated task that excludes its requester; its own
// signed approval is refused and recorded, and two other approvers make
// the quorum.
func TestWhoCreatedAGatedTaskCannotApproveIt(t *testing.T) {
	b := setup(t)
	keys := map[string]ed25519.PrivateKey{"alice": b.register(t, "alice", "ops"), "bob": b.register(t, "bob", "ops"),
		"carol": b.register(t, "carol", "ops")}
	r := b.peer(t, "alice").send(t, "task.create", map[string]any{"spec": map[string]any{"queue": "payments",
		"input": map[string]any{"pay": 900}, "approval": map[string]any{"role": "ops", "quorum": 2, "exclude_requester": true}}}, "")
	require.True(t, r.OK, "%+v", r.Error)
	var created domain.Reply
	require.NoError(t, json.Unmarshal(r.Result, &created))
	require.Equal(t, "alice", get[domain.Task](t, b, "task.get", created.ID).CreatedBy)
	a := b.approval(t, domain.ApprovalID(created.ID, 1))
	require.Equal(t, [2]any{"alice", true}, [2]any{a.RequestedBy, a.ExcludeRequester})

	r = b.peer(t, "alice").send(t, "approval.decide", decide(a, "alice", keys["alice"], "approve"), "")
	require.False(t, r.OK, "the requester approved its own task")
	require.Equal(t, string(domain.CodeForbidden), r.Error.Code)
	require.Equal(t, "/approver", r.Error.Fields[0].Pointer)
	require.Contains(t, r.Error.Message, domain.RefusedSelfApproval)
	a = b.approval(t, a.ID)
	require.Empty(t, a.SignOffs)
	require.Equal(t, domain.RefusedSelfApproval, a.Refusals[len(a.Refusals)-1].Reason, "the refusal is recorded")

	for _, who := range []string{"bob", "carol"} {
		r = b.peer(t, who).send(t, "approval.decide", decide(a, who, keys[who], "approve"), "")
		require.True(t, r.OK, "%+v", r.Error)
	}
	a = b.approval(t, a.ID)
	require.Equal(t, [3]any{domain.ApprovalStateDecided, "carol", "bob"}, [3]any{a.State, a.Decision.Approver, a.SignOffs[0].Approver})
}
