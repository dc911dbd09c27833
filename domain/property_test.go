package domain

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// TestLifecycleProperties runs random command sequences — random plans
// (random DAGs) in one or two goals, standalone tasks, and random claims,
// reports, verifications, reviews, approvals (some sent by an authenticated
// identity), waits, signals, timers and cancellations, approvers revoked and
// registered again with keys that expire, members added and removed and
// queues configured, with attempt numbers and command ids that are often
// stale or reused, attempts' commands that now and then carry another token
// or come from another identity than the claimer, supersedes before and after
// the lease lapsed, on a clock that moves forward at random — and checks the
// lifecycle's invariants after every step. More sequences: -rapid.checks=N; longer ones:
// -domain.steps=N.
func TestLifecycleProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		m := newModel(rt)
		actions := map[string]func(){
			"goal":        m.createGoal,
			"plan":        m.submitPlan,
			"revise":      m.revisePlan,
			"standalone":  m.createTask,
			"claim":       m.claim,
			"succeed":     m.succeed,
			"fail":        m.fail,
			"lazy":        m.lazyReport,
			"checkpoint":  m.checkpoint,
			"verify":      m.verify,
			"review":      m.review,
			"approve":     m.approve,
			"wait":        m.wait,
			"signal":      m.signal,
			"timer":       m.fireTimer,
			"cancel":      m.cancelTask,
			"cancel goal": m.cancelGoal,
			"clock":       m.tick,
			"keys":        m.keys,
			"member":      m.member,
		}
		// Progress needs claims and reports more often than the rest.
		weighted := []string{"goal", "plan", "revise", "standalone",
			"claim", "claim", "claim", "claim", "claim", "succeed", "succeed", "succeed", "succeed",
			"fail", "fail", "lazy", "lazy", "lazy", "checkpoint", "verify", "verify", "verify", "review", "review",
			"approve", "approve", "wait", "signal", "signal", "timer", "timer", "timer",
			"cancel", "cancel goal", "clock", "clock", "keys", "member"}
		m.check()
		for range *propertySteps {
			actions[rapid.SampledFrom(weighted).Draw(rt, "action")]()
			m.check()
		}
		m.w.requireReplays()
		m.w.requireReplaysFromWire()
	})
}

var propertySteps = flag.Int("domain.steps", 100, "domain: steps in each random command sequence of TestLifecycleProperties")

// model drives a world at random and keeps what the invariants need.
type model struct {
	t        *rapid.T
	w        *world
	goals    []string
	plans    map[string][]TaskSpec // goal -> the last plan it accepted
	features map[string]features   // key/variant -> what the spec holds
	usedIDs  []string
	ended    map[string]*Task // terminal tasks as first seen terminal
	goalEnd  map[string]*Goal // terminal goals as first seen terminal

	// The history replayed so far, kept up to date by check.
	replayed *replayed
	seen     int
	versions map[string]uint64
}

var (
	planKeys  = []string{"k0", "k1", "k2", "k3", "k4"}
	signals   = []string{"s1", "s2"}
	verifiers = []string{"v1", "v2"}
	digests   = []string{ResultDigest([]byte(`"done"`)), "sha256:another-result"} // the successes' result, and one no attempt had
)

func newModel(t *rapid.T) *model {
	m := &model{t: t, w: setup(t), plans: map[string][]TaskSpec{}, features: map[string]features{},
		ended: map[string]*Task{}, goalEnd: map[string]*Goal{}, versions: map[string]uint64{},
		replayed: &replayed{workspaces: map[string]*Workspace{}, goals: map[string]*Goal{}, tasks: map[string]*Task{}}}
	m.usedIDs = append(m.usedIDs, m.w.history[0].CommandID)
	m.w.approver("alice", "owner")
	m.w.approver("bob", "intern")
	return m
}

// features are the parts of a spec a key has under one variant. They are drawn
// once per key and variant, so that a revision that names the same variant
// submits the same spec.
type features struct {
	Verify   bool
	OnFail   string // the verification policy, when Verify
	OnInc    string
	Approval bool
	StartAt  int // seconds after epoch; 0 for none
	Max      int
	Fatal    bool
	Timeout  bool
}

func (m *model) spec(key string, variant int, deps []string) TaskSpec {
	k := fmt.Sprintf("%s/%d", key, variant)
	f, ok := m.features[k]
	if !ok {
		f = features{
			Verify:   rapid.IntRange(0, 2).Draw(m.t, "verify") == 0,
			Approval: rapid.IntRange(0, 5).Draw(m.t, "approval") == 0,
			Max:      rapid.IntRange(1, 3).Draw(m.t, "max attempts"),
			Fatal:    rapid.Bool().Draw(m.t, "fatal"),
			Timeout:  rapid.IntRange(0, 3).Draw(m.t, "timeout") == 0,
		}
		if f.Verify {
			policies := []string{"", "", VerdictRetry, VerdictReject, VerdictReview}
			f.OnFail = rapid.SampledFrom(policies).Draw(m.t, "on fail")
			f.OnInc = rapid.SampledFrom(policies).Draw(m.t, "on inconclusive")
		}
		if rapid.IntRange(0, 4).Draw(m.t, "start at") == 0 {
			f.StartAt = rapid.IntRange(1, 30).Draw(m.t, "start at seconds")
		}
		if key != "" {
			m.features[k] = f
		}
	}
	s := TaskSpec{Key: key, Queue: "work", DependsOn: deps, Input: json.RawMessage(fmt.Sprintf(`{ "v" : %d, "html": "<a&b>" }`, variant)),
		Retry: &RetryPolicy{MaxAttempts: f.Max, InitialBackoff: Duration(time.Second), MaxBackoff: Duration(3 * time.Second)}}
	if f.Verify {
		s.Verification = &VerificationSpec{Queue: "verify", OnFail: f.OnFail, OnInconclusive: f.OnInc}
	}
	if f.Approval {
		s.Approval = &ApprovalSpec{Role: "owner"}
	}
	if f.StartAt > 0 {
		at := epoch.Add(time.Duration(f.StartAt) * time.Second)
		s.StartAt = &at
	}
	if f.Fatal {
		s.Retry.NonRetryable = []string{"fatal"}
	}
	if f.Timeout {
		s.Timeout = Duration(2 * time.Second)
	}
	return s
}

