package schemas_test

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain" //nolint:depguard // tests may import domain, to prove the schemas describe its types
	"github.com/dwr-run/dwr/schemas"
)

// The contract test drives the domain through every command and checks that
// everything that crosses the wire matches its schema: each command as a
// client writes it, each reply (claims carry the whole task), and each event
// with its envelope. It must see every command and every event type.

type contract struct {
	t      *testing.T
	w      *domain.Overlay
	now    time.Time
	ws     string
	seq    uint64
	n      int
	hashes map[string]string // aggregate -> hash of its last envelope
	cmds   map[string]bool
	events map[string]bool
	keys   map[string]ed25519.PrivateKey // approver -> private key
	actor  string                        // who sends the commands
	authn  bool                          // whether NATS authenticated the actor
	tokens map[string]string             // task/attempt -> the token its claim returned
	claim  string                        // the token of the claim just decided
}

func newContract(t *testing.T) *contract {
	return &contract{t: t, w: domain.NewOverlay(domain.Empty{}), now: time.Date(2025, 6, 2, 9, 0, 0, 0, time.UTC),
		ws: "acme", hashes: map[string]string{}, cmds: map[string]bool{}, events: map[string]bool{},
		keys: map[string]ed25519.PrivateKey{}, actor: "user:maria@acme.example", tokens: map[string]string{}}
}

// execute sends command name with body as a client would: it checks the
// body against the command's schema, decides it, and applies and checks
// every change it causes. An attempt's command carries its attempt's token
// unless body has one; a claim is given the hash of a token made for it, as
// the service does, and one that supersedes the moment the lease lapsed.
func (c *contract) execute(name string, body map[string]any) *domain.Outcome {
	t := c.t
	t.Helper()
	c.now = c.now.Add(time.Minute)
	c.n++
	id := domain.DeriveID(c.now, fmt.Sprint("cmd", c.n))
	attempt, isAttempt := body["attempt"].(int)
	if _, has := body["token"]; !has && isAttempt && name != "task.verify" && name != "timer.fire" {
		body["token"] = c.tokens[fmt.Sprintf("%s/%d", body["task_id"], attempt)]
	}
	b, err := json.Marshal(body)
	require.NoError(t, err)
	require.NoError(t, schemas.ValidateCommand(name, b))
	cmd, ok := domain.NewCommand(name)
	require.True(t, ok)
	require.NoError(t, decodeStrict(b, cmd))
	c.claim = ""
	if claim, ok := cmd.(*domain.ClaimTask); ok {
		sum := sha256.Sum256([]byte(id))
		c.claim = base64.RawURLEncoding.EncodeToString(sum[:])
		claim.TokenHash = domain.TokenHash(c.claim)
		claim.SupersedeAfter = c.now
	}
	m := domain.Meta{CommandID: id, Workspace: c.ws, Actor: c.actor, Authenticated: c.authn, CorrelationID: "corr-1", Now: c.now}
	out, err := domain.Execute(c.w, cmd, m)
	require.NoError(t, err, "%s %s", name, b)
	for i, ch := range out.Changes {
		require.NoError(t, c.w.Apply(ch, domain.Recorded{CommandID: m.CommandID, Actor: m.Actor, Time: m.Now}))
		c.event(m, i, ch)
		if s, ok := ch.Event.(*domain.AttemptStarted); ok {
			c.tokens[fmt.Sprintf("%s/%d", ch.AggregateID, s.Attempt)] = c.claim
		}
	}
	c.cmds[name] = true
	return out
}

// do sends command name with body, which must be taken, and returns its
// reply, checked against reply.json.
func (c *contract) do(name string, body map[string]any) domain.Reply {
	t := c.t
	t.Helper()
	out := c.execute(name, body)
	require.Nil(t, out.Refusal, "%s was refused", name)
	if name == "task.claim" {
		out.Reply.Token = c.claim // the service adds it to the claimer's answer
	}
	c.seq++
	reply, err := json.Marshal(map[string]any{"ok": true, "result": out.Reply, "seq": c.seq})
	require.NoError(t, err)
	require.NoError(t, schemas.Validate(schemas.PathReply, reply), "reply to %s: %s", name, reply)
	return out.Reply
}

// refused sends command name with body, which must be refused with code
// and reason yet recorded (a decision on an approval that is not taken), and
// checks its answer, as the writer sends it, against error.json.
func (c *contract) refused(name string, body map[string]any, code domain.Code, reason string) {
	t := c.t
	t.Helper()
	out := c.execute(name, body)
	r := out.Refusal
	require.NotNil(t, r, "%s was not refused", name)
	require.NotEmpty(t, out.Changes, "a refusal is recorded")
	require.Equal(t, code, r.Code, r.Message)
	require.True(t, strings.HasPrefix(r.Message, reason+": "), "the message opens with the reason: %s", r.Message)
	require.True(t, c.events["task.approval_refused"])
	reply, err := json.Marshal(map[string]any{"ok": false, "error": map[string]any{"code": r.Code, "message": r.Message,
		"fields": []map[string]any{{"pointer": r.Field, "message": r.Message}}}})
	require.NoError(t, err)
	require.NoError(t, schemas.Validate(schemas.PathError, reply), "refusal of %s: %s", name, reply)
}

