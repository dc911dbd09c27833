package handlers_test

import (
	"cmp"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/handlers/servicetest/ports"
	"github.com/dwr-run/dwr/schemas"
)

// The linearizability test: clients claim, complete (now and then with a
// report that carries its claim: the lazy claim), fail, cancel, approve
// and read a few tasks concurrently while the service is restarted under
// them, and porcupine checks that the history they saw could have happened
// one operation at a time, each at a moment between its call and its answer.
// A command whose answer was lost to a restart is sent again with its
// command id until it is answered: its one effect lies in that interval. A
// client reports with the token its claim returned when it claimed the
// attempt, and with a forged one when it did not: those reports must be
// refused whatever the attempt's state.

// linOp is an operation on a task as a client issued it.
type linOp struct {
	Task    string
	Kind    string // create | claim | succeed | fail | lazy (a success whose report carries its claim) | cancel | approve | get
	Gated   bool   // for create
	Attempt int    // for succeed, fail and lazy
	Token   string // for succeed and fail: the token sent
	Own     bool   // for succeed and fail: Token is the one the attempt's claim returned
}

// linOut is what the service answered.
type linOut struct {
	OK       bool
	Code     string // the error code when not OK
	State    string
	Attempt  int // claim: the attempt started; get: how many attempts there are
	Approved bool
	Token    string // claim: the token returned
}

// linState is the model's view of one task.
type linState struct {
	State    string // "" before it is created
	Attempts int
	Failed   int // failed attempts
	Running  int
	Gated    bool // it has an approval gate
}

const linMaxAttempts = 3

var linModel = porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range h {
			t := op.Input.(linOp).Task
			if _, ok := by[t]; !ok {
				order = append(order, t)
			}
			by[t] = append(by[t], op)
		}
		out := make([][]porcupine.Operation, 0, len(order))
		for _, t := range order {
			out = append(out, by[t])
		}
		return out
	},
	Init: func() []any { return []any{linState{}} },
	Step: func(s, in, out any) []any {
		st, op, o := s.(linState), in.(linOp), out.(linOut)
		var next []any
		for _, cur := range linNow(st) {
			if n, ok := linStep(cur, op, o); ok {
				next = append(next, n)
			}
		}
		return next
	},
	DescribeOperation: func(in, out any) string {
		op, o := in.(linOp), out.(linOut)
		return fmt.Sprintf("%s(%s a%d) -> ok=%v %s %s a%d", op.Kind, op.Task[len(op.Task)-4:], op.Attempt, o.OK, o.Code, o.State, o.Attempt)
	},
}

// linNow returns the states a task may be in when an operation takes
// effect: a task in backoff may have been made ready by its timer, which no
// client operation shows.
func linNow(s linState) []linState {
	if s.State == domain.StateBackoff {
		r := s
		r.State = domain.StateReady
		return []linState{s, r}
	}
	return []linState{s}
}

func linStep(s linState, op linOp, o linOut) (linState, bool) {
	conflict := !o.OK && o.Code == string(domain.CodeConflict)
	terminal := domain.Terminal(s.State)
	switch op.Kind {
	case "create":
		if s.State != "" || !o.OK {
			return s, false
		}
		s.State, s.Gated = domain.StateReady, op.Gated
		if op.Gated {
			s.State = domain.StateWaiting
		}
		return s, o.State == s.State
	case "claim":
		if s.State != domain.StateReady {
			return s, conflict
		}
		s.Attempts++
		s.Running, s.State = s.Attempts, domain.StateRunning
		return s, o.OK && o.Attempt == s.Attempts && o.State == domain.StateRunning
	case "lazy": // taken only when the task is ready for exactly this attempt
		if s.State != domain.StateReady || op.Attempt != s.Attempts+1 {
			return s, conflict
		}
		s.Attempts++
		s.State = domain.StateAccepted
		return s, o.OK && o.State == s.State
	case "succeed", "fail": // taken only from the attempt that holds the task
		if !op.Own {
			return s, forged(s, op, o)
		}
		if s.State != domain.StateRunning || op.Attempt != s.Running {
			return s, conflict
		}
		s.Running, s.State = 0, domain.StateAccepted
		if op.Kind == "fail" {
			s.Failed++
			s.State = domain.StateBackoff
			if s.Failed >= linMaxAttempts {
				s.State = domain.StateFailed
			}
		}
		return s, o.OK && o.State == s.State
	case "cancel":
		if terminal || s.State == "" {
			return s, conflict
		}
		s.State, s.Running = domain.StateCancelled, 0
		return s, o.OK && o.State == s.State
	case "approve":
		if !s.Gated { // no approval to decide
			return s, !o.OK && o.Code == string(domain.CodeNotFound)
		}
		if s.State == domain.StateWaiting {
			s.State = domain.StateReady
			return s, o.OK && o.State == s.State
		}
		// Decided already: the same signed decision again is a no-op;
		// another is refused. Withdrawn (the task ended): refused.
		return s, conflict || (o.OK && o.State == s.State)
	case "get":
		return s, o.OK && o.State == s.State && o.Attempt == s.Attempts
	}
	return s, false
}