// commandID returns a fresh command id or, now and then, one already used.
func (m *model) commandID() string {
	if len(m.usedIDs) > 0 && rapid.IntRange(0, 9).Draw(m.t, "reuse id") == 9 {
		return rapid.SampledFrom(m.usedIDs).Draw(m.t, "reused id")
	}
	id := m.w.nextCommandID()
	m.usedIDs = append(m.usedIDs, id)
	return id
}

// exec decides cmd, addressed to the aggregate typ/id, under a random command
// id and checks what must hold of any single decision.
func (m *model) exec(cmd Command, typ, id string) (*Outcome, error) {
	m.t.Helper()
	cmdID := m.commandID()
	length := len(m.w.history)
	applied := m.hasCommand(typ, id, CommandKey(m.w.actor, cmdID))
	var prev *Task
	if typ == AggTask {
		prev, _ = m.w.o.Task(id)
	}
	out, err := m.w.runID(cmdID, cmd)
	if err != nil {
		m.t.Logf("%s %s %s %+v: refused: %v", cmdID, m.w.actor, cmd.CommandName(), cmd, err)
		var de *Error
		require.True(m.t, errors.As(err, &de), "a refusal is a *domain.Error: %v", err)
		require.NotEqual(m.t, CodeInternal, de.Code)
		switch cmd.(type) {
		case *ReportSuccess, *ReportFailure, *SaveCheckpoint, *WaitTask:
			if de.Code == CodeForbidden {
				require.Equal(m.t, "/token", de.Field, "an attempt's command is forbidden only for its token or sender")
			}
		}
		// That deciding did not modify the world it was decided against is
		// checked after every step: the world must stay deep-equal to the
		// replayed history.
		require.Len(m.t, m.w.history, length, "a refused command appends nothing")
		return nil, err
	}
	m.t.Logf("%s %s %+v: %s", cmdID, cmd.CommandName(), cmd, describe(out))
	if applied {
		require.Empty(m.t, out.Changes, "command id %s was already applied to %s %s", cmdID, typ, id)
		require.True(m.t, out.Reply.Duplicate)
	}
	if len(out.Changes) > 0 {
		require.False(m.t, out.Reply.Duplicate, "a reply with changes is not a duplicate")
	}
	if prev != nil && len(out.Changes) > 0 {
		m.checkDecision(cmd, prev, out)
	}
	return out, nil
}

// checkDecision checks a task command that changed something against the
// task as it was before.
func (m *model) checkDecision(cmd Command, prev *Task, out *Outcome) {
	m.t.Helper()
	switch c := cmd.(type) {
	case *ReportSuccess, *ReportFailure, *SaveCheckpoint, *WaitTask:
		n := reflect.ValueOf(c).Elem().FieldByName("Attempt").Interface().(int)
		token := reflect.ValueOf(c).Elem().FieldByName("Token").Interface().(string)
		if cl := claimOf(c); cl != nil {
			require.Empty(m.t, token, "a report with a claim and a token was taken")
			require.Equal(m.t, StateReady, prev.State, "a report's claim was taken for a task that was %s", prev.State)
			require.Equal(m.t, len(prev.Attempts)+1, n, "a report's claim was taken for attempt %d after %d attempts", n, len(prev.Attempts))
			if a := m.w.task(prev.ID).Attempt(n); a != nil {
				require.Equal(m.t, m.w.actor, a.ClaimedBy, "a report's claim was recorded for another identity")
				require.Equal(m.t, cl.TokenHash, a.TokenHash)
			}
			return
		}
		a := prev.Running()
		require.True(m.t, a != nil && a.N == n, "a report from attempt %d was taken, running attempt was %+v", n, a)
		require.Equal(m.t, a.TokenHash, TokenHash(token), "a report without its attempt's token was taken")
		require.Equal(m.t, a.ClaimedBy, m.w.actor, "a report from another identity than the claimer was taken")
	case *FireTimer:
		switch c.Kind {
		case TimerBackoff:
			require.False(m.t, m.w.now.Before(*prev.BackoffUntil), "backoff timer fired early")
		case TimerWait:
			require.False(m.t, m.w.now.Before(*prev.Wait.Until), "wait timer fired early")
		case TimerAttempt:
			require.False(m.t, m.w.now.Before(*prev.Running().Deadline), "attempt timer fired early")
		}
	case *ClaimTask:
		ok := prev.State == StateReady || (prev.State == StateRunning && c.Supersedes == prev.Running().N)
		require.True(m.t, ok, "claimed a task that was %s (supersedes %d)", prev.State, c.Supersedes)
		if prev.State == StateRunning {
			require.False(m.t, m.w.now.Before(c.SupersedeAfter), "superseded attempt %d before its lease lapsed", c.Supersedes)
		}
	}
}

func describe(out *Outcome) string {
	s := ""
	for _, c := range out.Changes {
		s += fmt.Sprintf(" %s:%s@%d", c.AggregateID, c.Event.EventType(), c.Version)
	}
	if out.Reply.Duplicate {
		s += " (duplicate)"
	}
	return s
}

func (m *model) hasCommand(typ, id, key string) bool {
	switch typ {
	case AggWorkspace:
		w, _ := m.w.o.Workspace(id)
		return w != nil && w.HasCommand(key)
	case AggGoal:
		g, _ := m.w.o.Goal(id)
		return g != nil && g.HasCommand(key)
	case AggTask:
		t, _ := m.w.o.Task(id)
		return t != nil && t.HasCommand(key)
	}
	return false
}

