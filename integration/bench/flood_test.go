package bench

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFloodBenchmark runs the flood benchmark briefly, for real: with the
// bench (flooders benched past eight times 64 KiB in a second: two of their
// commands, so that it shows under -race on a busy machine too, where a
// flooder sends some ten a second), every flooder is benched and the other
// client is answered, without a failure; the report prints for people.
func TestFloodBenchmark(t *testing.T) {
	rep, _ := mustRun(t, RunFlood, FloodOptions{Flooders: 2, PayloadBytes: 256 << 10, Duration: 1500 * time.Millisecond,
		CallerBytes: 64 << 10, Dir: t.TempDir()})
	require.NoError(t, rep.Err())
	require.Equal(t, "30s", rep.BenchFor)
	require.Positive(t, rep.Sent)
	require.Equal(t, 2, rep.Benched, "both flooders benched: %+v", rep)
	require.Zero(t, rep.SlowConsumers)
	require.Positive(t, rep.Other.Answered)
	require.Zero(t, rep.Other.Failed, rep.Other.LastError)
	require.GreaterOrEqual(t, rep.Other.P99, rep.Other.P50)
	out := printed(t, PrintFlood, rep)
	require.Contains(t, out, "flooders benched                   2 of 2")
	require.Contains(t, out, "the other client")
}

// With --rate each flooder sends that many requests a second, not more:
// small valid commands, which the service takes, from two flooders at 50 a
// second for a second and a half send at most 75 each.
func TestFloodBenchmarkPacesItsFlooders(t *testing.T) {
	rep, _ := mustRun(t, RunFlood, FloodOptions{Flooders: 2, PayloadBytes: 40, Rate: 50, Duration: 1500 * time.Millisecond,
		Dir: t.TempDir()})
	require.NoError(t, rep.Err())
	require.LessOrEqual(t, rep.Sent, int64(2*75+2), "%+v", rep)
	require.Positive(t, rep.Sent)
	require.Zero(t, rep.Benched)
	require.Positive(t, rep.Other.Answered)
}

// Bad options are refused before anything starts, naming the flag.
func TestFloodRejectsBadOptions(t *testing.T) {
	for _, c := range []struct {
		o    FloodOptions
		want string
	}{
		{FloodOptions{Flooders: 0, PayloadBytes: 1, Duration: time.Second}, "--flooders 0"},
		{FloodOptions{Flooders: 1, PayloadBytes: 0, Duration: time.Second}, "--payload-bytes 0"},
		{FloodOptions{Flooders: 1, PayloadBytes: 1, Duration: 0}, "--duration 0s"},
		{FloodOptions{Flooders: 1, PayloadBytes: 1, Duration: time.Second, CallerBytes: -1}, "--caller-bytes -1"},
		{FloodOptions{Flooders: 1, PayloadBytes: 1, Duration: time.Second, Rate: -1}, "--rate -1"},
	} {
		_, err := RunFlood(t.Context(), c.o, io.Discard)
		require.ErrorContains(t, err, c.want)
	}
}