// forged says whether o is the answer to a report with a token that is not
// its attempt's: refused (forbidden) when the attempt exists, as a conflict
// when it does not; never taken.
func forged(s linState, op linOp, o linOut) bool {
	if o.OK {
		return false
	}
	if op.Attempt >= 1 && op.Attempt <= s.Attempts {
		return o.Code == string(domain.CodeForbidden)
	}
	return o.Code == string(domain.CodeConflict)
}

// linClient is one client's connection with the retries that make every
// command's outcome known.
type linClient struct {
	nc      *nats.Conn
	seq     *atomic.Int64
	retries *atomic.Int64 // requests sent again because no answer came (a restart)
}

func (c *linClient) do(t *testing.T, op linOp, key ed25519.PrivateKey, deadline time.Time) linOut {
	var name string
	var body any
	switch op.Kind {
	case "create":
		spec := map[string]any{"queue": "lin", "retry": map[string]any{"max_attempts": linMaxAttempts, "initial_backoff": "30ms", "max_backoff": "60ms"}}
		if op.Gated {
			spec["approval"] = map[string]any{"role": "ops"}
		}
		name, body = "task.create", map[string]any{"task_id": op.Task, "spec": spec}
	case "claim":
		name, body = "task.claim", map[string]any{"task_id": op.Task, "executor": "lin"}
	case "succeed":
		name, body = "task.succeed", map[string]any{"task_id": op.Task, "attempt": op.Attempt, "token": op.Token}
	case "lazy":
		name, body = "task.succeed", map[string]any{"task_id": op.Task, "attempt": op.Attempt, "claim": map[string]any{"executor": "lin"}}
	case "fail":
		name, body = "task.fail", map[string]any{"task_id": op.Task, "attempt": op.Attempt, "token": op.Token,
			"error": map[string]any{"message": "flaky"}, "retryable": true}
	case "cancel":
		name, body = "task.cancel", map[string]any{"task_id": op.Task}
	case "approve":
		id := domain.ApprovalID(op.Task, 1)
		digest, _ := domain.ActionDigest(json.RawMessage("null"))
		name, body = "approval.decide", map[string]any{"approval_id": id, "approver": "ops-1", "response": "approve",
			"action_digest": digest, "signature": domain.SignDecision(key, id, "approve", digest)}
	case "get":
		return c.get(t, op, deadline)
	}
	cmdID := "lin-" + strconv.FormatInt(c.seq.Add(1), 10)
	for {
		m := nats.NewMsg("dwr.cmd.default." + name)
		m.Header.Set(schemas.HeaderCommandID, cmdID)
		m.Data, _ = json.Marshal(body)
		resp, err := c.nc.RequestMsg(m, 2*time.Second)
		var r schemas.Reply
		if err == nil {
			err = json.Unmarshal(resp.Data, &r)
		}
		if err == nil && (r.OK || r.Error.Code != string(domain.CodeUnavailable)) {
			if !r.OK {
				return linOut{Code: r.Error.Code}
			}
			var rep domain.Reply
			if err := json.Unmarshal(r.Result, &rep); err != nil {
				t.Errorf("%s: reply does not decode: %v", name, err)
			}
			return linOut{OK: true, State: rep.State, Attempt: rep.Attempt, Token: rep.Token}
		}
		if time.Now().After(deadline) {
			t.Errorf("command %s %s was not answered before the deadline: %v", name, cmdID, err)
			return linOut{Code: "no_answer"}
		}
		c.retries.Add(1)
		<-time.After(20 * time.Millisecond) // a client's pause before it retries (no responders answer at once)
	}
}