// goal returns a goal id, or false when there is none yet.
func (m *model) goal() (string, bool) {
	if len(m.goals) == 0 {
		return "", false
	}
	return rapid.SampledFrom(m.goals).Draw(m.t, "goal"), true
}

// task returns a task id — mostly one in one of the given states (any state
// that has not ended when none is given), sometimes any task, and now and
// then one that does not exist (with a nil *Task) — or false when there is
// no task yet.
func (m *model) task(states ...string) (string, *Task, bool) {
	all := m.w.aggregates(AggTask)
	if len(all) == 0 {
		return "", nil, false
	}
	var preferred []string
	for _, id := range all {
		st := m.w.task(id).State
		if slices.Contains(states, st) || (len(states) == 0 && !Terminal(st)) {
			preferred = append(preferred, id)
		}
	}
	switch p := rapid.IntRange(0, 19).Draw(m.t, "which tasks"); {
	case p == 19:
		return DeriveID(m.w.now, "no such task"), nil, true
	case p < 15 && len(preferred) > 0:
		id := rapid.SampledFrom(preferred).Draw(m.t, "preferred task")
		return id, m.w.task(id), true
	default:
		id := rapid.SampledFrom(all).Draw(m.t, "task")
		return id, m.w.task(id), true
	}
}

// attempt returns an attempt number near t's current one.
func (m *model) attempt(t *Task) int {
	cur := 0
	if t != nil {
		cur = len(t.Attempts)
	}
	return cur + rapid.SampledFrom([]int{0, 0, 0, 0, 0, 0, -1, 1, -cur}).Draw(m.t, "attempt offset")
}

func (m *model) createGoal() {
	if len(m.goals) >= 2 {
		return
	}
	id := m.w.newID()
	if _, err := m.exec(&CreateGoal{GoalID: id, Title: "goal"}, AggGoal, id); err == nil {
		m.goals = append(m.goals, id)
	}
}

// randomPlan returns a plan over some of planKeys whose dependencies form a
// random DAG, listed in a random order.
func (m *model) randomPlan() []TaskSpec {
	keys := rapid.Permutation(planKeys).Draw(m.t, "keys")
	keys = keys[:rapid.IntRange(1, len(keys)).Draw(m.t, "plan size")]
	specs := make([]TaskSpec, len(keys))
	for i, k := range keys {
		var deps []string
		for _, d := range keys[:i] {
			if rapid.IntRange(0, 2).Draw(m.t, "depends") == 0 {
				deps = append(deps, d)
			}
		}
		specs[i] = m.spec(k, rapid.IntRange(0, 2).Draw(m.t, "variant"), deps)
	}
	return rapid.Permutation(specs).Draw(m.t, "plan order")
}

// submitPlan submits a random plan to a goal: its first plan, or now and
// then one that replaces the whole plan.
func (m *model) submitPlan() {
	g, ok := m.goal()
	if !ok || (m.plans[g] != nil && rapid.IntRange(0, 3).Draw(m.t, "replace plan") > 0) {
		return
	}
	m.submit(g, m.randomPlan())
}

// revisePlan submits a small change to a goal's last plan, so that unchanged
// tasks are kept.
func (m *model) revisePlan() {
	g, ok := m.goal()
	prev := m.plans[g]
	if !ok || len(prev) == 0 {
		return
	}
	specs := slices.Clone(prev)
	i := rapid.IntRange(0, len(specs)-1).Draw(m.t, "revised task")
	switch rapid.IntRange(0, 3).Draw(m.t, "revision") {
	case 0: // change one task's spec
		specs[i] = m.spec(specs[i].Key, rapid.IntRange(0, 2).Draw(m.t, "variant"), specs[i].DependsOn)
	case 1: // remove one task, and the dependencies on it
		if len(specs) == 1 {
			break
		}
		gone := specs[i].Key
		specs = slices.Delete(specs, i, i+1)
		for j, s := range specs {
			if slices.Contains(s.DependsOn, gone) {
				specs[j].DependsOn = slices.DeleteFunc(slices.Clone(s.DependsOn), func(d string) bool { return d == gone })
				if len(specs[j].DependsOn) == 0 {
					specs[j].DependsOn = nil
				}
			}
		}
	case 2: // add a task that depends on one
		for _, k := range planKeys {
			if !slices.ContainsFunc(specs, func(s TaskSpec) bool { return s.Key == k }) {
				specs = append(specs, m.spec(k, rapid.IntRange(0, 2).Draw(m.t, "variant"), []string{specs[i].Key}))
				break
			}
		}
	case 3: // resubmit as it is
	}
	m.submit(g, specs)
}

func (m *model) submit(g string, specs []TaskSpec) {
	invalidPlan := false
	if rapid.IntRange(0, 9).Draw(m.t, "corrupt plan") == 9 {
		invalidPlan = true
		specs = slices.Clone(specs)
		i := rapid.IntRange(0, len(specs)-1).Draw(m.t, "corrupted task")
		deps := slices.Clone(specs[i].DependsOn)
		if rapid.Bool().Draw(m.t, "cycle") {
			deps = append(deps, specs[i].Key)
		} else {
			deps = append(deps, "unknown")
		}
		specs[i].DependsOn = deps
	}
	open := m.w.goal(g).State == GoalStateOpen
	out, err := m.exec(&SubmitPlan{GoalID: g, Tasks: specs}, AggGoal, g)
	if invalidPlan && open {
		if err == nil && out.Reply.Duplicate {
			return // a retried command id answers as it first did
		}
		require.Error(m.t, err, "a plan with a bad dependency was taken")
		require.Equal(m.t, CodeInvalid, CodeOf(err))
		return
	}
	if err == nil && !out.Reply.Duplicate {
		m.plans[g] = specs
	}
}

