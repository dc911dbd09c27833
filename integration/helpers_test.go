// Package integration holds dwr's end-to-end tests: the real binary as a
// child process, real embedded NATS servers, crashes by SIGKILL, clusters on
// loopback. Each test checks what survived by reading the log directly and
// prints a one-line summary of its figures.
package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/handlers/embedded"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/handlers/servicetest/ports"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

var longFlag = flag.Bool("long", false, "run the soak versions of the crash tests (also DWR_LONG=1)")

// times returns how often a crash test repeats its fault: n, or soak when
// the soak versions were asked for.
func times(n, soak int) int {
	if *longFlag || os.Getenv("DWR_LONG") == "1" {
		return soak
	}
	return n
}

func TestMain(m *testing.M) {
	code := m.Run()
	dwrBuild.Remove()
	natsServerBuild.Remove()
	os.Exit(code)
}

// dwrBuild is ./cmd/dwr, built on first use.
var dwrBuild servicetest.Binary

// childRace reports whether the dwr child is built with the race detector:
// DWR_CHILD_RACE=1 or 0 decides; by default it is not (a -race child is
// several times slower and the crash tests are about durability, not races).
func childRace() bool { return os.Getenv("DWR_CHILD_RACE") == "1" }

// dwrBinary builds ./cmd/dwr once per test run and returns its path.
func dwrBinary(t *testing.T) string {
	t.Helper()
	return dwrBuild.Path(t, "dwr", "./cmd/dwr", childRace())
}

// localServe returns the arguments of a `dwr serve` with its data in a new
// temp dir and its NATS port a free loopback one, that data dir, and the URL
// clients reach it at.
func localServe(t *testing.T) (args []string, data, url string) {
	data = filepath.Join(t.TempDir(), "data")
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	return []string{"serve", "--data", data, "--listen", listen, "--http", ""}, data, "nats://" + listen
}

// freePort returns a loopback TCP port to listen on (ports.Free).
func freePort(t *testing.T) int { return ports.Free(t) }

// syncBuffer collects the output of child processes and in-process servers,
// shown only when a test fails (never written to t after the test ends).
type syncBuffer struct{ servicetest.Output }

// lines returns the lines containing any of the needles, at most max.
func (s *syncBuffer) lines(max int, needles ...string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s.String()))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() && len(out) < max {
		for _, n := range needles {
			if strings.Contains(sc.Text(), n) {
				out = append(out, sc.Text())
				break
			}
		}
	}
	return out
}

// phases returns a logger of the phases a long test reaches, each with the
// seconds since it began.
func phases(t *testing.T) func(what string) {
	began := time.Now()
	return func(what string) { t.Logf("%6.2fs %s", time.Since(began).Seconds(), what) }
}

// logOnFailure returns a buffer for the output of child processes and
// in-process servers, shown under title when the test fails. Call it before
// starting the processes that write to it, so that it is shown after they
// were killed.
func logOnFailure(t *testing.T, title string) *syncBuffer {
	buf := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("---- %s ----\n%s", title, buf.String())
		}
	})
	return buf
}

// serverProc is one `dwr serve` child process, in its own process group.
type serverProc struct {
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{} // closed once the process has exited
	err     error         // Wait's result, set before done is closed
	ready   *readyLine    // sees dwr serve's "dwr ready" line in its output
}

// readyMark is what dwr serve's log says once it is ready: caught up, and
// its server's users given the members its views hold.
const readyMark = `msg="dwr ready"`

// readyLine passes a process's output on to out and closes seen once the
// output holds readyMark (also across two writes).
type readyLine struct {
	out  io.Writer
	mu   sync.Mutex
	tail []byte
	seen chan struct{}
}

func (r *readyLine) Write(p []byte) (int, error) {
	r.mu.Lock()
	if r.tail != nil {
		r.tail = append(r.tail, p...)
		if bytes.Contains(r.tail, []byte(readyMark)) {
			close(r.seen)
			r.tail = nil // seen: nothing more to look for
		} else {
			r.tail = r.tail[max(0, len(r.tail)-len(readyMark)):]
		}
	}
	r.mu.Unlock()
	return r.out.Write(p)
}

// startServer starts `dwr <args>` with its output going to out. The process
// (and its group) is killed at cleanup.
func startServer(t *testing.T, bin string, out io.Writer, label string, args ...string) *serverProc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	ready := &readyLine{out: out, tail: []byte{}, seen: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = ready, ready
	fmt.Fprintf(out, "==== %s: %s %s ====\n", label, bin, strings.Join(args, " "))
	p := &serverProc{cmd: cmd, done: make(chan struct{}), ready: ready}
	p.started = time.Now()
	require.NoError(t, cmd.Start())
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			p.signal(syscall.SIGKILL)
			<-p.done
		}
	})
	return p
}

