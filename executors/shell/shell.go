package shell

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/schemas"
)

// Limits, exit statuses and environment variables of a command.
const (
	MaxStdout     = 256 << 10 // the result: at most 256 KiB of stdout
	MaxStderrTail = 4 << 10   // the error message: the last 4 KiB of stderr
	// MaxStderrKept bounds what is kept of a successful command's stderr:
	// its last 64 KiB, stored as the attempt's artifact StderrArtifact.
	MaxStderrKept = 64 << 10
	// StderrArtifact names the artifact of a successful command's stderr.
	StderrArtifact = "dwr/stderr.txt"
	KillGrace      = 5 * time.Second // SIGTERM, then SIGKILL this much later
	ExitPermanent  = 100             // the exit status of a failure that must not be retried
	ExitWait       = 101             // the exit status of a command that parks its task on what DWR_WAIT_FILE says
	MaxWaitFile    = 256 << 10       // the wait file: at most 256 KiB

	EnvCheckpointFile = "DWR_CHECKPOINT_FILE" // the file that holds the last checkpoint, and takes a new one
	EnvWaitFile       = "DWR_WAIT_FILE"       // the file a command writes what it waits for in
	EnvPriorAttempts  = "DWR_PRIOR_ATTEMPTS"  // the earlier attempts, JSON
	// EnvArtifactsDir is an empty directory: the files a command that
	// succeeds leaves in it (below it, named by their path in it) are
	// stored as artifacts and attached to its report — a verifier's to its
	// verdict's evidence_refs.
	EnvArtifactsDir = "DWR_ARTIFACTS_DIR"
	// EnvModelStepsFile is an empty file: the command appends to it one
	// JSON object a line for each consequential model call it made
	// (schemas.ModelStep: model, prompt_version, tokens, cost, ...); they are
	// recorded with its report, a success's or a failure's.
	EnvModelStepsFile = "DWR_MODEL_STEPS_FILE"
	// MaxModelStepsFile bounds the model-steps file.
	MaxModelStepsFile = 1 << 20

	pipeGrace = 5 * time.Second // how long output is read after the command's group is gone
)

// Options adjust a Command; the zero value is the defaults.
type Options struct {
	// Lease is the lease of the worker that runs the command: the
	// checkpoint file is read every Lease/3 while the command runs.
	// Default executors.DefaultLease.
	Lease time.Duration
	// Logger receives what the executor has to say about a command: a
	// checkpoint file that does not hold JSON, a command it stops.
	// Default: discarded.
	Logger *slog.Logger
}