func (m *model) createTask() {
	var deps []string
	if all := m.w.aggregates(AggTask); len(all) > 0 {
		n := rapid.IntRange(0, 2).Draw(m.t, "standalone deps")
		for range n {
			deps = append(deps, rapid.SampledFrom(all).Draw(m.t, "standalone dep"))
		}
	}
	id := m.w.newID()
	_, _ = m.exec(&CreateTask{TaskID: id, Spec: m.spec("", rapid.IntRange(0, 2).Draw(m.t, "variant"), deps)}, AggTask, id)
}

// executors are the identities that claim tasks and send their attempts'
// commands.
var executors = []string{"exec-a", "exec-b"}

func (m *model) claim() {
	id, t, ok := m.task(StateReady, StateRunning)
	if !ok {
		return
	}
	c := &ClaimTask{ClaimBody: ClaimBody{TaskID: id, Executor: "exec"}}
	if rapid.IntRange(0, 3).Draw(m.t, "supersede") == 0 {
		c.Supersedes = m.attempt(t)
		// The running attempt's lease lapsed a moment ago, or lapses in a moment.
		c.SupersedeAfter = m.w.now.Add(time.Duration(rapid.SampledFrom([]int{-1, -1, 0, 1}).Draw(m.t, "lease lapses in")) * time.Second)
	}
	m.w.actor = rapid.SampledFrom(executors).Draw(m.t, "claimer")
	_, _ = m.exec(c, AggTask, id)
}

// sender makes the world send the next command of attempt n of t as its
// claimer mostly, and now and then as the other executor; it returns the
// token the command carries: "" (the harness fills in the attempt's own)
// mostly, now and then a forged one or another attempt's.
func (m *model) sender(t *Task, n int) string {
	m.w.actor = executors[0]
	if t != nil {
		if a := t.Attempt(n); a != nil {
			m.w.actor = a.ClaimedBy
		}
	}
	if rapid.IntRange(0, 5).Draw(m.t, "impostor") == 0 {
		m.w.actor = rapid.SampledFrom(executors).Draw(m.t, "impostor identity")
	}
	switch rapid.IntRange(0, 7).Draw(m.t, "token") {
	case 0:
		return "forged"
	case 1:
		if t != nil {
			return m.w.token(t.ID, n-1) // "" when there is no such attempt: the right one
		}
	}
	return ""
}

func (m *model) succeed() {
	id, t, ok := m.task(StateRunning)
	if !ok {
		return
	}
	n := m.attempt(t)
	next := rapid.Bool().Draw(m.t, "succeed asks next")
	out, _ := m.exec(&ReportSuccess{TaskID: id, Attempt: n, Token: m.sender(t, n), Result: json.RawMessage(` "done <now>" `), Next: next}, AggTask, id)
	m.checkHandoff(id, next, out)
}

// checkHandoff checks the handoff a report of task id that asked for it
// (next) was answered with: none unless it asked; else an attempt of a
// task that depends on id, on its queue, now running for the report's
// sender, handed, with the token hash the report carried.
func (m *model) checkHandoff(id string, next bool, out *Outcome) {
	if out == nil || out.Refusal != nil || out.Reply.Next == nil {
		return
	}
	require.True(m.t, next, "a report that did not ask was handed an attempt")
	h := out.Reply.Next
	reported, err := m.w.o.Task(id)
	require.NoError(m.t, err)
	d, err := m.w.o.Task(h.TaskID)
	require.NoError(m.t, err)
	require.Contains(m.t, d.DependsOn, id, "the handed task depends on the reported one")
	require.Equal(m.t, reported.Spec.Queue, d.Spec.Queue, "on the same queue")
	require.Equal(m.t, StateRunning, d.State)
	a := d.Running()
	require.Equal(m.t, h.Attempt, a.N)
	require.True(m.t, a.Handed)
	require.Equal(m.t, m.w.actor, a.ClaimedBy, "for the report's sender")
	require.Equal(m.t, h.TokenHash, a.TokenHash)
}

func (m *model) fail() {
	id, t, ok := m.task(StateRunning)
	if !ok {
		return
	}
	n := m.attempt(t)
	next := rapid.Bool().Draw(m.t, "fail asks next")
	out, _ := m.exec(&ReportFailure{TaskID: id, Attempt: n, Token: m.sender(t, n), Retryable: rapid.IntRange(0, 4).Draw(m.t, "retryable") > 0,
		Error: ErrorInfo{Code: rapid.SampledFrom([]string{"", "boom", "fatal"}).Draw(m.t, "error code"), Message: "failed"}, Next: next}, AggTask, id)
	m.checkHandoff(id, next, out)
}

// lazyReport sends a report that carries a claim (the lazy claim) for a
// ready task mostly, and for any other now and then, from either executor,
// for an attempt number near the next one; now and then it carries a token
// too (invalid). When it is taken, the task must be exactly what task.claim
// followed by the plain report would have left, decided on a fork of the
// world from the same state.
func (m *model) lazyReport() {
	id, t, ok := m.task(StateReady)
	if !ok {
		return
	}
	n := m.attempt(t) + 1
	m.w.actor = rapid.SampledFrom(executors).Draw(m.t, "lazy claimer")
	lazyToken := "lazy-token-" + m.w.nextCommandID()
	cl := &ReportClaim{Executor: "exec", TokenHash: TokenHash(lazyToken)}
	var token string
	if rapid.IntRange(0, 9).Draw(m.t, "claim with token") == 0 {
		token = "forged"
	}
	var report, plain Command
	if rapid.Bool().Draw(m.t, "lazy success") {
		r := &ReportSuccess{TaskID: id, Attempt: n, Token: token, Claim: cl, Result: json.RawMessage(`"done"`)}
		p := *r
		report, plain = r, &p
	} else {
		r := &ReportFailure{TaskID: id, Attempt: n, Token: token, Claim: cl, Retryable: rapid.IntRange(0, 4).Draw(m.t, "lazy retryable") > 0,
			Error: ErrorInfo{Code: rapid.SampledFrom([]string{"", "boom", "fatal"}).Draw(m.t, "lazy error code"), Message: "failed"}}
		p := *r
		report, plain = r, &p
	}
	want := m.claimThenReport(id, cl, lazyToken, plain)
	out, err := m.exec(report, AggTask, id)
	if err != nil || out.Reply.Duplicate || len(out.Changes) == 0 {
		return
	}
	require.Empty(m.t, token, "a report with a claim and a token was taken")
	require.NotNil(m.t, want, "a merged report was taken where task.claim would have been refused")
	got := m.w.task(id).Clone()
	got.Commands, want.Commands = nil, nil
	require.Equal(m.t, want, got, "a merged report left another task than claim-then-report")
}

