package bench

import (
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/handlers/access"
)

// TestBenchEndToEnd runs the benchmark briefly, for real (embedded NATS
// with SyncAlways, the whole service in-process), and checks every cell
// measured something; then prints the report for people.
func TestBenchEndToEnd(t *testing.T) {
	rep, progress := mustRun(t, Run, Options{Clients: []int{1, 4}, Duration: 300 * time.Millisecond, Warmup: -1, Fsyncs: 200,
		Dir: t.TempDir(), Auth: true})
	require.NoError(t, rep.Err())
	require.NotNil(t, rep.Fsync)
	require.Positive(t, rep.Fsync.Syncs)
	require.Positive(t, rep.Fsync.PerSecond)
	require.Positive(t, rep.Fsync.P50)

	require.Len(t, rep.Cells, 4)
	seen := map[string]bool{}
	for _, c := range rep.Cells {
		seen[fmt.Sprintf("%s/%d", c.Mode, c.Clients)] = true
		require.Positive(t, c.Ops, "%s/%d", c.Mode, c.Clients)
		require.Positive(t, c.OpsPerSec, "%s/%d", c.Mode, c.Clients)
		require.Zero(t, c.Errors, "%s/%d: %s", c.Mode, c.Clients, c.FirstError)
		require.Positive(t, c.P50, "%s/%d", c.Mode, c.Clients)
		require.GreaterOrEqual(t, c.P99, c.P50)
		require.Positive(t, c.Records, "%s/%d", c.Mode, c.Clients)
		require.GreaterOrEqual(t, c.Batch, 1.0, "%s/%d", c.Mode, c.Clients)
		require.Positive(t, c.CPUPerOp, "%s/%d", c.Mode, c.Clients)
		if c.Mode == ModeGroup {
			require.Equal(t, AuthClosed, c.Auth, "the service runs as dwr serve does")
		}
	}
	require.Equal(t, AuthClosed, rep.Auth)
	require.Empty(t, rep.AuthCost)
	require.Equal(t, map[string]bool{"baseline/1": true, "baseline/4": true, "group/1": true, "group/4": true}, seen)
	require.Equal(t, 4, rep.Ratios.ThroughputClients)
	require.Positive(t, rep.Ratios.GroupOverBaseline)
	require.Equal(t, 1, rep.Ratios.LatencyClients)
	require.Positive(t, rep.Ratios.GroupP50OverFsyncP50)
	require.Contains(t, progress, "group, closed, sealed, 4 clients", "progress on stderr")

	human := printed(t, Print, rep)
	require.Contains(t, human, "group commit (dwr, closed, sealed)")
	require.Contains(t, human, "summary: group commit ÷ baseline ops/s at 4 clients")
}

// TestBenchCompareEncryption runs group mode, each goal.create carrying a
// task input to seal, with payloads sealed and plain alternating in two
// rounds, and pairs them: the cost of encryption.
func TestBenchCompareEncryption(t *testing.T) {
	rep, _ := mustRun(t, Run, Options{Clients: []int{2}, Duration: 200 * time.Millisecond, Warmup: -1, Fsyncs: 50,
		Dir: t.TempDir(), Auth: true, CompareEncryption: true, PayloadBytes: 512, Rounds: 2})
	require.Equal(t, AuthCompare, rep.Encryption)
	var order []string
	for _, c := range rep.Cells {
		require.Zero(t, c.Errors, c.FirstError)
		order = append(order, fmt.Sprintf("%d/%s/%s", c.Round, c.Auth, c.Encryption))
	}
	requireEncryptionCompared(t, order, rep.EncryptionCost, printed(t, Print, rep))
}

// TestBenchCompareAuth runs group mode closed and open, alternating in two
// rounds (closed first in the first, open first in the second), and checks
// the cost of authentication pairs the runs of each round.
func TestBenchCompareAuth(t *testing.T) {
	rep, _ := mustRun(t, Run, Options{Clients: []int{1, 2}, Duration: 200 * time.Millisecond, Warmup: -1, Fsyncs: 50,
		Dir: t.TempDir(), Auth: true, CompareAuth: true, Rounds: 2})
	require.Equal(t, AuthCompare, rep.Auth)
	require.Equal(t, 2, rep.Rounds)
	var order []string
	for _, c := range rep.Cells {
		require.Equal(t, ModeGroup, c.Mode, "the baseline has no service to authenticate")
		require.Zero(t, c.Errors, c.FirstError)
		require.Positive(t, c.OpsPerSec)
		require.Positive(t, c.CPUPerOp)
		order = append(order, fmt.Sprintf("%d/%d/%s", c.Round, c.Clients, c.Auth))
	}
	require.Equal(t, []string{"1/1/closed", "1/1/open", "1/2/closed", "1/2/open",
		"2/1/open", "2/1/closed", "2/2/open", "2/2/closed"}, order)
	require.Len(t, rep.AuthCost, 2)
	require.Equal(t, "1 client", rep.AuthCost[0].Load)
	for _, c := range rep.AuthCost {
		for _, s := range []RatioSet{c.PerS, c.P50, c.P99, c.CPU} {
			require.Len(t, s.Rounds, 2, c.Load)
			require.Positive(t, s.Median, c.Load)
			require.LessOrEqual(t, s.Min, s.Median)
			require.GreaterOrEqual(t, s.Max, s.Median)
		}
	}
	human := printed(t, Print, rep)
	require.Contains(t, human, "the cost of authentication: closed ÷ open")
	require.Contains(t, human, "group commit (dwr, open, sealed)")
}

