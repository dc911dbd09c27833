package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/handlers"
)

// FloodMethod is what RunFlood runs and measures and how, for people
// (`dwr bench flood --help`).
const FloodMethod = `flood starts the service in-process, closed and sealed as dwr serve runs it,
and measures what one client gets while hostile clients flood it. Each of --flooders client-role
identities publishes --payload-bytes commands (goal.create, refused at once as too large) as fast as
its connection takes them, without waiting for any answer; one other identity sends goal.create
after goal.create, each waited for (5 s at most), for --duration. It reports the other client's
answered commands a second and latencies, its failures, the flood's bytes a second, how many
flooders the service benched (their connections closed by the server), and the NATS server's slow
consumer count (a cut connection: the service's own, when it is not 0). --bench-flooders sets the
service's bench (-1s: off, to compare).`

// FloodOptions are what `dwr bench flood` measures; its flags set them.
type FloodOptions struct {
	// Flooders are the flooding identities, each on a connection of its own.
	Flooders int
	// PayloadBytes is the size of each flooding request.
	PayloadBytes int
	// Rate is how many requests each flooder sends a second (0: as fast as
	// its connection takes them).
	Rate int
	// Duration is how long the flood and the other client's commands run.
	Duration time.Duration
	// BenchFor is the service's Config.BenchFor (0: its default; negative:
	// no bench).
	BenchFor time.Duration
	// CallerBytes is the service's Config.MaxBytesInFlightPerCaller (0:
	// its default): a flooder is benched past eight times it in a second.
	CallerBytes int
	// Dir is where the fresh directory is made; "" for os.TempDir().
	Dir string
	// CPUProfile, when set, is where a CPU profile of the flood (server,
	// service and clients) is written.
	CPUProfile string
}

// FloodReport is what one flood run measured.
type FloodReport struct {
	Started      time.Time `json:"started"`
	CPUs         int       `json:"cpus"`
	Flooders     int       `json:"flooders"`
	PayloadBytes int       `json:"payload_bytes"`
	Seconds      float64   `json:"seconds"`
	BenchFor     string    `json:"bench_for"`
	// Sent is how many flooding requests were published, FloodMiBps their
	// bytes a second.
	Sent       int64   `json:"sent"`
	FloodMiBps float64 `json:"flood_mib_per_s"`
	// Benched is how many flooders' connections the server closed.
	Benched int `json:"benched"`
	// SlowConsumers is the NATS server's count of connections it cut as
	// slow consumers during the run.
	SlowConsumers uint64 `json:"slow_consumers"`
	// Other is what the other client got.
	Other FloodClient `json:"other"`
	// Error is why the run could not be made ("" when it was).
	Error string `json:"error,omitempty"`
}

// FloodClient is what the other client's commands got during the flood.
type FloodClient struct {
	Answered  int     `json:"answered"`
	Failed    int     `json:"failed"`
	PerSecond float64 `json:"per_s"`
	P50       float64 `json:"p50_ms"`
	P99       float64 `json:"p99_ms"`
	Max       float64 `json:"max_ms"`
	// LastError is the last failure's error.
	LastError string `json:"last_error,omitempty"`
}

// Err reports a run that could not be made.
func (r *FloodReport) Err() error {
	if r.Error != "" {
		return errors.New(r.Error)
	}
	return nil
}