// register registers approver name with role and a key made from a fixed
// seed, so that every run signs the same.
func (c *contract) register(name, role string) { c.registerUntil(name, role, time.Time{}) }

// registerUntil registers approver name with role and a key that expires at
// expiry (never, when it is zero).
func (c *contract) registerUntil(name, role string, expiry time.Time) {
	seed := sha256.Sum256([]byte("contract approver " + name))
	key := ed25519.NewKeyFromSeed(seed[:])
	c.keys[name] = key
	body := map[string]any{"name": name, "role": role,
		"public_key": base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey))}
	if !expiry.IsZero() {
		body["expires_at"] = expiry.Format(time.RFC3339)
	}
	r := c.do("approver.register", body)
	require.Equal(c.t, c.ws, r.ID)
}

// NATS user keys made by nkeys.CreateUser.
const (
	userKey1 = "UA7MKXBLY6WJ5644NDJL7IFP4GV56SLO2464EHTM3LXWGVVLUA5ASOHH"
	userKey2 = "UAFX6JXN64DJ77OVSWCEW4QPAYNB6MQXY747VU67A2D5SZONOHUY4TJK"
)

// pending returns the approval task id waits on.
func (c *contract) pending(id string) *domain.Approval {
	tk := c.task(id)
	require.Equal(c.t, domain.StateWaiting, tk.State, id)
	a := tk.PendingApproval()
	require.NotNil(c.t, a, "task %s waits on no approval", id)
	return a
}

// decision returns the body of an approval.decide: response by approver,
// signed with their key over the action digest the task's state gives.
func (c *contract) decision(taskID, approvalID, approver, response, comment string) map[string]any {
	a := c.task(taskID).Approval(approvalID)
	require.NotNil(c.t, a, approvalID)
	body := map[string]any{"approval_id": a.ID, "approver": approver, "response": response,
		"action_digest": a.ActionDigest, "signature": domain.SignDecision(c.keys[approver], a.ID, response, a.ActionDigest)}
	if comment != "" {
		body["comment"] = comment
	}
	return body
}

// event checks one change as it is published: its data and its envelope.
func (c *contract) event(m domain.Meta, i int, ch domain.Change) {
	t := c.t
	typ := ch.Event.EventType()
	data, err := json.Marshal(ch.Event)
	require.NoError(t, err)
	require.NoError(t, schemas.ValidateEvent(typ, data), "%s: %s", typ, data)
	key := ch.AggregateType + "/" + ch.AggregateID
	env := schemas.Event{ID: domain.DeriveID(m.Now, fmt.Sprint(m.CommandID, i)), Type: typ, SchemaVersion: 1,
		Workspace: ch.Workspace, AggregateType: ch.AggregateType, AggregateID: ch.AggregateID, Version: ch.Version,
		CommandID: m.CommandID, CorrelationID: m.CorrelationID, Actor: m.Actor, Time: m.Now, PrevHash: c.hashes[key], Data: data}
	raw, err := json.Marshal(env)
	require.NoError(t, err)
	require.NoError(t, schemas.Validate(schemas.PathEnvelope, raw), "%s", raw)
	sum := sha256.Sum256(raw)
	c.hashes[key] = hex.EncodeToString(sum[:])
	c.events[typ] = true
}

func (c *contract) task(id string) *domain.Task {
	tk, err := c.w.Task(id)
	require.NoError(c.t, err)
	require.NotNil(c.t, tk, id)
	return tk
}

func ids(r domain.Reply) map[string]string {
	m := map[string]string{}
	for _, pt := range r.Tasks {
		m[pt.Key] = pt.TaskID
	}
	return m
}

