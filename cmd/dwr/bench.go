package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/handlers/embedded"
)

// Benchmark modes.
const (
	modeBaseline = "baseline" // one JetStream message per event, optimistic concurrency per subject
	modeGroup    = "group"    // the real dwr command path: group commit through the writer
	modeFsync    = "fsync"    // the disk alone: f.Sync() after a small append
)

// benchOpts are the flags of `dwr bench`.
type benchOpts struct {
	clients  []int
	duration time.Duration
	warmup   time.Duration // < 0: the default, duration/5 capped at 1s
	modes    []string
	dir      string
	fsyncs   int
	cpuProf  string
	// auth runs the service closed, as dwr serve does (false: open).
	auth bool
	// compareAuth runs every group cell closed and open, alternating, in
	// rounds, and reports the cost of authentication.
	compareAuth bool
	rounds      int
	modesSet    bool // --modes was given
}

// benchReport is everything one run measured; --json prints it as is.
type benchReport struct {
	Started  time.Time `json:"started"`
	Go       string    `json:"go"`
	OS       string    `json:"os"`
	Arch     string    `json:"arch"`
	CPUs     int       `json:"cpus"`
	Dir      string    `json:"dir"`
	Duration string    `json:"duration"`
	Warmup   string    `json:"warmup"`
	// Auth is how the service ran: closed, open, or compare (both,
	// alternating in Rounds rounds).
	Auth   string `json:"auth"`
	Rounds int    `json:"rounds,omitempty"`
	// LoadAvg is the 1-minute load average before and after the run (Linux
	// only): other work on the machine skews every figure.
	LoadAvg [2]float64  `json:"load_avg"`
	Fsync   *fsyncCell  `json:"fsync"`
	Cells   []benchCell `json:"cells"`
	Ratios  benchRatios `json:"ratios"`
	// AuthCost is, when comparing, the cost of authentication at each
	// level: the group cells closed ÷ open, round by round.
	AuthCost []authCost `json:"auth_cost,omitempty"`
}

// fsyncCell is the reference: what the disk alone does.
type fsyncCell struct {
	Syncs     int     `json:"syncs"`
	PerSecond float64 `json:"fsyncs_per_sec"`
	Mean      float64 `json:"mean_ms"`
	P50       float64 `json:"p50_ms"`
	P90       float64 `json:"p90_ms"`
	P99       float64 `json:"p99_ms"`
}

// benchCell is one mode at one concurrency level.
type benchCell struct {
	Mode string `json:"mode"`
	// Auth is how the service ran in group mode: closed or open (the
	// baseline has no service).
	Auth string `json:"auth,omitempty"`
	// Round is the cell's round (from 1) when comparing.
	Round      int     `json:"round,omitempty"`
	Clients    int     `json:"clients"`
	Ops        int     `json:"ops"`
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	Seconds    float64 `json:"seconds"`
	OpsPerSec  float64 `json:"ops_per_sec"`
	P50        float64 `json:"p50_ms"`
	P90        float64 `json:"p90_ms"`
	P99        float64 `json:"p99_ms"`
	// Records is the number of log messages the measured window appended:
	// one per event in the baseline, one per commit record in group mode.
	Records int `json:"records"`
	// Batch is the mean number of commands per record (1 in the baseline).
	Batch float64 `json:"batch"`
	// RecordBytes is the mean size of a record's payload (without headers).
	RecordBytes float64 `json:"record_bytes"`
	// CPUPerOp is the whole process's CPU time (server, service and
	// clients) in the measured window, per operation, in microseconds.
	CPUPerOp float64 `json:"cpu_us_per_op"`
}

// benchRatios are the summary figures; a zero field was not measured.
type benchRatios struct {
	ThroughputClients    int     `json:"throughput_clients,omitempty"`
	GroupOverBaseline    float64 `json:"group_over_baseline_ops,omitempty"`
	LatencyClients       int     `json:"latency_clients,omitempty"`
	GroupP50OverFsyncP50 float64 `json:"group_p50_over_fsync_p50,omitempty"`
}

