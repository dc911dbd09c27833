package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/handlers"
)

// chainOpts are the flags of `dwr bench chain3`.
type chainOpts struct {
	chains      []int
	workers     int
	concurrency int
	submitters  int
	single      int
	dir         string
	timeout     time.Duration
	cpuProf     string
}

// chainCell is the result of running N chains.
type chainCell struct {
	Chains      int     `json:"chains"`
	Seconds     float64 `json:"seconds"`
	ChainsPerS  float64 `json:"chains_per_s"`
	TasksPerS   float64 `json:"tasks_per_s"`
	P50ms       float64 `json:"p50_ms"`
	P99ms       float64 `json:"p99_ms"`
	CPUmsPerRun float64 `json:"cpu_ms_per_chain"`
	Errors      int     `json:"errors"`
	FirstError  string  `json:"first_error,omitempty"`
}

// chainReport is what `dwr bench chain3` prints.
type chainReport struct {
	Go           string      `json:"go"`
	CPUs         int         `json:"cpus"`
	Workers      int         `json:"workers"`
	Concurrency  int         `json:"concurrency_per_worker"`
	Single       chainCell   `json:"single"` // one chain at a time
	Cells        []chainCell `json:"cells"`
	PeakRSSMiB   float64     `json:"peak_rss_mib"`
	ReferenceCPS float64     `json:"reference_chains_per_s"`
}

// referenceChainsPerS is the better of the peers the issue names, measured
// on this kind of machine: a Postgres-backed durable workflow library with
// synchronous commit (a Redis-backed one managed about 160).
const referenceChainsPerS = 230