// claimThenReport decides, on a fork of the world, task.claim for the
// sender with cl's executor and token hash, then plain (the report without
// its claim, with token, whose hash cl has): it returns the task as they
// leave it, or nil when the claim is refused.
func (m *model) claimThenReport(id string, cl *ReportClaim, token string, plain Command) *Task {
	fork := NewOverlay(m.w.o)
	run := func(c Command, cmdID string) bool {
		meta := Meta{CommandID: cmdID, Workspace: m.w.ws, Actor: m.w.actor, Now: m.w.now}
		out, err := Execute(fork, c, meta)
		if err != nil || out.Refusal != nil {
			return false
		}
		for _, ch := range out.Changes {
			require.NoError(m.t, fork.Apply(ch, Recorded{CommandID: cmdID, Actor: meta.Actor, Time: meta.Now}))
		}
		return true
	}
	if !run(&ClaimTask{ClaimBody: ClaimBody{TaskID: id, Executor: cl.Executor, ExecutorVersion: cl.ExecutorVersion}, TokenHash: cl.TokenHash}, "fork-claim") {
		return nil
	}
	switch c := plain.(type) {
	case *ReportSuccess:
		c.Claim, c.Token = nil, token
	case *ReportFailure:
		c.Claim, c.Token = nil, token
	}
	if t, _ := fork.Task(id); t.Running() != nil {
		run(plain, "fork-report")
	}
	t, _ := fork.Task(id)
	return t
}

func (m *model) checkpoint() {
	id, t, ok := m.task(StateRunning)
	if !ok {
		return
	}
	n := m.attempt(t)
	_, _ = m.exec(&SaveCheckpoint{TaskID: id, Attempt: n, Token: m.sender(t, n), Checkpoint: json.RawMessage(`{"at": 1}`)}, AggTask, id)
}

func (m *model) verify() {
	id, t, ok := m.task(StateVerifying, StateNeedsReview)
	if !ok {
		return
	}
	_, _ = m.exec(&RecordVerification{TaskID: id, Verdict: Verdict{Attempt: m.attempt(t),
		Outcome:      rapid.SampledFrom([]string{OutcomeInconclusive, OutcomePass, OutcomeFail}).Draw(m.t, "outcome"),
		Verifier:     rapid.SampledFrom(verifiers).Draw(m.t, "verifier"),
		ResultDigest: rapid.SampledFrom(digests).Draw(m.t, "digest")}}, AggTask, id)
}

func (m *model) review() {
	id, _, ok := m.task(StateNeedsReview)
	if !ok {
		return
	}
	_, _ = m.exec(&ReviewTask{TaskID: id, Decision: rapid.SampledFrom([]string{ReviewAccept, ReviewReject, ReviewRetry}).Draw(m.t, "decision")}, AggTask, id)
}

func (m *model) approve() {
	id, _, ok := m.task(StateWaiting)
	if !ok {
		return
	}
	t, _ := m.w.o.Task(id)
	if t == nil {
		return
	}
	a := t.PendingApproval()
	if a == nil {
		if len(t.Approvals) == 0 {
			return
		}
		a = &t.Approvals[rapid.IntRange(0, len(t.Approvals)-1).Draw(m.t, "decided approval")]
	}
	who := rapid.SampledFrom([]string{"alice", "alice", "alice", "bob", "mallory"}).Draw(m.t, "approver")
	c := decision(a, who, keyOf(who), rapid.SampledFrom([]string{ResponseApprove, ResponseApprove, ResponseReject}).Draw(m.t, "response"))
	if rapid.IntRange(0, 5).Draw(m.t, "forge") == 0 {
		c.Signature = SignDecision(keyOf("mallory"), a.ID, c.Response, a.ActionDigest)
	}
	if rapid.IntRange(0, 3).Draw(m.t, "authenticated") == 0 {
		m.w.actor, m.w.authn = rapid.SampledFrom([]string{"alice", "alice", "bob"}).Draw(m.t, "actor"), true
		defer func() { m.w.actor, m.w.authn = "tester", false }()
	}
	actor, authn := m.w.actor, m.w.authn
	alice := m.w.workspace().Approver("alice")
	active := alice != nil && alice.Active(m.w.now)
	before := a.State
	out, err := m.exec(c, AggTask, id)
	if err != nil || out.Refusal != nil {
		require.Equal(m.t, before, m.w.task(id).Approval(a.ID).State, "a refused decision leaves the approval as it was")
		return
	}
	if len(out.Changes) > 0 {
		require.Equal(m.t, "alice", c.Approver, "only alice (role owner, her own key) can decide")
		require.Equal(m.t, ApprovalStatePending, before, "only a pending approval is decided")
		require.True(m.t, active, "alice decided while revoked or with her key expired: %+v", alice)
		require.True(m.t, !authn || actor == "alice", "%s, authenticated, decided as alice", actor)
	}
}

