package handlers_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// encrypted starts the service with encryption on, in dir, its logs in out.
func encrypted(t *testing.T, dir string, out *servicetest.Output) *servicetest.Service {
	t.Helper()
	return servicetest.Start(t, dir, servicetest.Options{Config: handlers.Config{WriterID: "test-writer", Encryption: true,
		MasterKey: bytes.Repeat([]byte{42}, 32), Logger: slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}))}})
}

// markers are the payloads of one scope's work, each distinctive.
type markers struct{ input, checkpoint, signal, result, evidence, parsed, failure string }

func markersOf(name string) markers {
	return markers{input: "MARK-" + name + "-INPUT", checkpoint: "MARK-" + name + "-CHECKPOINT", signal: "MARK-" + name + "-SIGNAL",
		result: "MARK-" + name + "-RESULT", evidence: "MARK-" + name + "-EVIDENCE", parsed: "MARK-" + name + "-PARSED", failure: "MARK-" + name + "-FAILURE"}
}

func (m markers) all() []string {
	return []string{m.input, m.checkpoint, m.signal, m.result, m.evidence, m.parsed, m.failure}
}

// work runs a task through every payload it may carry: input, checkpoint,
// a signal kept for a later wait, a result, a verdict's evidence. It
// returns the task's id.
func work(t *testing.T, st *servicetest.Service, c *servicetest.Client, ws string, goal map[string]any, m markers) string {
	t.Helper()
	var g schemas.CommandResult
	goal["tasks"] = []map[string]any{{"key": "t", "queue": "q", "input": map[string]string{"secret": m.input},
		"verification": map[string]any{"queue": "checks"}}, {"key": "f", "queue": "q"}}
	require.NoError(t, json.Unmarshal(c.Command(t, "goal.create", goal), &g))
	id := g.Tasks[0].TaskID
	var claim schemas.CommandResult
	require.NoError(t, json.Unmarshal(c.Command(t, "task.claim", map[string]any{"task_id": id, "executor": "e"}), &claim))
	require.Contains(t, string(claim.Task.Spec.Input), m.input, "the claimer gets the input opened")
	c.Command(t, "task.checkpoint", map[string]any{"task_id": id, "attempt": 1, "token": claim.Token, "checkpoint": m.checkpoint})
	c.Command(t, "task.signal", map[string]any{"task_id": id, "name": "s", "payload": m.signal})
	c.Command(t, "task.succeed", map[string]any{"task_id": id, "attempt": 1, "token": claim.Token, "result": m.result,
		"model_steps": []map[string]any{{"model": "m", "parsed": map[string]string{"answer": m.parsed}, "tokens": 10}}})
	failing := g.Tasks[1].TaskID
	var fc schemas.CommandResult
	require.NoError(t, json.Unmarshal(c.Command(t, "task.claim", map[string]any{"task_id": failing, "executor": "e"}), &fc))
	c.Command(t, "task.fail", map[string]any{"task_id": failing, "attempt": 1, "token": fc.Token, "retryable": false,
		"error": map[string]any{"code": "refused", "message": "the vendor said " + m.failure}})
	require.Equal(t, "the vendor said "+m.failure, c.Task(t, failing).Attempts[0].Error.Message, "read back opened")
	c.Command(t, "task.verify", map[string]any{"task_id": id, "attempt": 1, "outcome": "INCONCLUSIVE", "verifier": "v",
		"result_digest": verifyItem(t, st, ws, id).ResultDigest, "evidence": m.evidence})
	return id
}

// putArtifact stores b as an artifact of workspace ws (one chunk) and
// returns its digest.
func putArtifact(t *testing.T, c *servicetest.Client, ws string, b []byte) string {
	t.Helper()
	sum := sha256.Sum256(b)
	sha := hex.EncodeToString(sum[:])
	r := c.Request(t, "dwr.q."+ws+".artifact.chunk", b, nats.Header{schemas.HeaderUpload: {"u1"}, schemas.HeaderChunk: {"0"}})
	require.True(t, r.OK, "%+v", r.Error)
	r = c.Request(t, "dwr.q."+ws+".artifact.put", schemas.ArtifactPut{Upload: "u1", Chunks: 1, Size: int64(len(b)), SHA256: sha, Name: "notes.txt"}, nil)
	require.True(t, r.OK, "%+v", r.Error)
	return sha
}