// isReady reports whether p, when it is dwr serve, has logged readyMark
// (any other process is ready as soon as it answers).
func (p *serverProc) isReady() bool {
	if !slices.Contains(p.cmd.Args, "serve") {
		return true
	}
	select {
	case <-p.ready.seen:
		return true
	default:
		return false
	}
}

func (p *serverProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *serverProc) signal(sig syscall.Signal) {
	if !p.exited() {
		_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	}
}

// kill9 SIGKILLs the process group and waits for the process to be gone.
func (p *serverProc) kill9(t *testing.T) {
	t.Helper()
	p.signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("dwr serve (pid %d) still running 10s after SIGKILL", p.cmd.Process.Pid)
	}
}

// terminate sends SIGTERM and waits up to timeout for a clean exit.
func (p *serverProc) terminate(timeout time.Duration) error {
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		return fmt.Errorf("dwr serve (pid %d) did not exit within %s of SIGTERM", p.cmd.Process.Pid, timeout)
	}
}

// creds maps a service's client URL to the admin credential of its data
// directory, learnt by waitReady, so that dial connects as that admin.
var creds sync.Map

// credsOf returns the admin credential that `dwr serve` (args) creates in
// its data directory, or "" when it runs against an external NATS.
func credsOf(args []string) string {
	data := ""
	for i, a := range args {
		if a == "--nats" {
			return ""
		}
		if a == "--data" && i+1 < len(args) {
			data = args[i+1]
		}
	}
	if data == "" {
		return ""
	}
	return filepath.Join(data, "admin.creds")
}

// connectOpts returns the options that connect to url as the admin of the
// service behind it (none for a service on an external NATS).
func connectOpts(t *testing.T, url string) []nats.Option {
	v, ok := creds.Load(url)
	if !ok || v.(string) == "" {
		return nil
	}
	opts, err := executors.Credentials(v.(string))
	require.NoError(t, err)
	return opts
}

// waitReady polls a query on url until the service answers it and, for dwr
// serve, until it has logged that it is ready (its server's users reloaded
// with the members its views hold: a client connecting during that reload
// can be refused), and returns the time from the process's start to then.
// It fails the test when the process exits first or timeout passes.
func waitReady(t *testing.T, p *serverProc, url string, timeout time.Duration) time.Duration {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var nc *nats.Conn
	defer func() {
		if nc != nil {
			nc.Close()
		}
	}()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last error
	credsFile := credsOf(p.cmd.Args[1:])
	if credsFile != "" {
		creds.Store(url, credsFile)
	} else if v, ok := creds.Load(url); ok {
		credsFile = v.(string) // registered by the test: a service on an external NATS
	}
	for {
		if p.exited() {
			t.Fatalf("dwr serve exited before it was ready: %v", p.err)
		}
		if nc == nil {
			var opts []nats.Option
			if credsFile != "" {
				if opts, last = executors.Credentials(credsFile); last != nil {
					<-tick.C // serve writes it at its first start
					continue
				}
			}
			nc, last = nats.Connect(url, append(opts, nats.Timeout(500*time.Millisecond), nats.NoReconnect())...)
		}
		if nc != nil {
			resp, err := nc.Request("dwr.q.default.workspace.list", nil, 500*time.Millisecond)
			if err == nil {
				var r schemas.Reply
				switch {
				case json.Unmarshal(resp.Data, &r) != nil || !r.OK:
					err = fmt.Errorf("reply %s", resp.Data)
				case p.isReady():
					return time.Since(p.started)
				default:
					err = errors.New("it answers, but has not logged that it is ready")
				}
			}
			last = err
			if !nc.IsConnected() {
				nc.Close()
				nc = nil
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("dwr serve not ready after %s: %v", timeout, last)
		}
		<-tick.C
	}
}

// client speaks the wire to the service on its own connection.
type client struct {
	nc      *nats.Conn
	ws      string
	timeout time.Duration
	actor   string // the identity the service knows it as
}

func dial(t *testing.T, url, name string, timeout time.Duration) *client {
	t.Helper()
	nc, err := nats.Connect(url, append(connectOpts(t, url), nats.Name(name), nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond), nats.Timeout(time.Second))...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	actor := "admin" // the admin of dwr serve's data directory, or of the generated accounts
	if v, ok := creds.Load(url); !ok || v.(string) == "" {
		actor = "anonymous" // an open service
	}
	return &client{nc: nc, ws: "default", timeout: timeout, actor: actor}
}

// member adds an identity with role to the workspace through admin c (the
// service at url) and returns a client connected as it, and the member.add
// command (for a test's ledger).
func (c *client) member(t *testing.T, url, name string, role domain.Role, queues ...string) (*client, *cmdResult) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := c.do(ctx, "member.add", domain.AddMember{Name: name, Role: role, PublicKey: pub, Queues: queues}, "member-"+name)
	require.Equal(t, acked, r.Outcome, "member.add %s: %v %s", name, r.Err, r.LastErr)
	nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.IgnoreAuthErrorAbort(),
		nats.Timeout(time.Second), nats.CustomInboxPrefix(schemas.InboxPrefix(pub)),
		nats.Nkey(pub, func(nonce []byte) ([]byte, error) { return kp.Sign(nonce) }))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return &client{nc: nc, ws: c.ws, timeout: c.timeout, actor: name}, r
}

