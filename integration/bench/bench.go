package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/embedded"
)

// Benchmark modes.
const (
	ModeBaseline = "baseline" // one JetStream message per event, optimistic concurrency per subject
	ModeGroup    = "group"    // the real dwr command path: group commit through the writer
	ModeFsync    = "fsync"    // the disk alone: f.Sync() after a small append
)

// Options are what `dwr bench` measures, and how; its flags set them.
type Options struct {
	// Clients are the concurrency levels: clients each with one operation
	// in flight (1 to 4096 each).
	Clients []int
	// Duration is the measured time per mode and level.
	Duration time.Duration
	// Warmup is the unmeasured time before each measurement; negative for
	// the default, Duration/5 capped at 1s.
	Warmup time.Duration
	// Modes are the modes run (ModeBaseline, ModeGroup); nil for both. The
	// fsync reference always runs.
	Modes []string
	// Dir is where the fresh directories are made; "" for os.TempDir().
	Dir string
	// Fsyncs is how many fsyncs the reference times (it stops early after
	// Duration).
	Fsyncs int
	// CPUProfile, when set, is the file a CPU profile of the whole run is
	// written to.
	CPUProfile string
	// Auth runs the service closed, as dwr serve does (false: open).
	Auth bool
	// CompareAuth runs every group cell closed and open, alternating, in
	// Rounds rounds, and reports the cost of authentication.
	CompareAuth bool
	Rounds      int
	// Plain runs the service without encryption; by default it seals
	// payloads, as dwr serve does.
	Plain bool
	// CompareEncryption runs every group cell with payloads sealed and
	// plain, alternating in Rounds rounds, and reports the cost of
	// encryption (with PayloadBytes, or there is nothing to seal).
	CompareEncryption bool
	// PayloadBytes, when positive, makes each goal.create carry a plan of
	// one task whose input holds that many bytes: a payload to seal.
	PayloadBytes int
}

// Report is everything one run measured; `dwr bench --json` prints it as
// is.
type Report struct {
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
	LoadAvg [2]float64 `json:"load_avg"`
	Fsync   *FsyncCell `json:"fsync"`
	Cells   []Cell     `json:"cells"`
	Ratios  Ratios     `json:"ratios"`
	// AuthCost is, when comparing, the cost of authentication at each
	// level: the group cells closed ÷ open, round by round.
	AuthCost []AuthCost `json:"auth_cost,omitempty"`
	// Encryption is how the service stored payloads: sealed, plain, or
	// compare; PayloadBytes the size of each goal's task input.
	Encryption   string `json:"encryption"`
	PayloadBytes int    `json:"payload_bytes,omitempty"`
	// EncryptionCost is, when comparing encryption, its cost at each
	// level: sealed ÷ plain, round by round.
	EncryptionCost []AuthCost `json:"encryption_cost,omitempty"`
}

// FsyncCell is the reference: what the disk alone does.
type FsyncCell struct {
	Syncs     int     `json:"syncs"`
	PerSecond float64 `json:"fsyncs_per_sec"`
	Mean      float64 `json:"mean_ms"`
	P50       float64 `json:"p50_ms"`
	P90       float64 `json:"p90_ms"`
	P99       float64 `json:"p99_ms"`
}

