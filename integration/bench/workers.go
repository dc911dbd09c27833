package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/dwr-run/dwr/executors"
)

// The SDKs a chain benchmark's workers are written with
// (ChainOptions.WorkerSDK). Go's run in the benchmark's process; the others
// are programs of the SDK's own, one process per worker, started by the
// benchmark and reaching the deployed service over TCP.
const (
	WorkerGo         = "go"
	WorkerPython     = "python"     // python3 -m dwr.bench_worker, from executors/python
	WorkerTypeScript = "typescript" // node executors/typescript/dist/bench_worker.js
	// WorkerGoProcess is the Go SDK's workers as processes of their own, as
	// the others run: `dwr bench worker` (ServeWorker) of the dwr binary
	// (ChainOptions.Binary).
	WorkerGoProcess = "go-process"
)

// workerSDKs are the worker SDKs, in the order they are listed.
var workerSDKs = []string{WorkerGo, WorkerGoProcess, WorkerPython, WorkerTypeScript}

// workerReadyTimeout bounds the wait for a worker process to take work.
const workerReadyTimeout = 60 * time.Second

// workerProgram is how the processes of one SDK's workers are started.
type workerProgram struct {
	bin  string
	args []string
	env  []string // added to the benchmark's
}

// workerPrograms finds the programs of the SDKs other than Go in sdks,
// under root (the repository's checkout), and dwr binary bin's for
// WorkerGoProcess ("": this executable): an error names what is missing and
// how to get it.
func workerPrograms(root, bin string, sdks []string) (map[string]workerProgram, error) {
	if root == "" {
		root = "."
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	progs := map[string]workerProgram{}
	for _, sdk := range sdks {
		switch sdk {
		case WorkerGo:
		case WorkerGoProcess:
			if bin == "" {
				if bin, err = os.Executable(); err != nil {
					return nil, fmt.Errorf("the dwr binary: %w", err)
				}
			}
			progs[sdk] = workerProgram{bin: bin, args: []string{"bench", "worker"}}
		case WorkerPython:
			dir := filepath.Join(root, "executors", "python")
			if _, err := os.Stat(filepath.Join(dir, "dwr", "bench_worker.py")); err != nil {
				return nil, fmt.Errorf("--worker-sdk python: no executors/python/dwr/bench_worker.py under --sdk-root %s: %w", root, err)
			}
			py, err := exec.LookPath("python3")
			if err != nil {
				return nil, fmt.Errorf("--worker-sdk python needs python3 (3.10 or later) on PATH: %w", err)
			}
			// The interpreter itself: a version manager's shim (pyenv's)
			// costs seconds at each start, and is a process of its own.
			out, err := exec.Command(py, "-c", "import sys, cryptography; assert sys.version_info >= (3, 10); print(sys.executable)").CombinedOutput() //nolint:gosec // G204: python3 from PATH
			if err != nil {
				return nil, fmt.Errorf("--worker-sdk python needs python3 3.10 or later with the cryptography package: %s", strings.TrimSpace(string(out)))
			}
			progs[sdk] = workerProgram{bin: strings.TrimSpace(string(out)), args: []string{"-m", "dwr.bench_worker"},
				env: []string{"PYTHONPATH=" + dir, "PYTHONDONTWRITEBYTECODE=1"}}
		case WorkerTypeScript:
			script := filepath.Join(root, "executors", "typescript", "dist", "bench_worker.js")
			if _, err := os.Stat(script); err != nil {
				return nil, fmt.Errorf("--worker-sdk typescript: no executors/typescript/dist/bench_worker.js under --sdk-root %s (run npm ci && npm run build in executors/typescript): %w", root, err)
			}
			node, err := exec.LookPath("node")
			if err != nil {
				return nil, fmt.Errorf("--worker-sdk typescript needs node (20 or later) on PATH: %w", err)
			}
			progs[sdk] = workerProgram{bin: node, args: []string{script}}
		default:
			return nil, fmt.Errorf("worker SDK %q: want one of %s", sdk, strings.Join(workerSDKs, ", "))
		}
	}
	return progs, nil
}

// workerProc is one worker process of the benchmark.
type workerProc struct {
	label string
	cmd   *exec.Cmd
	log   string        // the file its stderr goes to
	ready chan struct{} // closed once it has said "ready"
	// stopping is closed when the benchmark stops it: its exit is then no
	// failure.
	stopping chan struct{}
	done     chan struct{} // closed once it has exited
	err      error         // Wait's result, set before done is closed
}

// startWorkerProc starts worker i of prog on queue of the service at url,
// as executor name with the credential creds ("" on an open service),
// running concurrency jobs at once; its stderr goes to a file in dir. When
// it exits before it is stopped, died is called with an error saying so.
func startWorkerProc(prog workerProgram, label, dir, url, creds, queue, name string, concurrency int, died func(error)) (*workerProc, error) {
	p := &workerProc{label: label, log: filepath.Join(dir, name+".log"), ready: make(chan struct{}), stopping: make(chan struct{}),
		done: make(chan struct{})}
	errf, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	defer func() { _ = errf.Close() }()          // the child has its own copy
	p.cmd = exec.Command(prog.bin, prog.args...) //nolint:gosec // G204: the SDK's worker program (workerPrograms)
	p.cmd.Env = append(benchEnv(), prog.env...)
	p.cmd.Env = append(p.cmd.Env, "DWR_SERVER="+url, "DWR_CREDS="+creds, "BENCH_QUEUE="+queue, "BENCH_EXECUTOR="+name,
		"BENCH_CONCURRENCY="+strconv.Itoa(concurrency))
	p.cmd.Stderr = errf
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	// Its own process group, and killed if the benchmark dies.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", label, err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		said := false
		for sc.Scan() {
			if !said && sc.Text() == "ready" {
				said = true
				close(p.ready)
			}
		}
		p.err = p.cmd.Wait() // after stdout is read to its end
		close(p.done)
		select {
		case <-p.stopping:
		default:
			died(fmt.Errorf("%s exited (%v):\n%s", label, p.err, logTail(p.log)))
		}
	}()
	return p, nil
}

