package bench

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

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/handlers"
)

// ChainOptions are what `dwr bench chain3` runs, and how; its flags set
// them.
type ChainOptions struct {
	// Chains are the numbers of chains to run, each in a fresh service.
	Chains []int
	// Workers are the SDK workers on the queue, each running Concurrency
	// jobs at once.
	Workers     int
	Concurrency int
	// Submitters are the clients submitting goals and plans concurrently.
	Submitters int
	// Single chains run one at a time first, for the latency at low load.
	Single int
	// Dir is where the fresh directories are made; "" for os.TempDir().
	Dir string
	// Timeout is how long a run may take before it is given up; default 5
	// minutes.
	Timeout time.Duration
	// CPUProfile, when set, is the file a CPU profile of the whole run is
	// written to.
	CPUProfile string
	// MemProfile, when set, is the file a profile of the run's allocations
	// is written to (in-process: the service's with the rest).
	MemProfile string
	// Auth runs the service closed, as dwr serve does (false: open).
	Auth bool
	// CompareAuth runs closed and open, alternating in Rounds rounds.
	CompareAuth bool
	Rounds      int
	// Plain runs the service without encryption (payloads stored as
	// sent); by default it seals them, as dwr serve does.
	Plain bool
	// CompareEncryption runs encrypted and plain, alternating in Rounds
	// rounds (with Auth as it is).
	CompareEncryption bool
	// CompareObservability runs with observability off and on
	// (ObservabilityOff, ObservabilityOn), alternating in Rounds rounds: the
	// cost of metrics and tracing. In-process only.
	CompareObservability bool
	// Observe runs with observability on (ObservabilityOn) when not
	// comparing it: to profile it.
	Observe bool
	// Deployed runs the service as a user deploys it: `dwr serve` in its
	// own OS process (Binary), reached over TCP by the workers and clients
	// of this one. Otherwise the service runs in this process.
	Deployed bool
	// Binary is the dwr binary Deployed runs; "" for this process's own
	// executable (os.Executable: `dwr bench` runs the dwr it is).
	Binary string
	// Warmup chains run (and are discarded) in each fresh service before
	// the measured ones, as the peers' harnesses warm up.
	Warmup int
	// WorkerSDK is the SDK the workers are written with: WorkerGo (or "")
	// runs them in this process; WorkerPython, WorkerTypeScript and
	// WorkerGoProcess run each worker as a process of its own, the SDK's
	// bench worker program (found under SDKRoot; Binary's for Go), reaching
	// the deployed service over TCP (Deployed only). The submitters and the
	// measuring stay in this process.
	WorkerSDK string
	// CompareWorkers runs the chains with the workers of each SDK named (go
	// and at least one other), alternating in Rounds rounds, the order
	// rotated each round; the ratios are to go's.
	CompareWorkers []string
	// SDKRoot is the checkout holding executors/python and
	// executors/typescript (built); "" for the current directory.
	SDKRoot string

	// programs are the worker programs of the SDKs run (RunChain finds
	// them).
	programs map[string]workerProgram

	// afterRun, when set, is called with each run's service once its chains
	// have ended, before it is stopped (tests).
	afterRun func(*service)
}

// DefaultChainTimeout is how long a run of chains may take by default.
const DefaultChainTimeout = 5 * time.Minute