// getArtifact reads the one chunk of artifact sha of workspace ws: its
// bytes, or the error reply.
func getArtifact(t *testing.T, nc *nats.Conn, ws, sha string) ([]byte, *schemas.Error) {
	t.Helper()
	b, err := json.Marshal(schemas.ArtifactGet{SHA256: sha})
	require.NoError(t, err)
	m, err := nc.Request("dwr.q."+ws+".artifact.get", b, 10*time.Second)
	require.NoError(t, err)
	if m.Header.Get(schemas.HeaderChunkSeq) == "" {
		var r schemas.Reply
		require.NoError(t, json.Unmarshal(m.Data, &r))
		return nil, r.Error
	}
	return m.Data, nil
}

// verifyItem returns the verify work item of task id of workspace ws: what
// a verifier is handed, its result sealed.
func verifyItem(t *testing.T, st *servicetest.Service, ws, id string) schemas.WorkItem {
	t.Helper()
	js, err := jetstream.New(st.Conn)
	require.NoError(t, err)
	ctx := context.Background()
	s, err := js.Stream(ctx, "DWR_WORK")
	require.NoError(t, err)
	var it schemas.WorkItem
	require.True(t, servicetest.Within(10*time.Second, func() bool { // published once the record is committed
		m, err := s.GetLastMsgForSubject(ctx, "dwr.work."+ws+".checks")
		return err == nil && json.Unmarshal(m.Data, &it) == nil && it.TaskID == id
	}), "no verify item for task %s", id)
	require.True(t, schemas.IsSealed(it.Result), "a work item carries the result sealed: %s", it.Result)
	return it
}

// hits counts where below dir, and in logs, a marker stands: as written,
// JSON-escaped (the same, for these), or in base64 at each alignment.
func hits(t *testing.T, dir string, logs []byte, marker string) int {
	t.Helper()
	forms := [][]byte{[]byte(marker)}
	for i := range 3 {
		b := base64.StdEncoding.EncodeToString([]byte("xx" + marker)[2-i:])
		forms = append(forms, []byte(b[4:len(b)-4]))
	}
	n := 0
	count := func(data []byte) {
		for _, f := range forms {
			n += bytes.Count(data, f)
		}
	}
	count(logs)
	require.NoError(t, filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		data, err := os.ReadFile(p) //nolint:gosec // the test's own data directory
		if err == nil {
			count(data)
		}
		return err
	}))
	return n
}