// errBadReply marks a reply that is not a valid Response: a wire bug.
var errBadReply = errors.New("reply is not a dwr response")

func (c *client) request(subject string, body any, hdr nats.Header) (*schemas.Reply, error) {
	m := nats.NewMsg(subject)
	if hdr != nil {
		m.Header = hdr
	}
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		m.Data = b
	}
	resp, err := c.nc.RequestMsg(m, c.timeout)
	if err != nil {
		return nil, err
	}
	var r schemas.Reply
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return nil, fmt.Errorf("%w: %q: %v", errBadReply, resp.Data, err)
	}
	if !r.OK && r.Error == nil {
		return nil, fmt.Errorf("%w: %q has neither ok nor an error", errBadReply, resp.Data)
	}
	return &r, nil
}

// query runs a query and decodes its result into out.
func (c *client) query(name string, q schemas.Query, minSeq uint64, out any) error {
	h := nats.Header{}
	if minSeq > 0 {
		h.Set(schemas.HeaderMinSeq, fmt.Sprint(minSeq))
	}
	r, err := c.request("dwr.q."+c.ws+"."+name, q, h)
	if err != nil {
		return err
	}
	if !r.OK {
		return r.Error
	}
	return json.Unmarshal(r.Result, out)
}

// outcome is what a client knows about a command.
type outcome int

const (
	acked   outcome = iota // an ok reply
	refused                // an error reply that is a decision (conflict, invalid, ...)
	unknown                // no answer, or an answer saying the outcome is unknown
)

func (o outcome) String() string {
	return [...]string{"acked", "refused", "unknown"}[o]
}

// aggRef names an aggregate a command's reply says exists.
type aggRef struct{ typ, id string }

func (a aggRef) String() string { return a.typ + "/" + a.id }

// cmdResult is the final knowledge of one command id.
type cmdResult struct {
	Name, ID string
	Actor    string // who sent it, as the service knows the sender
	Body     any    // what was sent, for replays
	Outcome  outcome
	Seq      uint64
	Reply    json.RawMessage
	Err      *schemas.Error // the refusal
	Unknowns int            // attempts whose outcome was unknown before the last one
	Internal int            // of those, replies with code internal
	BadReply int            // of those, replies that were not dwr responses
	LastErr  string         // the last unknown outcome's cause
	Aggs     []aggRef       // aggregates an acked reply names
	Sent     time.Time      // first attempt
	Answered time.Time      // the answer
}

// reply decodes an acked command's reply.
func (r *cmdResult) reply() domain.Reply {
	var rep domain.Reply
	_ = json.Unmarshal(r.Reply, &rep)
	return rep
}

// retryPause spaces the retries of an unknown outcome. It is pacing, not a
// wait for a condition: the retry itself finds out whether the service is
// back.
const retryPause = 100 * time.Millisecond