// waitReady waits until the process has said it takes work, it exits, ctx
// ends, or workerReadyTimeout passes.
func (p *workerProc) waitReady(ctx context.Context) error {
	select {
	case <-p.ready:
		return nil
	case <-p.done:
		return fmt.Errorf("%s exited before it took work (%v):\n%s", p.label, p.err, logTail(p.log))
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(workerReadyTimeout):
		return fmt.Errorf("%s did not take work within %s:\n%s", p.label, workerReadyTimeout, logTail(p.log))
	}
}

// stop ends the process: SIGTERM (it drains, for up to a second), and
// SIGKILL to its group if it has not exited 10 s later.
func (p *workerProc) stop() {
	select {
	case <-p.stopping:
	default:
		close(p.stopping)
	}
	pid := p.cmd.Process.Pid
	_ = syscall.Kill(pid, syscall.SIGTERM)
	killAfter(pid, p.done, 10*time.Second)
}

// workerCPU returns the CPU time the processes have used so far, together.
func workerCPU(procs []*workerProc) (time.Duration, error) { return sumProcs(procs, procCPU) }

// workerPeakRSS returns the sum of the processes' peak RSS, in MiB.
func workerPeakRSS(procs []*workerProc) (float64, error) { return sumProcs(procs, procPeakRSS) }

// sumProcs returns the sum of what read reads of each process (by its pid);
// its error names the process it failed on.
func sumProcs[T time.Duration | float64](procs []*workerProc, read func(pid int) (T, error)) (T, error) {
	var sum T
	for _, p := range procs {
		v, err := read(p.cmd.Process.Pid)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", p.label, err)
		}
		sum += v
	}
	return sum, nil
}