// The crypto-shredding test: with encryption on, every payload is sealed
// wherever it is stored; a goal with its own key and a whole workspace are
// shredded; then no byte of the data directory, nor the service's logs,
// holds their payloads, while the rest still reads.
func TestCryptoShredding(t *testing.T) {
	dir := t.TempDir()
	var out servicetest.Output
	st := encrypted(t, dir, &out)
	c := st.Client("default")
	acme := st.Client("acme")
	acme.Command(t, "workspace.create", map[string]any{"name": "acme"})

	shredGoal, keep, shredWS := markersOf("GOAL"), markersOf("KEEP"), markersOf("WS")
	own := work(t, st, c, "default", map[string]any{"title": "own key", "envelope": map[string]any{"privacy": map[string]any{"key": "goal"}}}, shredGoal)
	kept := work(t, st, c, "default", map[string]any{"title": "workspace key"}, keep)
	other := work(t, st, acme, "acme", map[string]any{"title": "another workspace"}, shredWS)

	// Artifacts: their bytes are sealed with the workspace's key.
	keptArtifact := putArtifact(t, c, "default", []byte("MARK-KEEP-ARTIFACT"))
	gone := putArtifact(t, acme, "acme", []byte("MARK-WS-ARTIFACT"))
	got, werr := getArtifact(t, st.Conn, "acme", gone)
	require.Nil(t, werr)
	require.Equal(t, "MARK-WS-ARTIFACT", string(got), "read back opened")

	// Read back opened, before anything is shredded.
	for id, m := range map[string]markers{own: shredGoal, kept: keep} {
		tk := c.Task(t, id)
		require.Contains(t, string(tk.Spec.Input), m.input)
		require.Equal(t, `"`+m.result+`"`, string(tk.Attempts[0].Result))
		require.Equal(t, `"`+m.evidence+`"`, string(tk.Verifications[0].Evidence))
		require.Equal(t, `"`+m.signal+`"`, string(tk.PendingSignals[0].Payload))
	}

	// A goal under its workspace's key cannot be shredded alone.
	var own1 schemas.Task
	c.Query(t, "task.get", schemas.Query{ID: own}, &own1)
	r := c.Request(t, "dwr.cmd.default.goal.shred", map[string]any{"goal_id": c.Task(t, kept).GoalID}, nil)
	require.False(t, r.OK)
	require.Equal(t, schemas.CodeConflict, r.Error.Code)
	c.Command(t, "goal.shred", map[string]any{"goal_id": own1.GoalID, "reason": "erasure request"})
	acme.Command(t, "workspace.shred", map[string]any{"reason": "the customer left"})

	tk := c.Task(t, own)
	require.Equal(t, `"[shredded]"`, string(tk.Spec.Input))
	require.Equal(t, `"[shredded]"`, string(tk.Attempts[0].Result))
	require.Equal(t, domain.StateCancelled, tk.State, "an open goal shredded is cancelled")
	require.Equal(t, `"[shredded]"`, string(acme.Task(t, other).Spec.Input))
	require.Contains(t, string(c.Task(t, kept).Spec.Input), keep.input, "the rest still reads")
	_, werr = getArtifact(t, st.Conn, "acme", gone)
	require.NotNil(t, werr, "a shredded workspace's artifact cannot be read")
	require.Contains(t, werr.Message, "the data of workspace acme was shredded")
	got, werr = getArtifact(t, st.Conn, "default", keptArtifact)
	require.Nil(t, werr)
	require.Equal(t, "MARK-KEEP-ARTIFACT", string(got))
	var evs []schemas.Event
	c.Query(t, "events", schemas.Query{ID: own, Aggregate: domain.AggTask}, &evs)
	require.Contains(t, string(evs[0].Data), `"[shredded]"`)

	// No new payloads for what was shredded, and its work cannot run.
	r = acme.Request(t, "dwr.cmd.acme.task.review", map[string]any{"task_id": other, "decision": "retry"}, nil)
	require.True(t, r.OK, "%+v", r.Error)
	r = acme.Request(t, "dwr.cmd.acme.task.claim", map[string]any{"task_id": other, "executor": "e"}, nil)
	require.False(t, r.OK)
	require.Equal(t, schemas.CodeConflict, r.Error.Code)
	require.Contains(t, r.Error.Message, "the data of workspace acme was shredded: its task "+other+" cannot run")
	r = acme.Request(t, "dwr.cmd.acme.task.create", map[string]any{"spec": map[string]any{"queue": "q", "input": 1}}, nil)
	require.False(t, r.OK)
	require.Equal(t, schemas.CodeConflict, r.Error.Code)
	require.Contains(t, r.Error.Message, "the data of workspace acme was shredded")
	r = acme.Request(t, "dwr.cmd.acme.goal.create", map[string]any{"title": "t", "envelope": map[string]any{"privacy": map[string]any{"key": "goal"}},
		"tasks": []map[string]any{{"key": "a", "queue": "q", "input": 1}}}, nil)
	require.False(t, r.OK, "nor a goal key made in a shredded workspace")

	// Restarted on the same data, the same.
	st.Stop()
	logs := []byte(out.String())
	var shredded, total int
	for _, m := range append(append(shredGoal.all(), shredWS.all()...), "MARK-WS-ARTIFACT") {
		n := hits(t, dir, logs, m)
		shredded += n
		require.Zero(t, n, "%s is left somewhere", m)
	}
	for _, m := range append(keep.all(), "MARK-KEEP-ARTIFACT") {
		total += hits(t, dir, logs, m)
	}
	t.Logf("crypto-shredding: plaintext hits of the shredded payloads %d (of 15 markers), of the kept ones %d (sealed at rest)", shredded, total)
	// The log still verifies, and views rebuilt from it are the live ones,
	// byte for byte: they never held the plaintext.
	m, err := handlers.OpenMaintenance(context.Background(), handlers.MaintenanceConfig{DataDir: dir})
	require.NoError(t, err)
	rebuilt, err := m.Rebuild(context.Background(), handlers.RebuildOptions{})
	m.Close()
	require.NoError(t, err)
	require.Equal(t, "identical to the current views, byte for byte", rebuilt.Verdict)

	st = encrypted(t, dir, &out)
	c = st.Client("default")
	require.Equal(t, `"[shredded]"`, string(c.Task(t, own).Spec.Input))
	require.Contains(t, string(c.Task(t, kept).Spec.Input), keep.input)
	require.Zero(t, total, "with encryption on no payload is stored in plaintext")
	_ = fmt.Sprint
}