// do sends command name with id until it gets an answer — an ok reply or a
// refusal — retrying unknown outcomes with the same id until ctx ends.
func (c *client) do(ctx context.Context, name string, body any, id string) *cmdResult {
	r := &cmdResult{Name: name, ID: id, Actor: c.actor, Body: body, Sent: time.Now()}
	h := nats.Header{}
	h.Set(schemas.HeaderCommandID, id)
	for {
		resp, err := c.request("dwr.cmd."+c.ws+"."+name, body, h)
		switch {
		case err == nil && resp.OK:
			r.Outcome, r.Seq, r.Reply, r.Answered = acked, resp.Seq, resp.Result, time.Now()
			return r
		case err == nil && resp.Error.Code != string(domain.CodeUnavailable) && resp.Error.Code != string(domain.CodeInternal):
			r.Outcome, r.Err, r.Answered = refused, resp.Error, time.Now()
			return r
		case err == nil:
			if resp.Error.Code == string(domain.CodeInternal) {
				r.Internal++
			}
			r.LastErr = resp.Error.Error()
		default:
			if errors.Is(err, errBadReply) {
				r.BadReply++
			}
			r.LastErr = err.Error()
		}
		r.Unknowns++
		t := time.NewTimer(retryPause) // pacing between retries, see retryPause
		select {
		case <-ctx.Done():
			t.Stop()
			r.Outcome = unknown
			return r
		case <-t.C:
		}
	}
}

// replay sends an acked command again with its id and reports how the
// answer differs from the first outcome ("" when it is the same).
func (c *client) replay(r *cmdResult) string {
	h := nats.Header{}
	h.Set(schemas.HeaderCommandID, r.ID)
	resp, err := c.request("dwr.cmd."+c.ws+"."+r.Name, r.Body, h)
	switch {
	case err != nil:
		return fmt.Sprintf("replay of %s %s: %v", r.Name, r.ID, err)
	case !resp.OK:
		return fmt.Sprintf("replay of %s %s: refused %v; first outcome ok at seq %d", r.Name, r.ID, resp.Error, r.Seq)
	case resp.Seq != r.Seq || !jsonEqual(resp.Result, r.Reply):
		return fmt.Sprintf("replay of %s %s: seq %d %s; first outcome seq %d %s", r.Name, r.ID, resp.Seq, resp.Result, r.Seq, r.Reply)
	}
	return ""
}

// ledger is every command the clients sent, with its final outcome.
type ledger struct {
	mu   sync.Mutex
	cmds []*cmdResult
}

func (l *ledger) add(r *cmdResult) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cmds = append(l.cmds, r)
}

func (l *ledger) all() []*cmdResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.cmds)
}

// ledgerCounts are the client-side figures of a run.
type ledgerCounts struct {
	acked, refused, conflicts, unresolved   int
	resolved, internal, badReplies, invalid int
}

func (l *ledger) counts() ledgerCounts {
	var c ledgerCounts
	for _, r := range l.all() {
		switch r.Outcome {
		case acked:
			c.acked++
		case refused:
			c.refused++
			switch r.Err.Code {
			case string(domain.CodeConflict):
				c.conflicts++
			case string(domain.CodeInvalid):
				c.invalid++
			}
		case unknown:
			c.unresolved++
		}
		if r.Unknowns > 0 && r.Outcome != unknown {
			c.resolved++
		}
		c.internal += r.Internal
		c.badReplies += r.BadReply
	}
	return c
}

// loggedRecord is one record of the log, decoded.
type loggedRecord struct {
	Seq uint64
	C   *eventstore.Commit
}

// readLog reads every record of l, verifying the log's chain and each
// record's MAC under key.
func readLog(ctx context.Context, l eventstore.Log, key *eventstore.LogKey) ([]loggedRecord, error) {
	var out []loggedRecord
	_, err := eventstore.ReadVerified(ctx, l, key, eventstore.LogTip{}, func(seq uint64, c *eventstore.Commit) error {
		out = append(out, loggedRecord{Seq: seq, C: c})
		return nil
	})
	return out, err
}

// logKeyOf returns the log key of a `dwr serve` data directory.
func logKeyOf(t *testing.T, dataDir string) *eventstore.LogKey {
	t.Helper()
	b, _, err := handlers.LoadLogKey(filepath.Join(dataDir, handlers.LogKeyFile), false)
	require.NoError(t, err)
	k, err := eventstore.NewLogKey(b)
	require.NoError(t, err)
	return k
}

// audit is what reading the whole log found, checked against the ledger.
type audit struct {
	Records, Events, Aggregates int
	LastSeq                     uint64

	// Safety counts: each must be 0.
	Lost           int // an acked command, its events or an aggregate its reply names is not in the log
	Duplicates     int // a command id's results or events are in more than one record
	VersionErrors  int // an aggregate's versions are not 1..n in log order
	ChainErrors    int // an event does not extend its aggregate's hash chain
	EpochErrors    int // a record's epoch is below the one before it
	WrongReplies   int // an ok reply that is not the logged first outcome (other seq or reply)
	Orphans        int // a command with events but no result in its record, or the reverse
	RefusedApplied int // a command answered with a refusal whose events are in the log
	Unexpected     int // a command in the log that no client sent

	// Informative.
	UnknownLanded int // commands left unresolved that did land
	Problems      []string
}