func TestCostOf(t *testing.T) {
	c := costOf("x", [][2]figures{
		{{perS: 90, p50: 2, p99: 4, cpu: 110}, {perS: 100, p50: 1, p99: 4, cpu: 100}},
		{{perS: 80, p50: 3, p99: 4, cpu: 120}, {perS: 100, p50: 2, p99: 2, cpu: 100}},
		{{perS: 100, p50: 1, p99: 4, cpu: 100}, {perS: 100, p50: 1, p99: 0, cpu: 100}},
	})
	require.Equal(t, RatioSet{Rounds: []float64{0.9, 0.8, 1}, Median: 0.9, Min: 0.8, Max: 1}, c.PerS)
	require.Equal(t, RatioSet{Rounds: []float64{2, 1.5, 1}, Median: 1.5, Min: 1, Max: 2}, c.P50)
	require.Equal(t, RatioSet{Rounds: []float64{1, 2}, Median: 1.5, Min: 1, Max: 2}, c.P99, "an open figure of 0 is left out")
	require.Equal(t, [2]bool{false, true}, authOrder(0))
	require.Equal(t, [2]bool{true, false}, authOrder(1))
}

// TestBenchServiceIsClosed checks the benchmarks' service is closed as dwr
// serve's is: a connection without a credential is refused, and a client's
// command is recorded as sent by the member it joined as; open, it is the
// anonymous admin's.
func TestBenchServiceIsClosed(t *testing.T) {
	for _, open := range []bool{false, true} {
		t.Run(authName(open), func(t *testing.T) {
			bs, err := startService(t.Context(), t.TempDir(), setup{open: open}, io.Discard)
			require.NoError(t, err)
			defer bs.close()
			if nc, err := bs.srv.Connect(); !open {
				require.Error(t, err, "a connection without a credential")
			} else {
				require.NoError(t, err)
				nc.Close()
			}
			nc, err := bs.join(t.Context(), "bench-client-0", domain.RoleClient)
			require.NoError(t, err)
			defer nc.Close()
			_, err = newClient(nc).Command(t.Context(), "goal.create", []byte(`{"title":"t"}`), client.CommandID("c1"))
			require.NoError(t, err)
			actor := ""
			require.NoError(t, bs.svc.Log().Read(t.Context(), 1, func(_ uint64, rec []byte) error {
				cm, err := eventstore.DecodeCommit(rec)
				if err != nil {
					return err
				}
				for _, r := range cm.Results {
					if r.CommandID == "c1" {
						actor = r.Actor
					}
				}
				return nil
			}))
			want := "bench-client-0"
			if open {
				want = access.AnonymousUser
			}
			require.Equal(t, want, actor)
		})
	}
}

func TestBenchRejectsBadOptions(t *testing.T) {
	ok := Options{Clients: []int{1}, Duration: time.Second, Fsyncs: 1, Rounds: 1}
	for _, c := range []struct {
		change func(*Options)
		want   string
	}{
		{func(o *Options) { o.Clients = []int{0} }, "--clients: 0 is not in 1..4096"},
		{func(o *Options) { o.Duration = 0 }, "--duration must be positive"},
		{func(o *Options) { o.Modes = []string{"nope"} }, `--modes: unknown mode "nope"`},
		{func(o *Options) { o.CompareAuth, o.Modes = true, []string{ModeBaseline, ModeGroup} }, "--compare-auth and --compare-encryption measure group mode only"},
		{func(o *Options) { o.CompareAuth, o.Rounds = true, 0 }, "--rounds must be at least 1"},
	} {
		o := ok
		c.change(&o)
		_, err := Run(t.Context(), o, io.Discard)
		require.ErrorContains(t, err, c.want)
	}
}

func TestPercentilesAndFormat(t *testing.T) {
	require.Equal(t, [3]float64{}, percentiles(nil))
	require.Equal(t, "1,234,568", thousands(1234567.6))
	require.Equal(t, "999", thousands(999))
	require.Equal(t, "0.42", ms(0.4167))
}