// RunFlood runs the flood benchmark.
func RunFlood(ctx context.Context, o FloodOptions, progress io.Writer) (*FloodReport, error) {
	switch {
	case o.Flooders < 1 || o.Flooders > 64:
		return nil, fmt.Errorf("--flooders %d: 1 to 64", o.Flooders)
	case o.PayloadBytes < 1 || o.PayloadBytes > 8<<20:
		return nil, fmt.Errorf("--payload-bytes %d: 1 to 8 MiB (and under the server's max_payload, 1 MiB by default)", o.PayloadBytes)
	case o.Rate < 0:
		return nil, fmt.Errorf("--rate %d: 0 (as fast as the connection takes them) or more", o.Rate)
	case o.Duration <= 0:
		return nil, fmt.Errorf("--duration %s: give a positive duration", o.Duration)
	case o.CallerBytes < 0:
		return nil, fmt.Errorf("--caller-bytes %d: 0 (the service's default) or more", o.CallerBytes)
	}
	dir, err := os.MkdirTemp(o.Dir, "dwr-bench-flood-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	limits := handlers.Config{BenchFor: o.BenchFor, MaxBytesInFlightPerCaller: o.CallerBytes}
	bs, err := startService(ctx, dir, setup{limits: &limits}, progress)
	if err != nil {
		return nil, err
	}
	defer bs.close()
	rep := &FloodReport{Started: time.Now().UTC(), CPUs: runtime.NumCPU(), Flooders: o.Flooders, PayloadBytes: o.PayloadBytes}
	switch {
	case o.BenchFor < 0:
		rep.BenchFor = "off"
	case o.BenchFor == 0:
		rep.BenchFor = handlers.DefaultBenchFor.String()
	default:
		rep.BenchFor = o.BenchFor.String()
	}
	var flooders []*nats.Conn
	for i := range o.Flooders {
		name := fmt.Sprintf("flooder-%d", i)
		file, err := bs.member(ctx, name, domain.RoleClient)
		if err != nil {
			return nil, err
		}
		nc, err := bs.connectCreds(name, file, nats.NoReconnect())
		if err != nil {
			return nil, err
		}
		defer nc.Close()
		flooders = append(flooders, nc)
	}
	onc, err := bs.join(ctx, "other", domain.RoleClient)
	if err != nil {
		return nil, err
	}
	defer onc.Close()
	other := client.New(onc, client.NoRetry(), client.Timeout(5*time.Second))
	slowBefore := bs.srv.NATS().NumSlowConsumers()

	fmt.Fprintf(progress, "bench: flood: %d flooders of %d-byte commands (%s), bench %s, %s\n", o.Flooders, o.PayloadBytes, rateName(o.Rate), rep.BenchFor, o.Duration)
	body := []byte(`{"title":"` + strings.Repeat("x", max(o.PayloadBytes-12, 0)) + `"}`)
	stopProfile, err := handlers.StartCPUProfile(o.CPUProfile)
	if err != nil {
		return nil, err
	}
	defer stopProfile()
	runCtx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	var sent atomic.Int64
	var wg sync.WaitGroup
	for _, nc := range flooders {
		wg.Go(func() { flood(runCtx, nc, body, o.Rate, &sent) })
	}
	began := time.Now()
	var lat []time.Duration
	for runCtx.Err() == nil {
		start := time.Now()
		_, err := other.Command(runCtx, "goal.create", map[string]any{"title": "served"})
		switch {
		case err == nil:
			lat = append(lat, time.Since(start))
		case runCtx.Err() != nil: // the run ended while it waited
		default:
			rep.Other.Failed++
			rep.Other.LastError = err.Error()
		}
	}
	rep.Seconds = time.Since(began).Seconds()
	wg.Wait()
	rep.Sent = sent.Load()
	rep.FloodMiBps = float64(rep.Sent) * float64(len(body)) / rep.Seconds / (1 << 20)
	for _, nc := range flooders {
		if nc.IsClosed() {
			rep.Benched++
		}
	}
	rep.SlowConsumers = uint64(max(bs.srv.NATS().NumSlowConsumers()-slowBefore, 0)) //nolint:gosec // G115: not negative
	slices.Sort(lat)
	rep.Other.Answered = len(lat)
	rep.Other.PerSecond = float64(len(lat)) / rep.Seconds
	if len(lat) > 0 {
		rep.Other.P50, rep.Other.P99, rep.Other.Max = millis(lat[len(lat)/2]), millis(lat[len(lat)*99/100]), millis(lat[len(lat)-1])
	}
	return rep, nil
}

// flood publishes body as a goal.create request on nc, without waiting for
// answers, rate times a second (0: as fast as nc takes them) until ctx ends,
// counting what it sent.
func flood(ctx context.Context, nc *nats.Conn, body []byte, rate int, sent *atomic.Int64) {
	publish := func() bool {
		if ctx.Err() != nil || nc.PublishRequest("dwr.cmd.default.goal.create", nc.NewRespInbox(), body) != nil {
			return false
		}
		sent.Add(1)
		return true
	}
	if rate == 0 {
		for publish() {
		}
		return
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	began := time.Now()
	for n := 0; ; {
		for due := int(time.Since(began).Seconds() * float64(rate)); n < due; n++ { // what is due by now
			if !publish() {
				return
			}
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// rateName says a flooder's rate for people.
func rateName(rate int) string {
	if rate == 0 {
		return "each as fast as its connection takes them"
	}
	return fmt.Sprintf("each %d a second", rate)
}

// millis is d in milliseconds.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// PrintFlood prints a flood report for people.
func PrintFlood(w io.Writer, r *FloodReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "flood: %d flooders of %d-byte commands for %.1fs, bench %s, %d CPUs\n\n", r.Flooders, r.PayloadBytes, r.Seconds, r.BenchFor, r.CPUs)
	fmt.Fprintf(tw, "flood sent\t%d requests, %.0f MiB/s\n", r.Sent, r.FloodMiBps)
	fmt.Fprintf(tw, "flooders benched\t%d of %d\n", r.Benched, r.Flooders)
	fmt.Fprintf(tw, "connections cut as slow consumers\t%d\n", r.SlowConsumers)
	fmt.Fprintf(tw, "the other client\t%d answered (%.0f/s), %d failed, p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
		r.Other.Answered, r.Other.PerSecond, r.Other.Failed, r.Other.P50, r.Other.P99, r.Other.Max)
	if r.Other.LastError != "" {
		fmt.Fprintf(tw, "its last failure\t%s\n", r.Other.LastError)
	}
	return tw.Flush()
}