func (a *audit) problem(counter *int, format string, args ...any) {
	*counter++
	if len(a.Problems) < 40 {
		a.Problems = append(a.Problems, fmt.Sprintf(format, args...))
	}
}

// safety is the sum of the safety counts.
func (a *audit) safety() int {
	return a.Lost + a.Duplicates + a.VersionErrors + a.ChainErrors + a.EpochErrors + a.WrongReplies +
		a.Orphans + a.RefusedApplied + a.Unexpected
}

func (a *audit) String() string {
	return fmt.Sprintf("records=%d events=%d aggregates=%d last_seq=%d lost=%d duplicates=%d version_errors=%d "+
		"chain_errors=%d epoch_errors=%d wrong_replies=%d orphans=%d refused_applied=%d unexpected=%d unknown_landed=%d",
		a.Records, a.Events, a.Aggregates, a.LastSeq, a.Lost, a.Duplicates, a.VersionErrors, a.ChainErrors,
		a.EpochErrors, a.WrongReplies, a.Orphans, a.RefusedApplied, a.Unexpected, a.UnknownLanded)
}

// builtinCommands are command ids the service issues itself.
var builtinCommands = map[string]bool{"default/dwr-default-workspace": true}

// serviceCommand reports whether the command id of workspace ws is one the
// service issues itself: a builtin one, or the firing of a durable timer.
func serviceCommand(ws, id string) bool {
	return builtinCommands[ws+"/"+id] || strings.HasPrefix(id, "timer.")
}

// auditLog checks the log's records against the commands the clients sent.
func auditLog(recs []loggedRecord, cmds []*cmdResult, open opener) *audit {
	a := &audit{Records: len(recs)}
	chain := eventstore.NewChainVerifier()
	lastVer := map[string]uint64{}
	resultSeqs := map[string][]uint64{}
	resultOf := map[string]eventstore.CommandResult{}
	firstReply := map[string]json.RawMessage{}
	eventSeqs := map[string][]uint64{}
	var epoch uint64
	addSeq := func(m map[string][]uint64, k string, seq uint64) {
		if s := m[k]; len(s) == 0 || s[len(s)-1] != seq {
			m[k] = append(s, seq)
		}
	}
	for _, r := range recs {
		a.LastSeq = r.Seq
		if r.C.Epoch < epoch {
			a.problem(&a.EpochErrors, "record %d: epoch %d after epoch %d", r.Seq, r.C.Epoch, epoch)
		}
		epoch = max(epoch, r.C.Epoch)
		withEvents := map[string]bool{}
		for i := range r.C.Events {
			e := &r.C.Events[i]
			a.Events++
			k := e.AggregateType + "/" + e.AggregateID
			if e.Version != lastVer[k]+1 {
				a.problem(&a.VersionErrors, "record %d: %s v%d follows v%d (cmd %s)", r.Seq, k, e.Version, lastVer[k], e.CommandID)
			}
			lastVer[k] = e.Version
			if err := chain.Check(e); err != nil {
				a.problem(&a.ChainErrors, "record %d: %v", r.Seq, err)
			}
			ck := e.Workspace + "/" + domain.CommandKey(e.Actor, e.CommandID) // a command id is its sender's
			addSeq(eventSeqs, ck, r.Seq)
			withEvents[ck] = true
		}
		withResult := map[string]bool{}
		for _, res := range r.C.Results {
			ck := res.Workspace + "/" + domain.CommandKey(res.Actor, res.CommandID)
			addSeq(resultSeqs, ck, r.Seq)
			if _, ok := firstReply[ck]; !ok {
				firstReply[ck], resultOf[ck] = res.Reply, res
			}
			withResult[ck] = true
		}
		for ck := range withEvents {
			if !withResult[ck] {
				a.problem(&a.Orphans, "record %d: events of command %s but no result", r.Seq, ck)
			}
		}
		for ck := range withResult {
			if !withEvents[ck] {
				a.problem(&a.Orphans, "record %d: result of command %s but no events", r.Seq, ck)
			}
		}
	}
	a.Aggregates = len(lastVer)
	seen := map[string]bool{}
	for k, seqs := range resultSeqs {
		if len(seqs) > 1 {
			a.problem(&a.Duplicates, "command %s has results in records %v", k, seqs)
		}
	}
	for k, seqs := range eventSeqs {
		if len(seqs) > 1 && len(resultSeqs[k]) <= 1 {
			a.problem(&a.Duplicates, "command %s has events in records %v", k, seqs)
		}
	}
	for _, c := range cmds {
		ck := "default/" + domain.CommandKey(c.Actor, c.ID)
		seen[ck] = true
		seqs := resultSeqs[ck]
		switch c.Outcome {
		case acked:
			switch {
			case len(seqs) == 0 && len(eventSeqs[ck]) == 0:
				a.problem(&a.Lost, "acked %s %s (seq %d, after %d unknown attempts) is not in the log", c.Name, c.ID, c.Seq, c.Unknowns)
				continue
			case len(seqs) == 0:
				a.problem(&a.WrongReplies, "acked %s %s has events in %v but no result", c.Name, c.ID, eventSeqs[ck])
				continue
			case seqs[0] != c.Seq:
				a.problem(&a.WrongReplies, "acked %s %s: reply names seq %d, the log has it at %d", c.Name, c.ID, c.Seq, seqs[0])
			case !sameReply(c.Name, open(resultOf[ck].Workspace, firstReply[ck]), c.Reply):
				a.problem(&a.WrongReplies, "acked %s %s: reply %s, the log's first outcome %s", c.Name, c.ID, c.Reply, firstReply[ck])
			}
			if !slices.Contains(eventSeqs[ck], seqs[0]) {
				a.problem(&a.Lost, "acked %s %s: no events in its record %d", c.Name, c.ID, seqs[0])
			}
			for _, ag := range c.Aggs {
				if lastVer[ag.String()] == 0 {
					a.problem(&a.Lost, "acked %s %s names %s, which has no events in the log", c.Name, c.ID, ag)
				}
			}
		case refused:
			if len(seqs) > 0 || len(eventSeqs[ck]) > 0 {
				a.problem(&a.RefusedApplied, "%s %s was refused (%s) but is in the log at %v", c.Name, c.ID, c.Err, seqs)
			}
		case unknown:
			if len(seqs) > 0 {
				a.UnknownLanded++
			}
		}
	}
	for k := range resultSeqs {
		if res := resultOf[k]; !seen[k] && !serviceCommand(res.Workspace, res.CommandID) {
			a.problem(&a.Unexpected, "command %s is in the log at %v but no client sent it", k, resultSeqs[k])
		}
	}
	return a
}