// keys revokes an approver, or registers one again (its own key), now and
// then with a key that expires within seconds.
func (m *model) keys() {
	who := rapid.SampledFrom([]string{"alice", "alice", "bob"}).Draw(m.t, "approver")
	if rapid.IntRange(0, 2).Draw(m.t, "revoke") == 0 {
		_, _ = m.exec(&RevokeApprover{Name: who}, AggWorkspace, m.w.ws)
		return
	}
	c := &RegisterApprover{Name: who, Role: map[string]string{"alice": "owner", "bob": "intern"}[who], PublicKey: pubOf(keyOf(who))}
	if rapid.Bool().Draw(m.t, "expires") {
		at := m.w.now.Add(time.Duration(rapid.IntRange(0, 20).Draw(m.t, "expires in s")) * time.Second)
		c.ExpiresAt = &at
	}
	_, _ = m.exec(c, AggWorkspace, m.w.ws)
}

// member adds or removes a member, or configures a queue, from small pools
// of names, keys and settings (some out of bounds), so that names, keys and
// queues collide.
func (m *model) member() {
	name := rapid.SampledFrom([]string{"m1", "m2", "m3"}).Draw(m.t, "member")
	switch rapid.IntRange(0, 3).Draw(m.t, "member command") {
	case 0:
		_, _ = m.exec(&RemoveMember{Name: name}, AggWorkspace, m.w.ws)
	case 1:
		c := &ConfigureQueue{Queue: rapid.SampledFrom([]string{"work", "verify"}).Draw(m.t, "queue"),
			LeaseMS:    rapid.SampledFrom([]int64{999, MinLeaseMS, 30_000, MaxLeaseMS, MaxLeaseMS + 1}).Draw(m.t, "lease"),
			MaxDeliver: rapid.SampledFrom([]int{0, 1, 5, MaxMaxDeliver, MaxMaxDeliver + 1}).Draw(m.t, "max deliver"),
			IfUnset:    rapid.Bool().Draw(m.t, "if unset")}
		was := m.w.workspace().Queue(c.Queue)
		out, err := m.exec(c, AggWorkspace, m.w.ws)
		if err != nil || (out.Reply.Duplicate && out.Reply.Queue == "") { // refused, or a command id another command used
			return
		}
		q := m.w.workspace().Queue(c.Queue)
		require.NotNil(m.t, q)
		require.Equal(m.t, Reply{ID: m.w.ws, Version: m.w.workspace().Version, Queue: q.Name, LeaseMS: q.LeaseMS,
			MaxDeliver: q.MaxDeliver, Duplicate: out.Reply.Duplicate}, out.Reply, "the reply carries the settings in effect")
		if was != nil && (c.IfUnset || out.Reply.Duplicate) {
			require.Equal(m.t, *was, *q, "settings kept")
		}
	default:
		role := rapid.SampledFrom(Roles).Draw(m.t, "role")
		c := &AddMember{Name: name, Role: role, PublicKey: userKey(rapid.SampledFrom([]string{"k1", "k2", "k3", "k4"}).Draw(m.t, "key"))}
		if role == RoleExecutor || rapid.IntRange(0, 5).Draw(m.t, "queues anyway") == 0 {
			c.Queues = rapid.SampledFrom([][]string{nil, {"work"}, {"verify", "work"}, {"work", "verify"}}).Draw(m.t, "queues")
		}
		if out, err := m.exec(c, AggWorkspace, m.w.ws); err == nil && len(out.Changes) > 0 {
			got := m.w.workspace().Member(name)
			require.NotNil(m.t, got)
			require.Equal(m.t, Member{Name: c.Name, Role: c.Role, PublicKey: c.PublicKey, Queues: c.Queues, AddedAt: m.w.now}, *got)
		}
	}
}

func (m *model) wait() {
	id, t, ok := m.task(StateRunning)
	if !ok {
		return
	}
	n := m.attempt(t)
	c := &WaitTask{TaskID: id, Attempt: n, Token: m.sender(t, n), Kind: WaitSignal, Signal: rapid.SampledFrom(signals).Draw(m.t, "signal")}
	if rapid.Bool().Draw(m.t, "timer wait") {
		until := m.w.now.Add(time.Duration(rapid.IntRange(1, 5).Draw(m.t, "wait seconds")) * time.Second)
		c.Kind, c.Signal, c.Until = WaitTimer, "", &until
	}
	_, _ = m.exec(c, AggTask, id)
}

func (m *model) signal() {
	id, _, ok := m.task(StateWaiting)
	if !ok {
		return
	}
	_, _ = m.exec(&SendSignal{TaskID: id, Name: rapid.SampledFrom(signals).Draw(m.t, "signal")}, AggTask, id)
}

// fireTimer fires a random timer of a task, often after moving the clock to
// the moment it is due.
func (m *model) fireTimer() {
	id, t, ok := m.task(StateBackoff, StateWaiting, StateRunning)
	if !ok {
		return
	}
	c := &FireTimer{TaskID: id, Kind: rapid.SampledFrom([]string{TimerBackoff, TimerWait, TimerAttempt}).Draw(m.t, "timer")}
	if t != nil {
		c.Attempt = m.attempt(t)
		var due *time.Time
		switch {
		case c.Kind == TimerBackoff:
			due = t.BackoffUntil
		case c.Kind == TimerWait && t.Wait != nil:
			due = t.Wait.Until
		case c.Kind == TimerAttempt && t.Running() != nil:
			due = t.Running().Deadline
		}
		if due != nil && due.After(m.w.now) && rapid.IntRange(0, 2).Draw(m.t, "wait for it") > 0 {
			m.w.now = *due
		}
	}
	_, _ = m.exec(c, AggTask, id)
}

func (m *model) cancelTask() {
	id, _, ok := m.task()
	if !ok {
		return
	}
	_, _ = m.exec(&CancelTask{TaskID: id}, AggTask, id)
}