// Cell is one mode at one concurrency level.
type Cell struct {
	Mode string `json:"mode"`
	// Auth is how the service ran in group mode: closed or open (the
	// baseline has no service); Encryption how it stored payloads.
	Auth       string `json:"auth,omitempty"`
	Encryption string `json:"encryption,omitempty"`
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

// Ratios are the summary figures; a zero field was not measured.
type Ratios struct {
	ThroughputClients    int     `json:"throughput_clients,omitempty"`
	GroupOverBaseline    float64 `json:"group_over_baseline_ops,omitempty"`
	LatencyClients       int     `json:"latency_clients,omitempty"`
	GroupP50OverFsyncP50 float64 `json:"group_p50_over_fsync_p50,omitempty"`
}

// validate checks o and sets its defaults.
func (o *Options) validate() error {
	if len(o.Clients) == 0 {
		return errors.New("--clients: give at least one level")
	}
	for _, c := range o.Clients {
		if c < 1 || c > 4096 {
			return fmt.Errorf("--clients: %d is not in 1..4096", c)
		}
	}
	if o.Duration <= 0 {
		return errors.New("--duration must be positive")
	}
	if o.Fsyncs < 1 {
		return errors.New("--fsyncs must be at least 1")
	}
	for _, m := range o.Modes {
		if m != ModeBaseline && m != ModeGroup {
			return fmt.Errorf("--modes: unknown mode %q (baseline, group)", m)
		}
	}
	if o.CompareAuth && o.CompareEncryption {
		return errors.New("compare one thing at a time: --compare-auth or --compare-encryption")
	}
	if o.PayloadBytes < 0 || o.PayloadBytes > 200<<10 {
		return errors.New("--payload-bytes must be 0 to 204800 (a task input holds at most 256 KiB)")
	}
	if o.CompareAuth || o.CompareEncryption {
		if o.Modes != nil && !slices.Equal(o.Modes, []string{ModeGroup}) {
			return errors.New("--compare-auth and --compare-encryption measure group mode only (the baseline has no service): leave --modes out")
		}
		o.Modes = []string{ModeGroup}
		if o.Rounds < 1 {
			return errors.New("--rounds must be at least 1")
		}
	}
	if o.Modes == nil {
		o.Modes = []string{ModeBaseline, ModeGroup}
	}
	if o.Warmup < 0 {
		o.Warmup = min(o.Duration/5, time.Second)
	}
	if o.Dir == "" {
		o.Dir = os.TempDir()
	}
	return nil
}

// Run runs every cell, each in a fresh directory, and returns the report;
// progress goes to progress. It returns an error when o is invalid (naming
// the flag of `dwr bench`), when a cell cannot be set up, or when ctx ends;
// a cell whose operations failed is in the report (Report.Err).
func Run(ctx context.Context, o Options, progress io.Writer) (*Report, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	rep := &Report{Started: time.Now().UTC().Round(time.Second), Go: runtime.Version(), OS: runtime.GOOS,
		Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), Dir: o.Dir, Duration: o.Duration.String(), Warmup: o.Warmup.String(),
		Auth: authName(!o.Auth), Encryption: encryptionName(o.Plain), PayloadBytes: o.PayloadBytes}
	logf := func(format string, args ...any) { _, _ = fmt.Fprintf(progress, "bench: "+format+"\n", args...) }
	rep.LoadAvg[0] = loadAvg()
	if rep.LoadAvg[0] > float64(rep.CPUs)/2 {
		logf("warning: the machine is busy (load average %.2f on %d CPUs): the figures will be skewed", rep.LoadAvg[0], rep.CPUs)
	}

	stopProfile, err := handlers.StartCPUProfile(o.CPUProfile)
	if err != nil {
		return nil, err
	}
	defer stopProfile()

	logf("fsync reference: up to %d syncs or %s in %s", o.Fsyncs, o.Duration, o.Dir)
	fs, err := withTempDir(o.Dir, func(dir string) (*FsyncCell, error) { return benchFsync(ctx, dir, o.Fsyncs, o.Duration) })
	if err != nil {
		return nil, fmt.Errorf("fsync reference: %w", err)
	}
	rep.Fsync = fs
	logf("  %.0f fsyncs/s, p50 %.3f ms", fs.PerSecond, fs.P50)

	cell := func(mode string, n int, s setup, round int) error {
		open := s.open
		auth := ""
		if mode == ModeGroup {
			auth = ", " + authName(open) + ", " + encryptionName(s.plain)
		}
		if round > 0 {
			logf("round %d: %s%s, %d clients: %s warm-up + %s", round, mode, auth, n, o.Warmup, o.Duration)
		} else {
			logf("%s%s, %d clients: %s warm-up + %s", mode, auth, n, o.Warmup, o.Duration)
		}
		c, err := withTempDir(o.Dir, func(dir string) (*Cell, error) {
			if mode == ModeBaseline {
				return benchBaseline(ctx, dir, n, o.Warmup, o.Duration, progress)
			}
			return benchGroup(ctx, dir, n, s, o.PayloadBytes, o.Warmup, o.Duration, progress)
		})
		if err != nil {
			return fmt.Errorf("%s%s with %d clients: %w", mode, auth, n, err)
		}
		c.Round = round
		if mode == ModeGroup {
			c.Encryption = encryptionName(s.plain)
		}
		rep.Cells = append(rep.Cells, *c)
		logf("  %.0f ops/s, p50 %.2f ms, p99 %.2f ms, batch %.1f, CPU %.0f µs/op", c.OpsPerSec, c.P50, c.P99, c.Batch, c.CPUPerOp)
		return nil
	}
	if o.CompareAuth || o.CompareEncryption {
		cmp := comparison{auth: o.CompareAuth, encryption: o.CompareEncryption, closed: o.Auth, plain: o.Plain}
		rep.Rounds = o.Rounds
		var observability string // the write-path benchmark does not compare it
		cmp.mark(&rep.Auth, &rep.Encryption, &observability)
		for r := range o.Rounds {
			for _, n := range o.Clients {
				for _, b := range authOrder(r) {
					if err := cell(ModeGroup, n, cmp.setup(b), r+1); err != nil {
						return nil, err
					}
				}
			}
		}
		if o.CompareAuth {
			rep.AuthCost = benchAuthCost(rep, o.Clients, func(c Cell) bool { return c.Auth == AuthOpen })
		} else {
			rep.EncryptionCost = benchAuthCost(rep, o.Clients, func(c Cell) bool { return c.Encryption == EncryptionPlain })
		}
	} else {
		for _, mode := range o.Modes {
			for _, n := range o.Clients {
				if err := cell(mode, n, setup{open: !o.Auth, plain: o.Plain}, 0); err != nil {
					return nil, err
				}
			}
		}
	}
	rep.Ratios = ratios(rep, o.Clients)
	rep.LoadAvg[1] = loadAvg()
	return rep, nil
}