// sameReply reports whether a client got the log's first outcome of its
// command as the reply: a claim's reply may hold the attempt's token too,
// which the service adds for the claimer and never stores.
func sameReply(name string, logged, got json.RawMessage) bool {
	if name != "task.claim" {
		return jsonEqual(logged, got)
	}
	var l, g map[string]any
	if json.Unmarshal(logged, &l) != nil || json.Unmarshal(got, &g) != nil {
		return false
	}
	// A claim that started an attempt carries its token; one that did not
	// (it ended the task), none.
	if tok, _ := g["token"].(string); (l["state"] == "running") != (len(tok) == 43) {
		return false
	}
	delete(g, "token")
	return reflect.DeepEqual(l, g)
}

func jsonEqual(a, b []byte) bool {
	var x, y bytes.Buffer
	if json.Compact(&x, a) != nil || json.Compact(&y, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(x.Bytes(), y.Bytes())
}

// openLog starts an embedded NATS server on a stopped `dwr serve`'s data
// directory (no TCP listener) and opens its log, both closed at cleanup. It
// returns the log with what opens its sealed payloads (encrypted by
// default), as the service opens them for a query: with the data keys of
// its keys stream, unwrapped by DATA/master.key (a document is returned as
// it is when the service made no data key).
func openLog(t *testing.T, ctx context.Context, dataDir string, logs io.Writer) (*eventstore.JetStreamLog, opener) {
	t.Helper()
	srv, nc, err := access.OpenStopped(dataDir, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	l, err := eventstore.OpenJetStreamLog(ctx, js, eventstore.JetStreamConfig{})
	require.NoError(t, err)
	return l, payloadOpener(t, ctx, js, filepath.Join(dataDir, handlers.MasterKeyFile))
}

// opener opens the sealed payloads of a document of a workspace.
type opener func(ws string, b []byte) []byte

// payloadOpener returns what opens the sealed payloads of the service whose
// streams js reaches, as it opens them for a query: with the data keys of
// its keys stream, unwrapped by the master key in masterFile. It returns
// documents as they are when the service made no data key.
func payloadOpener(t *testing.T, ctx context.Context, js jetstream.JetStream, masterFile string) opener {
	t.Helper()
	st, err := js.Stream(ctx, eventstore.KeysStream("dwr"))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return func(_ string, b []byte) []byte { return b }
	}
	require.NoError(t, err)
	master, err := os.ReadFile(masterFile) //nolint:gosec // the test's own key
	require.NoError(t, err)
	keys, err := eventstore.KeyringOf(js, st, "dwr", master)
	require.NoError(t, err)
	return func(ws string, b []byte) []byte {
		out, err := eventstore.OpenAll(b, ws, func(ws, scope string) (*eventstore.DataKey, error) { return keys.Key(ctx, ws, scope, false) })
		require.NoError(t, err)
		return out
	}
}

// viewsCheck compares the live views in dir with views rebuilt from l.
type viewsCheck struct {
	LiveCheckpoint, RebuiltCheckpoint uint64
	LiveRows, RebuiltRows             int
	Equal                             bool
	FirstDiff                         string
}

func (v viewsCheck) String() string {
	return fmt.Sprintf("live checkpoint %d (%d rows), rebuilt checkpoint %d (%d rows), equal=%v %s",
		v.LiveCheckpoint, v.LiveRows, v.RebuiltCheckpoint, v.RebuiltRows, v.Equal, v.FirstDiff)
}

// requireRebuiltEqual fails t unless the views rebuilt from the whole log
// reached lastSeq, its last record, and the live ones reached it too and
// equal them byte for byte.
func (v viewsCheck) requireRebuiltEqual(t *testing.T, lastSeq uint64) {
	t.Helper()
	require.Equal(t, lastSeq, v.RebuiltCheckpoint)
	require.Equal(t, v.RebuiltCheckpoint, v.LiveCheckpoint, "live views reached the end of the log")
	require.True(t, v.Equal, "rebuilt views equal the live ones byte for byte: %s", v.FirstDiff)
}

// compareViews opens the live views in dir (their server stopped), rebuilds
// views from the whole of l in a temporary directory, and compares their
// dumps byte for byte.
func compareViews(t *testing.T, ctx context.Context, dir string, l eventstore.Log, key *eventstore.LogKey) viewsCheck {
	t.Helper()
	live, err := projections.Open(dir, projections.Options{})
	require.NoError(t, err)
	defer live.Close()
	rebuilt, err := projections.Rebuild(ctx, l, key, filepath.Join(t.TempDir(), "rebuilt"), projections.Options{}, nil)
	require.NoError(t, err)
	defer rebuilt.Close()
	var a, b bytes.Buffer
	require.NoError(t, live.Dump(&a))
	require.NoError(t, rebuilt.Dump(&b))
	v := viewsCheck{LiveCheckpoint: live.Checkpoint(), RebuiltCheckpoint: rebuilt.Checkpoint(), Equal: bytes.Equal(a.Bytes(), b.Bytes())}
	ra, rb := dumpRows(a.Bytes()), dumpRows(b.Bytes())
	v.LiveRows, v.RebuiltRows = len(ra), len(rb)
	if !v.Equal {
		v.FirstDiff = firstDiff(ra, rb)
	}
	return v
}

type dumpRow struct{ k, v []byte }

// dumpRows parses projections.Store.Dump's output: per row, the key's and
// the value's lengths as big-endian uint64s, then the key and the value.
func dumpRows(b []byte) []dumpRow {
	var out []dumpRow
	for len(b) >= 16 {
		kl, vl := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:16])
		b = b[16:]
		if kl > uint64(len(b)) || vl > uint64(len(b))-kl {
			break
		}
		out = append(out, dumpRow{b[:kl], b[kl : kl+vl]})
		b = b[kl+vl:]
	}
	return out
}