func TestContractOfTheDomain(t *testing.T) {
	c := newContract(t)
	c.do("workspace.create", map[string]any{"name": "acme", "description": "Market research."})
	c.register("maria", "editor")
	c.register("omar", "finance")
	c.register("lena", "legal")

	// Members, and the settings of a queue: set, then asked for if unset,
	// which answers the settings in effect.
	c.do("member.add", map[string]any{"name": "ops", "role": "admin", "public_key": userKey1})
	c.do("member.add", map[string]any{"name": "researcher-1", "role": "executor", "public_key": userKey2,
		"queues": []string{"research", "fact-check"}})
	r := c.do("queue.configure", map[string]any{"queue": "research", "lease_ms": 300000, "max_deliver": 5})
	require.Equal(t, "research", r.Queue)
	r = c.do("queue.configure", map[string]any{"queue": "research", "lease_ms": 60000, "max_deliver": 3, "if_unset": true})
	require.Equal(t, int64(300000), r.LeaseMS)
	require.Equal(t, 5, r.MaxDeliver)
	require.True(t, r.Duplicate)
	r = c.do("queue.configure", map[string]any{"queue": "drafts", "lease_ms": 60000, "max_deliver": 3, "rate_limit": 60, "rate_period_ms": 60000,
		"order": "priority"})
	require.Equal(t, 60, r.RateLimit)
	require.Equal(t, "priority", r.Order)
	c.do("queue.delete", map[string]any{"queue": "drafts"})
	// A queue paused before any settings: the defaults, which an
	// executor's settings if unset still replace; the pause outlasts them.
	r = c.do("queue.pause", map[string]any{"queue": "review"})
	require.True(t, r.Paused)
	r = c.do("queue.configure", map[string]any{"queue": "review", "lease_ms": 60000, "max_deliver": 3, "if_unset": true})
	require.Equal(t, int64(60000), r.LeaseMS)
	require.True(t, r.Paused)
	r = c.do("queue.resume", map[string]any{"queue": "review"})
	require.False(t, r.Paused)

	// A goal that is achieved, through failures, a lost lease, a review, an
	// approval gate, an attempt's approval that is escalated, and a signal.
	goal := domain.DeriveID(c.now, "goal-1")
	c.do("goal.create", map[string]any{"goal_id": goal, "title": "Publish the Q2 report",
		"labels":           map[string]any{"quarter": "2025-q2", "draft": ""},
		"priority":         4,
		"key":              "report-2025-q2",
		"success_criteria": []string{"Every figure cites a source."},
		"envelope": map[string]any{"budget": map[string]any{"cost": 25.5, "tokens": 2000000, "deadline": "2025-06-30T17:00:00Z"},
			"permissions": map[string]any{"queues": []string{"research", "writer", "publisher"}}}})
	plan := ids(c.do("plan.submit", map[string]any{"goal_id": goal, "tasks": []map[string]any{
		{"key": "collect", "queue": "research", "timeout": "10m", "input": map[string]any{"quarter": "2025-Q2"}},
		{"key": "draft", "queue": "writer", "depends_on": []string{"collect"}, "verification": map[string]any{"queue": "fact-check"},
			"retry": map[string]any{"max_attempts": 3, "initial_backoff": "30s"}},
		{"key": "publish", "title": "Publish", "queue": "publisher", "depends_on": []string{"draft"},
			"input":    map[string]any{"page": "/reports/2025-q2"},
			"approval": map[string]any{"role": "editor", "expires_in": 86400, "responses": []string{"approve", "reject"}}},
	}}))
	collect, draft, publish := plan["collect"], plan["draft"], plan["publish"]
	r = c.do("goal.label", map[string]any{"goal_id": goal, "set": map[string]any{"owner": "maria"}, "remove": []string{"draft"}})
	require.False(t, r.Duplicate)
	require.True(t, c.do("goal.label", map[string]any{"goal_id": goal, "remove": []string{"draft"}}).Duplicate, "nothing left to remove")
	require.False(t, c.do("goal.prioritize", map[string]any{"goal_id": goal, "priority": 2}).Duplicate)
	r = c.do("goal.create", map[string]any{"goal_id": domain.DeriveID(c.now, "goal-1-again"), "title": "The Q2 report", "key": "report-2025-q2", "if_open": "use"})
	require.Equal(t, goal, r.ID, "the open goal that holds the key")

	r = c.do("task.claim", map[string]any{"task_id": collect, "executor": "researcher-1", "executor_version": "1.0.0"})
	require.NotNil(t, r.Task)
	require.NotEmpty(t, r.Token)
	require.Empty(t, c.do("task.heartbeat", map[string]any{"task_id": collect, "attempt": 1}).Token)
	c.do("task.checkpoint", map[string]any{"task_id": collect, "attempt": 1, "checkpoint": map[string]any{"page": 3}})
	c.do("task.succeed", map[string]any{"task_id": collect, "attempt": 1, "result": map[string]any{"rows": 120},
		"artifacts": []map[string]any{{"name": "data.csv", "sha256": hex.EncodeToString(make([]byte, 32)), "size": 4096, "type": "text/csv"}}})

	c.do("task.claim", map[string]any{"task_id": draft, "executor": "writer-1"})
	c.do("task.fail", map[string]any{"task_id": draft, "attempt": 1, "error": map[string]any{"code": "rate_limited", "message": "429"}, "retryable": true})
	until := *c.task(draft).BackoffUntil
	c.now = until
	c.do("timer.fire", map[string]any{"task_id": draft, "kind": "backoff", "due": until.Format(time.RFC3339Nano)})
	c.do("task.claim", map[string]any{"task_id": draft, "executor": "writer-1"})
	c.do("task.claim", map[string]any{"task_id": draft, "executor": "writer-2", "supersedes": 2})
	c.do("task.succeed", map[string]any{"task_id": draft, "attempt": 3, "result": "draft one",
		"model_steps": []map[string]any{{"model": "claude-sonnet-4", "tokens": 1200, "cost": 0.02, "parsed": []int{1}}}})
	c.do("task.verify", map[string]any{"task_id": draft, "attempt": 3, "outcome": "INCONCLUSIVE", "verifier": "fact-checker",
		"result_digest": domain.ResultDigest([]byte(`"draft one"`)), "evidence": map[string]any{"unsure": 2},
		"evidence_refs": []map[string]any{{"name": "trace.json", "sha256": strings.Repeat("ab", 32), "size": 4096}}})
	c.do("task.review", map[string]any{"task_id": draft, "decision": "retry", "reason": "cite the sources"})
	c.do("task.claim", map[string]any{"task_id": draft, "executor": "writer-2"})
	c.do("task.succeed", map[string]any{"task_id": draft, "attempt": 4, "result": "draft two"})
	c.do("task.verify", map[string]any{"task_id": draft, "attempt": 4, "outcome": "PASS", "verifier": "fact-checker",
		"verifier_version": "2.0.1", "result_digest": domain.ResultDigest([]byte(`"draft two"`))})

	// The gate: a finance approver may not decide it; an editor approves.
	gate := c.pending(publish)
	require.Zero(t, gate.Attempt, "a gate is asked before the first attempt")
	c.refused("approval.decide", c.decision(publish, gate.ID, "omar", "approve", ""), domain.CodeForbidden, domain.RefusedUnauthorized)
	r = c.do("approval.decide", c.decision(publish, gate.ID, "maria", "approve", "looks good"))
	require.Equal(t, gate.ID, r.ApprovalID)
	require.Equal(t, domain.StateReady, r.State)

	// The first attempt asks before it publishes; the editor escalates to
	// legal, who approves, and a new attempt goes on.
	r = c.do("task.claim", map[string]any{"task_id": publish, "executor": "publisher-1"})
	require.Len(t, r.Task.Approvals, 1, "the claimed task carries its approvals")
	r = c.do("task.request_approval", map[string]any{"task_id": publish, "attempt": 1,
		"action":  map[string]any{"tool": "cms.publish", "page": "/reports/2025-q2", "visibility": "public"},
		"summary": "Publish the Q2 report on the public website", "basis": map[string]any{"verification": "PASS"},
		"responses": []string{"approve", "reject", "revise", "escalate"}, "branches": map[string]any{"revise": "resume"},
		"escalate_to": "legal", "on_expiry": "fail", "expires_in": "2h"})
	asked := r.ApprovalID
	require.Equal(t, asked, c.pending(publish).ID)
	c.do("approval.decide", c.decision(publish, asked, "maria", "escalate", "legal should see the figures"))
	escalated := c.pending(publish)
	require.Equal(t, "legal", escalated.Role)
	require.NotEqual(t, asked, escalated.ID)
	r = c.do("approval.decide", c.decision(publish, escalated.ID, "lena", "approve", ""))
	require.Equal(t, domain.StateReady, r.State)
	r = c.do("task.claim", map[string]any{"task_id": publish, "executor": "publisher-1"})
	require.Equal(t, 2, r.Attempt)
	require.Len(t, r.Task.Approvals, 3)
	// A signal sent before its wait is kept, and the wait takes it at once.
	r = c.do("task.signal", map[string]any{"task_id": publish, "name": "cms.preview", "payload": map[string]any{"url": "https://example.com/q2-preview"}})
	require.Equal(t, domain.StateRunning, r.State)
	r = c.do("task.wait", map[string]any{"task_id": publish, "attempt": 2, "kind": "signal", "signal": "cms.preview"})
	require.Equal(t, domain.StateReady, r.State)
	c.do("task.claim", map[string]any{"task_id": publish, "executor": "publisher-1"})
	c.do("task.wait", map[string]any{"task_id": publish, "attempt": 3, "kind": "signal", "signal": "cms.published"})
	c.do("task.signal", map[string]any{"task_id": publish, "name": "cms.published", "payload": map[string]any{"url": "https://example.com/q2"}})
	c.do("task.claim", map[string]any{"task_id": publish, "executor": "publisher-1"})
	r = c.do("task.succeed", map[string]any{"task_id": publish, "attempt": 4})
	require.Equal(t, domain.StateAccepted, r.State)
	g, err := c.w.Goal(goal)
	require.NoError(t, err)
	require.Equal(t, domain.GoalStateAchieved, g.State)

	// A goal that fails: an error that is not retryable fails its dependent.
	goal2 := domain.DeriveID(c.now, "goal-2")
	c.do("goal.create", map[string]any{"goal_id": goal2, "title": "Second"})
	plan2 := ids(c.do("plan.submit", map[string]any{"goal_id": goal2, "tasks": []map[string]any{
		{"key": "a", "queue": "research"}, {"key": "b", "queue": "research", "depends_on": []string{"a"}}}}))
	c.do("task.claim", map[string]any{"task_id": plan2["a"], "executor": "r"})
	c.do("task.fail", map[string]any{"task_id": plan2["a"], "attempt": 1, "error": map[string]any{"message": "bad input"}, "retryable": false})
	// A person fixes the input and retries it: the goal reopens, b waits for
	// a again, and a's second attempt carries the goal.
	r = c.do("task.retry", map[string]any{"task_id": plan2["a"], "reason": "input fixed"})
	require.Equal(t, domain.StateReady, r.State)
	c.do("task.claim", map[string]any{"task_id": plan2["a"], "executor": "r"})
	r = c.do("task.succeed", map[string]any{"task_id": plan2["a"], "attempt": 2})
	require.Equal(t, domain.StateAccepted, r.State)
	require.Equal(t, domain.StateReady, c.task(plan2["b"]).State)

	// A goal whose budget runs out asks finance to extend it, who approves.
	goal4 := domain.DeriveID(c.now, "goal-4")
	c.do("goal.create", map[string]any{"goal_id": goal4, "title": "Fourth", "envelope": map[string]any{
		"budget": map[string]any{"attempts": 1}, "on_exhausted": "approval", "extension_role": "finance"}})
	plan4 := ids(c.do("plan.submit", map[string]any{"goal_id": goal4, "tasks": []map[string]any{{"key": "p", "queue": "research"}}}))
	c.do("task.claim", map[string]any{"task_id": plan4["p"], "executor": "r"})
	r = c.do("task.fail", map[string]any{"task_id": plan4["p"], "attempt": 1, "error": map[string]any{"message": "flaky"}, "retryable": true})
	require.Equal(t, domain.StateWaiting, r.State)
	extension := c.pending(plan4["p"])
	require.Equal(t, "budget", extension.Kind)
	r = c.do("approval.decide", c.decision(plan4["p"], extension.ID, "omar", "approve", "one more try"))
	require.Equal(t, domain.StateReady, r.State)

	// A goal whose plan is revised (kept, replaced, added, removed), then
	// canceled.
	goal3 := domain.DeriveID(c.now, "goal-3")
	c.do("goal.create", map[string]any{"goal_id": goal3, "title": "Third"})
	c.do("plan.submit", map[string]any{"goal_id": goal3, "tasks": []map[string]any{
		{"key": "x", "queue": "research"}, {"key": "y", "queue": "research"}, {"key": "w", "queue": "research"}}})
	c.do("plan.submit", map[string]any{"goal_id": goal3, "tasks": []map[string]any{
		{"key": "x", "queue": "research"}, {"key": "y", "queue": "writer"}, {"key": "z", "queue": "research"}}})
	c.do("goal.cancel", map[string]any{"goal_id": goal3, "reason": "moved to Q3"})

	// Standalone tasks: one rejected at its approval gate; one whose gate
	// expires, and a decision that comes too late; one that misses its
	// deadline; one that waits for its start time and is then canceled; one
	// quarantined.
	gated := domain.DeriveID(c.now, "task-1")
	c.do("task.create", map[string]any{"task_id": gated, "labels": map[string]any{"invoice": "1042"}, "spec": map[string]any{"queue": "billing",
		"approval": map[string]any{"role": "finance"}}})
	c.do("task.label", map[string]any{"task_id": gated, "set": map[string]any{"customer": "acme"}})
	r = c.do("approval.decide", c.decision(gated, c.pending(gated).ID, "omar", "reject", "not this month"))
	require.Equal(t, domain.StateRejected, r.State)
	// A gate that needs two editors: maria's approval signs off, noor's
	// makes the quorum and decides.
	c.register("noor", "editor")
	fourEyes := domain.DeriveID(c.now, "task-four-eyes")
	c.do("task.create", map[string]any{"task_id": fourEyes, "spec": map[string]any{"queue": "billing",
		"approval": map[string]any{"role": "editor", "quorum": 2}}})
	r = c.do("approval.decide", c.decision(fourEyes, c.pending(fourEyes).ID, "maria", "approve", "one pair of eyes"))
	require.Equal(t, domain.StateWaiting, r.State)
	r = c.do("approval.decide", c.decision(fourEyes, c.pending(fourEyes).ID, "noor", "approve", ""))
	require.Equal(t, domain.StateReady, r.State)
	// Another, created by maria and excluding its requester: her approval is
	// refused; pia signs off and is revoked, so noor's approval is the only
	// one that counts (pia's sign-off dropped), and quinn's decides.
	c.register("pia", "editor")
	c.register("quinn", "editor")
	c.actor = "maria"
	apart := domain.DeriveID(c.now, "task-four-eyes-apart")
	c.do("task.create", map[string]any{"task_id": apart, "spec": map[string]any{"queue": "billing",
		"approval": map[string]any{"role": "editor", "quorum": 2, "exclude_requester": true}}})
	c.actor = "user:maria@acme.example"
	c.refused("approval.decide", c.decision(apart, c.pending(apart).ID, "maria", "approve", ""), domain.CodeForbidden, domain.RefusedSelfApproval)
	c.do("approval.decide", c.decision(apart, c.pending(apart).ID, "pia", "approve", ""))
	c.do("approver.revoke", map[string]any{"name": "pia"})
	r = c.do("approval.decide", c.decision(apart, c.pending(apart).ID, "noor", "approve", ""))
	require.Equal(t, domain.StateWaiting, r.State, "pia's sign-off no longer counts")
	r = c.do("approval.decide", c.decision(apart, c.pending(apart).ID, "quinn", "approve", ""))
	require.Equal(t, domain.StateReady, r.State)

	expiring := domain.DeriveID(c.now, "task-4")
	c.do("task.create", map[string]any{"task_id": expiring, "spec": map[string]any{"queue": "billing", "input": map[string]any{"amount": 12},
		"approval": map[string]any{"expires_in": "1h", "on_expiry": "fail", "basis": map[string]any{"quote": "Q-17"}}}})
	lapsed := c.pending(expiring)
	require.NotNil(t, lapsed.ExpiresAt)
	c.now = *lapsed.ExpiresAt
	r = c.do("timer.fire", map[string]any{"task_id": expiring, "kind": "approval_expiry", "attempt": 1,
		"due": lapsed.ExpiresAt.Format(time.RFC3339Nano)})
	require.Equal(t, domain.StateFailed, r.State)
	c.refused("approval.decide", c.decision(expiring, lapsed.ID, "omar", "approve", ""), domain.CodeConflict, domain.RefusedExpired)

	// Decisions refused for who sent them: a revoked approver, a key that
	// expired, an authenticated identity naming another approver. Then the
	// approver decides as itself, and leaves.
	c.register("ivan", "finance")
	c.do("approver.revoke", map[string]any{"name": "ivan"})
	expiry := c.now.Add(time.Hour)
	c.registerUntil("kim", "finance", expiry)
	held := domain.DeriveID(c.now, "task-6")
	c.do("task.create", map[string]any{"task_id": held, "spec": map[string]any{"queue": "billing",
		"approval": map[string]any{"role": "finance"}}})
	heldID := c.pending(held).ID
	c.refused("approval.decide", c.decision(held, heldID, "ivan", "approve", ""), domain.CodeForbidden, domain.RefusedRevoked)
	c.now = expiry
	c.refused("approval.decide", c.decision(held, heldID, "kim", "approve", ""), domain.CodeForbidden, domain.RefusedKeyExpired)
	c.actor, c.authn = "maria", true
	c.refused("approval.decide", c.decision(held, heldID, "omar", "approve", ""), domain.CodeForbidden, domain.RefusedNotApprover)
	c.actor = "omar"
	r = c.do("approval.decide", c.decision(held, heldID, "omar", "approve", ""))
	require.Equal(t, domain.StateReady, r.State)
	c.actor, c.authn = "user:maria@acme.example", false
	c.do("member.remove", map[string]any{"name": "researcher-1"})

	late := domain.DeriveID(c.now, "task-5")
	deadline := c.now.Add(30 * time.Minute)
	c.do("task.create", map[string]any{"task_id": late, "spec": map[string]any{"queue": "billing",
		"deadline": deadline.Format(time.RFC3339)}})
	c.do("task.claim", map[string]any{"task_id": late, "executor": "biller-1"})
	c.now = deadline
	r = c.do("timer.fire", map[string]any{"task_id": late, "kind": "task_deadline", "due": deadline.Format(time.RFC3339)})
	require.Equal(t, domain.StateFailed, r.State)
	require.Equal(t, domain.ReasonDeadline, c.task(late).Reason)

	timed := domain.DeriveID(c.now, "task-2")
	start := c.now.Add(time.Hour)
	c.do("task.create", map[string]any{"task_id": timed, "spec": map[string]any{"key": "later", "queue": "billing",
		"depends_on": []string{collect}, "start_at": start.Format(time.RFC3339)}})
	c.now = start
	c.do("timer.fire", map[string]any{"task_id": timed, "kind": "wait", "due": start.Format(time.RFC3339)})
	c.do("task.cancel", map[string]any{"task_id": timed, "reason": "no longer needed"})
	poisoned := domain.DeriveID(c.now, "task-3")
	c.do("task.create", map[string]any{"task_id": poisoned, "spec": map[string]any{"queue": "billing", "priority": 1}})
	c.do("task.quarantine", map[string]any{"task_id": poisoned, "reason": "work item delivered 5 times without being completed"})

	// A ritual: two versions, the first run by number, the second by
	// default; the goals it makes are ordinary ones that name it.
	ritual := map[string]any{"name": "quarterly", "description": "A quarterly report.",
		"parameters": map[string]any{"type": "object", "required": []string{"quarter"}, "properties": map[string]any{
			"quarter": map[string]any{"type": "string"}, "attempts": map[string]any{"type": "integer", "default": 2}}},
		"goal":  map[string]any{"title": "Report ${quarter}"},
		"tasks": []map[string]any{{"key": "collect", "queue": "research", "input": map[string]any{"quarter": "${quarter}"}}}}
	r = c.do("ritual.define", ritual)
	require.Equal(t, uint64(1), r.Version)
	require.True(t, c.do("ritual.define", ritual).Duplicate, "the same content again is the same version")
	ritual["tasks"] = []map[string]any{{"key": "collect", "queue": "research", "retry": map[string]any{"max_attempts": "${attempts}"}}}
	require.Equal(t, uint64(2), c.do("ritual.define", ritual).Version)
	ran := domain.DeriveID(c.now, "goal-4")
	r = c.do("ritual.run", map[string]any{"name": "quarterly", "version": 1, "params": map[string]any{"quarter": "2025-Q3"}, "goal_id": ran})
	require.Equal(t, ran, r.ID)
	require.Len(t, r.Tasks, 1)
	g, err = c.w.Goal(ran)
	require.NoError(t, err)
	require.Equal(t, "Report 2025-Q3", g.Title)
	require.Equal(t, &domain.RitualRef{Name: "quarterly", Version: 1}, g.Ritual)
	r = c.do("ritual.run", map[string]any{"name": "quarterly", "params": map[string]any{"quarter": "2025-Q4"}, "goal_id": domain.DeriveID(c.now, "goal-5")})
	require.Equal(t, 2, c.task(r.Tasks[0].TaskID).Spec.Retry.MaxAttempts, "the default of attempts")

	// Delegation: a task hands work on to a child goal, which fails; its
	// review retries it; the new attempt delegates to a ritual's goal,
	// which is achieved and resumes it; a third delegation is cancelled
	// with its parent.
	goal6 := domain.DeriveID(c.now, "goal-6")
	lead := ids(c.do("goal.create", map[string]any{"goal_id": goal6, "title": "Sixth",
		"envelope": map[string]any{"permissions": map[string]any{"queues": []string{"research", "writer"}}},
		"tasks":    []map[string]any{{"key": "lead", "queue": "research"}}}))["lead"]
	c.do("task.claim", map[string]any{"task_id": lead, "executor": "r"})
	child := domain.DeriveID(c.now, "goal-7")
	r = c.do("task.delegate", map[string]any{"task_id": lead, "attempt": 1, "key": "sources", "on_failure": "review",
		"goal": map[string]any{"goal_id": child, "title": "Sources", "tasks": []map[string]any{{"key": "s", "queue": "writer"}}}})
	require.Equal(t, child, r.GoalID)
	require.Equal(t, domain.StateWaiting, r.State)
	g, err = c.w.Goal(child)
	require.NoError(t, err)
	require.Equal(t, &domain.ParentRef{TaskID: lead, GoalID: goal6, Key: "sources", Depth: 1}, g.Parent)
	require.Equal(t, []string{"research", "writer"}, g.Envelope.Permissions.Queues, "the child takes its parent's permissions")
	c.do("task.claim", map[string]any{"task_id": g.Plan[0].TaskID, "executor": "w"})
	c.do("task.fail", map[string]any{"task_id": g.Plan[0].TaskID, "attempt": 1, "error": map[string]any{"message": "no access"}, "retryable": false})
	require.Equal(t, domain.StateNeedsReview, c.task(lead).State)
	c.do("task.review", map[string]any{"task_id": lead, "decision": "retry"})
	c.do("task.claim", map[string]any{"task_id": lead, "executor": "r"})
	r = c.do("task.delegate", map[string]any{"task_id": lead, "attempt": 2, "key": "quarterly",
		"ritual": map[string]any{"name": "quarterly", "version": 1, "params": map[string]any{"quarter": "2025-Q2"}, "goal_id": domain.DeriveID(c.now, "goal-9")}})
	g, err = c.w.Goal(r.GoalID)
	require.NoError(t, err)
	require.Equal(t, &domain.RitualRef{Name: "quarterly", Version: 1}, g.Ritual)
	c.do("task.claim", map[string]any{"task_id": g.Plan[0].TaskID, "executor": "r"})
	c.do("task.succeed", map[string]any{"task_id": g.Plan[0].TaskID, "attempt": 1, "result": map[string]any{"rows": 3}})
	require.Equal(t, domain.StateReady, c.task(lead).State)
	c.do("task.claim", map[string]any{"task_id": lead, "executor": "r"})
	r = c.do("task.delegate", map[string]any{"task_id": lead, "attempt": 3, "key": "more",
		"goal": map[string]any{"title": "More", "goal_id": domain.DeriveID(c.now, "goal-8"), "tasks": []map[string]any{{"key": "m", "queue": "research"}}}})
	c.do("task.cancel", map[string]any{"task_id": lead, "reason": "enough"})
	g, err = c.w.Goal(r.GoalID)
	require.NoError(t, err)
	require.Equal(t, domain.GoalStateCancelled, g.State)
	require.Equal(t, []string{domain.GoalStateFailed, domain.GoalStateAchieved, domain.GoalStateCancelled},
		[]string{c.task(lead).Delegations[0].State, c.task(lead).Delegations[1].State, c.task(lead).Delegations[2].State})

	// Privacy: a goal with its own data key is shredded (and cancelled);
	// then the whole workspace is. With a retention, goals get their own
	// keys.
	c.do("workspace.configure", map[string]any{"retain_ended": "720h"})
	goal10 := domain.DeriveID(c.now, "goal-10")
	c.do("goal.create", map[string]any{"goal_id": goal10, "title": "Tenth", "envelope": map[string]any{"privacy": map[string]any{"key": "goal"}},
		"tasks": []map[string]any{{"key": "t", "queue": "research", "input": "secret"}}})
	r = c.do("goal.shred", map[string]any{"goal_id": goal10, "reason": "erasure request"})
	require.Equal(t, domain.GoalStateCancelled, r.State)

	// A schedule every hour, its service down for three slots: catch-up
	// one starts the latest, with its goal in the same commit, and records
	// the two before it skipped.
	c.do("schedule.create", map[string]any{"name": "hourly", "every": "1h", "overlap": "allow",
		"goal": map[string]any{"title": "Hourly check"}, "tasks": []map[string]any{{"key": "check", "queue": "research"}}})
	sc, err := c.w.Schedule(domain.ScheduleID(c.ws, "hourly"))
	require.NoError(t, err)
	first := *sc.NextSlot
	c.now = first.Add(2*time.Hour + 29*time.Minute)
	c.do("timer.fire", map[string]any{"schedule": "hourly", "kind": "schedule", "due": first.Format(time.RFC3339Nano)})
	sc, err = c.w.Schedule(domain.ScheduleID(c.ws, "hourly"))
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2}, []uint64{sc.Fired, sc.Skipped})
	g, err = c.w.Goal(sc.LastGoal)
	require.NoError(t, err)
	require.Equal(t, &domain.ScheduleRef{Name: "hourly", Slot: first.Add(2 * time.Hour)}, g.Schedule)
	// A schedule whose goal is still open at its next slot waits for the
	// goal to end (overlap skip: no next slot meanwhile), and waits for its
	// next slot again once it has.
	c.do("schedule.create", map[string]any{"name": "daily", "every": "24h",
		"goal": map[string]any{"title": "Daily digest"}, "tasks": []map[string]any{{"key": "digest", "queue": "research"}}})
	for range 2 {
		sc, err = c.w.Schedule(domain.ScheduleID(c.ws, "daily"))
		require.NoError(t, err)
		due := *sc.NextSlot
		c.now = due
		c.do("timer.fire", map[string]any{"schedule": "daily", "kind": "schedule", "due": due.Format(time.RFC3339Nano)})
	}
	sc, err = c.w.Schedule(domain.ScheduleID(c.ws, "daily"))
	require.NoError(t, err)
	require.Nil(t, sc.NextSlot)
	require.Equal(t, sc.LastGoal, sc.WaitsFor)
	c.do("goal.cancel", map[string]any{"goal_id": sc.LastGoal, "reason": "superseded"})
	sc, err = c.w.Schedule(domain.ScheduleID(c.ws, "daily"))
	require.NoError(t, err)
	require.NotNil(t, sc.NextSlot)
	c.do("schedule.pause", map[string]any{"name": "hourly"})
	c.do("schedule.resume", map[string]any{"name": "hourly"})
	c.do("schedule.delete", map[string]any{"name": "hourly"})
	c.do("workspace.shred", map[string]any{"reason": "the customer left"})

	var cmds, events []string
	for n := range c.cmds {
		cmds = append(cmds, n)
	}
	for e := range c.events {
		events = append(events, e)
	}
	slices.Sort(cmds)
	slices.Sort(events)
	require.Equal(t, schemas.CommandNames(), cmds, "the contract test must send every command")
	require.Equal(t, schemas.EventTypes(), events, "the contract test must see every event type")
}
