package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/executors"
)

// Limits and signals of `dwr worker`'s commands.
const (
	maxStdout      = 256 << 10       // the result: at most 256 KiB of stdout
	maxStderrTail  = 4 << 10         // the error message: the last 4 KiB of stderr
	killGrace      = 5 * time.Second // SIGTERM, then SIGKILL this much later
	pipeGrace      = 5 * time.Second // how long output is read after the command's group is gone
	exitPermanent  = 100             // the exit status of a failure that must not be retried
	exitWait       = 101             // the exit status of a command that parks its task on what DWR_WAIT_FILE says
	maxWaitFile    = 256 << 10       // the wait file: at most 256 KiB
	envCheckpoint  = "DWR_CHECKPOINT_FILE"
	envWaitFile    = "DWR_WAIT_FILE"
	envPriorJSON   = "DWR_PRIOR_ATTEMPTS"
	workerConnName = "dwr-worker"
)

// workerOpts are the flags of `dwr worker`.
type workerOpts struct {
	queue, executor, version, logLevel string
	concurrency, maxDeliver            int
	lease, drainTimeout                time.Duration
	verify, reconfigure                bool
}

func workerCmd(g *globals) *cobra.Command {
	var o workerOpts
	cmd := &cobra.Command{
		Use:   "worker --queue Q [flags] -- COMMAND [ARGS...]",
		Short: "run COMMAND for every task of a queue: an executor made of any program",
		Long: `dwr worker takes the work items of one queue and runs COMMAND once per attempt.

The command gets the task's input (JSON) on stdin and, in its environment:
  DWR_TASK_ID, DWR_ATTEMPT, DWR_OPERATION_KEY (the same for every attempt: key
  your side effects by it), DWR_WORKSPACE, DWR_QUEUE, DWR_DEADLINE (RFC 3339,
  when the task has a timeout), DWR_SIGNAL (the signal that resumed the task,
  JSON {"name", "payload"}, when there is one), DWR_APPROVAL (the latest
  decision on the task's approvals — the one that resumed it — JSON
  {"approval_id", "action_digest", "action", "response", "comment",
  "approver", "role", "decided_at"}, when there is one), DWR_VERIFICATIONS
  (the FAIL verdicts of earlier results with their evidence, JSON, when there
  are any),
  DWR_PRIOR_ATTEMPTS (the earlier attempts, JSON;
  without their results if those would make it longer than 64 KiB),
  DWR_CHECKPOINT_FILE (holds the last checkpoint, empty for none: write JSON to
  it to save a new one; it is read every lease/3 and when the command exits),
  DWR_WAIT_FILE (an empty file: to wait, see below).

What it prints on stdout (at most 256 KiB) is the result: as JSON when it
parses, else as a JSON string. Exit 0 succeeds; exit 100 fails the task at
once; exit 101 parks the task (below); any other exit status or a signal
fails the attempt, retried per the task's retry policy, with the end of
stderr as the error message.

To wait without holding a process, a command writes one JSON object to
DWR_WAIT_FILE (at most 256 KiB) and exits 101:
  {"until": "2026-12-01T09:00:00Z"} or {"after": "10m"}
      sleep durably until that time (after: a duration, or seconds);
  {"signal": "payment-settled"}
      wait for that signal (dwr signal TASK NAME --data JSON);
  {"approval": {"action": {...}, "summary": "...", "basis": {...},
   "role": "ops", "responses": ["approve", "reject", "revise"],
   "expires_in": "1h", "on_expiry": "reject", "branches": {...},
   "escalate_to": "..."}}
      ask a person to approve the exact action (only "action" is required;
      dwr approvals list, dwr approve APPROVAL).
The attempt ends parked and the worker is free; save in DWR_CHECKPOINT_FILE
what the next run needs. When the time comes, the signal arrives or the
approval is decided, a new attempt runs the command again: it reads
DWR_SIGNAL (the signal and its payload) or DWR_APPROVAL (the decision: its
"response", and "action" and "action_digest", the action decided on) and
acts on it. So a script checks DWR_APPROVAL before it asks: asking again
for an action that is already decided fails the task (it would loop). An
empty or invalid wait file fails the task too, naming the problem. A
verifier (--verify) cannot wait.

The command runs in its own process group. When the task is cancelled, the
attempt loses its lease or passes its deadline, or the worker stops past its
drain timeout, the group gets SIGTERM, then SIGKILL 5s later.

SIGINT or SIGTERM stops the worker: it takes no more work and lets running
commands finish for up to --drain-timeout.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return runWorker(ctx, g, o, args, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.SetInterspersed(false) // everything after COMMAND is its own
	f.StringVar(&o.queue, "queue", "", "the work queue to take tasks from (required)")
	f.IntVar(&o.concurrency, "concurrency", executors.DefaultConcurrency, "commands run at once")
	f.DurationVar(&o.lease, "lease", executors.DefaultLease, "how long a task stays with this worker without a heartbeat (renewed every lease/3)")
	f.IntVar(&o.maxDeliver, "max-deliver", executors.DefaultMaxDeliver, "deliveries of a work item before it is quarantined and its task failed")
	f.BoolVar(&o.reconfigure, "reconfigure", false, "make --lease and --max-deliver the queue's (they are shared by every worker of the queue; without this flag, a worker uses the queue's)")
	f.StringVar(&o.executor, "executor", "", "this worker's name in the attempts it runs (default <hostname>-<pid>)")
	f.StringVar(&o.version, "executor-version", "", "the version recorded with every attempt")
	f.DurationVar(&o.drainTimeout, "drain-timeout", executors.DefaultDrainTimeout, "how long running commands may finish after SIGINT or SIGTERM")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.BoolVar(&o.verify, "verify", false, "be a verifier: COMMAND gets the attempt's result on stdin and prints {\"outcome\": \"PASS\"|\"FAIL\"|\"INCONCLUSIVE\", \"evidence\": ...}")
	return cmd
}

// runWorker runs the worker until ctx ends.
func runWorker(ctx context.Context, g *globals, o workerOpts, argv []string, stderr io.Writer) error {
	logger, err := newLogger(stderr, o.logLevel)
	if err != nil {
		return err
	}
	if o.queue == "" {
		return fail(exitInvalid, "--queue is required")
	}
	// Reconnect forever, also when the service is not up yet: a worker
	// outlives restarts of the service and of NATS.
	// A worker rides out restarts: its identity may be let in again only
	// once the restarted service has read its members.
	nc, err := g.dial(workerConnName, nats.MaxReconnects(-1), nats.IgnoreAuthErrorAbort(),
		nats.ReconnectWait(250*time.Millisecond), nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			logger.Warn("dwr worker: disconnected from NATS; reconnecting", "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { logger.Info("dwr worker: reconnected", "url", nc.ConnectedUrl()) }),
		nats.ConnectHandler(func(nc *nats.Conn) { logger.Info("dwr worker: connected", "url", nc.ConnectedUrl()) }))
	var ce *cliError
	if errors.As(err, &ce) {
		return err
	} else if err != nil {
		return fail(exitUnavailable, "cannot connect to NATS at %s: %v", g.server, err)
	}
	defer nc.Close()
	if !nc.IsConnected() {
		logger.Warn("dwr worker: NATS is not reachable yet; retrying until it is", "server", g.server)
	}
	x := &commandExecutor{argv: argv, lease: o.lease, logger: logger}
	cfg := executors.Config{Conn: nc, Workspace: g.workspace, Queue: o.queue,
		Executor: o.executor, Version: o.version, Concurrency: o.concurrency, Lease: o.lease,
		MaxDeliver: o.maxDeliver, Reconfigure: o.reconfigure, DrainTimeout: o.drainTimeout, Logger: logger}
	var w *executors.Worker
	if o.verify {
		w, err = executors.NewVerifier(cfg, x.verify)
	} else {
		w, err = executors.NewWorker(cfg, x.handle)
	}
	if err != nil {
		return fail(exitInvalid, "%v", err)
	}
	if err := w.Run(ctx); err != nil {
		return fail(exitUnavailable, "%v", err)
	}
	return nil
}

// commandExecutor runs a command per job.
type commandExecutor struct {
	argv   []string
	lease  time.Duration
	logger *slog.Logger
}

// verify runs the command as a verifier: the attempt's result on stdin, the
// verdict on stdout ({"outcome": "PASS"|"FAIL"|"INCONCLUSIVE", "evidence": ...}).
// A command that fails or prints no verdict leaves the item to be delivered
// again (and, past --max-deliver, quarantined).
func (x *commandExecutor) verify(ctx context.Context, c *executors.Check) (executors.Verdict, error) {
	job := executors.NewJob(executors.Job{TaskID: c.TaskID, Workspace: c.Workspace, Queue: c.Queue, GoalID: c.GoalID,
		Key: c.Key, Title: c.Title, Attempt: c.Attempt, Input: c.Result, PriorAttempts: c.PriorAttempts}, nil)
	res, err := x.run(ctx, job, false)
	if err != nil {
		return executors.Verdict{}, err
	}
	raw, _ := res.Output.(json.RawMessage)
	var v struct {
		Outcome      string               `json:"outcome"`
		Evidence     json.RawMessage      `json:"evidence"`
		EvidenceRefs []executors.Artifact `json:"evidence_refs"`
	}
	if err := json.Unmarshal(raw, &v); err != nil || (v.Outcome != executors.Pass && v.Outcome != executors.Fail && v.Outcome != executors.Inconclusive) {
		return executors.Verdict{}, fmt.Errorf(`the verifier printed %q: it must print {"outcome": "PASS"|"FAIL"|"INCONCLUSIVE", "evidence": ...}`, short(string(raw), 200))
	}
	var evidence any
	if len(v.Evidence) > 0 {
		evidence = v.Evidence
	}
	return executors.Verdict{Outcome: v.Outcome, Evidence: evidence, EvidenceRefs: v.EvidenceRefs}, nil
}

// handle runs the command for job: see workerCmd's help for the contract.
func (x *commandExecutor) handle(ctx context.Context, job *executors.Job) (executors.Result, error) {
	return x.run(ctx, job, true)
}

// run runs the command for job; a command may wait (exit 101) when waits
// is set.
func (x *commandExecutor) run(ctx context.Context, job *executors.Job, waits bool) (executors.Result, error) {
	files, err := newJobFiles(job, waits)
	if err != nil {
		return executors.Result{}, fmt.Errorf("prepare the command's files: %w", err)
	}
	defer files.remove()
	cp := &checkpointFile{path: files.checkpoint, last: job.Checkpoint, job: job, logger: x.logger}

	cmd := exec.Command(x.argv[0], x.argv[1:]...) //nolint:gosec // G204: running the operator's command is the point
	cmd.Env = append(os.Environ(), jobEnv(job, files.checkpoint, files.wait)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdin = files.stdin
	outR, outW, err := os.Pipe()
	if err != nil {
		return executors.Result{}, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		_ = outR.Close()
		_ = outW.Close()
		return executors.Result{}, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	err = cmd.Start()
	_ = outW.Close() // the command holds its own copies
	_ = errW.Close()
	if err != nil {
		_ = outR.Close()
		_ = errR.Close()
		return executors.Result{}, executors.Failure{Code: "start_failed", Message: err.Error(), Retryable: true}
	}
	pgid := cmd.Process.Pid
	stdout, stderrTail := &capped{max: maxStdout}, &tail{max: maxStderrTail}
	var readers sync.WaitGroup
	readers.Go(func() { _, _ = io.Copy(stdout, outR) })
	readers.Go(func() { _, _ = io.Copy(stderrTail, errR) })

	exited := make(chan struct{})
	var supervisor sync.WaitGroup
	supervisor.Go(func() { x.supervise(ctx, pgid, cp, exited) })
	waitErr := cmd.Wait()
	close(exited)
	supervisor.Wait()
	// Whatever the command left running in its group goes with it.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	readDone := make(chan struct{})
	go func() { readers.Wait(); close(readDone) }()
	grace := time.NewTimer(pipeGrace)
	select {
	case <-readDone:
	case <-grace.C: // a process outside the group still holds a pipe
		_ = outR.Close()
		_ = errR.Close()
		<-readDone
	}
	grace.Stop()
	_ = outR.Close()
	_ = errR.Close()

	if ctx.Err() == nil {
		cp.sync(ctx) // the checkpoint written last, before the report
		if waits && cmd.ProcessState != nil && cmd.ProcessState.ExitCode() == exitWait {
			return x.park(ctx, job, files.wait, time.Now())
		}
	}
	return x.result(ctx, cmd.ProcessState, waitErr, stdout, stderrTail)
}

// supervise saves the checkpoint file when it changes, every lease/3, and
// stops the command's group when ctx ends: SIGTERM, then SIGKILL.
func (x *commandExecutor) supervise(ctx context.Context, pgid int, cp *checkpointFile, exited <-chan struct{}) {
	tick := time.NewTicker(x.lease / 3)
	defer tick.Stop()
	done := ctx.Done()
	var kill <-chan time.Time
	for {
		select {
		case <-exited:
			return
		case <-tick.C:
			if ctx.Err() == nil {
				cp.sync(ctx)
			}
		case <-done:
			done = nil
			x.logger.Info("dwr worker: stopping the command", "task", cp.job.TaskID, "attempt", cp.job.Attempt,
				"why", context.Cause(ctx))
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			t := time.NewTimer(killGrace)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	}
}

// result turns how the command ended into the job's result or error.
func (x *commandExecutor) result(ctx context.Context, st *os.ProcessState, waitErr error, stdout *capped, stderr *tail) (executors.Result, error) {
	if st == nil {
		return executors.Result{}, fmt.Errorf("the command did not run: %v", waitErr)
	}
	if ctx.Err() != nil {
		return executors.Result{}, fmt.Errorf("the command was stopped (%v): %w", context.Cause(ctx), ctx.Err())
	}
	if st.Success() {
		if stdout.over {
			return executors.Result{}, executors.Failure{Code: executors.CodeInvalidResult,
				Message: fmt.Sprintf("the command printed more than %d bytes on stdout; store large results as artifacts", maxStdout)}
		}
		return executors.Result{Output: outputOf(stdout.Bytes())}, nil
	}
	msg := strings.TrimSpace(stderr.String())
	ws, _ := st.Sys().(syscall.WaitStatus)
	switch {
	case ws.Signaled():
		if msg == "" {
			msg = "killed by signal " + ws.Signal().String()
		}
		return executors.Result{}, executors.Failure{Code: "signal", Message: msg, Retryable: true}
	case msg == "":
		msg = "exit status " + strconv.Itoa(st.ExitCode())
	}
	return executors.Result{}, executors.Failure{Code: "exit_" + strconv.Itoa(st.ExitCode()), Message: msg,
		Retryable: st.ExitCode() != exitPermanent}
}

// outputOf returns stdout as the result: itself when it is JSON, else a JSON
// string without its trailing newlines (as a shell's $(...) has it); nil
// when empty.
func outputOf(b []byte) any {
	t := bytes.TrimSpace(b)
	if len(t) == 0 {
		return nil
	}
	if json.Valid(t) {
		return json.RawMessage(t)
	}
	return strings.ToValidUTF8(strings.TrimRight(string(b), "\r\n"), "\uFFFD")
}

// maxPriorEnv bounds DWR_PRIOR_ATTEMPTS: Linux refuses to start a program
// with an environment string over 128 KiB.
const maxPriorEnv = 64 << 10

// priorJSON returns the earlier attempts as JSON for the environment: without
// their results when those make it too long, and then without the oldest
// attempts until it fits.
func priorJSON(prior []executors.PriorAttempt) []byte {
	b, err := json.Marshal(prior)
	if err == nil && prior != nil && len(b) <= maxPriorEnv {
		return b
	}
	slim := make([]executors.PriorAttempt, len(prior))
	for i, p := range prior {
		p.Result = nil
		slim[i] = p
	}
	for len(slim) > 0 {
		if b, err := json.Marshal(slim); err == nil && len(b) <= maxPriorEnv {
			return b
		}
		slim = slim[1:]
	}
	return []byte("[]")
}

// jobEnv is what the command learns about its job from its environment.
// waitFile is "" (and DWR_WAIT_FILE set empty) when the command may not wait.
func jobEnv(job *executors.Job, checkpoint, waitFile string) []string {
	prior := priorJSON(job.PriorAttempts)
	env := []string{"DWR_TASK_ID=" + job.TaskID, "DWR_ATTEMPT=" + strconv.Itoa(job.Attempt),
		"DWR_OPERATION_KEY=" + job.OperationKey, "DWR_WORKSPACE=" + job.Workspace, "DWR_QUEUE=" + job.Queue,
		envCheckpoint + "=" + checkpoint, envWaitFile + "=" + waitFile, envPriorJSON + "=" + string(prior), "DWR_DEADLINE="}
	if !job.Deadline.IsZero() {
		env[len(env)-1] += job.Deadline.UTC().Format(time.RFC3339Nano)
	}
	if len(job.Verifications) > 0 {
		if b, err := json.Marshal(job.Verifications); err == nil && len(b) <= maxPriorEnv {
			env = append(env, "DWR_VERIFICATIONS="+string(b))
		}
	}
	if job.Signal != nil && len(job.Signal.Payload) <= maxPriorEnv {
		if b, err := json.Marshal(job.Signal); err == nil {
			env = append(env, "DWR_SIGNAL="+string(b))
		}
	}
	if d := job.Approval(); d != nil && len(d.Action) <= maxPriorEnv {
		if b, err := json.Marshal(d); err == nil {
			env = append(env, "DWR_APPROVAL="+string(b))
		}
	}
	return env
}

// jobFiles are a job's temporary files: the command's stdin (the input), its
// checkpoint file and its wait file.
type jobFiles struct {
	stdin      *os.File
	checkpoint string
	wait       string // "" when the command may not wait
}

func newJobFiles(job *executors.Job, waits bool) (*jobFiles, error) {
	in, err := os.CreateTemp("", "dwr-input-*.json")
	if err != nil {
		return nil, err
	}
	f := &jobFiles{stdin: in}
	if _, err := in.Write(job.Input); err != nil {
		f.remove()
		return nil, err
	}
	if _, err := in.Seek(0, io.SeekStart); err != nil {
		f.remove()
		return nil, err
	}
	cp, err := os.CreateTemp("", "dwr-checkpoint-*.json")
	if err != nil {
		f.remove()
		return nil, err
	}
	f.checkpoint = cp.Name()
	_, err = cp.Write(job.Checkpoint)
	if cerr := cp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		f.remove()
		return nil, err
	}
	if waits {
		w, err := os.CreateTemp("", "dwr-wait-*.json")
		if err != nil {
			f.remove()
			return nil, err
		}
		f.wait = w.Name()
		if err := w.Close(); err != nil {
			f.remove()
			return nil, err
		}
	}
	return f, nil
}

func (f *jobFiles) remove() {
	_ = f.stdin.Close()
	_ = os.Remove(f.stdin.Name())
	if f.checkpoint != "" {
		_ = os.Remove(f.checkpoint)
	}
	if f.wait != "" {
		_ = os.Remove(f.wait)
	}
}

// checkpointFile saves the content of a job's checkpoint file whenever it
// changes to valid JSON.
type checkpointFile struct {
	path    string
	job     *executors.Job
	logger  *slog.Logger
	last    []byte // the content last saved (or handed to the job)
	invalid []byte // the content last found invalid, logged once
}

func (c *checkpointFile) sync(ctx context.Context) {
	b, err := os.ReadFile(c.path)
	if err != nil {
		c.logger.Warn("dwr worker: cannot read the checkpoint file", "task", c.job.TaskID, "err", err)
		return
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 || bytes.Equal(b, c.last) || bytes.Equal(b, c.invalid) {
		return
	}
	if !json.Valid(b) {
		c.invalid = b
		c.logger.Warn("dwr worker: the checkpoint file does not hold valid JSON; ignored", "task", c.job.TaskID,
			"attempt", c.job.Attempt, "file", c.path)
		return
	}
	if err := c.job.SaveCheckpoint(ctx, json.RawMessage(b)); err != nil {
		if !errors.Is(err, executors.ErrCancelled) && !errors.Is(err, executors.ErrLeaseLost) {
			c.logger.Warn("dwr worker: checkpoint not saved", "task", c.job.TaskID, "attempt", c.job.Attempt, "err", err)
		}
		return
	}
	c.last = b
}

// capped keeps the first max bytes written to it and notes whether more
// came; it never refuses a write, so the command never blocks on a full
// pipe. (It has no ReadFrom, so io.Copy goes through Write.)
type capped struct {
	buf  []byte
	max  int
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	n := len(p)
	if room := c.max - len(c.buf); n > room {
		c.over = true
		p = p[:max(room, 0)]
	}
	c.buf = append(c.buf, p...)
	return n, nil
}

// Bytes returns what was kept.
func (c *capped) Bytes() []byte { return c.buf }

// tail keeps the last max bytes written to it.
type tail struct {
	buf []byte
	max int
}

func (t *tail) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string { return strings.ToValidUTF8(string(t.buf), "") }

// Error codes of a command's wait (exit 101) that cannot be honoured.
const (
	codeInvalidWait  = "invalid_wait"             // the wait file is empty or does not say what to wait for
	codeAlreadyAsked = "approval_already_decided" // an approval asked again for an action already decided
)

// waitForms says what a wait file may hold: the end of every message about
// one that does not.
const waitForms = `expected one JSON object: {"until": "<RFC 3339 time>"}, {"after": "<duration, e.g. 10m>"}, ` +
	`{"signal": "<name>"} or {"approval": {"action": <the action to approve>, "summary": ..., ...}}`

// waitRequest is what a command asked for in its wait file: a durable sleep
// until a time, a signal, or an approval.
type waitRequest struct {
	until    time.Time
	signal   string
	approval *executors.ApprovalRequest
}

// waitFile is a wait file as written.
type waitFile struct {
	Until    *string         `json:"until"`
	After    json.RawMessage `json:"after"`
	Signal   *string         `json:"signal"`
	Approval *waitApproval   `json:"approval"`
}

// waitApproval is the approval request of a wait file: the fields of
// executors.ApprovalRequest.
type waitApproval struct {
	Action     json.RawMessage   `json:"action"`
	Summary    string            `json:"summary"`
	Basis      json.RawMessage   `json:"basis"`
	Role       string            `json:"role"`
	Responses  []string          `json:"responses"`
	Branches   map[string]string `json:"branches"`
	OnExpiry   string            `json:"on_expiry"`
	EscalateTo string            `json:"escalate_to"`
	ExpiresIn  json.RawMessage   `json:"expires_in"`
}

// parseWaitFile returns what the wait file b asks for; "after" counts from
// now.
func parseWaitFile(b []byte, now time.Time) (waitRequest, error) {
	t := bytes.TrimSpace(b)
	if len(t) == 0 {
		return waitRequest{}, fmt.Errorf("%s is empty", envWaitFile)
	}
	holds := func(format string, args ...any) error {
		return fmt.Errorf("%s holds %q: %s", envWaitFile, short(strings.ToValidUTF8(string(t), "\uFFFD"), 200), fmt.Sprintf(format, args...))
	}
	dec := json.NewDecoder(bytes.NewReader(t))
	dec.DisallowUnknownFields()
	var f waitFile
	if err := dec.Decode(&f); err != nil {
		return waitRequest{}, holds("%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return waitRequest{}, holds("more than one JSON value")
	}
	n := 0
	for _, set := range []bool{f.Until != nil, !isNull(f.After), f.Signal != nil, f.Approval != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return waitRequest{}, holds("%d waits; name exactly one of until, after, signal, approval", n)
	}
	switch {
	case f.Until != nil:
		at, err := time.Parse(time.RFC3339Nano, *f.Until)
		if err != nil {
			return waitRequest{}, holds(`"until" is not an RFC 3339 time such as 2026-12-01T09:00:00Z`)
		}
		if !at.After(now) {
			return waitRequest{}, holds(`"until" is not in the future (now is %s)`, now.UTC().Format(time.RFC3339))
		}
		return waitRequest{until: at.UTC()}, nil
	case f.Signal != nil:
		if !domain.ValidKey(*f.Signal) {
			return waitRequest{}, holds(`"signal" is not a valid signal name: letters, digits, '_', '.' and '-', starting with a letter or digit, at most 128`)
		}
		return waitRequest{signal: *f.Signal}, nil
	case f.Approval != nil:
		return approvalOf(f.Approval, holds)
	}
	d, err := durationOf(f.After)
	if err != nil || d <= 0 {
		return waitRequest{}, holds(`"after" is not a positive duration such as "10m" or "1h30m" (or a number of seconds)`)
	}
	return waitRequest{until: now.Add(d).UTC()}, nil
}

// approvalOf returns the approval request of a wait file.
func approvalOf(a *waitApproval, holds func(string, ...any) error) (waitRequest, error) {
	if isNull(a.Action) {
		return waitRequest{}, holds(`"approval" has no "action": the concrete action to approve is required`)
	}
	if len(a.Action) > executors.MaxPayloadBytes || len(a.Basis) > executors.MaxPayloadBytes {
		return waitRequest{}, holds("the action and the basis may have at most %d bytes each", executors.MaxPayloadBytes)
	}
	r := &executors.ApprovalRequest{Action: a.Action, Summary: a.Summary, Role: a.Role, Responses: a.Responses,
		Branches: a.Branches, OnExpiry: a.OnExpiry, EscalateTo: a.EscalateTo}
	if !isNull(a.Basis) {
		r.Basis = a.Basis
	}
	if !isNull(a.ExpiresIn) {
		d, err := durationOf(a.ExpiresIn)
		if err != nil || d < 0 {
			return waitRequest{}, holds(`"approval"."expires_in" is not a duration such as "1h" (or a number of seconds)`)
		}
		r.ExpiresIn = d
	}
	return waitRequest{approval: r}, nil
}

// durationOf decodes a duration: a string such as "10m", or a number of
// seconds.
func durationOf(raw json.RawMessage) (time.Duration, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return time.ParseDuration(s)
	}
	var secs float64
	if err := json.Unmarshal(raw, &secs); err != nil {
		return 0, err
	}
	if secs > float64(math.MaxInt64/int64(time.Second)) || secs < -float64(math.MaxInt64/int64(time.Second)) {
		return 0, errors.New("out of range")
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// isNull reports whether a JSON field was absent or null.
func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// readWaitFile returns the wait file's content, refusing more than
// maxWaitFile bytes.
func readWaitFile(path string) ([]byte, error) {
	f, err := os.Open(path) //nolint:gosec // G304: the worker's own temporary file
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %v", envWaitFile, err)
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, maxWaitFile+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("cannot read %s: %v", envWaitFile, err)
	case len(b) > maxWaitFile:
		return nil, fmt.Errorf("%s holds more than %d bytes", envWaitFile, maxWaitFile)
	}
	return b, nil
}

// park honours the wait of a command that exited 101: the task sleeps,
// waits for a signal, or asks for an approval, as the wait file at path
// says. A wait file that does not say fails the task, not retried: the
// command would only ask the same again.
func (x *commandExecutor) park(ctx context.Context, job *executors.Job, path string, now time.Time) (executors.Result, error) {
	b, err := readWaitFile(path)
	var w waitRequest
	if err == nil {
		w, err = parseWaitFile(b, now)
	}
	if err != nil {
		return executors.Result{}, executors.Failure{Code: codeInvalidWait,
			Message: "the command exited " + strconv.Itoa(exitWait) + " to wait, but " + err.Error() + "; " + waitForms}
	}
	switch {
	case w.approval != nil:
		d, err := job.RequestApproval(ctx, *w.approval)
		if err != nil {
			return executors.Result{}, err // a *executors.WaitError: the request parked the task
		}
		// The task holds a decision on exactly this action already: asking
		// again would run the command again, which would ask again.
		return executors.Result{}, executors.Failure{Code: codeAlreadyAsked, Message: fmt.Sprintf(
			"the command exited %d to ask for approval of an action already decided (%s by %s, approval %s, action %s): "+
				"read DWR_APPROVAL (its action_digest and response) before asking, and ask again only for another action",
			exitWait, d.Response, d.Approver, d.ApprovalID, d.ActionDigest)}
	case w.signal != "":
		return executors.Result{}, executors.AwaitSignal(w.signal)
	}
	return executors.Result{}, executors.Sleep(w.until)
}