// New returns the executor that runs argv (a program and its arguments,
// found in $PATH as exec.Command finds it) once per job. It returns an
// error when argv is empty.
func New(argv []string, o Options) (*Command, error) {
	if len(argv) == 0 {
		return nil, errors.New("shell: no command to run")
	}
	if o.Lease <= 0 {
		o.Lease = executors.DefaultLease
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Command{argv: slices.Clone(argv), lease: o.Lease, logger: o.Logger}, nil
}

// Command runs a program per job: its Handle is an executors.Handler, its
// Verify an executors.VerifyHandler. It is safe for concurrent use: every
// job runs its own process.
type Command struct {
	argv   []string
	lease  time.Duration
	logger *slog.Logger
}

// Verify runs the command as a verifier: the attempt's result on stdin, the
// verdict on stdout ({"outcome": "PASS"|"FAIL"|"INCONCLUSIVE", "evidence": ...}).
// A command that fails or prints no verdict leaves the item to be delivered
// again (and, past the queue's MaxDeliver, quarantined).
func (x *Command) Verify(ctx context.Context, c *executors.Check) (executors.Verdict, error) {
	job := executors.NewJob(executors.Job{TaskID: c.TaskID, Workspace: c.Workspace, Queue: c.Queue, GoalID: c.GoalID,
		Key: c.Key, Title: c.Title, Attempt: c.Attempt, Input: c.Result, PriorAttempts: c.PriorAttempts}, nil)
	res, err := x.run(ctx, job, false, c.PutArtifact)
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
	return executors.Verdict{Outcome: v.Outcome, Evidence: evidence, EvidenceRefs: append(v.EvidenceRefs, res.Artifacts...)}, nil
}

// Handle runs the command for job, as Contract says.
func (x *Command) Handle(ctx context.Context, job *executors.Job) (executors.Result, error) {
	return x.run(ctx, job, true, job.PutArtifact)
}

// putFunc stores an artifact (Job.PutArtifact, Check.PutArtifact).
type putFunc func(ctx context.Context, name string, r io.Reader) (executors.Artifact, error)

// run runs the command for job; a command may wait (exit 101) when waits
// is set. What it leaves in its artifacts directory is stored with put.
func (x *Command) run(ctx context.Context, job *executors.Job, waits bool, put putFunc) (executors.Result, error) {
	files, err := newJobFiles(job, waits)
	if err != nil {
		return executors.Result{}, fmt.Errorf("prepare the command's files: %w", err)
	}
	defer files.remove()
	cp := &checkpointFile{path: files.checkpoint, last: job.Checkpoint, job: job, logger: x.logger}

	cmd := exec.Command(x.argv[0], x.argv[1:]...) //nolint:gosec // G204: running the operator's command is the point
	cmd.Env = append(os.Environ(), jobEnv(job, files)...)
	cmd.Env = append(cmd.Env, EnvArtifactsDir+"="+files.artifacts, EnvModelStepsFile+"="+files.modelSteps)
	if tp := executors.Traceparent(ctx); tp != "" { // the command's own dwr commands join the job's trace
		cmd.Env = append(cmd.Env, schemas.EnvTraceparent+"="+tp)
	}
	cmd.SysProcAttr = procAttr()
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
	// The parent-death signal follows the OS thread that starts the
	// command: keep this goroutine on it until the command has exited, so
	// that the runtime does not end that thread under a running command.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	err = cmd.Start()
	_ = outW.Close() // the command holds its own copies
	_ = errW.Close()
	if err != nil {
		_ = outR.Close()
		_ = errR.Close()
		return executors.Result{}, executors.Failure{Code: "start_failed", Message: err.Error(), Retryable: true}
	}
	pgid := cmd.Process.Pid
	stdout, stderrTail := &capped{max: MaxStdout}, &tail{max: MaxStderrKept}
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
		if waits && cmd.ProcessState != nil && cmd.ProcessState.ExitCode() == ExitWait {
			return x.park(ctx, job, files.wait, time.Now())
		}
	}
	res, err := x.result(ctx, cmd.ProcessState, waitErr, stdout, stderrTail)
	steps, stepsErr := readModelSteps(files.modelSteps)
	res.ModelSteps = steps // with a failure too: the calls were made
	if err == nil {
		err = stepsErr
	}
	if err == nil {
		res.Artifacts, err = storeArtifacts(ctx, files.artifacts, put)
	}
	if err == nil && stderrTail.Len() > 0 {
		var ref executors.Artifact
		if ref, err = x.keepStderr(ctx, job, stderrTail, put); err == nil {
			res.Artifacts = append(res.Artifacts, ref)
		}
	}
	return res, err
}

// keepStderr logs what a command that succeeded printed on stderr (its last
// MaxStderrTail bytes) and stores the last MaxStderrKept bytes as the
// attempt's artifact StderrArtifact.
func (x *Command) keepStderr(ctx context.Context, job *executors.Job, stderr *tail, put putFunc) (executors.Artifact, error) {
	x.logger.Info("shell: the command's stderr", "task", job.TaskID, "attempt", job.Attempt, "bytes", stderr.Len(),
		"stderr", strings.TrimSpace(stderr.Last(MaxStderrTail)))
	ref, err := put(ctx, StderrArtifact, strings.NewReader(stderr.String()))
	if err != nil {
		return executors.Artifact{}, executors.Failure{Code: "artifact_failed", Message: "keep the command's stderr: " + err.Error(), Retryable: true}
	}
	return ref, nil
}

// storeArtifacts stores the regular files below dir, named by their path in
// it, and returns their references.
func storeArtifacts(ctx context.Context, dir string, put putFunc) ([]executors.Artifact, error) {
	var refs []executors.Artifact
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err // links and other non-files are left out
		}
		if len(refs) == maxArtifacts {
			return executors.Failure{Code: executors.CodeInvalidResult,
				Message: fmt.Sprintf("the command left more than %d files in %s", maxArtifacts, EnvArtifactsDir)}
		}
		name, _ := filepath.Rel(dir, path)
		f, err := os.Open(path) //nolint:gosec // G304: a file the command made in its own directory
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		ref, err := put(ctx, filepath.ToSlash(name), f)
		if err != nil {
			return executors.Failure{Code: "artifact_failed", Message: err.Error(), Retryable: true}
		}
		refs = append(refs, ref)
		return nil
	})
	return refs, err
}