func benchChainCmd(g *globals) *cobra.Command {
	var o chainOpts
	cmd := &cobra.Command{
		Use:   "chain3",
		Short: "chains of three sequential tasks, executed by in-process SDK workers, with fsync before ack",
		Long: `chain3 starts the whole service in-process (embedded NATS with SyncAlways, Pebble views) and
SDK workers on one queue, then for each N in --chains submits N goals, each with a plan of three
sequential tasks (a → b → c), as fast as --submitters clients can, and waits until every goal is
achieved. It reports chains/s and tasks/s (from the first submission to the last achievement), the
latency of a chain (from its goal.create to its goal.achieved event) at p50 and p99, the CPU time of
the whole process per chain (server, service, workers and clients), and the process's peak RSS. First
it runs --single chains one after the other: the latency of a chain at low load.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runReport(cmd, g, "bench chain3",
				func(ctx context.Context, progress io.Writer) (*chainReport, error) {
					return runChainBench(ctx, o, progress)
				},
				printChainBench,
				func(rep *chainReport) error {
					for _, c := range append([]chainCell{rep.Single}, rep.Cells...) {
						if c.Errors > 0 {
							return fmt.Errorf("%d chains had %d errors (first: %s)", c.Chains, c.Errors, c.FirstError)
						}
					}
					return nil
				})
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&o.chains, "chains", []int{200, 2000}, "numbers of chains to run, each in a fresh service")
	f.IntVar(&o.workers, "workers", 2, "SDK workers on the queue")
	f.IntVar(&o.concurrency, "concurrency", 64, "jobs each worker runs at once")
	f.IntVar(&o.submitters, "submitters", 32, "clients submitting goals and plans concurrently")
	f.IntVar(&o.single, "single", 20, "chains run one at a time first, for the latency at low load")
	f.StringVar(&o.dir, "dir", os.TempDir(), "where the fresh directories are made")
	f.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up on a run after this long")
	f.StringVar(&o.cpuProf, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	return cmd
}

func runChainBench(ctx context.Context, o chainOpts, progress io.Writer) (*chainReport, error) {
	if o.workers < 1 || o.concurrency < 1 || o.submitters < 1 || o.single < 0 || len(o.chains) == 0 {
		return nil, errors.New("--workers, --concurrency and --submitters must be at least 1, --single at least 0, and --chains not empty")
	}
	stopProfile, err := startCPUProfile(o.cpuProf)
	if err != nil {
		return nil, err
	}
	defer stopProfile()
	rep := &chainReport{Go: runtime.Version(), CPUs: runtime.NumCPU(), Workers: o.workers, Concurrency: o.concurrency,
		ReferenceCPS: referenceChainsPerS}
	if o.single > 0 {
		fmt.Fprintf(progress, "bench: %d single chains, one at a time\n", o.single)
		c, err := withTempDir(o.dir, func(dir string) (*chainCell, error) { return chainRun(ctx, dir, o, o.single, 1) })
		if err != nil {
			return nil, err
		}
		rep.Single = *c
	}
	for _, n := range o.chains {
		fmt.Fprintf(progress, "bench: %d chains, %d submitters, %d workers × %d\n", n, o.submitters, o.workers, o.concurrency)
		c, err := withTempDir(o.dir, func(dir string) (*chainCell, error) { return chainRun(ctx, dir, o, n, o.submitters) })
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(progress, "bench:   %.0f chains/s, p50 %.1f ms, p99 %.1f ms\n", c.ChainsPerS, c.P50ms, c.P99ms)
		rep.Cells = append(rep.Cells, *c)
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		rep.PeakRSSMiB = round1(float64(ru.Maxrss) / 1024) // Linux reports KiB
	}
	return rep, nil
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// chainRun runs n chains on a fresh service in dir with the given number of
// concurrent submitters.
func chainRun(ctx context.Context, dir string, o chainOpts, n, submitters int) (*chainCell, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	bs, err := startBenchService(ctx, dir, io.Discard)
	if err != nil {
		return nil, err
	}
	defer bs.close()

	// Workers on the queue, as an executor fleet would run them.
	wctx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopWorkers(); wg.Wait() }()
	for i := range o.workers {
		nc, err := bs.srv.Connect(nats.Name(fmt.Sprintf("dwr-bench-worker-%d", i)))
		if err != nil {
			return nil, err
		}
		defer nc.Close()
		w, err := executors.NewWorker(executors.Config{Conn: nc, Queue: "chain", Concurrency: o.concurrency,
			Executor: fmt.Sprintf("bench-%d", i), DrainTimeout: time.Second},
			func(_ context.Context, job *executors.Job) (executors.Result, error) {
				return executors.Result{Output: json.RawMessage(`{"ok":true}`)}, nil
			})
		if err != nil {
			return nil, err
		}
		wg.Go(func() {
			if err := w.Run(wctx); err != nil && wctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "bench: worker stopped: %v\n", err)
			}
		})
	}

	// Each chain's end is its goal's achievement on the event feed.
	fnc, err := bs.srv.Connect(nats.Name("dwr-bench-feed"))
	if err != nil {
		return nil, err
	}
	defer fnc.Close()
	var mu sync.Mutex
	started := map[string]time.Time{}
	ended := map[string]time.Time{}
	all := make(chan struct{})
	sub, err := fnc.Subscribe("dwr.ev.default.goal.*.achieved", func(m *nats.Msg) {
		now := time.Now()
		parts := strings.Split(m.Subject, ".")
		mu.Lock()
		defer mu.Unlock()
		ended[parts[4]] = now
		if len(ended) == n {
			close(all)
		}
	})
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := fnc.Flush(); err != nil {
		return nil, err
	}

	conns, closeConns, err := connectClients(bs.srv, submitters)
	if err != nil {
		return nil, err
	}
	defer closeConns()
	var errCount atomic.Int64
	var firstErr atomic.Value
	next := atomic.Int64{}
	cpu0, t0 := cpuTime(), time.Now()
	var sw sync.WaitGroup
	for i := range submitters {
		nc := conns[i]
		sw.Go(func() {
			for {
				k := next.Add(1)
				if k > int64(n) || ctx.Err() != nil {
					return
				}
				id := ulid.Make().String()
				at := time.Now()
				err := submitChain(nc, id)
				if err != nil {
					errCount.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					mu.Lock()
					ended[id] = at // counted, so the run ends
					if len(ended) == n {
						close(all)
					}
					mu.Unlock()
					continue
				}
				mu.Lock()
				started[id] = at
				mu.Unlock()
				if submitters == 1 { // one chain at a time: wait for it
					waitEnded(ctx, &mu, ended, id)
				}
			}
		})
	}
	sw.Wait()
	select {
	case <-all:
	case <-ctx.Done():
		return nil, fmt.Errorf("%d of %d chains achieved before giving up: %w", len(ended), n, ctx.Err())
	}
	cpu := cpuTime() - cpu0
	mu.Lock()
	defer mu.Unlock()
	last := t0
	lats := make([]time.Duration, 0, n)
	for id, s := range started {
		e := ended[id]
		lats = append(lats, e.Sub(s))
		if e.After(last) {
			last = e
		}
	}
	slices.Sort(lats)
	p := percentiles(lats)
	secs := last.Sub(t0).Seconds()
	c := &chainCell{Chains: n, Seconds: round2(secs), ChainsPerS: round1(float64(n) / secs), TasksPerS: round1(3 * float64(n) / secs),
		P50ms: p[0], P99ms: p[2], CPUmsPerRun: round2(float64(cpu.Microseconds()) / 1000 / float64(n)),
		Errors: int(errCount.Load())}
	if v, ok := firstErr.Load().(string); ok {
		c.FirstError = v
	}
	return c, nil
}

// waitEnded waits until chain id has ended (its goal was achieved).
func waitEnded(ctx context.Context, mu *sync.Mutex, ended map[string]time.Time, id string) {
	t := time.NewTicker(100 * time.Microsecond)
	defer t.Stop()
	for ctx.Err() == nil {
		mu.Lock()
		_, ok := ended[id]
		mu.Unlock()
		if ok {
			return
		}
		<-t.C
	}
}

// submitChain creates goal id and commits its plan of three sequential tasks.
func submitChain(nc *nats.Conn, id string) error {
	if err := benchCommand(nc, "goal.create", fmt.Sprintf(`{"goal_id":%q,"title":"chain"}`, id), "g."+id); err != nil {
		return err
	}
	plan := fmt.Sprintf(`{"goal_id":%q,"tasks":[{"key":"a","queue":"chain"},{"key":"b","queue":"chain","depends_on":["a"]},{"key":"c","queue":"chain","depends_on":["b"]}]}`, id)
	return benchCommand(nc, "plan.submit", plan, "p."+id)
}

// benchCommand sends command name with body and command id id in the default
// workspace and returns nil once it is accepted.
func benchCommand(nc *nats.Conn, name, body, id string) error {
	m := nats.NewMsg("dwr.cmd.default." + name)
	m.Header.Set(handlers.HeaderCommandID, id)
	m.Data = []byte(body)
	resp, err := nc.RequestMsg(m, 30*time.Second)
	if err != nil {
		return err
	}
	var r handlers.Response
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return fmt.Errorf("reply is not a dwr response: %w", err)
	}
	if !r.OK {
		if r.Error == nil {
			return errors.New("refused without an error")
		}
		return r.Error
	}
	return nil
}

func printChainBench(w io.Writer, rep *chainReport) error {
	fmt.Fprintf(w, "dwr bench chain3: %s, %s/%s, %d CPUs, %d workers × %d jobs, fsync before ack\n\n",
		rep.Go, runtime.GOOS, runtime.GOARCH, rep.CPUs, rep.Workers, rep.Concurrency)
	rows := [][]string{}
	row := func(label string, c chainCell) {
		rows = append(rows, []string{label, fmt.Sprint(c.Chains), thousands(c.ChainsPerS), thousands(c.TasksPerS),
			ms(c.P50ms), ms(c.P99ms), fmt.Sprintf("%.2f", c.CPUmsPerRun)})
	}
	if rep.Single.Chains > 0 {
		row("one at a time", rep.Single)
	}
	for _, c := range rep.Cells {
		row("all at once", c)
	}
	if err := table(w, []string{"RUN", "CHAINS", "CHAINS/S", "TASKS/S", "P50 MS", "P99 MS", "CPU MS/CHAIN"}, rows); err != nil {
		return err
	}
	fmt.Fprintf(w, "\npeak RSS %.1f MiB", rep.PeakRSSMiB)
	if len(rep.Cells) > 0 {
		best := rep.Cells[len(rep.Cells)-1]
		fmt.Fprintf(w, "; at N=%d: %.1f× the reference peer's %d chains/s", best.Chains, best.ChainsPerS/rep.ReferenceCPS, int(rep.ReferenceCPS))
	}
	fmt.Fprintln(w)
	return nil
}
