package integration

import (
	"context"
	"crypto/ed25519"
	crand "crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// The kinds of task the timers crash test creates: each waits on one durable
// timer (or on a person) that falls due around the first SIGKILL.
const (
	tkWait     = "wait"         // start_at ahead: task.ready (timer)
	tkExpire   = "expire"       // a gate nobody decides, with expires_in: approval_expired, then rejected
	tkEarly    = "decide-early" // a gate decided around the first kill (one while the service is down)
	tkLate     = "decide-late"  // a gate decided right after the first restart, just before the second kill
	tkPending  = "pending"      // a gate nobody decides, without expiry: still pending at the end
	tkFourEyes = "four-eyes"    // a gate of quorum 2: one approval acked long before kill 1, the second after restart 1
	tkBackoff  = "backoff"      // failed retryably: backoff_scheduled, then task.ready (backoff_elapsed)
	tkDeadline = "deadline"     // spec deadline: task.failed (deadline)
	tkTimeout  = "timeout"      // attempt timeout: attempt_failed (timeout), a backoff, then task.ready
)

// tkTask is one task of the timers crash test and what the test knows of it.
type tkTask struct {
	kind       string
	i          int
	id         string
	due        time.Time // its timer's moment, as the service recorded it (zero for gates without expiry)
	approvalID string    // its gate
	digest     string    // the gate's action digest
	claimed    bool      // a deadline task whose attempt is running when the deadline passes
	approver   string    // the decision the test sends, for tkEarly, tkLate and tkFourEyes
	response   string
	decision   *cmdResult // its outcome
	signer     string     // for tkFourEyes: the first approval, short of the quorum
	signOff    *cmdResult // its outcome
}

// final is the state the task must end in.
func (tk *tkTask) final() string {
	switch tk.kind {
	case tkExpire:
		return domain.StateRejected
	case tkEarly, tkLate, tkFourEyes:
		if tk.response == domain.ResponseReject {
			return domain.StateRejected
		}
		return domain.StateReady
	case tkPending:
		return domain.StateWaiting
	case tkDeadline:
		return domain.StateFailed
	}
	return domain.StateReady // wait, backoff, timeout
}

// tkFiring is one firing of a durable timer found in the log: the timer's
// command and the effect it had.
type tkFiring struct {
	kind string // domain.Timer*
	task *tkTask
	due  time.Time // the moment the test recorded for it
	at   time.Time // the effect's envelope time
	cmd  string
}

// parseTimerCommand splits a timer's command id,
// "timer.<aggregate id>.<kind>.<attempt>.<due unix ns>".
func parseTimerCommand(id string) (agg, kind string, attempt int, due time.Time, ok bool) {
	p := strings.Split(id, ".")
	if len(p) != 5 || p[0] != "timer" {
		return "", "", 0, time.Time{}, false
	}
	n, err1 := strconv.Atoi(p[3])
	ns, err2 := strconv.ParseInt(p[4], 10, 64)
	if err1 != nil || err2 != nil {
		return "", "", 0, time.Time{}, false
	}
	return p[1], p[2], n, time.Unix(0, ns).UTC(), true
}

// waitUntil lets the wall clock reach at: the service runs on it, so the
// moments under test can only be waited for.
func waitUntil(at time.Time) {
	if d := time.Until(at); d > 0 {
		tm := time.NewTimer(d)
		<-tm.C
	}
}

// TestTimersAndApprovalsSurviveKillNine SIGKILLs `dwr serve` while durable
// timers fall due and approvals are pending, keeps it down until every
// moment has passed, restarts it on the same data, decides more approvals
// and SIGKILLs it again at once. Then it reads the whole log: every timer
// fired exactly once and none early, every acknowledged decision is there
// and took its branch, no pending approval was lost, and the views rebuilt
// from the log equal the live ones.
func TestTimersAndApprovalsSurviveKillNine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs on the wall clock for ~15s")
	}
	const (
		perKind   = 6
		setupLead = 4 * time.Second // from the start of the timed tasks' setup to the first kill
	)
	bin := dwrBinary(t)
	logs := logOnFailure(t, "dwr serve output")
	args, data, url := localServe(t)

	srv := startServer(t, bin, logs, "start 0", args...)
	cold := waitReady(t, srv, url, 60*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := dial(t, url, "timers-kill9", 2*time.Second)
	led := &ledger{}
	var nextID atomic.Int64
	sendAs := func(cl *client, name string, body any) *cmdResult { // safe from any goroutine
		r := cl.do(ctx, name, body, fmt.Sprintf("tk-%04d", nextID.Add(1)))
		led.add(r)
		return r
	}
	send := func(name string, body any) *cmdResult { return sendAs(c, name, body) }
	must := func(name string, body any) *cmdResult {
		t.Helper()
		r := send(name, body)
		require.Equal(t, acked, r.Outcome, "%s %v: refused %v; last unknown cause %q", name, body, r.Err, r.LastErr)
		return r
	}
	getTask := func(id string, minSeq uint64) domain.Task {
		t.Helper()
		var tk domain.Task
		require.NoError(t, c.query("task.get", schemas.Query{ID: id}, minSeq, &tk))
		return tk
	}

	// Two approvers of role ops, with keys made here.
	approvers := []string{"alice", "bob"}
	keys := map[string]ed25519.PrivateKey{}
	// Each decides on its own connection: an authenticated identity decides only as itself.
	as := map[string]*client{}
	for _, name := range approvers {
		var added *cmdResult
		as[name], added = c.member(t, url, name, domain.RoleApprover)
		led.add(added)
		pub, priv, err := ed25519.GenerateKey(crand.Reader)
		require.NoError(t, err)
		keys[name] = priv
		must("approver.register", map[string]any{"name": name, "role": "ops", "public_key": base64.StdEncoding.EncodeToString(pub)})
	}

	var tasks []*tkTask
	byID := map[string]*tkTask{}
	add := func(tk *tkTask) { tasks = append(tasks, tk); byID[tk.id] = tk }
	of := func(kind string) []*tkTask {
		return slices.DeleteFunc(slices.Clone(tasks), func(tk *tkTask) bool { return tk.kind != kind })
	}
	create := func(spec map[string]any) (*cmdResult, domain.Reply) {
		t.Helper()
		r := must("task.create", map[string]any{"spec": spec})
		rep := r.reply()
		r.Aggs = []aggRef{{domain.AggTask, rep.ID}}
		return r, rep
	}
	claim := func(id string) domain.Reply {
		t.Helper()
		r := must("task.claim", map[string]any{"task_id": id, "executor": "tk-executor"})
		r.Aggs = []aggRef{{domain.AggTask, id}}
		rep := r.reply()
		require.Equal(t, domain.StateRunning, rep.State, "claim of %s", id)
		return rep
	}
	gate := func(kind string, i int, approval map[string]any) *tkTask {
		t.Helper()
		r, rep := create(map[string]any{"queue": "tk-gated", "title": fmt.Sprintf("%s %d", kind, i),
			"input": map[string]any{"kind": kind, "i": i}, "approval": approval})
		require.Equal(t, domain.StateWaiting, rep.State)
		tk := &tkTask{kind: kind, i: i, id: rep.ID, approvalID: domain.ApprovalID(rep.ID, 1)}
		var a projections.ApprovalView
		require.NoError(t, c.query("approval.get", schemas.Query{ID: tk.approvalID}, r.Seq, &a))
		require.Equal(t, domain.ApprovalStatePending, a.State)
		tk.digest = a.ActionDigest
		if a.ExpiresAt != nil {
			tk.due = *a.ExpiresAt
		}
		add(tk)
		return tk
	}
	decisionBy := func(tk *tkTask, approver string) map[string]any {
		return map[string]any{"approval_id": tk.approvalID, "approver": approver, "response": tk.response,
			"action_digest": tk.digest, "comment": "timers kill-9 test",
			"signature": domain.SignDecision(keys[approver], tk.approvalID, tk.response, tk.digest)}
	}
	decision := func(tk *tkTask) map[string]any { return decisionBy(tk, tk.approver) }

	// The gates decided by hand, and those left pending: no timer.
	for kind, n := range map[string]int{tkEarly: 5, tkLate: 4, tkPending: 3} {
		for i := range n {
			tk := gate(kind, i, map[string]any{"role": "ops"})
			tk.approver, tk.response = approvers[i%2], domain.ResponseApprove
			if i%4 == 3 {
				tk.response = domain.ResponseReject
			}
		}
	}

	// Four eyes: gates of quorum 2, each approved by alice now (acked long
	// before kill 1, so the approval waits across it) and by bob after
	// restart 1.
	for i := range 3 {
		tk := gate(tkFourEyes, i, map[string]any{"role": "ops", "quorum": 2})
		tk.signer, tk.approver, tk.response = approvers[0], approvers[1], domain.ResponseApprove
		tk.signOff = sendAs(as[tk.signer], "approval.decide", decisionBy(tk, tk.signer))
		require.Equal(t, acked, tk.signOff.Outcome, "first approval of %s: %v %s", tk.approvalID, tk.signOff.Err, tk.signOff.LastErr)
		tk.signOff.Aggs = []aggRef{{domain.AggTask, tk.id}}
	}

	// The timed tasks: their moments are spread from 0.7s before the first
	// kill to 1.8s after it, so that a few fire live (one racing the kill)
	// and most fall due while the service is down.
	setupStart := time.Now()
	kill1 := setupStart.Add(setupLead)
	ahead := func(at time.Time) string {
		t.Helper()
		d := time.Until(at)
		require.Greater(t, d, 100*time.Millisecond, "setup too slow: a moment %s away is already due", at.Sub(setupStart))
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	for i := range perKind {
		due := kill1.Add(-700*time.Millisecond + time.Duration(i)*500*time.Millisecond).UTC().Truncate(time.Millisecond)

		// A start time.
		_, rep := create(map[string]any{"queue": "tk-wait", "start_at": due.Format(time.RFC3339Nano)})
		require.Equal(t, domain.StateWaiting, rep.State)
		add(&tkTask{kind: tkWait, i: i, id: rep.ID, due: due})

		// A gate that expires and rejects.
		gate(tkExpire, i, map[string]any{"role": "ops", "expires_in": ahead(due), "on_expiry": domain.BranchReject})

		// A retry backoff.
		_, rep = create(map[string]any{"queue": "tk-flaky",
			"retry": map[string]any{"max_attempts": 3, "initial_backoff": ahead(due)}})
		flaky := claim(rep.ID)
		f := must("task.fail", map[string]any{"task_id": rep.ID, "attempt": 1, "token": flaky.Token,
			"error": map[string]any{"code": "flaky", "message": "injected retryable failure"}, "retryable": true})
		f.Aggs = []aggRef{{domain.AggTask, rep.ID}}
		require.Equal(t, domain.StateBackoff, f.reply().State)
		got := getTask(rep.ID, f.Seq)
		require.NotNil(t, got.BackoffUntil)
		add(&tkTask{kind: tkBackoff, i: i, id: rep.ID, due: *got.BackoffUntil})

		// A task deadline; every other one with its attempt running.
		_, rep = create(map[string]any{"queue": "tk-deadline", "deadline": due.Format(time.RFC3339Nano)})
		tk := &tkTask{kind: tkDeadline, i: i, id: rep.ID, due: due, claimed: i%2 == 0}
		if tk.claimed {
			claim(rep.ID)
		}
		add(tk)

		// An attempt timeout, retried after a short backoff.
		_, rep = create(map[string]any{"queue": "tk-slow", "timeout": ahead(due),
			"retry": map[string]any{"max_attempts": 2, "initial_backoff": "500ms"}})
		cl := claim(rep.ID)
		require.NotNil(t, cl.Task)
		require.Len(t, cl.Task.Attempts, 1)
		require.NotNil(t, cl.Task.Attempts[0].Deadline)
		add(&tkTask{kind: tkTimeout, i: i, id: rep.ID, due: *cl.Task.Attempts[0].Deadline})
	}
	setupTook := time.Since(setupStart)
	var firstDue, lastDue time.Time
	for _, tk := range tasks {
		if tk.due.IsZero() {
			continue
		}
		if firstDue.IsZero() || tk.due.Before(firstDue) {
			firstDue = tk.due
		}
		lastDue = maxTime(lastDue, tk.due)
	}
	require.True(t, time.Now().Before(firstDue.Add(-100*time.Millisecond)),
		"setup took %s: the plan needs it done before the first moment, %s after its start", setupTook, firstDue.Sub(setupStart))

	// Decisions around the first kill: paced to be acknowledged just before
	// it, the last one sent while the service is down (retried with its id
	// until the restarted service answers).
	early := of(tkEarly)
	earlyDone := make(chan struct{})
	go func() {
		defer close(earlyDone)
		for j, tk := range early {
			at := kill1.Add(-400*time.Millisecond + time.Duration(j)*100*time.Millisecond)
			if j == len(early)-1 {
				at = kill1.Add(150 * time.Millisecond)
			}
			waitUntil(at)
			tk.decision = sendAs(as[tk.approver], "approval.decide", decision(tk))
		}
	}()
	pending := func() []string {
		t.Helper()
		var inbox []projections.ApprovalView
		require.NoError(t, c.query("approval.list", schemas.Query{State: domain.ApprovalStatePending, Role: "ops", Limit: 1000}, 0, &inbox))
		ids := make([]string, len(inbox))
		for i, a := range inbox {
			ids[i] = a.ID
		}
		return ids
	}

	// Kill 1, with timers due and approvals pending; down until every
	// moment has passed.
	waitUntil(kill1)
	pendingAtKill1 := pending()
	srv.kill9(t)
	killed1 := time.Now()
	waitUntil(lastDue.Add(500 * time.Millisecond))
	srv = startServer(t, bin, logs, "restart 1 after SIGKILL", args...)
	down1 := srv.started.Sub(killed1)
	ready1 := waitReady(t, srv, url, 60*time.Second)
	restarted1 := srv.started

	select {
	case <-earlyDone:
	case <-time.After(60 * time.Second):
		t.Fatal("the decisions sent around the first kill got no answer 60s after it")
	}
	var earlyAckedBefore, earlyAckedAfter int
	for _, tk := range early {
		require.Equal(t, acked, tk.decision.Outcome, "decision on %s: %v %s", tk.approvalID, tk.decision.Err, tk.decision.LastErr)
		tk.decision.Aggs = []aggRef{{domain.AggTask, tk.id}}
		if tk.decision.Answered.Before(killed1) {
			earlyAckedBefore++
		} else {
			earlyAckedAfter++
		}
	}

	// More decisions right after the restart, all at once; kill 2 as soon
	// as the last is acknowledged.
	late := slices.Concat(of(tkLate), of(tkFourEyes))
	var wg sync.WaitGroup
	for _, tk := range late {
		wg.Go(func() { tk.decision = sendAs(as[tk.approver], "approval.decide", decision(tk)) })
	}
	wg.Wait()
	for _, tk := range late {
		require.Equal(t, acked, tk.decision.Outcome, "decision on %s: %v %s", tk.approvalID, tk.decision.Err, tk.decision.LastErr)
		tk.decision.Aggs = []aggRef{{domain.AggTask, tk.id}}
	}
	pendingAtKill2 := pending()
	srv.kill9(t)
	killed2 := time.Now()
	srv = startServer(t, bin, logs, "restart 2 after SIGKILL", args...)
	down2 := srv.started.Sub(killed2)
	ready2 := waitReady(t, srv, url, 60*time.Second)
	restarted2 := srv.started

	// Every task reaches its final state.
	settleDeadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var behind []string
		for _, tk := range tasks {
			if got := getTask(tk.id, 0); got.State != tk.final() {
				behind = append(behind, fmt.Sprintf("%s %d (%s) is %s, not %s", tk.kind, tk.i, tk.id, got.State, tk.final()))
			}
		}
		if len(behind) == 0 {
			break
		}
		if time.Now().After(settleDeadline) {
			t.Fatalf("%d tasks did not reach their final state 30s after the second restart:\n%s", len(behind), strings.Join(behind, "\n"))
		}
		<-tick.C
	}
	settled := time.Since(restarted2)

	// What the live service says: the approvals, the histories, and the
	// answer to each decision sent again with its id.
	liveApprovals := map[string]projections.ApprovalView{}
	liveHistory := map[string][]json.RawMessage{}
	var replayMismatches []string
	for _, tk := range tasks {
		if tk.approvalID != "" {
			var a projections.ApprovalView
			require.NoError(t, c.query("approval.get", schemas.Query{ID: tk.approvalID}, 0, &a))
			liveApprovals[tk.approvalID] = a
		}
		var h []json.RawMessage
		require.NoError(t, c.query("events", schemas.Query{ID: tk.id, Aggregate: domain.AggTask}, 0, &h))
		liveHistory[tk.id] = h
		if tk.decision != nil {
			if msg := as[tk.approver].replay(tk.decision); msg != "" {
				replayMismatches = append(replayMismatches, msg)
			}
		}
	}
	stillPending := pending()

	// Stop gracefully, then read what is on disk.
	if srv.exited() {
		t.Fatalf("dwr serve died: %v", srv.err) // err is set before exited reports true
	}
	require.NoError(t, srv.terminate(30*time.Second), "graceful stop of dwr serve")
	lctx, stopL := context.WithTimeout(context.Background(), 60*time.Second)
	defer stopL()
	l, opened := openLog(t, lctx, data, logs)
	recs, err := readLog(lctx, l, logKeyOf(t, data))
	require.NoError(t, err, "read the whole log")
	cmds := led.all()
	a := auditLog(recs, cmds, opened)
	views := compareViews(t, lctx, filepath.Join(data, "views"), l, logKeyOf(t, data))

	// The log's events per task, and its timer commands.
	history := map[string][]eventstore.Event{}
	timerCmds := map[string]time.Time{} // command id -> its record's first event time
	var downEvents int
	for _, r := range recs {
		for _, e := range r.C.Events {
			if e.AggregateType == domain.AggTask && byID[e.AggregateID] != nil {
				history[e.AggregateID] = append(history[e.AggregateID], e)
			}
			if strings.HasPrefix(e.CommandID, "timer.") {
				if _, ok := timerCmds[e.CommandID]; !ok {
					timerCmds[e.CommandID] = e.Time
				}
			}
			if (e.Time.After(killed1) && e.Time.Before(restarted1)) || (e.Time.After(killed2) && e.Time.Before(restarted2)) {
				downEvents++
			}
		}
	}

	var problems []string
	problem := func(tk *tkTask, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%s %d (%s): ", tk.kind, tk.i, tk.id)+fmt.Sprintf(format, args...))
	}
	var firings []tkFiring
	fired := func(tk *tkTask, kind string, due time.Time, e eventstore.Event) {
		firings = append(firings, tkFiring{kind: kind, task: tk, due: due, at: e.Time, cmd: e.CommandID})
		_, k, _, cmdDue, ok := parseTimerCommand(e.CommandID)
		switch {
		case !ok || k != kind:
			problem(tk, "%s at %s came from command %q, not a %s timer", e.Type, e.Time.Format(time.RFC3339Nano), e.CommandID, kind)
		case !cmdDue.Equal(due):
			problem(tk, "%s timer fired for moment %s, the task's is %s", kind, cmdDue.Format(time.RFC3339Nano), due.Format(time.RFC3339Nano))
		}
		if e.Time.Before(due) {
			problem(tk, "%s timer fired EARLY: %s at %s, due %s (%s early)", kind, e.Type,
				e.Time.Format(time.RFC3339Nano), due.Format(time.RFC3339Nano), due.Sub(e.Time))
		}
	}
	decode := func(tk *tkTask, e eventstore.Event, v any) {
		if err := json.Unmarshal(e.Data, v); err != nil {
			problem(tk, "%s v%d: %v", e.Type, e.Version, err)
		}
	}
	// only returns the events of type typ, and reports a problem unless
	// there are want of them.
	only := func(tk *tkTask, evs []eventstore.Event, typ string, want int) []eventstore.Event {
		var out []eventstore.Event
		for _, e := range evs {
			if e.Type == typ {
				out = append(out, e)
			}
		}
		if len(out) != want {
			problem(tk, "%d %s events, want %d", len(out), typ, want)
		}
		return out
	}
	// backoffs checks that every backoff is followed by exactly one
	// task.ready (backoff_elapsed), no earlier than its moment.
	backoffs := func(tk *tkTask, evs []eventstore.Event) []time.Time {
		var untils []time.Time
		for i, e := range evs {
			if e.Type != "task.backoff_scheduled" {
				continue
			}
			var b domain.BackoffScheduled
			decode(tk, e, &b)
			untils = append(untils, b.Until)
			var readies []eventstore.Event
			for _, f := range evs[i+1:] {
				if f.Type == "task.backoff_scheduled" {
					break
				}
				if f.Type == "task.ready" {
					readies = append(readies, f)
				}
			}
			if len(readies) != 1 {
				problem(tk, "%d task.ready events follow the backoff until %s, want 1", len(readies), b.Until.Format(time.RFC3339Nano))
				continue
			}
			var r domain.TaskReady
			decode(tk, readies[0], &r)
			if r.Reason != "backoff_elapsed" {
				problem(tk, "the backoff ended with task.ready reason %q", r.Reason)
			}
			fired(tk, domain.TimerBackoff, b.Until, readies[0])
		}
		return untils
	}
	gateRequested := func(tk *tkTask, evs []eventstore.Event) {
		for _, e := range only(tk, evs, "task.approval_requested", 1) {
			var ar domain.ApprovalRequested
			decode(tk, e, &ar)
			if ar.ID != tk.approvalID || ar.ActionDigest != tk.digest {
				problem(tk, "approval requested is %s (%s), want %s (%s)", ar.ID, ar.ActionDigest, tk.approvalID, tk.digest)
			}
			if (ar.ExpiresAt == nil) != tk.due.IsZero() || (ar.ExpiresAt != nil && !ar.ExpiresAt.Equal(tk.due)) {
				problem(tk, "approval expires at %v, want %s", ar.ExpiresAt, tk.due)
			}
		}
		only(tk, evs, "task.approval_refused", 0)
	}

	for _, tk := range tasks {
		evs := history[tk.id]
		if len(evs) == 0 {
			problem(tk, "no events in the log")
			continue
		}
		// The live history is the log's.
		if live := liveHistory[tk.id]; len(live) != len(evs) {
			problem(tk, "the events query lists %d events, the log has %d", len(live), len(evs))
		} else {
			for i := range evs {
				if !jsonEqual(live[i], opened(evs[i].Workspace, evs[i].Raw)) {
					problem(tk, "event %d: the events query has %.200s, the log %.200s", i+1, live[i], evs[i].Raw)
				}
			}
		}
		switch tk.kind {
		case tkWait:
			var cr domain.TaskCreated
			decode(tk, evs[0], &cr)
			if cr.State != domain.StateWaiting || cr.WaitKind != domain.WaitTimer || cr.WaitUntil == nil || !cr.WaitUntil.Equal(tk.due) {
				problem(tk, "created %s waiting on %s until %v, want waiting on a timer until %s", cr.State, cr.WaitKind, cr.WaitUntil, tk.due)
			}
			for _, e := range only(tk, evs, "task.ready", 1) {
				var r domain.TaskReady
				decode(tk, e, &r)
				if r.Reason != "timer" {
					problem(tk, "task.ready reason %q, want timer", r.Reason)
				}
				fired(tk, domain.TimerWait, tk.due, e)
			}
		case tkExpire:
			gateRequested(tk, evs)
			only(tk, evs, "task.approval_decided", 0)
			only(tk, evs, "task.ready", 0)
			exp := only(tk, evs, "task.approval_expired", 1)
			rej := only(tk, evs, "task.rejected", 1)
			if len(exp) == 1 {
				var x domain.ApprovalExpired
				decode(tk, exp[0], &x)
				if x.ApprovalID != tk.approvalID || x.Branch != domain.BranchReject {
					problem(tk, "expired %s with branch %q, want %s, reject", x.ApprovalID, x.Branch, tk.approvalID)
				}
				fired(tk, domain.TimerApproval, tk.due, exp[0])
				if len(rej) == 1 && (rej[0].CommandID != exp[0].CommandID || rej[0].Version != exp[0].Version+1) {
					problem(tk, "task.rejected (v%d, %s) does not follow the expiry (v%d, %s)", rej[0].Version, rej[0].CommandID, exp[0].Version, exp[0].CommandID)
				}
			}
		case tkEarly, tkLate:
			gateRequested(tk, evs)
			only(tk, evs, "task.approval_expired", 0)
			dec := only(tk, evs, "task.approval_decided", 1)
			if len(dec) != 1 {
				break
			}
			var d domain.ApprovalDecided
			decode(tk, dec[0], &d)
			sent := tk.decision.Body.(map[string]any)
			if d.ApprovalID != tk.approvalID || d.Approver != tk.approver || d.Response != tk.response || d.Signature != sent["signature"] {
				problem(tk, "decided %s: %s by %s (signature %.12s…), the acknowledged decision is %s by %s", d.ApprovalID, d.Response, d.Approver, d.Signature, tk.response, tk.approver)
			}
			if dec[0].CommandID != tk.decision.ID {
				problem(tk, "the decision came from command %s, the test sent %s", dec[0].CommandID, tk.decision.ID)
			}
			next := "task.ready"
			if tk.response == domain.ResponseReject {
				next = "task.rejected"
				only(tk, evs, "task.ready", 0)
			}
			for _, e := range only(tk, evs, next, 1) {
				if e.CommandID != dec[0].CommandID || e.Version != dec[0].Version+1 {
					problem(tk, "%s (v%d) does not follow the decision (v%d)", next, e.Version, dec[0].Version)
				}
				if next == "task.ready" {
					var r domain.TaskReady
					decode(tk, e, &r)
					if r.Reason != "approved" {
						problem(tk, "task.ready reason %q after the gate's approval, want approved", r.Reason)
					}
				}
			}
		case tkFourEyes:
			gateRequested(tk, evs)
			only(tk, evs, "task.approval_expired", 0)
			for _, e := range only(tk, evs, "task.approval_signed_off", 1) {
				var so domain.ApprovalSignedOff
				decode(tk, e, &so)
				if so.ApprovalID != tk.approvalID || so.Approver != tk.signer || e.CommandID != tk.signOff.ID {
					problem(tk, "signed off %s by %s (command %s), the acknowledged approval is %s's (%s)", so.ApprovalID, so.Approver, e.CommandID, tk.signer, tk.signOff.ID)
				}
			}
			dec := only(tk, evs, "task.approval_decided", 1)
			if len(dec) != 1 {
				break
			}
			var d domain.ApprovalDecided
			decode(tk, dec[0], &d)
			if d.Approver != tk.approver || dec[0].CommandID != tk.decision.ID {
				problem(tk, "decided by %s (command %s), the acknowledged approval that makes the quorum is %s's (%s)", d.Approver, dec[0].CommandID, tk.approver, tk.decision.ID)
			}
			for _, e := range only(tk, evs, "task.ready", 1) {
				if e.CommandID != dec[0].CommandID || e.Version != dec[0].Version+1 {
					problem(tk, "task.ready (v%d) does not follow the decision (v%d)", e.Version, dec[0].Version)
				}
			}
		case tkPending:
			gateRequested(tk, evs)
			only(tk, evs, "task.approval_decided", 0)
			only(tk, evs, "task.approval_expired", 0)
			if len(evs) != 2 {
				problem(tk, "%d events, want task.created and task.approval_requested only", len(evs))
			}
		case tkBackoff:
			for _, e := range only(tk, evs, "task.attempt_failed", 1) {
				var f domain.AttemptFailed
				decode(tk, e, &f)
				if f.Error.Code != "flaky" || !f.Retryable {
					problem(tk, "attempt failed with %+v (retryable %v), want the injected failure", f.Error, f.Retryable)
				}
			}
			only(tk, evs, "task.backoff_scheduled", 1)
			only(tk, evs, "task.ready", 1)
			if u := backoffs(tk, evs); len(u) == 1 && !u[0].Equal(tk.due) {
				problem(tk, "backoff until %s, the service answered %s", u[0], tk.due)
			}
		case tkDeadline:
			only(tk, evs, "task.attempt_failed", 0)
			for _, e := range only(tk, evs, "task.failed", 1) {
				var f domain.TaskFailed
				decode(tk, e, &f)
				if f.Reason != domain.ReasonDeadline {
					problem(tk, "task.failed reason %q, want deadline", f.Reason)
				}
				fired(tk, domain.TimerTask, tk.due, e)
			}
			started := 0
			if tk.claimed {
				started = 1
			}
			only(tk, evs, "task.attempt_started", started)
			if last := evs[len(evs)-1]; last.Type != "task.failed" {
				problem(tk, "the last event is %s, want task.failed", last.Type)
			}
		case tkTimeout:
			for _, e := range only(tk, evs, "task.attempt_started", 1) {
				var s domain.AttemptStarted
				decode(tk, e, &s)
				if s.Deadline == nil || !s.Deadline.Equal(tk.due) {
					problem(tk, "attempt deadline %v, the claim answered %s", s.Deadline, tk.due)
				}
			}
			for _, e := range only(tk, evs, "task.attempt_failed", 1) {
				var f domain.AttemptFailed
				decode(tk, e, &f)
				if f.Attempt != 1 || f.Error.Code != domain.ReasonTimeout || !f.Retryable {
					problem(tk, "attempt %d failed with %+v (retryable %v), want attempt 1 timed out", f.Attempt, f.Error, f.Retryable)
				}
				fired(tk, domain.TimerAttempt, tk.due, e)
			}
			only(tk, evs, "task.backoff_scheduled", 1)
			only(tk, evs, "task.ready", 1)
			backoffs(tk, evs)
		}
	}

	// Every timer command in the log is one of the firings above, and each
	// firing is a command of its own.
	firedBy := map[string]int{}
	for _, f := range firings {
		firedBy[f.cmd]++
	}
	for cmd := range timerCmds {
		if firedBy[cmd] == 0 {
			problems = append(problems, fmt.Sprintf("timer command %s is in the log but had none of the expected effects", cmd))
		}
	}
	for cmd, n := range firedBy {
		if n > 1 {
			problems = append(problems, fmt.Sprintf("timer command %s had %d effects", cmd, n))
		}
	}
	wantFirings := map[string]int{domain.TimerWait: perKind, domain.TimerApproval: perKind, domain.TimerTask: perKind,
		domain.TimerAttempt: perKind, domain.TimerBackoff: 2 * perKind}
	gotFirings := map[string]int{}
	for _, f := range firings {
		gotFirings[f.kind]++
	}

	// No decision lost, no pending approval lost.
	for _, tk := range tasks {
		if tk.approvalID == "" {
			continue
		}
		av := liveApprovals[tk.approvalID]
		switch tk.kind {
		case tkEarly, tkLate:
			if av.State != domain.ApprovalStateDecided || av.Decision == nil ||
				av.Decision.Approver != tk.approver || av.Decision.Response != tk.response {
				problem(tk, "approval %s is %s (%+v) after an acknowledged decision %s by %s", tk.approvalID, av.State, av.Decision, tk.response, tk.approver)
			}
		case tkFourEyes:
			if av.State != domain.ApprovalStateDecided || av.Decision == nil || av.Decision.Approver != tk.approver ||
				len(av.SignOffs) != 1 || av.SignOffs[0].Approver != tk.signer {
				problem(tk, "approval %s is %s (%+v, signed off %+v) after %s's and %s's acknowledged approvals", tk.approvalID, av.State, av.Decision, av.SignOffs, tk.signer, tk.approver)
			}
		case tkExpire:
			if av.State != domain.ApprovalStateExpired {
				problem(tk, "approval %s is %s, want expired", tk.approvalID, av.State)
			}
		case tkPending:
			if av.State != domain.ApprovalStatePending {
				problem(tk, "approval %s is %s, want still pending", tk.approvalID, av.State)
			}
		}
	}
	approvalTask := map[string]*tkTask{}
	for _, tk := range tasks {
		if tk.approvalID != "" {
			approvalTask[tk.approvalID] = tk
		}
	}
	for _, id := range slices.Concat(pendingAtKill1, pendingAtKill2) {
		tk := approvalTask[id]
		if tk == nil {
			problems = append(problems, fmt.Sprintf("approval %s was pending at a kill but the test never asked for it", id))
			continue
		}
		switch av := liveApprovals[id]; {
		case av.State == domain.ApprovalStateDecided && tk.decision != nil:
		case av.State == domain.ApprovalStateExpired && tk.kind == tkExpire:
		case av.State == domain.ApprovalStatePending && tk.kind == tkPending:
		default:
			problem(tk, "approval %s was pending at a kill and is now %s", id, av.State)
		}
	}
	slices.Sort(stillPending)
	var wantPending []string
	for _, tk := range of(tkPending) {
		wantPending = append(wantPending, tk.approvalID)
	}
	slices.Sort(wantPending)

	// Figures: where each firing happened and how late it was.
	// Lateness is measured from the moment, or from the process start for
	// a moment that passed while the service was down.
	var liveLate, life1Late, life2Late []time.Duration
	for _, f := range firings {
		switch {
		case f.at.Before(killed1):
			liveLate = append(liveLate, f.at.Sub(f.due))
		case f.at.Before(killed2):
			life1Late = append(life1Late, f.at.Sub(maxTime(f.due, restarted1)))
		default:
			life2Late = append(life2Late, f.at.Sub(maxTime(f.due, restarted2)))
		}
	}
	firedLive, firedLife1, firedLife2 := len(liveLate), len(life1Late), len(life2Late)
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	timerWarnings := len(logs.lines(1000, "firing a timer failed"))
	lc := led.counts()
	t.Logf("timers kill-9 plan: %d tasks (%d per timed kind: wait, approval expiry, backoff, task deadline, attempt timeout; "+
		"%d gates decided around kill 1 (%d acked before it, %d resolved after the restart), %d decided before kill 2 (%d of them "+
		"the second approval of a quorum of two, the first acked before kill 1), %d left pending); setup %s",
		len(tasks), perKind, len(early), earlyAckedBefore, earlyAckedAfter, len(late), len(of(tkFourEyes)), len(of(tkPending)),
		setupTook.Round(time.Millisecond))
	t.Logf("timers kill-9 firings: %v (want %v); %d live before kill 1 (late by p50 %s, max %s), "+
		"%d after restart 1 (p50 %s, max %s after the process started), %d after restart 2 (p50 %s, max %s); %d 'firing a timer failed' warnings",
		gotFirings, wantFirings, firedLive, ms(percentile(liveLate, 0.5)), ms(percentile(liveLate, 1)),
		firedLife1, ms(percentile(life1Late, 0.5)), ms(percentile(life1Late, 1)),
		firedLife2, ms(percentile(life2Late, 0.5)), ms(percentile(life2Late, 1)), timerWarnings)
	t.Logf("timers kill-9: cold start ready in %s; down %s then ready in %s; down %s then ready in %s; all settled %s after restart 2; "+
		"pending at kill 1: %d, at kill 2: %d, at the end: %d", ms(cold), ms(down1), ms(ready1),
		down2.Round(100*time.Microsecond), ms(ready2), ms(settled), len(pendingAtKill1), len(pendingAtKill2), len(stillPending))
	t.Logf("timers kill-9 log: %s", a)
	t.Logf("timers kill-9 views: %s", views)
	for _, line := range logs.lines(30, "level=ERROR", "level=WARN", "panic", "DATA RACE") {
		t.Log("dwr serve: " + line)
	}
	fmt.Printf("timers kill-9: firings=%d (live %d, restart1 %d, restart2 %d) decisions=%d down=%s ready=%s/%s settled=%s problems=%d\n",
		len(firings), firedLive, firedLife1, firedLife2, len(early)+len(late), ms(down1), ms(ready1), ms(ready2), ms(settled), len(problems))
	for _, p := range a.Problems {
		t.Log("audit problem: " + p)
	}
	for _, p := range problems {
		t.Log("problem: " + p)
	}

	require.Empty(t, problems, "timers fired once and not early, decisions kept (see the problems above)")
	require.Equal(t, wantFirings, gotFirings, "firings per timer kind")
	require.Len(t, timerCmds, len(firings), "timer commands in the log")
	require.Equal(t, wantPending, stillPending, "the approvals nobody decided are still pending")
	require.Empty(t, replayMismatches, "a decision sent again with its id gets its first outcome")
	require.Zero(t, downEvents, "events dated while the service was down")
	require.Zero(t, a.safety(), "safety counts: %s", a)
	require.Zero(t, lc.unresolved+lc.refused+lc.badReplies, "every command of the test is acknowledged: %+v", lc)
	views.requireRebuiltEqual(t, a.LastSeq)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