// checkWorkerSDKs checks the SDKs named by --worker-sdk and
// --compare-workers.
func checkWorkerSDKs(o ChainOptions) error {
	if o.WorkerSDK != "" && !slices.Contains(workerSDKs, o.WorkerSDK) {
		return fmt.Errorf("--worker-sdk %q: want one of %s", o.WorkerSDK, strings.Join(workerSDKs, ", "))
	}
	if len(o.CompareWorkers) == 0 {
		return nil
	}
	for i, sdk := range o.CompareWorkers {
		if !slices.Contains(workerSDKs, sdk) {
			return fmt.Errorf("--compare-workers: %q: want some of %s", sdk, strings.Join(workerSDKs, ", "))
		}
		if slices.Contains(o.CompareWorkers[:i], sdk) {
			return fmt.Errorf("--compare-workers: %s is named twice", sdk)
		}
	}
	if len(o.CompareWorkers) < 2 || !slices.Contains(o.CompareWorkers, WorkerGo) {
		return errors.New("--compare-workers: name go and at least one other SDK (the ratios are to go)")
	}
	return nil
}

// workerOrder returns the SDKs of round r (from 0): sdks rotated by r, so
// that each runs first in turn (A B C, B C A, C A B, ...).
func workerOrder(sdks []string, r int) []string {
	k := r % len(sdks)
	return append(slices.Clone(sdks[k:]), sdks[:k]...)
}

// ServeWorker runs one Go SDK worker of the chains as a process of its own
// (`dwr bench worker`, which --worker-sdk go-process starts), as the other
// SDKs' bench workers run: configured by the environment (DWR_SERVER,
// DWR_CREDS, none on an open service, BENCH_QUEUE, BENCH_EXECUTOR,
// BENCH_CONCURRENCY), it writes "ready" to stdout once it takes work from
// the queue, and runs until ctx ends, then drains. Its warnings and errors
// go to stderr.
func ServeWorker(ctx context.Context, stdout, stderr io.Writer) error {
	url, creds := os.Getenv("DWR_SERVER"), os.Getenv("DWR_CREDS")
	queue, name := os.Getenv("BENCH_QUEUE"), os.Getenv("BENCH_EXECUTOR")
	if url == "" || queue == "" || name == "" {
		return errors.New("DWR_SERVER, BENCH_QUEUE and BENCH_EXECUTOR must be set")
	}
	concurrency, err := strconv.Atoi(os.Getenv("BENCH_CONCURRENCY"))
	if err != nil {
		return fmt.Errorf("BENCH_CONCURRENCY: %w", err)
	}
	opts := []nats.Option{nats.Name(name)}
	if creds != "" {
		c, err := executors.Credentials(creds)
		if err != nil {
			return err
		}
		opts = append(opts, c...)
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return err
	}
	defer nc.Close()
	log := &readyLog{out: stdout, next: slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}), ready: new(atomic.Bool)}
	w, err := executors.NewWorker(executors.Config{Conn: nc, Queue: queue, Concurrency: concurrency, Executor: name,
		DrainTimeout: time.Second, Logger: slog.New(log)}, chainHandler)
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// readyLog is a worker's log handler that writes "ready" to out at the
// worker's "taking work" line, and hands warnings and errors to next. It
// takes Info records only until then (the worker logs one a job).
type readyLog struct {
	out   io.Writer
	next  slog.Handler
	ready *atomic.Bool // shared with the handlers derived from it
}

func (h *readyLog) Enabled(ctx context.Context, l slog.Level) bool {
	return (l == slog.LevelInfo && !h.ready.Load()) || h.next.Enabled(ctx, l)
}

func (h *readyLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelInfo && strings.HasPrefix(r.Message, "executors: taking work from the queue") && h.ready.CompareAndSwap(false, true) {
		if _, err := io.WriteString(h.out, "ready\n"); err != nil {
			return err
		}
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *readyLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &readyLog{out: h.out, next: h.next.WithAttrs(as), ready: h.ready}
}

func (h *readyLog) WithGroup(name string) slog.Handler {
	return &readyLog{out: h.out, next: h.next.WithGroup(name), ready: h.ready}
}