// ChainCell is the result of running N chains.
type ChainCell struct {
	// Auth is how the service ran: closed or open.
	Auth string `json:"auth"`
	// Encryption is how it stored payloads: sealed or plain.
	Encryption string `json:"encryption"`
	// Observability is whether it kept metrics and made spans: on or off.
	Observability string `json:"observability"`
	// Workers is the SDK the workers were written with (WorkerGo, ...).
	Workers string `json:"workers"`
	// Round is the run's round (from 1) when comparing.
	Round int `json:"round,omitempty"`
	// OneAtATime: the chains ran one after the other (--single).
	OneAtATime bool    `json:"one_at_a_time,omitempty"`
	Chains     int     `json:"chains"`
	Seconds    float64 `json:"seconds"`
	ChainsPerS float64 `json:"chains_per_s"`
	TasksPerS  float64 `json:"tasks_per_s"`
	P50ms      float64 `json:"p50_ms"`
	P99ms      float64 `json:"p99_ms"`
	// CPUmsPerRun is the CPU time per chain of the whole system over the
	// measured window: this process, and when deployed the service's too,
	// and the worker processes' when the workers run as processes of their
	// own.
	CPUmsPerRun float64 `json:"cpu_ms_per_chain"`
	// ServiceCPUms is, when deployed, the service process's share of
	// CPUmsPerRun; ServiceRSSMiB its peak RSS (VmHWM) over its whole life,
	// warm-up and measured chains.
	ServiceCPUms  float64 `json:"service_cpu_ms_per_chain,omitempty"`
	ServiceRSSMiB float64 `json:"service_peak_rss_mib,omitempty"`
	// WorkerCPUms is, when the workers are processes of their own (all but
	// WorkerGo), their share of CPUmsPerRun, read from /proc/PID/stat of each
	// before and after the measured window; WorkerRSSMiB the sum of their
	// peak RSS (VmHWM) over their whole life.
	WorkerCPUms  float64 `json:"worker_cpu_ms_per_chain,omitempty"`
	WorkerRSSMiB float64 `json:"workers_peak_rss_mib,omitempty"`
	Errors       int     `json:"errors"`
	FirstError   string  `json:"first_error,omitempty"`
}

// ChainReport is what `dwr bench chain3` prints.
type ChainReport struct {
	Go          string `json:"go"`
	CPUs        int    `json:"cpus"`
	Workers     int    `json:"workers"`
	Concurrency int    `json:"concurrency_per_worker"`
	// Service is where the service ran: "in-process" or "deployed" (`dwr
	// serve` in its own process).
	Service string `json:"service"`
	// Submitters and Warmup are the options the runs had.
	Submitters int `json:"submitters"`
	Warmup     int `json:"warmup"`
	// Auth is how the service ran: closed, open, or compare (both,
	// alternating in Rounds rounds; every run is then in Cells).
	Auth   string      `json:"auth"`
	Rounds int         `json:"rounds,omitempty"`
	Single ChainCell   `json:"single"` // one chain at a time
	Cells  []ChainCell `json:"cells"`
	// AuthCost is, when comparing, the cost of authentication of each kind
	// of run: closed ÷ open, round by round.
	AuthCost []AuthCost `json:"auth_cost,omitempty"`
	// Encryption is how the service stored payloads: sealed, plain, or
	// compare (both, alternating in Rounds rounds).
	Encryption string `json:"encryption"`
	// EncryptionCost is, when comparing encryption, its cost for each kind
	// of run: sealed ÷ plain, round by round.
	EncryptionCost []AuthCost `json:"encryption_cost,omitempty"`
	// Observability is whether the service kept metrics and made spans:
	// off, or compare (off and on, alternating in Rounds rounds).
	Observability string `json:"observability"`
	// ObservabilityCost is, when comparing observability, its cost for
	// each kind of run: on ÷ off, round by round.
	ObservabilityCost []AuthCost `json:"observability_cost,omitempty"`
	// WorkerSDK is the SDK the workers were written with, or compare (those
	// of CompareWorkers, alternating in Rounds rounds).
	WorkerSDK string `json:"worker_sdk"`
	// WorkerCost is, when comparing the workers' SDKs, each one's figures
	// divided by go's, at each kind of run, round by round.
	WorkerCost []AuthCost `json:"worker_cost,omitempty"`
	// PeakRSSMiB is this process's peak RSS: the whole system in-process;
	// the workers and clients alone when deployed (each cell has the
	// service's).
	PeakRSSMiB float64 `json:"peak_rss_mib"`
}

// Where a chain benchmark's service runs.
const (
	ServiceInProcess = "in-process"
	ServiceDeployed  = "deployed"
)