// readModelSteps reads the model steps a command recorded in file, one JSON
// object a line. A file past MaxModelStepsFile, or a line that is not a
// model step, is a failure that is not retried, naming the line.
func readModelSteps(file string) ([]executors.ModelStep, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxModelStepsFile+1))
	_ = f.Close() // read only: nothing to lose
	if err != nil {
		return nil, err
	}
	if len(b) > MaxModelStepsFile {
		return nil, executors.Failure{Code: "invalid_model_steps",
			Message: fmt.Sprintf("%s holds more than %d bytes", EnvModelStepsFile, MaxModelStepsFile)}
	}
	var steps []executors.ModelStep
	for i, line := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var step executors.ModelStep
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&step); err != nil || step.Model == "" {
			if err == nil {
				err = errors.New(`"model" is required`)
			}
			return nil, executors.Failure{Code: "invalid_model_steps",
				Message: fmt.Sprintf("%s line %d: not a model step: %v", EnvModelStepsFile, i+1, err)}
		}
		steps = append(steps, step)
	}
	return steps, nil
}

// maxArtifacts bounds the artifacts of one report.
const maxArtifacts = 1_000

// supervise saves the checkpoint file when it changes, every lease/3, and
// stops the command's group when ctx ends: SIGTERM, then SIGKILL.
func (x *Command) supervise(ctx context.Context, pgid int, cp *checkpointFile, exited <-chan struct{}) {
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
			t := time.NewTimer(KillGrace)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	}
}

// result turns how the command ended into the job's result or error.
func (x *Command) result(ctx context.Context, st *os.ProcessState, waitErr error, stdout *capped, stderr *tail) (executors.Result, error) {
	if st == nil {
		return executors.Result{}, fmt.Errorf("the command did not run: %v", waitErr)
	}
	if ctx.Err() != nil {
		return executors.Result{}, fmt.Errorf("the command was stopped (%v): %w", context.Cause(ctx), ctx.Err())
	}
	if st.Success() {
		if stdout.over {
			return executors.Result{}, executors.Failure{Code: executors.CodeInvalidResult,
				Message: fmt.Sprintf("the command printed more than %d bytes on stdout; store large results as artifacts", MaxStdout)}
		}
		return executors.Result{Output: outputOf(stdout.Bytes())}, nil
	}
	msg := strings.TrimSpace(stderr.Last(MaxStderrTail))
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
		Retryable: st.ExitCode() != ExitPermanent}
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

// jobEnv is what the command learns about its job from its environment,
// with the paths of its files f: f.wait is "" (and DWR_WAIT_FILE set empty)
// when the command may not wait; f.dependencies, f.delegations and
// f.approvals are "" when the task has none.
func jobEnv(job *executors.Job, f *jobFiles) []string {
	prior := priorJSON(job.PriorAttempts)
	env := []string{"DWR_TASK_ID=" + job.TaskID, "DWR_ATTEMPT=" + strconv.Itoa(job.Attempt),
		"DWR_OPERATION_KEY=" + job.OperationKey, "DWR_WORKSPACE=" + job.Workspace, "DWR_QUEUE=" + job.Queue,
		EnvCheckpointFile + "=" + f.checkpoint, EnvWaitFile + "=" + f.wait, EnvPriorAttempts + "=" + string(prior), "DWR_DEADLINE="}
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
	if f.dependencies != "" {
		env = handOver(env, EnvDependencies, EnvDependenciesFile, f.dependencies, job.Dependencies)
	}
	if f.delegations != "" {
		env = handOver(env, EnvDelegations, EnvDelegationsFile, f.delegations, delegationsByKey(job))
	}
	if f.approvals != "" {
		env = handOver(env, EnvApprovals, EnvApprovalsFile, f.approvals, job.Decisions)
	}
	return env
}

// handOver adds to env the variable fileVar naming the file at path, which
// holds v as JSON, and inlineVar with the same JSON when it is at most 64
// KiB.
func handOver(env []string, inlineVar, fileVar, path string, v any) []string {
	env = append(env, fileVar+"="+path)
	if b, err := json.Marshal(v); err == nil && len(b) <= maxPriorEnv {
		env = append(env, inlineVar+"="+string(b))
	}
	return env
}

// delegationsByKey returns the job's ended delegations by their key.
func delegationsByKey(job *executors.Job) map[string]executors.Delegated {
	out := make(map[string]executors.Delegated, len(job.Delegations))
	for _, d := range job.Delegations {
		out[d.Key] = d
	}
	return out
}

// The environment that hands a command its task's dependencies: the same
// JSON object, {"<key>": {"key", "task_id", "result", "artifacts"}, ...}
// (by plan key; by task id for a standalone task's dependencies), inline
// when it is at most 64 KiB and always in a file.
const (
	EnvDependencies     = "DWR_DEPENDENCIES"
	EnvDependenciesFile = "DWR_DEPENDENCIES_FILE"
)