func benchCmd(g *globals) *cobra.Command {
	o := benchOpts{warmup: -1}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "measure the durable write path: one message per event vs group commit, and the disk's fsync",
		Long: `bench measures, on this machine and in one run, each in a fresh directory with an
embedded NATS server that fsyncs before acknowledging (SyncAlways):

  baseline  one JetStream message per event: each client publishes a ~300-byte event on
            its own aggregate subject with the expected last sequence of that subject,
            waiting for the ack (the obvious design);
  group     the real dwr command path: the whole service in-process, each client sending
            goal.create requests with fresh command ids, answered after the commit record
            holding them is fsynced. The service runs closed, as dwr serve does: the
            service's and the clients' NATS accounts, the service on its own identity, and
            each client a client-role member of the workspace connected with its own
            credential (nkey and inbox prefix); --auth=false runs it open (no accounts,
            no credentials), and --compare-auth runs both, alternating, in --rounds
            rounds, and reports the cost of authentication as ratios;
  fsync     the reference: f.Sync() after a small append on a file in the same directory.

Each client runs one operation at a time (a closed loop) for --duration after a warm-up.
Progress goes to stderr; the table (or --json) to stdout.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.modesSet = cmd.Flags().Changed("modes")
			return runReport(cmd, g, "bench",
				func(ctx context.Context, progress io.Writer) (*benchReport, error) { return runBench(ctx, o, progress) },
				printBench,
				func(rep *benchReport) error {
					for _, c := range rep.Cells {
						if c.Errors > 0 {
							return fmt.Errorf("%s with %d clients had %d errors (first: %s)", c.Mode, c.Clients, c.Errors, c.FirstError)
						}
					}
					return nil
				})
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&o.clients, "clients", []int{1, 8, 64}, "concurrency levels: clients each with one operation in flight")
	f.DurationVar(&o.duration, "duration", 5*time.Second, "measured time per mode and level")
	f.DurationVar(&o.warmup, "warmup", -1, "unmeasured time before each measurement (default duration/5, at most 1s)")
	f.StringSliceVar(&o.modes, "modes", []string{modeBaseline, modeGroup}, "modes to run: baseline, group (the fsync reference always runs)")
	f.StringVar(&o.dir, "dir", os.TempDir(), "where the fresh directories are made: put it on the disk you care about")
	f.IntVar(&o.fsyncs, "fsyncs", 2000, "fsyncs timed for the reference (stops early after --duration)")
	f.StringVar(&o.cpuProf, "cpuprofile", "", "write a CPU profile of the whole run (server, service and clients) to this file")
	f.BoolVar(&o.auth, "auth", true, "run the service closed, as dwr serve does (--auth=false: open, without accounts or credentials)")
	f.BoolVar(&o.compareAuth, "compare-auth", false, "run group mode closed and open, alternating in --rounds rounds, and print the cost of authentication")
	f.IntVar(&o.rounds, "rounds", 3, "with --compare-auth: rounds, each measuring every level closed and open (the order swapped each round)")
	cmd.AddCommand(benchChainCmd(g))
	return cmd
}

func (o *benchOpts) validate() error {
	if len(o.clients) == 0 {
		return errors.New("--clients: give at least one level")
	}
	for _, c := range o.clients {
		if c < 1 || c > 4096 {
			return fmt.Errorf("--clients: %d is not in 1..4096", c)
		}
	}
	if o.duration <= 0 {
		return errors.New("--duration must be positive")
	}
	if o.fsyncs < 1 {
		return errors.New("--fsyncs must be at least 1")
	}
	for _, m := range o.modes {
		if m != modeBaseline && m != modeGroup {
			return fmt.Errorf("--modes: unknown mode %q (baseline, group)", m)
		}
	}
	if o.compareAuth {
		if o.modesSet && !slices.Equal(o.modes, []string{modeGroup}) {
			return errors.New("--compare-auth measures group mode only (the baseline has no service to authenticate): leave --modes out")
		}
		o.modes = []string{modeGroup}
		if o.rounds < 1 {
			return errors.New("--rounds must be at least 1")
		}
	}
	if o.warmup < 0 {
		o.warmup = min(o.duration/5, time.Second)
	}
	return nil
}

// runBench runs every cell and returns the report; progress goes to progress.
func runBench(ctx context.Context, o benchOpts, progress io.Writer) (*benchReport, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	rep := &benchReport{Started: time.Now().UTC().Round(time.Second), Go: runtime.Version(), OS: runtime.GOOS,
		Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), Dir: o.dir, Duration: o.duration.String(), Warmup: o.warmup.String(),
		Auth: authName(!o.auth)}
	logf := func(format string, args ...any) { _, _ = fmt.Fprintf(progress, "bench: "+format+"\n", args...) }
	rep.LoadAvg[0] = loadAvg()
	if rep.LoadAvg[0] > float64(rep.CPUs)/2 {
		logf("warning: the machine is busy (load average %.2f on %d CPUs): the figures will be skewed", rep.LoadAvg[0], rep.CPUs)
	}

	stopProfile, err := startCPUProfile(o.cpuProf)
	if err != nil {
		return nil, err
	}
	defer stopProfile()

	logf("fsync reference: up to %d syncs or %s in %s", o.fsyncs, o.duration, o.dir)
	fs, err := withTempDir(o.dir, func(dir string) (*fsyncCell, error) { return benchFsync(ctx, dir, o.fsyncs, o.duration) })
	if err != nil {
		return nil, fmt.Errorf("fsync reference: %w", err)
	}
	rep.Fsync = fs
	logf("  %.0f fsyncs/s, p50 %.3f ms", fs.PerSecond, fs.P50)

	cell := func(mode string, n int, open bool, round int) error {
		auth := ""
		if mode == modeGroup {
			auth = ", " + authName(open)
		}
		if round > 0 {
			logf("round %d: %s%s, %d clients: %s warm-up + %s", round, mode, auth, n, o.warmup, o.duration)
		} else {
			logf("%s%s, %d clients: %s warm-up + %s", mode, auth, n, o.warmup, o.duration)
		}
		c, err := withTempDir(o.dir, func(dir string) (*benchCell, error) {
			if mode == modeBaseline {
				return benchBaseline(ctx, dir, n, o.warmup, o.duration, progress)
			}
			return benchGroup(ctx, dir, n, open, o.warmup, o.duration, progress)
		})
		if err != nil {
			return fmt.Errorf("%s%s with %d clients: %w", mode, auth, n, err)
		}
		c.Round = round
		rep.Cells = append(rep.Cells, *c)
		logf("  %.0f ops/s, p50 %.2f ms, p99 %.2f ms, batch %.1f, CPU %.0f µs/op", c.OpsPerSec, c.P50, c.P99, c.Batch, c.CPUPerOp)
		return nil
	}
	if o.compareAuth {
		rep.Auth, rep.Rounds = authCompare, o.rounds
		for r := range o.rounds {
			for _, n := range o.clients {
				for _, open := range authOrder(r) {
					if err := cell(modeGroup, n, open, r+1); err != nil {
						return nil, err
					}
				}
			}
		}
		rep.AuthCost = benchAuthCost(rep, o.clients)
	} else {
		for _, mode := range o.modes {
			for _, n := range o.clients {
				if err := cell(mode, n, !o.auth, 0); err != nil {
					return nil, err
				}
			}
		}
	}
	rep.Ratios = ratios(rep, o.clients)
	rep.LoadAvg[1] = loadAvg()
	return rep, nil
}

// ratios compares group commit with the baseline at the highest level, and
// group latency at the lowest level with one fsync (the first closed group
// cell when comparing).
func ratios(rep *benchReport, levels []int) benchRatios {
	var r benchRatios
	hi, lo := slices.Max(levels), slices.Min(levels)
	find := func(mode string, n int) *benchCell {
		for i := range rep.Cells {
			c := &rep.Cells[i]
			if c.Mode == mode && c.Clients == n && (rep.Auth != authCompare || c.Auth == authClosed) {
				return c
			}
		}
		return nil
	}
	if g, b := find(modeGroup, hi), find(modeBaseline, hi); g != nil && b != nil && b.OpsPerSec > 0 {
		r.ThroughputClients = hi
		r.GroupOverBaseline = round2(g.OpsPerSec / b.OpsPerSec)
	}
	if g := find(modeGroup, lo); g != nil && rep.Fsync != nil && rep.Fsync.P50 > 0 {
		r.LatencyClients = lo
		r.GroupP50OverFsyncP50 = round2(g.P50 / rep.Fsync.P50)
	}
	return r
}

// benchAuthCost pairs each level's closed and open group cells of the same
// round.
func benchAuthCost(rep *benchReport, levels []int) []authCost {
	var out []authCost
	for _, n := range levels {
		pairs := pairRounds(rep.Rounds, rep.Cells, func(c benchCell) (int, string, figures, bool) {
			return c.Round, c.Auth, figures{perS: c.OpsPerSec, p50: c.P50, p99: c.P99, cpu: c.CPUPerOp},
				c.Mode == modeGroup && c.Clients == n
		})
		load := fmt.Sprintf("%d clients", n)
		if n == 1 {
			load = "1 client"
		}
		out = append(out, costOf(load, pairs))
	}
	return out
}

// loadAvg returns the 1-minute load average, or 0 where it is unknown.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(b) + " 0")[0], 64)
	return f
}

func withTempDir[T any](base string, fn func(dir string) (T, error)) (T, error) {
	dir, err := os.MkdirTemp(base, "dwr-bench-*")
	if err != nil {
		var zero T
		return zero, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	return fn(dir)
}

// benchFsync times up to n f.Sync() calls, each after a ~300-byte append,
// stopping early after limit.
func benchFsync(ctx context.Context, dir string, n int, limit time.Duration) (*fsyncCell, error) {
	f, err := os.Create(filepath.Join(dir, "fsync.dat"))
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	buf := make([]byte, 300)
	for i := range buf {
		buf[i] = byte('a' + i%26)
	}
	lats := make([]time.Duration, 0, n)
	var start time.Time
	for i := -20; i < n; i++ { // 20 unmeasured syncs first
		if i == 0 {
			start = time.Now()
		}
		if i > 0 && (time.Since(start) >= limit || ctx.Err() != nil) {
			break
		}
		if _, err := f.Write(buf); err != nil {
			return nil, err
		}
		t := time.Now()
		if err := f.Sync(); err != nil {
			return nil, err
		}
		if i >= 0 {
			lats = append(lats, time.Since(t))
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	el := time.Since(start)
	p := percentiles(lats)
	var sum time.Duration
	for _, l := range lats {
		sum += l
	}
	return &fsyncCell{Syncs: len(lats), PerSecond: round1(float64(len(lats)) / el.Seconds()),
		Mean: math.Round(float64(sum)/float64(len(lats))/float64(time.Millisecond)*1000) / 1000,
		P50:  p[0], P90: p[1], P99: p[2]}, nil
}

// startServer starts an embedded NATS server in dir (it asserts SyncAlways).
func startServer(dir string, progress io.Writer) (*embedded.Server, error) {
	return embedded.Start(embedded.Config{DataDir: dir,
		Logger: slog.New(slog.NewTextHandler(progress, &slog.HandlerOptions{Level: slog.LevelError}))})
}

// connectClients opens one in-process connection per client.
func connectClients(srv *embedded.Server, n int) ([]*nats.Conn, func(), error) {
	conns := make([]*nats.Conn, 0, n)
	closeAll := func() {
		for _, nc := range conns {
			nc.Close()
		}
	}
	for i := range n {
		nc, err := srv.Connect(nats.Name(fmt.Sprintf("dwr-bench-%d", i)))
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		conns = append(conns, nc)
	}
	return conns, closeAll, nil
}

// benchEvent returns a ~300-byte event, shaped like the envelope of a
// goal.created event.
func benchEvent(client int, n uint64) []byte {
	id := ulid.Make().String()
	b, _ := json.Marshal(map[string]any{
		"id": id, "type": "goal.created", "sv": 1, "ws": "default", "agg": "goal",
		"agg_id": fmt.Sprintf("bench-%d", client), "ver": n, "cmd": id, "actor": "bench",
		"time": time.Now().UTC().Format(time.RFC3339Nano),
		"data": map[string]any{"goal_id": fmt.Sprintf("bench-%d", client), "title": "bench goal",
			"envelope": map[string]any{"budget": map[string]any{}, "permissions": map[string]any{}}},
	})
	return b
}

// benchBaseline measures one JetStream message per event: each client
// publishes on its own aggregate subject, expecting the subject's last
// sequence (optimistic concurrency), and waits for the ack.
func benchBaseline(ctx context.Context, dir string, clients int, warm, dur time.Duration, progress io.Writer) (*benchCell, error) {
	srv, err := startServer(dir, progress)
	if err != nil {
		return nil, err
	}
	defer srv.Shutdown()
	conns, closeConns, err := connectClients(srv, clients)
	if err != nil {
		return nil, err
	}
	defer closeConns()
	js, err := jetstream.New(conns[0])
	if err != nil {
		return nil, err
	}
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BENCH_EVENTS", Subjects: []string{"bench.ev.>"},
		Storage: jetstream.FileStorage, Retention: jetstream.LimitsPolicy, Replicas: 1})
	if err != nil {
		return nil, err
	}
	ops := make([]func() error, clients)
	for i := range clients {
		cjs, err := jetstream.New(conns[i])
		if err != nil {
			return nil, err
		}
		subject := fmt.Sprintf("bench.ev.default.goal.bench-%d", i)
		var last, n uint64
		ops[i] = func() error {
			n++
			ack, err := cjs.Publish(ctx, subject, benchEvent(i, n),
				jetstream.WithExpectLastSequencePerSubject(last), jetstream.WithMsgID(ulid.Make().String()))
			if err != nil {
				return err
			}
			last = ack.Sequence
			return nil
		}
	}
	var before uint64
	mark := func() error {
		info, err := stream.Info(ctx)
		if err != nil {
			return err
		}
		before = info.State.LastSeq
		return nil
	}
	c, err := drive(ctx, ops, warm, dur, mark)
	if err != nil {
		return nil, err
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, err
	}
	c.Mode, c.Clients = modeBaseline, clients
	c.Records = int(min(info.State.LastSeq-before, math.MaxInt32))
	c.Batch = 1
	c.RecordBytes = float64(len(benchEvent(0, 1)))
	return c, nil
}

// benchGroup measures the real command path: the whole service in-process,
// each client sending goal.create requests with fresh command ids.
func benchGroup(ctx context.Context, dir string, clients int, open bool, warm, dur time.Duration, progress io.Writer) (*benchCell, error) {
	bs, err := startBenchService(ctx, dir, open, progress)
	if err != nil {
		return nil, err
	}
	defer bs.close()
	log := bs.svc.Log()

	conns, closeConns, err := bs.joinClients("bench-client", clients)
	if err != nil {
		return nil, err
	}
	defer closeConns()
	const body = `{"title":"bench goal","description":"a goal created by dwr bench"}`
	ops := make([]func() error, clients)
	for i := range clients {
		nc := conns[i]
		ops[i] = func() error { return benchCommand(nc, "goal.create", body, ulid.Make().String()) }
	}
	var before uint64
	mark := func() (err error) {
		before, err = log.LastSeq(ctx)
		return err
	}
	c, err := drive(ctx, ops, warm, dur, mark)
	if err != nil {
		return nil, err
	}
	c.Mode, c.Auth, c.Clients = modeGroup, authName(open), clients
	var cmds, bytes int
	if err := log.Read(ctx, before+1, func(_ uint64, rec []byte) error {
		cm, err := eventstore.DecodeCommit(rec)
		if err != nil {
			return err
		}
		if cm.Kind == eventstore.KindEvents {
			c.Records++
			cmds += len(cm.Results)
			bytes += len(rec)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("count commit records: %w", err)
	}
	if c.Records > 0 {
		c.Batch = round2(float64(cmds) / float64(c.Records))
		c.RecordBytes = round1(float64(bytes) / float64(c.Records))
	}
	return c, nil
}

// drive runs one closed loop per op (each client has one operation in flight)
// for warm, calls mark, then measures for dur: every operation completed
// after the warm-up counts, with its whole latency; clients start no
// operation after the measured time, and the window closes when the last one
// finishes. So every client completes at least one measured operation.
func drive(ctx context.Context, ops []func() error, warm, dur time.Duration, mark func() error) (*benchCell, error) {
	start := time.Now()
	t0 := start.Add(warm)
	t1 := t0.Add(dur)
	lats := make([][]time.Duration, len(ops))
	ends := make([]time.Time, len(ops))
	var errCount atomic.Int64
	var firstErr atomic.Value
	var stopped atomic.Bool
	var wg sync.WaitGroup
	for i, op := range ops {
		wg.Go(func() {
			for !stopped.Load() {
				s := time.Now()
				if !s.Before(t1) {
					return
				}
				err := op()
				e := time.Now()
				if !e.After(t0) {
					continue // completed during the warm-up
				}
				ends[i] = e
				if err != nil {
					firstErr.CompareAndSwap(nil, err.Error())
					if errCount.Add(1) >= 1000 {
						stopped.Store(true)
					}
					continue
				}
				lats[i] = append(lats[i], e.Sub(s))
			}
		})
	}
	// mark at t0 (or at once if the warm-up is zero), concurrently with the clients.
	markErr := make(chan error, 1)
	var cpu0 time.Duration
	go func() {
		select {
		case <-time.After(time.Until(t0)):
			cpu0 = cpuTime()
			markErr <- mark()
		case <-ctx.Done():
			markErr <- ctx.Err()
		}
	}()
	stopOnCancel := context.AfterFunc(ctx, func() { stopped.Store(true) })
	defer stopOnCancel()
	wg.Wait()
	cpu := cpuTime()
	if err := <-markErr; err != nil {
		return nil, err
	}
	cpu -= cpu0
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var all []time.Duration
	end := t1
	for i := range ops {
		all = append(all, lats[i]...)
		if ends[i].After(end) {
			end = ends[i]
		}
	}
	el := end.Sub(t0)
	p := percentiles(all)
	c := &benchCell{Ops: len(all), Errors: int(errCount.Load()), Seconds: round2(el.Seconds()),
		OpsPerSec: round1(float64(len(all)) / el.Seconds()), P50: p[0], P90: p[1], P99: p[2]}
	if len(all) > 0 {
		c.CPUPerOp = round1(float64(cpu.Nanoseconds()) / 1000 / float64(len(all)))
	}
	if s, ok := firstErr.Load().(string); ok {
		c.FirstError = s
	}
	return c, nil
}

// percentiles returns p50, p90 and p99 of lats in milliseconds (nearest rank).
func percentiles(lats []time.Duration) [3]float64 {
	var out [3]float64
	if len(lats) == 0 {
		return out
	}
	slices.Sort(lats)
	for i, q := range []float64{0.50, 0.90, 0.99} {
		k := int(math.Ceil(q*float64(len(lats)))) - 1
		out[i] = math.Round(float64(lats[max(k, 0)])/float64(time.Millisecond)*1000) / 1000
	}
	return out
}

func round1(f float64) float64 { return math.Round(f*10) / 10 }
func round2(f float64) float64 { return math.Round(f*100) / 100 }

// printBench prints the report for people: a table and the ratios.
func printBench(w io.Writer, rep *benchReport) error {
	var b strings.Builder
	auth := "service " + rep.Auth
	if rep.Auth == authCompare {
		auth = fmt.Sprintf("service closed and open alternating, %d rounds", rep.Rounds)
	}
	fmt.Fprintf(&b, "dwr bench: %s, %s/%s, %d CPUs (load %.2f → %.2f), %s per cell after %s warm-up, %s, in %s\n\n",
		rep.Go, rep.OS, rep.Arch, rep.CPUs, rep.LoadAvg[0], rep.LoadAvg[1], rep.Duration, rep.Warmup, auth, rep.Dir)
	compare := rep.Auth == authCompare
	var rows [][]string
	if f := rep.Fsync; f != nil {
		row := []string{"fsync (disk alone)", "-", thousands(f.PerSecond), ms(f.P50), ms(f.P99), "-", "-"}
		if compare {
			row = append([]string{"-"}, row...)
		}
		rows = append(rows, row)
	}
	anyErr := false
	for _, c := range rep.Cells {
		anyErr = anyErr || c.Errors > 0
	}
	for _, c := range rep.Cells {
		name := "baseline: 1 msg/event"
		if c.Mode == modeGroup {
			name = "group commit (dwr, " + c.Auth + ")"
		}
		row := []string{name, strconv.Itoa(c.Clients), thousands(c.OpsPerSec), ms(c.P50), ms(c.P99),
			strconv.FormatFloat(c.Batch, 'f', 1, 64), thousands(c.CPUPerOp)}
		if compare {
			row = append([]string{strconv.Itoa(c.Round)}, row...)
		}
		if anyErr {
			row = append(row, strconv.Itoa(c.Errors))
		}
		rows = append(rows, row)
	}
	header := []string{"MODE", "CLIENTS", "OPS/S", "P50 MS", "P99 MS", "BATCH", "CPU µS/OP"}
	if compare {
		header = append([]string{"ROUND"}, header...)
	}
	if anyErr {
		header = append(header, "ERRORS")
	}
	if err := table(&b, header, rows); err != nil {
		return err
	}
	if err := printAuthCost(&b, "OPS/S", "CPU/OP", rep.AuthCost); err != nil {
		return err
	}
	b.WriteString("\n")
	r := rep.Ratios
	var parts []string
	if r.ThroughputClients > 0 {
		parts = append(parts, fmt.Sprintf("group commit ÷ baseline ops/s at %d clients = %.2f×", r.ThroughputClients, r.GroupOverBaseline))
	}
	if r.LatencyClients > 0 {
		parts = append(parts, fmt.Sprintf("group p50 at %d client(s) ÷ fsync p50 = %.2f×", r.LatencyClients, r.GroupP50OverFsyncP50))
	}
	if len(parts) > 0 {
		b.WriteString("summary: " + strings.Join(parts, "; ") + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func ms(f float64) string {
	switch {
	case f >= 100:
		return strconv.FormatFloat(f, 'f', 0, 64)
	case f >= 10:
		return strconv.FormatFloat(f, 'f', 1, 64)
	default:
		return strconv.FormatFloat(f, 'f', 2, 64)
	}
}

// thousands formats f rounded, with commas: 12,345.
func thousands(f float64) string {
	s := strconv.FormatInt(int64(math.Round(f)), 10)
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// runReport runs a benchmark until a signal stops it, prints its report (as
// JSON with --json), and fails when check finds the run had errors.
func runReport[R any](cmd *cobra.Command, g *globals, name string, run func(context.Context, io.Writer) (R, error),
	print func(io.Writer, R) error, check func(R) error) error {
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, cmd.ErrOrStderr())
	if err != nil {
		return fail(exitError, "%s: %v", name, err)
	}
	if g.json {
		err = printJSON(g.out, rep)
	} else {
		err = print(g.out, rep)
	}
	if err != nil {
		return err
	}
	if err := check(rep); err != nil {
		return fail(exitError, "%s: %v", name, err)
	}
	return nil
}

// startCPUProfile starts writing a CPU profile of the whole process to path
// (nothing when path is empty) and returns what stops it.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	pf, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(pf); err != nil {
		_ = pf.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		_ = pf.Close()
	}, nil
}