// RunChain runs the chains of every run, each on a fresh service, and
// returns the report; progress goes to progress. It returns an error when o
// is invalid (naming the flag of `dwr bench chain3`), when a run cannot be
// set up or does not end within o.Timeout, or when ctx ends; chains whose
// submission failed are in the report (ChainReport.Err).
func RunChain(ctx context.Context, o ChainOptions, progress io.Writer) (*ChainReport, error) {
	if o.Dir == "" {
		o.Dir = os.TempDir()
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultChainTimeout
	}
	if o.Workers < 1 || o.Concurrency < 1 || o.Submitters < 1 || o.Single < 0 || len(o.Chains) == 0 {
		return nil, errors.New("--workers, --concurrency and --submitters must be at least 1, --single at least 0, and --chains not empty")
	}
	if o.Warmup < 0 {
		return nil, errors.New("--warmup must be at least 0")
	}
	if err := checkWorkerSDKs(o); err != nil {
		return nil, err
	}
	if o.WorkerSDK == "" {
		o.WorkerSDK = WorkerGo
	}
	compareWorkers := len(o.CompareWorkers) > 0
	comparing := o.CompareAuth || o.CompareEncryption || o.CompareObservability || compareWorkers
	if comparing && o.Rounds < 1 {
		return nil, errors.New("--rounds must be at least 1")
	}
	compared := 0
	for _, c := range []bool{o.CompareAuth, o.CompareEncryption, o.CompareObservability, compareWorkers} {
		if c {
			compared++
		}
	}
	if compared > 1 {
		return nil, errors.New("compare one thing at a time: --compare-auth, --compare-encryption, --compare-observability or --compare-workers")
	}
	sdks := []string{o.WorkerSDK}
	if compareWorkers {
		sdks = o.CompareWorkers
	}
	if (compareWorkers || o.WorkerSDK != WorkerGo) && !o.Deployed {
		return nil, errors.New("--worker-sdk and --compare-workers run the workers as processes of their own, which reach the service over TCP: add --deployed")
	}
	var err error
	if o.programs, err = workerPrograms(o.SDKRoot, o.Binary, sdks); err != nil {
		return nil, err
	}
	if (o.CompareObservability || o.Observe) && o.Deployed {
		return nil, errors.New("--compare-observability runs the service in-process: drop --deployed")
	}
	stopProfile, err := handlers.StartCPUProfile(o.CPUProfile)
	if err != nil {
		return nil, err
	}
	defer stopProfile()
	defer writeAllocsProfile(o.MemProfile)
	rep := &ChainReport{Go: runtime.Version(), CPUs: runtime.NumCPU(), Workers: o.Workers, Concurrency: o.Concurrency,
		Service: ServiceInProcess, Submitters: o.Submitters, Warmup: o.Warmup, Auth: authName(!o.Auth), Encryption: encryptionName(o.Plain),
		Observability: observabilityName(o.Observe), WorkerSDK: o.WorkerSDK}
	if o.Deployed {
		rep.Service = ServiceDeployed
	}
	run := func(n int, single bool, s setup, round int) (*ChainCell, error) {
		if s.workers == "" {
			s.workers = o.WorkerSDK
		}
		open := s.open
		at := ""
		if round > 0 {
			at = fmt.Sprintf("round %d: ", round)
		}
		submitters := o.Submitters
		if single {
			submitters = 1
			fmt.Fprintf(progress, "bench: %s%d single chains, one at a time, %s workers, %s, %s, observability %s\n", at, n, s.workers, authName(open),
				encryptionName(s.plain), observabilityName(s.observe))
		} else {
			fmt.Fprintf(progress, "bench: %s%d chains, %d submitters, %d %s workers × %d, %s, %s, observability %s\n", at, n, submitters, o.Workers, s.workers,
				o.Concurrency, authName(open), encryptionName(s.plain), observabilityName(s.observe))
		}
		c, err := withTempDir(o.Dir, func(dir string) (*ChainCell, error) { return chainRun(ctx, dir, o, n, submitters, s) })
		if err != nil {
			return nil, err
		}
		c.Round, c.OneAtATime, c.Encryption, c.Observability = round, single, encryptionName(s.plain), observabilityName(s.observe)
		fmt.Fprintf(progress, "bench:   %.0f chains/s, p50 %.1f ms, p99 %.1f ms, CPU %.2f ms/chain", c.ChainsPerS, c.P50ms, c.P99ms, c.CPUmsPerRun)
		if o.Deployed {
			fmt.Fprintf(progress, " (service %.2f", c.ServiceCPUms)
			if c.Workers != WorkerGo {
				fmt.Fprintf(progress, ", %s workers %.2f", c.Workers, c.WorkerCPUms)
			}
			fmt.Fprintf(progress, "), service peak RSS %.1f MiB", c.ServiceRSSMiB)
		}
		fmt.Fprintln(progress)
		return c, nil
	}
	if comparing {
		cmp := comparison{auth: o.CompareAuth, encryption: o.CompareEncryption, observability: o.CompareObservability, closed: o.Auth, plain: o.Plain,
			workers: o.WorkerSDK}
		rep.Rounds = o.Rounds
		if compareWorkers {
			rep.WorkerSDK = AuthCompare
		} else {
			cmp.mark(&rep.Auth, &rep.Encryption, &rep.Observability)
		}
		// The runs of round r (from 0): both ways of what is compared, or
		// each SDK's workers, in an order that changes each round.
		runsOf := func(r int) []setup {
			var ss []setup
			if compareWorkers {
				for _, sdk := range workerOrder(o.CompareWorkers, r) {
					ss = append(ss, setup{open: !o.Auth, plain: o.Plain, workers: sdk})
				}
				return ss
			}
			for _, b := range authOrder(r) {
				ss = append(ss, cmp.setup(b))
			}
			return ss
		}
		type load struct {
			n      int
			single bool
		}
		var loads []load
		if o.Single > 0 {
			loads = append(loads, load{o.Single, true})
		}
		for _, n := range o.Chains {
			loads = append(loads, load{n, false})
		}
		for r := range o.Rounds {
			for _, l := range loads {
				for _, s := range runsOf(r) {
					c, err := run(l.n, l.single, s, r+1)
					if err != nil {
						return nil, err
					}
					rep.Cells = append(rep.Cells, *c)
				}
			}
		}
		switch {
		case compareWorkers:
			for _, sdk := range o.CompareWorkers {
				if sdk == WorkerGo {
					continue
				}
				rep.WorkerCost = append(rep.WorkerCost, chainCost(rep, sdk+" ÷ go, ",
					func(c ChainCell) bool { return c.Workers == sdk || c.Workers == WorkerGo },
					func(c ChainCell) bool { return c.Workers == WorkerGo })...)
			}
		case o.CompareAuth:
			rep.AuthCost = chainAuthCost(rep, func(c ChainCell) bool { return c.Auth == AuthOpen })
		case o.CompareObservability:
			rep.ObservabilityCost = chainAuthCost(rep, func(c ChainCell) bool { return c.Observability == ObservabilityOff })
		default:
			rep.EncryptionCost = chainAuthCost(rep, func(c ChainCell) bool { return c.Encryption == EncryptionPlain })
		}
	} else {
		if o.Single > 0 {
			c, err := run(o.Single, true, setup{open: !o.Auth, plain: o.Plain, observe: o.Observe}, 0)
			if err != nil {
				return nil, err
			}
			rep.Single = *c
		}
		for _, n := range o.Chains {
			c, err := run(n, false, setup{open: !o.Auth, plain: o.Plain, observe: o.Observe}, 0)
			if err != nil {
				return nil, err
			}
			rep.Cells = append(rep.Cells, *c)
		}
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		rep.PeakRSSMiB = round1(float64(ru.Maxrss) / 1024) // Linux reports KiB
	}
	return rep, nil
}