// ratios compares group commit with the baseline at the highest level, and
// group latency at the lowest level with one fsync (the first closed group
// cell when comparing).
func ratios(rep *Report, levels []int) Ratios {
	var r Ratios
	hi, lo := slices.Max(levels), slices.Min(levels)
	find := func(mode string, n int) *Cell {
		for i := range rep.Cells {
			c := &rep.Cells[i]
			if c.Mode == mode && c.Clients == n && (rep.Auth != AuthCompare || c.Auth == AuthClosed) {
				return c
			}
		}
		return nil
	}
	if g, b := find(ModeGroup, hi), find(ModeBaseline, hi); g != nil && b != nil && b.OpsPerSec > 0 {
		r.ThroughputClients = hi
		r.GroupOverBaseline = round2(g.OpsPerSec / b.OpsPerSec)
	}
	if g := find(ModeGroup, lo); g != nil && rep.Fsync != nil && rep.Fsync.P50 > 0 {
		r.LatencyClients = lo
		r.GroupP50OverFsyncP50 = round2(g.P50 / rep.Fsync.P50)
	}
	return r
}

// benchAuthCost pairs each level's group cells with and without what is
// measured (without: the cells b reports) of the same round: with ÷
// without.
func benchAuthCost(rep *Report, levels []int, b func(Cell) bool) []AuthCost {
	var out []AuthCost
	for _, n := range levels {
		pairs := pairRounds(rep.Rounds, rep.Cells, func(c Cell) (int, string, figures, bool) {
			variant := AuthClosed
			if b(c) {
				variant = AuthOpen // pairRounds puts it second: the denominator
			}
			return c.Round, variant, figures{perS: c.OpsPerSec, p50: c.P50, p99: c.P99, cpu: c.CPUPerOp},
				c.Mode == ModeGroup && c.Clients == n
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
func benchFsync(ctx context.Context, dir string, n int, limit time.Duration) (*FsyncCell, error) {
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
	return &FsyncCell{Syncs: len(lats), PerSecond: round1(float64(len(lats)) / el.Seconds()),
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
func benchBaseline(ctx context.Context, dir string, clients int, warm, dur time.Duration, progress io.Writer) (*Cell, error) {
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
	c.Mode, c.Clients = ModeBaseline, clients
	c.Records = int(min(info.State.LastSeq-before, math.MaxInt32))
	c.Batch = 1
	c.RecordBytes = float64(len(benchEvent(0, 1)))
	return c, nil
}

// benchGroup measures the real command path: the whole service in-process,
// each client sending goal.create requests with fresh command ids.
func benchGroup(ctx context.Context, dir string, clients int, s setup, payload int, warm, dur time.Duration, progress io.Writer) (*Cell, error) {
	open := s.open
	bs, err := startService(ctx, dir, s, progress)
	if err != nil {
		return nil, err
	}
	defer bs.close()
	log := bs.svc.Log()

	cls, closeConns, err := bs.joinClients(ctx, "bench-client", clients)
	if err != nil {
		return nil, err
	}
	defer closeConns()
	body := []byte(`{"title":"bench goal","description":"a goal created by dwr bench"}`)
	if payload > 0 {
		body = []byte(`{"title":"bench goal","description":"a goal created by dwr bench","tasks":[{"key":"t","queue":"bench","input":"` +
			strings.Repeat("x", payload) + `"}]}`)
	}
	ops := make([]func() error, clients)
	for i := range clients {
		cl := cls[i]
		ops[i] = func() error {
			_, err := cl.Command(ctx, "goal.create", body, client.CommandID(ulid.Make().String()))
			return err
		}
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
	c.Mode, c.Auth, c.Clients = ModeGroup, authName(open), clients
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
func drive(ctx context.Context, ops []func() error, warm, dur time.Duration, mark func() error) (*Cell, error) {
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
	c := &Cell{Ops: len(all), Errors: int(errCount.Load()), Seconds: round2(el.Seconds()),
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

// table prints rows under a header, aligned.
func table(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

func round1(f float64) float64 { return math.Round(f*10) / 10 }
func round2(f float64) float64 { return math.Round(f*100) / 100 }

// Err returns an error naming the first cell whose operations failed, or
// nil when none did.
func (rep *Report) Err() error {
	for _, c := range rep.Cells {
		if c.Errors > 0 {
			return fmt.Errorf("%s with %d clients had %d errors (first: %s)", c.Mode, c.Clients, c.Errors, c.FirstError)
		}
	}
	return nil
}

// Print prints the report for people: a table and the ratios.
func Print(w io.Writer, rep *Report) error {
	var b strings.Builder
	auth := "service " + rep.Auth + ", payloads " + rep.Encryption
	switch {
	case rep.Auth == AuthCompare:
		auth = fmt.Sprintf("service closed and open alternating, %d rounds, payloads %s", rep.Rounds, rep.Encryption)
	case rep.Encryption == AuthCompare:
		auth = fmt.Sprintf("service %s, payloads sealed and plain alternating, %d rounds", rep.Auth, rep.Rounds)
	}
	if rep.PayloadBytes > 0 {
		auth += fmt.Sprintf(", a %d-byte task input in each goal.create", rep.PayloadBytes)
	}
	fmt.Fprintf(&b, "dwr bench: %s, %s/%s, %d CPUs (load %.2f → %.2f), %s per cell after %s warm-up, %s, in %s\n\n",
		rep.Go, rep.OS, rep.Arch, rep.CPUs, rep.LoadAvg[0], rep.LoadAvg[1], rep.Duration, rep.Warmup, auth, rep.Dir)
	compare := rep.Auth == AuthCompare || rep.Encryption == AuthCompare
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
		if c.Mode == ModeGroup {
			name = "group commit (dwr, " + c.Auth + ", " + c.Encryption + ")"
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
	if err := printCost(&b, "the cost of encryption: sealed ÷ plain", "OPS/S", "CPU/OP", rep.EncryptionCost); err != nil {
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

// writeAllocsProfile writes the process's allocations so far to path
// (nothing when path is empty); a failure is only logged, as the run's
// figures stand without it.
func writeAllocsProfile(path string) {
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.Lookup("allocs").WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: the allocations profile: %v\n", err)
	}
}