func (m *model) cancelGoal() {
	g, ok := m.goal()
	if !ok || rapid.IntRange(0, 2).Draw(m.t, "really cancel") > 0 {
		return
	}
	_, _ = m.exec(&CancelGoal{GoalID: g}, AggGoal, g)
}

func (m *model) tick() {
	m.w.advance(time.Duration(rapid.IntRange(0, 3000).Draw(m.t, "ms")) * time.Millisecond)
}

// check asserts the invariants of the committed world and its history.
func (m *model) check() {
	m.t.Helper()
	m.checkHistory()
	m.checkWorkspace(m.w.workspace())
	for _, id := range m.w.aggregates(AggTask) {
		m.checkTask(m.w.task(id))
	}
	for _, id := range m.goals {
		m.checkGoal(m.w.goal(id))
	}
}

// checkHistory replays the history appended since the last check, from
// where the last check left it (and so, over the run, the whole history from
// nothing), checks that each aggregate's versions run 1, 2, 3, ... and that
// the replayed states are deep-equal to the committed world's.
func (m *model) checkHistory() {
	m.t.Helper()
	for _, e := range m.w.history[m.seen:] {
		require.NoError(m.t, m.replayed.apply(m.versions, e))
	}
	m.seen = len(m.w.history)
	m.w.requireSameAs(m.replayed, reflect.DeepEqual)
}

func (m *model) checkTask(t *Task) {
	m.t.Helper()
	// Terminal is terminal: once a task ended, only refused decisions on its
	// approvals are recorded; nothing else changes.
	if was, ok := m.ended[t.ID]; ok {
		require.Equal(m.t, was.State, t.State, "task %s left terminal state %s", t.ID, was.State)
		for _, e := range m.w.historyOf(t.ID)[was.Version:] {
			require.IsType(m.t, &ApprovalRefused{}, e, "task %s changed after it ended %s", t.ID, was.State)
		}
	} else if Terminal(t.State) {
		m.ended[t.ID] = t
	}

	// At most one running attempt: the latest, exactly when the task runs.
	running := 0
	for i, a := range t.Attempts {
		require.Equal(m.t, i+1, a.N, "attempts are numbered 1, 2, 3, ...")
		require.Equal(m.t, OperationKey(t.ID), a.OperationKey)
		if a.State == AttemptStateRunning {
			running++
			require.Equal(m.t, len(t.Attempts), a.N, "only the latest attempt may run")
		}
	}
	require.LessOrEqual(m.t, running, 1)
	require.Equal(m.t, t.State == StateRunning, running == 1, "task %s is %s with %d running attempts", t.ID, t.State, running)

	// An approval gate holds back the first attempt; every decision taken
	// was made by an authorized approver with a signature that verifies.
	if t.Spec.Approval != nil && len(t.Attempts) > 0 {
		require.True(m.t, t.Approved, "task %s ran before its approval", t.ID)
	}
	for _, a := range t.Approvals {
		if d := a.Decision; d != nil {
			require.Equal(m.t, ApprovalStateDecided, a.State)
			sig, _ := base64.StdEncoding.DecodeString(d.Signature)
			require.True(m.t, ed25519.Verify(keyOf(d.Approver).Public().(ed25519.PublicKey), DecisionMessage(a.ID, d.Response, a.ActionDigest), sig))
			require.Equal(m.t, a.Role, d.Role)
		}
		if t.State == StateWaiting && t.Wait.Kind == WaitApproval && a.ID == t.Wait.ApprovalID {
			require.Equal(m.t, ApprovalStatePending, a.State)
		}
		if Terminal(t.State) {
			require.NotEqual(m.t, ApprovalStatePending, a.State, "an ended task leaves no approval pending")
		}
	}

	// A task leaves pending only when every dependency is accepted; it may
	// end while pending (failed, cancelled) without that.
	if t.State != StatePending && (len(t.Attempts) > 0 || !slices.Contains([]string{StateFailed, StateCancelled}, t.State)) {
		for _, d := range t.DependsOn {
			require.Equal(m.t, StateAccepted, m.w.task(d).State, "task %s is %s, but its dependency %s is not accepted", t.ID, t.State, d)
		}
	}

	switch t.State {
	case StatePending:
		open := false
		for _, d := range t.DependsOn {
			dt := m.w.task(d)
			open = open || dt.State != StateAccepted
			require.False(m.t, Terminal(dt.State) && dt.State != StateAccepted,
				"task %s is pending on %s, which ended %s", t.ID, d, dt.State)
		}
		require.True(m.t, open, "task %s is pending but every dependency is accepted", t.ID)
		require.Empty(m.t, t.Attempts)
	case StateReady:
		require.Nil(m.t, t.Wait)
		require.Nil(m.t, t.BackoffUntil)
	case StateWaiting:
		require.NotNil(m.t, t.Wait)
		require.Contains(m.t, []string{WaitApproval, WaitSignal, WaitTimer}, t.Wait.Kind)
		if t.Wait.Kind == WaitTimer {
			require.NotNil(m.t, t.Wait.Until)
		}
	case StateBackoff:
		require.NotNil(m.t, t.BackoffUntil)
		require.Equal(m.t, AttemptStateFailed, t.Current().State)
	case StateVerifying:
		require.NotNil(m.t, t.Spec.Verification)
		require.Equal(m.t, AttemptStateSucceeded, t.Current().State)
	case StateNeedsReview:
		require.Equal(m.t, AttemptStateSucceeded, t.Current().State)
		last := t.Verifications[len(t.Verifications)-1]
		require.Equal(m.t, VerdictReview, onVerdict(t.Spec.Verification, last.Outcome), "needs_review after %s", last.Outcome)
		require.Equal(m.t, t.Current().N, last.Attempt)
	case StateAccepted:
		m.checkAccepted(t)
	}
	if Terminal(t.State) {
		require.Nil(m.t, t.Wait)
		require.Nil(m.t, t.BackoffUntil)
	}

	// A task of a goal that has not ended belongs to the goal's current plan,
	// and the goal is open.
	if t.GoalID != "" && !Terminal(t.State) {
		g := m.w.goal(t.GoalID)
		require.Equal(m.t, GoalStateOpen, g.State, "task %s is %s in a goal that is %s", t.ID, t.State, g.State)
		require.True(m.t, slices.ContainsFunc(g.Plan, func(pt PlanTask) bool { return pt.TaskID == t.ID }),
			"task %s is %s but not in its goal's plan", t.ID, t.State)
	}
}