// A workspace's retention shreds the payloads of goals ended longer ago,
// and of those only.
func TestRetentionShredsEndedGoals(t *testing.T) {
	clock := servicetest.NewClock(time.Now())
	st := servicetest.Start(t, "", servicetest.Options{Clock: clock, Config: handlers.Config{WriterID: "test-writer", Encryption: true,
		MasterKey: bytes.Repeat([]byte{7}, 32)}})
	c := st.Client("default")
	c.Command(t, "workspace.configure", map[string]any{"retain_ended": "1h"})
	goal := func(title string, finish bool) (string, string) {
		var g schemas.CommandResult
		require.NoError(t, json.Unmarshal(c.Command(t, "goal.create", map[string]any{"title": title,
			"tasks": []map[string]any{{"key": "t", "queue": "q", "input": "secret of " + title}}}), &g))
		id := g.Tasks[0].TaskID
		if finish {
			var claim schemas.CommandResult
			require.NoError(t, json.Unmarshal(c.Command(t, "task.claim", map[string]any{"task_id": id, "executor": "e"}), &claim))
			c.Command(t, "task.succeed", map[string]any{"task_id": id, "attempt": 1, "token": claim.Token, "result": "done " + title})
		}
		return g.ID, id
	}
	oldGoal, oldTask := goal("old", true)
	_, openTask := goal("open", false)
	clock.Advance(2 * time.Hour)
	_, recentTask := goal("recent", true)

	shredded, err := st.Svc.SweepRetention(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{oldGoal}, shredded)
	require.Equal(t, `"[shredded]"`, string(c.Task(t, oldTask).Spec.Input))
	require.Equal(t, `"[shredded]"`, string(c.Task(t, oldTask).Attempts[0].Result))
	require.Equal(t, domain.StateAccepted, c.Task(t, oldTask).State, "the spine stays")
	require.Equal(t, `"secret of open"`, string(c.Task(t, openTask).Spec.Input), "an open goal is kept")
	require.Equal(t, `"secret of recent"`, string(c.Task(t, recentTask).Spec.Input), "a goal ended within the retention is kept")
	again, err := st.Svc.SweepRetention(context.Background())
	require.NoError(t, err)
	require.Empty(t, again, "shredded once")
}