// chainAuthCost pairs the runs with and without what is measured (without:
// the cells b reports) of each kind (one at a time, and each N) of the
// same round: with ÷ without.
func chainAuthCost(rep *ChainReport, b func(ChainCell) bool) []AuthCost {
	return chainCost(rep, "", func(ChainCell) bool { return true }, b)
}

// chainCost is chainAuthCost of the cells in reports, each load labelled
// with prefix first.
func chainCost(rep *ChainReport, prefix string, in, b func(ChainCell) bool) []AuthCost {
	var out []AuthCost
	seen := map[[2]int]bool{}
	for _, c := range rep.Cells {
		if !in(c) {
			continue
		}
		kind := [2]int{c.Chains, 0}
		if c.OneAtATime {
			kind[1] = 1
		}
		if seen[kind] {
			continue
		}
		seen[kind] = true
		pairs := pairRounds(rep.Rounds, rep.Cells, func(d ChainCell) (int, string, figures, bool) {
			variant := AuthClosed
			if b(d) {
				variant = AuthOpen // pairRounds puts it second: the denominator
			}
			return d.Round, variant, figures{perS: d.ChainsPerS, p50: d.P50ms, p99: d.P99ms, cpu: d.CPUmsPerRun},
				in(d) && d.Chains == c.Chains && d.OneAtATime == c.OneAtATime
		})
		label := fmt.Sprintf("%sN=%d", prefix, c.Chains)
		if c.OneAtATime {
			label = fmt.Sprintf("%sN=%d one at a time", prefix, c.Chains)
		}
		out = append(out, costOf(label, pairs))
	}
	return out
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// chainRun runs o.Warmup chains, then n measured ones, on a fresh service
// in dir (in this process, or deployed) with the given number of concurrent
// submitters.
func chainRun(ctx context.Context, dir string, o ChainOptions, n, submitters int, s setup) (*ChainCell, error) {
	open := s.open
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	// A worker process that exits before it is stopped ends the run, with
	// its error as the cause.
	ctx, died := context.WithCancelCause(ctx)
	defer died(nil)
	var bs *service
	var proc *deployed // the service's process when deployed
	var err error
	if o.Deployed {
		bs, proc, err = startDeployed(ctx, dir, o.Binary, s)
	} else {
		bs, err = startService(ctx, dir, s, io.Discard)
	}
	if err != nil {
		return nil, err
	}
	defer bs.close()

	// Workers on the queue, as an executor fleet would run them: each an
	// executor of the queue. They start once every participant has joined:
	// adding a member reloads the server's users, and a reload while a
	// worker binds to its consumer can cost that worker a second. Go's run
	// in this process; another SDK's each in a process of its own.
	var workers []*executors.Worker
	var workerCreds []string // the other SDK's processes' credentials ("" when open)
	for i := range o.Workers {
		name := fmt.Sprintf("bench-worker-%d", i)
		if s.workers != WorkerGo {
			creds, err := bs.member(ctx, name, domain.RoleExecutor, "chain")
			if err != nil {
				return nil, err
			}
			workerCreds = append(workerCreds, creds)
			continue
		}
		nc, err := bs.join(ctx, name, domain.RoleExecutor, "chain")
		if err != nil {
			return nil, err
		}
		defer nc.Close()
		w, err := executors.NewWorker(executors.Config{Conn: nc, Queue: "chain", Concurrency: o.Concurrency,
			Executor: fmt.Sprintf("bench-%d", i), DrainTimeout: time.Second, Tracer: bs.tracer},
			chainHandler)
		if err != nil {
			return nil, err
		}
		workers = append(workers, w)
	}

	// Each chain's end is its goal's achievement on the event feed. A phase
	// (the warm-up, then the measured chains) ends when ended holds target
	// chains: every earlier phase's and its own.
	fnc, err := bs.join(ctx, "bench-feed", domain.RoleClient)
	if err != nil {
		return nil, err
	}
	defer fnc.Close()
	var mu sync.Mutex
	ended := map[string]time.Time{}
	target := 0
	var reached chan struct{}             // closed (and cleared) once len(ended) reaches target
	waiters := map[string]chan struct{}{} // closed as their chain ends (chains one at a time)
	check := func() {                     // with mu held
		if reached != nil && len(ended) >= target {
			close(reached)
			reached = nil
		}
	}
	sub, err := fnc.Subscribe("dwr.ev.default.goal.*.achieved", func(m *nats.Msg) {
		now := time.Now()
		parts := strings.Split(m.Subject, ".")
		mu.Lock()
		defer mu.Unlock()
		ended[parts[4]] = now
		if w, ok := waiters[parts[4]]; ok {
			close(w)
			delete(waiters, parts[4])
		}
		check()
	})
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := fnc.Flush(); err != nil {
		return nil, err
	}
	// waitEnded waits until chain id has ended (its goal was achieved),
	// woken by the feed's event rather than polling for it: a poll's
	// timer would wake this process while the chain runs.
	waitEnded := func(id string) {
		mu.Lock()
		if _, ok := ended[id]; ok {
			mu.Unlock()
			return
		}
		w := make(chan struct{})
		waiters[id] = w
		mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
		}
	}

	cls, closeConns, err := bs.joinClients(ctx, "bench-submitter", submitters)
	if err != nil {
		return nil, err
	}
	defer closeConns()

	wctx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopWorkers(); wg.Wait() }()
	for _, w := range workers {
		wg.Go(func() {
			if err := w.Run(wctx); err != nil && wctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "bench: worker stopped: %v\n", err)
			}
		})
	}
	var procs []*workerProc
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	for i, creds := range workerCreds {
		p, err := startWorkerProc(o.programs[s.workers], fmt.Sprintf("%s worker %d", s.workers, i), dir, bs.url, creds, "chain",
			fmt.Sprintf("bench-%s-%d", s.workers, i), o.Concurrency, died)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
	}
	for _, p := range procs { // not measured: they are up and taking work
		if err := p.waitReady(ctx); err != nil {
			return nil, err
		}
	}

	// phase submits count chains from the submitters and waits until each
	// has ended; it returns when each was submitted, and its errors.
	phase := func(count int) (started map[string]time.Time, errs int64, first string, _ error) {
		started = map[string]time.Time{}
		mu.Lock()
		target += count
		all := make(chan struct{})
		reached = all
		check()
		mu.Unlock()
		var errCount atomic.Int64
		var firstErr atomic.Value
		next := atomic.Int64{}
		var sw sync.WaitGroup
		for i := range submitters {
			cl := cls[i]
			sw.Go(func() {
				for {
					k := next.Add(1)
					if k > int64(count) || ctx.Err() != nil {
						return
					}
					id := ulid.Make().String()
					at := time.Now()
					err := submitChain(ctx, cl, id)
					mu.Lock()
					if err != nil {
						errCount.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
						ended[id] = at // counted, so the phase ends
						check()
					} else {
						started[id] = at
					}
					mu.Unlock()
					if err == nil && submitters == 1 { // one chain at a time: wait for it
						waitEnded(id)
					}
				}
			})
		}
		sw.Wait()
		select {
		case <-all:
		case <-ctx.Done():
			mu.Lock()
			defer mu.Unlock()
			return nil, 0, "", fmt.Errorf("%d of %d chains achieved before giving up: %w", len(ended), target, context.Cause(ctx))
		}
		first, _ = firstErr.Load().(string)
		return started, errCount.Load(), first, nil
	}
	if o.Warmup > 0 {
		if _, errs, first, err := phase(o.Warmup); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		} else if errs > 0 {
			return nil, fmt.Errorf("warm-up: %d chains failed (first: %s)", errs, first)
		}
	}

	// The measured window: from the first submission to the last chain's
	// end, CPU of this process (workers, clients), of the service's
	// process when deployed, and of the worker processes.
	svc0, err := proc.cpuOrZero()
	if err != nil {
		return nil, err
	}
	wk0, err := workerCPU(procs)
	if err != nil {
		return nil, err
	}
	cpu0, t0 := cpuTime(), time.Now()
	started, errs, first, err := phase(n)
	if err != nil {
		return nil, err
	}
	cpu := cpuTime() - cpu0
	svc1, err := proc.cpuOrZero()
	if err != nil {
		return nil, err
	}
	wk1, err := workerCPU(procs)
	if err != nil {
		return nil, err
	}
	svcCPU, wkCPU := svc1-svc0, wk1-wk0
	cpu += svcCPU + wkCPU
	if o.afterRun != nil {
		o.afterRun(bs)
	}
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
	perChain := func(d time.Duration) float64 { return round2(float64(d.Microseconds()) / 1000 / float64(n)) }
	c := &ChainCell{Auth: authName(open), Workers: s.workers, Chains: n, Seconds: round2(secs), P50ms: p[0], P99ms: p[2], CPUmsPerRun: perChain(cpu),
		Errors: int(errs), FirstError: first}
	if secs > 0 { // not when every submission failed
		c.ChainsPerS, c.TasksPerS = round1(float64(n)/secs), round1(3*float64(n)/secs)
	}
	if proc != nil {
		c.ServiceCPUms = perChain(svcCPU)
		rss, err := proc.peakRSS()
		if err != nil {
			return nil, err
		}
		c.ServiceRSSMiB = round1(rss)
	}
	if len(procs) > 0 {
		c.WorkerCPUms = perChain(wkCPU)
		rss, err := workerPeakRSS(procs)
		if err != nil {
			return nil, err
		}
		c.WorkerRSSMiB = round1(rss)
	}
	return c, nil
}