func firstDiff(a, b []dumpRow) string {
	for i := 0; i < max(len(a), len(b)); i++ {
		switch {
		case i >= len(a):
			return fmt.Sprintf("rebuilt has extra row %q = %.300s", b[i].k, b[i].v)
		case i >= len(b):
			return fmt.Sprintf("live has extra row %q = %.300s", a[i].k, a[i].v)
		case !bytes.Equal(a[i].k, b[i].k):
			return fmt.Sprintf("row %d: live key %q, rebuilt key %q", i, a[i].k, b[i].k)
		case !bytes.Equal(a[i].v, b[i].v):
			return fmt.Sprintf("row %q: live %.300s, rebuilt %.300s", a[i].k, a[i].v, b[i].v)
		}
	}
	return "dumps differ in framing"
}

// percentile returns the p-th percentile (nearest rank) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p+0.9999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// natsNode is one in-process NATS server of a test cluster.
type natsNode struct {
	name    string
	cfg     embedded.Config
	mu      sync.Mutex
	srv     *embedded.Server
	url     string // client URL
	monitor string // monitoring URL (http_port)
}

func (n *natsNode) server() *embedded.Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.srv
}

func (n *natsNode) start() error {
	srv, err := embedded.Start(n.cfg)
	if err != nil {
		return fmt.Errorf("%s: %w", n.name, err)
	}
	n.mu.Lock()
	n.srv = srv
	n.mu.Unlock()
	return nil
}