// An approval's action, basis and comment are sealed too; the digest the
// approver signs is the plaintext action's, so the signature holds.
func TestApprovalsOverSealedActions(t *testing.T) {
	dir := t.TempDir()
	var out servicetest.Output
	st := encrypted(t, dir, &out)
	c := st.Client("default")
	pub, priv, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	c.Command(t, "approver.register", map[string]any{"name": "ada", "role": "ops", "public_key": base64.StdEncoding.EncodeToString(pub)})
	id := c.CreateTask(t, map[string]any{"queue": "refunds"})
	var claim schemas.CommandResult
	require.NoError(t, json.Unmarshal(c.Command(t, "task.claim", map[string]any{"task_id": id, "executor": "e"}), &claim))
	action := map[string]any{"refund": "MARK-APPROVAL-ACTION", "cents": 1250}
	var asked schemas.CommandResult
	require.NoError(t, json.Unmarshal(c.Command(t, "task.request_approval", map[string]any{"task_id": id, "attempt": 1, "token": claim.Token,
		"action": action, "basis": "MARK-APPROVAL-BASIS", "summary": "refund"}), &asked))
	b, err := json.Marshal(action)
	require.NoError(t, err)
	canonical, err := schemas.CanonicalJSON(b)
	require.NoError(t, err)
	digest, err := schemas.ActionDigest(canonical)
	require.NoError(t, err)
	var a schemas.ApprovalView
	c.Query(t, "approval.get", schemas.Query{ID: asked.ApprovalID}, &a)
	require.Equal(t, digest, a.ActionDigest, "the digest of the action as sent")
	require.JSONEq(t, string(canonical), string(a.Action), "read back opened")
	c.Command(t, "approval.decide", map[string]any{"approval_id": a.ID, "approver": "ada", "response": "approve", "action_digest": digest,
		"comment": "MARK-APPROVAL-COMMENT", "signature": domain.SignDecision(priv, a.ID, "approve", digest)})
	c.Query(t, "approval.get", schemas.Query{ID: asked.ApprovalID}, &a)
	require.Equal(t, "MARK-APPROVAL-COMMENT", a.Decision.Comment)

	// A gate's action is the task's input, sealed: its digest is the input's
	// as sent, which an approver computes from the action it is shown (as
	// dwr approve checks before it signs).
	gated := c.CreateTask(t, map[string]any{"queue": "refunds", "input": map[string]any{"pay": "MARK-GATE-INPUT", "cents": 5},
		"approval": map[string]any{"role": "ops"}})
	gate := c.Task(t, gated).Approvals[0]
	var g schemas.ApprovalView
	c.Query(t, "approval.get", schemas.Query{ID: gate.ID}, &g)
	shown, err := schemas.ActionDigest(g.Action)
	require.NoError(t, err)
	require.Equal(t, shown, g.ActionDigest, "the digest of the action shown")
	r := c.Request(t, "dwr.cmd.default.approval.decide", map[string]any{"approval_id": g.ID, "approver": "ada", "response": "approve",
		"action_digest": shown, "signature": domain.SignDecision(priv, g.ID, "approve", shown)}, nil)
	require.True(t, r.OK, "%+v", r.Error)
	require.Equal(t, domain.StateReady, c.Task(t, gated).State)
	st.Stop()
	for _, m := range []string{"MARK-APPROVAL-ACTION", "MARK-APPROVAL-BASIS", "MARK-APPROVAL-COMMENT", "MARK-GATE-INPUT"} {
		require.Zero(t, hits(t, dir, []byte(out.String()), m), "%s is stored in plaintext", m)
	}
}

// A schedule's plan is sealed as it is stored, and read back opened; so is
// what a ritual's params put in the goal it renders.
func TestRitualsAndSchedulesAreSealed(t *testing.T) {
	dir := t.TempDir()
	var out servicetest.Output
	st := encrypted(t, dir, &out)
	c := st.Client("default")
	c.Command(t, "schedule.create", map[string]any{"name": "nightly", "every": "24h", "goal": map[string]any{"title": "nightly"},
		"tasks": []map[string]any{{"key": "export", "queue": "q", "input": map[string]string{"customer": "MARK-SCHEDULE-INPUT"}}}})
	var s schemas.Schedule
	c.Query(t, "schedule.get", schemas.Query{ID: "nightly"}, &s)
	require.Contains(t, string(s.Tasks), "MARK-SCHEDULE-INPUT", "read back opened")

	c.Command(t, "ritual.define", map[string]any{"name": "onboard",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"customer": map[string]any{"type": "string"}}},
		"goal":       map[string]any{"title": "onboard"},
		"tasks":      []map[string]any{{"key": "create", "queue": "q", "input": map[string]any{"customer": "${customer}"}}}})
	var run schemas.CommandResult
	require.NoError(t, json.Unmarshal(c.Command(t, "ritual.run", map[string]any{"name": "onboard", "params": map[string]any{"customer": "MARK-RITUAL-PARAM"}}), &run))
	require.JSONEq(t, `{"customer": "MARK-RITUAL-PARAM"}`, string(c.Task(t, run.Tasks[0].TaskID).Spec.Input), "rendered, read back opened")
	st.Stop()
	for _, m := range []string{"MARK-SCHEDULE-INPUT", "MARK-RITUAL-PARAM"} {
		require.Zero(t, hits(t, dir, []byte(out.String()), m), m)
	}
}