// chainHandler is what every worker of the chains runs, whatever its SDK:
// it returns {"ok":true}.
func chainHandler(_ context.Context, _ *executors.Job) (executors.Result, error) {
	return executors.Result{Output: json.RawMessage(`{"ok":true}`)}, nil
}

// submitChain creates goal id with its plan of three sequential tasks, in
// one command as a peer starts a workflow, its body encoded here as it goes
// on the wire.
func submitChain(ctx context.Context, cl *client.Client, id string) error {
	goal := []byte(fmt.Sprintf(`{"goal_id":%q,"title":"chain","tasks":[{"key":"a","queue":"chain"},{"key":"b","queue":"chain","depends_on":["a"]},{"key":"c","queue":"chain","depends_on":["b"]}]}`, id))
	_, err := cl.Command(ctx, "goal.create", goal, client.CommandID("g."+id))
	return err
}

// Err returns an error naming the first run whose chains failed, or nil
// when none did.
func (rep *ChainReport) Err() error {
	for _, c := range append([]ChainCell{rep.Single}, rep.Cells...) {
		if c.Errors > 0 {
			return fmt.Errorf("%d chains had %d errors (first: %s)", c.Chains, c.Errors, c.FirstError)
		}
	}
	return nil
}

// PrintChain prints the report for people: a table, the cost of
// authentication when comparing, and the peak RSS.
func PrintChain(w io.Writer, rep *ChainReport) error {
	auth := "service " + rep.Auth + ", payloads " + rep.Encryption
	compareWorkers := rep.WorkerSDK == AuthCompare
	compare := rep.Auth == AuthCompare || rep.Encryption == AuthCompare || rep.Observability == AuthCompare || compareWorkers
	switch {
	case compareWorkers:
		auth = fmt.Sprintf("service %s, payloads %s, the workers' SDKs alternating, %d rounds", rep.Auth, rep.Encryption, rep.Rounds)
	case rep.Observability == AuthCompare:
		auth = fmt.Sprintf("service %s, payloads %s, observability off and on alternating, %d rounds", rep.Auth, rep.Encryption, rep.Rounds)
	case rep.Auth == AuthCompare:
		auth = fmt.Sprintf("service closed and open alternating, %d rounds, payloads %s", rep.Rounds, rep.Encryption)
	case rep.Encryption == AuthCompare:
		auth = fmt.Sprintf("service %s, payloads sealed and plain alternating, %d rounds", rep.Auth, rep.Rounds)
	}
	if rep.Observability == ObservabilityOn {
		auth += ", observability on"
	}
	deployed := rep.Service == ServiceDeployed
	where := "service in-process"
	if deployed {
		where = "service deployed (dwr serve in its own process)"
	}
	sdk := rep.WorkerSDK + " "
	if compareWorkers {
		sdk = ""
	}
	// Another SDK's workers are processes of their own, with CPU of their
	// own.
	external := false
	for _, c := range append([]ChainCell{rep.Single}, rep.Cells...) {
		external = external || (c.Chains > 0 && c.Workers != WorkerGo)
	}
	fmt.Fprintf(w, "dwr bench chain3: %s, %s/%s, %d CPUs, %s, %d %sworkers × %d jobs, %d submitters, %d warm-up chains, fsync before ack, %s\n\n",
		rep.Go, runtime.GOOS, runtime.GOARCH, rep.CPUs, where, rep.Workers, sdk, rep.Concurrency, rep.Submitters, rep.Warmup, auth)
	rows := [][]string{}
	row := func(c ChainCell) {
		label := "all at once"
		if c.OneAtATime {
			label = "one at a time"
		}
		r := []string{label, fmt.Sprint(c.Chains), thousands(c.ChainsPerS), thousands(c.TasksPerS),
			ms(c.P50ms), ms(c.P99ms), fmt.Sprintf("%.2f", c.CPUmsPerRun)}
		if deployed {
			r = append(r, fmt.Sprintf("%.2f", c.ServiceCPUms))
			if external {
				wk := "-" // Go's workers: in this process, counted in its CPU
				if c.Workers != WorkerGo {
					wk = fmt.Sprintf("%.2f", c.WorkerCPUms)
				}
				r = append(r, wk)
			}
			r = append(r, fmt.Sprintf("%.1f", c.ServiceRSSMiB))
		}
		switch {
		case compareWorkers:
			r = append([]string{fmt.Sprint(c.Round), c.Workers}, r...)
		case compare:
			r = append([]string{fmt.Sprint(c.Round), c.Auth + "/" + c.Encryption + "/" + c.Observability}, r...)
		}
		rows = append(rows, r)
	}
	if rep.Single.Chains > 0 {
		row(rep.Single)
	}
	for _, c := range rep.Cells {
		row(c)
	}
	header := []string{"RUN", "CHAINS", "CHAINS/S", "TASKS/S", "P50 MS", "P99 MS", "CPU MS/CHAIN"}
	if deployed {
		header = append(header, "OF WHICH SERVICE")
		if external {
			header = append(header, "OF WHICH WORKERS")
		}
		header = append(header, "SERVICE PEAK RSS MIB")
	}
	switch {
	case compareWorkers:
		header = append([]string{"ROUND", "WORKERS"}, header...)
	case compare:
		header = append([]string{"ROUND", "AUTH/PAYLOADS/OBS"}, header...)
	}
	if err := table(w, header, rows); err != nil {
		return err
	}
	if err := printAuthCost(w, "CHAINS/S", "CPU/CHAIN", rep.AuthCost); err != nil {
		return err
	}
	if err := printCost(w, "the cost of encryption: sealed ÷ plain", "CHAINS/S", "CPU/CHAIN", rep.EncryptionCost); err != nil {
		return err
	}
	if err := printCost(w, "the cost of observability (metrics, scraped every "+ScrapeEvery.String()+", and every span made, none exported): on ÷ off",
		"CHAINS/S", "CPU/CHAIN", rep.ObservabilityCost); err != nil {
		return err
	}
	if err := printCost(w, "the workers' SDKs, each ÷ go (CPU: this process's, the service's and the worker processes')",
		"CHAINS/S", "CPU/CHAIN", rep.WorkerCost); err != nil {
		return err
	}
	if external {
		var peak float64
		for _, c := range append([]ChainCell{rep.Single}, rep.Cells...) {
			peak = max(peak, c.WorkerRSSMiB)
		}
		fmt.Fprintf(w, "\npeak RSS of this process (clients, and Go's workers) %.1f MiB; of the worker processes of another SDK, together, at most %.1f MiB\n",
			rep.PeakRSSMiB, peak)
	} else if deployed {
		fmt.Fprintf(w, "\npeak RSS of this process (workers and clients) %.1f MiB\n", rep.PeakRSSMiB)
	} else {
		fmt.Fprintf(w, "\npeak RSS %.1f MiB\n", rep.PeakRSSMiB)
	}
	return nil
}