// shutdown stops the node gracefully.
func (n *natsNode) shutdown() {
	if s := n.server(); s != nil {
		s.Shutdown()
	}
}

// clusterAccess is what `dwr admin nats-config` writes for a cluster run by
// an operator: the accounts block every node includes, the service's seed
// for `dwr serve --nats`, and the admin's credential.
type clusterAccess struct {
	Config          string `json:"config"`
	ServiceSeed     string `json:"service_seed"`
	AdminCredential string `json:"admin_credential"`
	AdminKey        string `json:"admin_key"`
	accounts        string
}

// natsConfig runs `dwr admin nats-config` into a temp dir.
func natsConfig(t *testing.T, bin string) clusterAccess {
	t.Helper()
	out, err := exec.Command(bin, "admin", "nats-config", "--dir", filepath.Join(t.TempDir(), "nats-config"), "--json").Output()
	require.NoError(t, err)
	var a clusterAccess
	require.NoError(t, json.Unmarshal(out, &a))
	b, err := os.ReadFile(a.Config)
	require.NoError(t, err)
	a.accounts = string(b)
	return a
}

// serveArgs are the flags that make `dwr serve --nats` the service of the
// generated accounts.
func (a clusterAccess) serveArgs() []string {
	return []string{"--nats-creds", a.ServiceSeed, "--admin-key", a.AdminKey}
}

// service connects to url as the service itself (its account holds the
// streams), for a test that inspects JetStream.
func (a clusterAccess) service(t *testing.T, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nk, err := nats.NkeyOptionFromSeed(a.ServiceSeed)
	require.NoError(t, err)
	nc, err := nats.Connect(url, append([]nats.Option{nk}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// startCluster starts n clustered embedded NATS servers on loopback, each
// with its own directory, client port and route port, routed to each other.
func startCluster(t *testing.T, n int, logs io.Writer, accounts string) []*natsNode {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	routes := make([]string, n)
	nodes := make([]*natsNode, n)
	for i := range nodes {
		routes[i] = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	}
	for i := range nodes {
		port, mport := freePort(t), freePort(t)
		nodes[i] = &natsNode{
			name:    fmt.Sprintf("n%d", i+1),
			url:     fmt.Sprintf("nats://127.0.0.1:%d", port),
			monitor: fmt.Sprintf("http://127.0.0.1:%d", mport),
			cfg: embedded.Config{
				DataDir:    filepath.Join(t.TempDir(), fmt.Sprintf("n%d", i+1)),
				Listen:     fmt.Sprintf("127.0.0.1:%d", port),
				Monitor:    fmt.Sprintf("127.0.0.1:%d", mport),
				ServerName: fmt.Sprintf("n%d", i+1),
				MaxStore:   1 << 30,
				Logger:     logger.With("node", fmt.Sprintf("n%d", i+1)),
				Cluster:    &embedded.ClusterConfig{Name: "dwr-it", Listen: routes[i], Routes: routes},
				Accounts:   accounts,
			},
		}
	}
	// Start them concurrently: each waits for its own listeners only.
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, node := range nodes {
		wg.Go(func() { errs[i] = node.start() })
	}
	wg.Wait()
	for _, node := range nodes {
		t.Cleanup(node.shutdown)
	}
	require.NoError(t, errors.Join(errs...))
	return nodes
}

// monitorURLs returns the monitoring URLs of nodes as one --nats-monitor
// value.
func monitorURLs(nodes []*natsNode) string {
	urls := make([]string, len(nodes))
	for i, n := range nodes {
		urls[i] = n.monitor
	}
	return strings.Join(urls, ",")
}

// clusterURL returns the client URLs of nodes as one --nats value.
func clusterURL(nodes []*natsNode) string {
	urls := make([]string, len(nodes))
	for i, n := range nodes {
		urls[i] = n.url
	}
	return strings.Join(urls, ",")
}
