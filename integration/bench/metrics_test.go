package bench

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/handlers/servicetest"
)

// After a chain-3 run with observability on (three sequential tasks per
// chain, executed by SDK workers), the service's /metrics counts what was
// run: a goal.create per chain (its plan inline), each task claimed and
// succeeded once, nothing refused; records appended in batches whose
// requests add up to at least the commands; the queue empty again.
func TestChain3Metrics(t *testing.T) {
	const chains = 8
	var m servicetest.Metrics
	o := ChainOptions{Chains: []int{chains}, Workers: 2, Concurrency: 4, Submitters: 4, Dir: t.TempDir(), Auth: true,
		CompareObservability: true, Rounds: 1}
	o.afterRun = func(bs *service) {
		if bs.svc.Metrics() == nil {
			return // the run with observability off
		}
		srv := httptest.NewServer(bs.svc.Metrics())
		defer srv.Close()
		// The workers acknowledge their items after reporting: the queue
		// empties soon after the last chain ends.
		servicetest.Eventually(t, 10*time.Second, func() bool {
			m = servicetest.Scrape(t, srv.URL+"/metrics")
			pending, ok1 := m.Value("dwr_queue_pending", "workspace", "default", "queue", "chain")
			inFlight, ok2 := m.Value("dwr_queue_in_flight", "workspace", "default", "queue", "chain")
			return ok1 && ok2 && pending == 0 && inFlight == 0
		})
	}
	rep, progress := mustRun(t, RunChain, o)
	require.NoError(t, rep.Err(), progress)
	require.NotNil(t, m, "the run with observability on was scraped")

	count := func(command, outcome string) float64 {
		v, _ := m.Value("dwr_commands_total", "command", command, "outcome", outcome)
		return v
	}
	require.Equal(t, float64(chains), count("goal.create", "ok"))
	require.Equal(t, 0.0, count("plan.submit", "ok"), "the chains' plans go with their goal.create")
	require.Equal(t, float64(3*chains), count("task.succeed", "ok"), "each task succeeded once")
	claims := count("task.claim", "ok")
	require.LessOrEqual(t, claims, float64(3*chains), "no task was claimed twice")
	handoffs, _ := m.Value("dwr_handoffs_total")
	require.LessOrEqual(t, handoffs, float64(2*chains), "a chain's second and third tasks at most were handed")
	require.Positive(t, handoffs, "the SDK workers take the handoff")
	for _, outcome := range m.LabelValues("dwr_commands_total", "outcome") {
		if outcome != "ok" {
			v, _ := m.Value("dwr_commands_total", "outcome", outcome)
			require.Zero(t, v, "commands refused %s", outcome)
		}
	}
	appends, _ := m.Value("dwr_log_appends_total")
	require.GreaterOrEqual(t, appends, 1.0)
	batches, requests, ok := m.Histogram("dwr_commit_batch_requests")
	require.True(t, ok)
	require.LessOrEqual(t, float64(batches), appends, "a batch is an append")
	require.GreaterOrEqual(t, requests, float64(chains)+claims+float64(3*chains), "every accepted command was in a batch")
	commits, _, _ := m.Histogram("dwr_commit_seconds")
	require.Equal(t, batches, commits)
	lag, ok := m.Value("dwr_views_lag_records")
	require.True(t, ok)
	require.GreaterOrEqual(t, lag, 0.0)
	t.Logf("appends %.0f, batches %d, requests %.0f, claims %.0f, member.add %.0f", appends, batches, requests, claims, count("member.add", "ok"))
}
