package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/integration/bench"
)

// TestBenchCommands runs `dwr bench` and `dwr bench chain3` as briefly as
// they go, as JSON and for people; what they measure is tested in
// integration/bench.
func TestBenchCommands(t *testing.T) {
	var out, errb bytes.Buffer
	code := Main([]string{"bench", "--clients", "1", "--duration", "100ms", "--fsyncs", "20", "--dir", t.TempDir(), "--json"},
		strings.NewReader(""), &out, &errb)
	require.Equal(t, exitOK, code, "stderr:\n%s", errb.String())
	var rep bench.Report
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep), out.String())
	require.Len(t, rep.Cells, 2)
	require.Equal(t, bench.AuthClosed, rep.Auth)
	require.Contains(t, errb.String(), "group, closed, sealed, 1 clients", "progress on stderr")

	out.Reset()
	code = Main([]string{"bench", "chain3", "--chains", "2", "--single", "1", "--workers", "1", "--concurrency", "2",
		"--submitters", "2", "--dir", t.TempDir()}, strings.NewReader(""), &out, &errb)
	require.Equal(t, exitOK, code, "stderr:\n%s", errb.String())
	require.Contains(t, out.String(), "CHAINS/S")
	require.Contains(t, out.String(), "service closed")
}

func TestBenchRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--clients", "0"},
		{"bench", "--duration", "0s"},
		{"bench", "--modes", "nope"},
		{"bench", "--compare-auth", "--modes", "baseline,group"},
		{"bench", "--compare-auth", "--rounds", "0"},
		{"bench", "chain3", "--warmup", "-1"},
		{"bench", "chain3", "--worker-sdk", "python"}, // not deployed
		{"bench", "chain3", "--worker-sdk", "cobol", "--deployed"},
		{"bench", "chain3", "--compare-workers", "python,typescript", "--deployed"}, // no go
	} {
		var out, errb bytes.Buffer
		require.NotEqual(t, exitOK, Main(args, strings.NewReader(""), &out, &errb), "%v", args)
	}
}