// The environment that hands a command every decision taken on its task's
// approvals (and every expiry), oldest first: the same JSON array of
// DWR_APPROVAL's objects, inline when it is at most 64 KiB and always in a
// file, when there is one. A command that asks several roles to approve
// one action finds each role's decision here by its "asked_role".
const (
	EnvApprovals     = "DWR_APPROVALS"
	EnvApprovalsFile = "DWR_APPROVALS_FILE"
)

// The environment that hands a command the outcomes of the goals its task
// delegated to (a wait file's "delegate") that have ended: the same JSON
// object, {"<key>": {"key", "goal_id", "state", "reason", "results":
// {"<task key>": {"key", "task_id", "result", "artifacts"}}}, ...}, inline
// when it is at most 64 KiB and always in a file.
const (
	EnvDelegations     = "DWR_DELEGATIONS"
	EnvDelegationsFile = "DWR_DELEGATIONS_FILE"
)

// jobFiles are a job's temporary files: the command's stdin (the input), its
// checkpoint file and its wait file.
type jobFiles struct {
	stdin        *os.File
	checkpoint   string
	wait         string // "" when the command may not wait
	dependencies string // "" when the task depends on none
	delegations  string // "" when no goal the task delegated to has ended
	approvals    string // "" when no approval of the task was decided or expired
	artifacts    string // the command's artifacts directory
	modelSteps   string // the file the command records its model steps in
}

func newJobFiles(job *executors.Job, waits bool) (*jobFiles, error) {
	in, err := os.CreateTemp("", "dwr-input-*.json")
	if err != nil {
		return nil, err
	}
	f := &jobFiles{stdin: in}
	if f.artifacts, err = os.MkdirTemp("", "dwr-artifacts-*"); err != nil {
		f.remove()
		return nil, err
	}
	if _, err := in.Write(job.Input); err != nil {
		f.remove()
		return nil, err
	}
	if _, err := in.Seek(0, io.SeekStart); err != nil {
		f.remove()
		return nil, err
	}
	if f.checkpoint, err = writeTemp("dwr-checkpoint-*.json", job.Checkpoint); err != nil {
		f.remove()
		return nil, err
	}
	if f.modelSteps, err = writeTemp("dwr-model-steps-*.jsonl", nil); err != nil {
		f.remove()
		return nil, err
	}
	if len(job.Dependencies) > 0 {
		if f.dependencies, err = writeJSONTemp("dwr-dependencies-*.json", job.Dependencies); err != nil {
			f.remove()
			return nil, err
		}
	}
	if len(job.Delegations) > 0 {
		if f.delegations, err = writeJSONTemp("dwr-delegations-*.json", delegationsByKey(job)); err != nil {
			f.remove()
			return nil, err
		}
	}
	if len(job.Decisions) > 0 {
		if f.approvals, err = writeJSONTemp("dwr-approvals-*.json", job.Decisions); err != nil {
			f.remove()
			return nil, err
		}
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
	for _, p := range []string{f.dependencies, f.delegations, f.approvals, f.modelSteps} {
		if p != "" {
			_ = os.Remove(p)
		}
	}
	if f.artifacts != "" {
		_ = os.RemoveAll(f.artifacts)
	}
}

// writeJSONTemp writes v as JSON to a new temporary file named by pattern
// and returns its name.
func writeJSONTemp(pattern string, v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return writeTemp(pattern, b)
}

// writeTemp writes b to a new temporary file named by pattern and returns
// its name.
func writeTemp(pattern string, b []byte) (string, error) {
	f, err := os.CreateTemp("", pattern)
	if err != nil {
		return "", err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
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

// Len returns how many bytes the tail holds.
func (t *tail) Len() int { return len(t.buf) }

// Last returns the last n bytes the tail holds, as valid UTF-8.
func (t *tail) Last(n int) string {
	return strings.ToValidUTF8(string(t.buf[max(0, len(t.buf)-n):]), "")
}

// NewWorker returns the worker that `dwr worker` runs: it runs argv (New,
// with cfg's Lease and Logger) for every job of cfg's queue, or with verify
// for every check of a verification queue (executors.NewVerifier). It
// returns New's errors and those of the executors constructors.
func NewWorker(cfg executors.Config, argv []string, verify bool) (*executors.Worker, error) {
	x, err := New(argv, Options{Lease: cfg.Lease, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	if verify {
		return executors.NewVerifier(cfg, x.Verify)
	}
	return executors.NewWorker(cfg, x.Handle)
}