func (c *linClient) get(t *testing.T, op linOp, deadline time.Time) linOut {
	for {
		b, _ := json.Marshal(schemas.Query{ID: op.Task})
		resp, err := c.nc.Request("dwr.q.default.task.get", b, 2*time.Second)
		var r schemas.Reply
		if err == nil {
			err = json.Unmarshal(resp.Data, &r)
		}
		if err == nil && r.OK {
			var tk domain.Task
			if err := json.Unmarshal(r.Result, &tk); err != nil {
				t.Errorf("task.get: reply does not decode: %v", err)
			}
			return linOut{OK: true, State: tk.State, Attempt: len(tk.Attempts)}
		}
		if time.Now().After(deadline) {
			t.Errorf("task.get was not answered before the deadline: %v %+v", err, r.Error)
			return linOut{Code: "no_answer"}
		}
		c.retries.Add(1)
		<-time.After(20 * time.Millisecond) // a client's pause before it retries
	}
}

func TestTaskHistoriesAreLinearizableAcrossRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for a few seconds")
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports.Free(t))
	dir := t.TempDir()
	opts := servicetest.Options{Listen: addr, Secure: true, Config: handlers.Config{WriterID: "lin-writer"}}
	svc := servicetest.Start(t, dir, opts)

	key := testKey("ops-1")
	pub := base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey))
	reg := &bundle{nc: svc.Admin, svcNC: svc.Conn, c: svc.Client("default")}
	reg.mustCommand(t, "approver.register", map[string]any{"name": "ops-1", "role": "ops", "public_key": pub})
	// The clients are one identity, authenticated: ops-1, an admin of the
	// workspace, who claims, reports and decides as the approver ops-1.
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	kpub, _ := kp.PublicKey()
	reg.mustCommand(t, "member.add", map[string]any{"name": "ops-1", "role": "admin", "public_key": kpub})

	const clients, tasks = 4, 8
	var seq, retries atomic.Int64
	start := time.Now()
	deadline := start.Add(60 * time.Second)
	var hmu sync.Mutex
	var history []porcupine.Operation
	record := func(client int, op linOp, call time.Time, out linOut) {
		hmu.Lock()
		defer hmu.Unlock()
		history = append(history, porcupine.Operation{ClientId: client, Input: op, Output: out,
			Call: int64(call.Sub(start)), Return: int64(time.Since(start))})
	}
	conns := make([]*linClient, clients)
	for i := range conns {
		nc, err := nats.Connect("nats://"+addr, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
			nats.IgnoreAuthErrorAbort(), nats.CustomInboxPrefix(schemas.InboxPrefix(kpub)),
			nats.Nkey(kpub, func(n []byte) ([]byte, error) { return kp.Sign(n) }))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		conns[i] = &linClient{nc: nc, seq: &seq, retries: &retries}
	}
	// The clients work on the newest tasks; now and then one creates another,
	// so that tasks keep going through their lifecycle.
	var idsMu sync.Mutex
	var ids []string
	create := func(client int, gated bool) {
		id := domain.DeriveID(start, fmt.Sprint("lin-task-", seq.Add(1)))
		op := linOp{Task: id, Kind: "create", Gated: gated}
		call := time.Now()
		record(client, op, call, conns[client].do(t, op, key, deadline))
		idsMu.Lock()
		ids = append(ids, id) // the others work on it once it exists
		idsMu.Unlock()
	}
	pick := func(rng *rand.Rand) string {
		idsMu.Lock()
		defer idsMu.Unlock()
		n := min(len(ids), tasks)
		return ids[len(ids)-1-rng.IntN(n)]
	}
	for i := range tasks {
		create(0, i%2 == 0)
	}

	kinds := []string{"claim", "claim", "claim", "succeed", "fail", "fail", "fail", "lazy", "lazy", "approve", "approve", "get", "get", "get"}
	var wg sync.WaitGroup
	done := make(chan struct{})
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 42))
			attempts := map[string]int{}  // the attempt this client last claimed, per task
			tokens := map[string]string{} // the tokens its claims returned, by task/attempt
			for range 500 {
				switch rng.IntN(40) {
				case 0:
					create(c, rng.IntN(2) == 0)
					continue
				case 1:
					op := linOp{Task: pick(rng), Kind: "cancel"}
					call := time.Now()
					record(c, op, call, conns[c].do(t, op, key, deadline))
					continue
				}
				op := linOp{Task: pick(rng), Kind: kinds[rng.IntN(len(kinds))]}
				if op.Kind == "lazy" {
					op.Attempt = 1 + rng.IntN(linMaxAttempts) // the next attempt, or a stale or early one
				}
				if op.Kind == "succeed" || op.Kind == "fail" {
					op.Attempt = attempts[op.Task]
					if op.Attempt == 0 || rng.IntN(5) == 0 {
						op.Attempt = 1 + rng.IntN(linMaxAttempts) // now and then a stale or unknown attempt
					}
					op.Token = tokens[fmt.Sprintf("%s/%d", op.Task, op.Attempt)]
					op.Own = op.Token != "" && rng.IntN(8) > 0
					if !op.Own {
						op.Token = strings.Repeat("f", 43) // a forged token: well-formed, not the attempt's
					}
				}
				call := time.Now()
				out := conns[c].do(t, op, key, deadline)
				record(c, op, call, out)
				if op.Kind == "claim" && out.OK {
					attempts[op.Task] = out.Attempt
					if out.Token == "" {
						t.Errorf("claim of %s started attempt %d without returning its token", op.Task, out.Attempt)
					}
					tokens[fmt.Sprintf("%s/%d", op.Task, out.Attempt)] = out.Token
				}
			}
		})
	}
	go func() { wg.Wait(); close(done) }()

	// Restart the service twice while the clients work.
	restarts := 0
	for restarts < 2 {
		select {
		case <-done:
		case <-time.After(150 * time.Millisecond):
			svc.Stop()
			svc = servicetest.Start(t, dir, opts)
			restarts++
			continue
		}
		break
	}
	<-done
	require.False(t, t.Failed())
	require.Equal(t, 2, restarts, "the clients finished before both restarts: give them more work")

	res, info := porcupine.CheckOperationsVerbose(linModel.ToModel(), history, 60*time.Second)
	counts := map[string]int{}
	for _, op := range history {
		o := op.Output.(linOut)
		counts[op.Input.(linOp).Kind+map[bool]string{true: ":ok", false: ":" + o.Code}[o.OK]]++
	}
	t.Logf("linearizability: %d operations on %d tasks by %d clients across %d restarts (%d requests sent again): %s; %v",
		len(history), len(ids), clients, restarts, retries.Load(), res, counts)
	require.Positive(t, retries.Load(), "the restarts interrupted no request: they were not under load")
	if res != porcupine.Ok {
		for _, part := range linModel.Partition(history) {
			if porcupine.CheckOperations(linModel.ToModel(), part) {
				continue
			}
			slices.SortFunc(part, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
			for _, op := range part {
				t.Logf("  c%d [%6.1fms %6.1fms] %s", op.ClientId, float64(op.Call)/1e6, float64(op.Return)/1e6,
					linModel.DescribeOperation(op.Input, op.Output))
			}
			break
		}
		path := t.TempDir() + "/history.html"
		if err := porcupine.VisualizePath(linModel.ToModel(), info, path); err == nil {
			t.Logf("visualization: %s", path)
		}
	}
	require.Equal(t, porcupine.Ok, res, "the tasks' histories are not linearizable")
}