// checkAccepted checks that an accepted task has a succeeded attempt and,
// when it has a verifier, a PASS for that attempt or a review that accepted
// an INCONCLUSIVE one.
func (m *model) checkAccepted(t *Task) {
	m.t.Helper()
	es := slices.DeleteFunc(m.w.historyOf(t.ID), func(e Event) bool { _, refused := e.(*ApprovalRefused); return refused })
	last := len(es) - 1
	acc, ok := es[last].(*TaskAccepted)
	require.True(m.t, ok, "an accepted task's last event is task.accepted")
	var a *Attempt
	for i := range t.Attempts {
		if t.Attempts[i].N == acc.Attempt {
			a = &t.Attempts[i]
		}
	}
	require.NotNil(m.t, a, "accepted attempt %d does not exist", acc.Attempt)
	require.Equal(m.t, AttemptStateSucceeded, a.State)
	if t.Spec.Verification == nil {
		_, ok := es[last-1].(*AttemptSucceeded)
		require.True(m.t, ok, "without a verifier, acceptance follows the success")
		return
	}
	pass, reviewed := false, false
	for _, v := range t.Verifications {
		pass = pass || (v.Attempt == acc.Attempt && v.Outcome == OutcomePass)
		reviewed = reviewed || (v.Attempt == acc.Attempt && onVerdict(t.Spec.Verification, v.Outcome) == VerdictReview)
	}
	if rd, ok := es[last-1].(*ReviewDecided); ok {
		require.Equal(m.t, ReviewAccept, rd.Decision)
		require.True(m.t, reviewed, "a review accepted attempt %d with no verdict that asked for review", acc.Attempt)
		return
	}
	require.True(m.t, pass, "task %s accepted without a PASS", t.ID)
}

// checkWorkspace checks the members, queues and approvers of a workspace:
// a name once, a key naming one member, queues for executors only, settings
// within bounds.
func (m *model) checkWorkspace(w *Workspace) {
	m.t.Helper()
	names, keys := map[string]bool{}, map[string]bool{}
	for _, mb := range w.Members {
		require.False(m.t, names[mb.Name], "member %s twice", mb.Name)
		require.False(m.t, keys[mb.PublicKey], "key %s names two members", mb.PublicKey)
		names[mb.Name], keys[mb.PublicKey] = true, true
		require.True(m.t, ValidRole(mb.Role))
		require.True(m.t, ValidUserKey(mb.PublicKey))
		if mb.Role == RoleExecutor {
			require.NotEmpty(m.t, mb.Queues, "executor %s without queues", mb.Name)
		} else {
			require.Empty(m.t, mb.Queues, "%s %s with queues", mb.Role, mb.Name)
		}
	}
	queues := map[string]bool{}
	for _, q := range w.Queues {
		require.False(m.t, queues[q.Name], "queue %s twice", q.Name)
		queues[q.Name] = true
		require.True(m.t, q.LeaseMS >= MinLeaseMS && q.LeaseMS <= MaxLeaseMS, "lease %d", q.LeaseMS)
		require.True(m.t, q.MaxDeliver >= MinMaxDeliver && q.MaxDeliver <= MaxMaxDeliver, "max deliver %d", q.MaxDeliver)
	}
	approvers := map[string]bool{}
	for _, a := range w.Approvers {
		require.False(m.t, approvers[a.Name], "approver %s twice", a.Name)
		approvers[a.Name] = true
	}
}

func (m *model) checkGoal(g *Goal) {
	m.t.Helper()
	if was, ok := m.goalEnd[g.ID]; ok && was.State == GoalStateFailed && g.Version != was.Version {
		// Only a plan revision moves a failed goal on; achieved and cancelled are final.
		require.Greater(m.t, g.PlanVersion, was.PlanVersion, "goal %s left failed without a plan revision", g.ID)
		delete(m.goalEnd, g.ID)
		if g.State != GoalStateOpen {
			m.goalEnd[g.ID] = g
		}
	} else if ok {
		require.Equal(m.t, was.State, g.State, "goal %s left %s", g.ID, was.State)
		require.Equal(m.t, was.Version, g.Version, "goal %s changed after it ended", g.ID)
	} else if g.State != GoalStateOpen {
		m.goalEnd[g.ID] = g
	}
	allEnded, allAccepted := true, true
	for _, pt := range g.Plan {
		t := m.w.task(pt.TaskID)
		require.Equal(m.t, g.ID, t.GoalID)
		require.Equal(m.t, pt.Key, t.Key)
		allEnded = allEnded && Terminal(t.State)
		allAccepted = allAccepted && t.State == StateAccepted
	}
	switch g.State {
	case GoalStateAchieved:
		require.NotEmpty(m.t, g.Plan)
		require.True(m.t, allAccepted, "goal %s achieved with a task of its plan not accepted", g.ID)
	case GoalStateFailed:
		require.True(m.t, allEnded && !allAccepted, "goal %s failed but its plan did not end in failure", g.ID)
	case GoalStateOpen:
		require.False(m.t, len(g.Plan) > 0 && allEnded, "goal %s is open but every task of its plan ended", g.ID)
	case GoalStateCancelled:
		require.True(m.t, allEnded, "goal %s is cancelled with unfinished tasks", g.ID)
	}
}
