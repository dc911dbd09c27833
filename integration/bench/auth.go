package bench

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// How a benchmark's service runs.
const (
	AuthClosed  = "closed"  // as dwr serve runs by default: accounts, credentials, roles
	AuthOpen    = "open"    // an embedded server without accounts, every request the anonymous admin's
	AuthCompare = "compare" // both, alternating in rounds
)

// authName returns the name of a service that is open or not.
// How a benchmark's service stores payloads (ChainOptions.Plain).
const (
	EncryptionSealed = "sealed" // as dwr serve runs by default
	EncryptionPlain  = "plain"
)

// Whether a benchmark's service keeps metrics and makes spans
// (ChainOptions.CompareObservability).
const (
	// ObservabilityOff: no metrics registry, no-op tracers (the
	// handlers' and the SDK's defaults).
	ObservabilityOff = "off"
	// ObservabilityOn: the service's metrics on a registry of its own
	// (handlers.NewMetricsRegistry, as dwr serve --http keeps them),
	// gathered and encoded as a scrape every ScrapeEvery, and spans of the
	// service and the workers made by an OpenTelemetry SDK tracer provider
	// that samples every trace and exports nowhere.
	ObservabilityOn = "on"
)

// ScrapeEvery is how often a benchmark scrapes the metrics of a service
// with observability on: more often than Prometheus's usual 15 s, so that
// the scrapes' cost is counted, not hidden.
const ScrapeEvery = time.Second

func observabilityName(on bool) string {
	if on {
		return ObservabilityOn
	}
	return ObservabilityOff
}

// comparison is what a run compares, if anything: authentication
// (closed ÷ open), encryption (sealed ÷ plain) or observability (on ÷
// off), with how the service otherwise runs.
type comparison struct {
	auth, encryption, observability bool   // what is compared
	closed, plain                   bool   // how the service runs otherwise
	workers                         string // the workers' SDK
}

// setup is how a run of the comparison's runs: b, the variant without what
// is measured (open, plain, or observability off).
func (c comparison) setup(b bool) setup {
	return setup{open: !c.closed || (c.auth && b), plain: c.plain || (c.encryption && b), observe: c.observability && !b, workers: c.workers}
}

// mark names what is compared in a report's auth, encryption or
// observability.
func (c comparison) mark(auth, encryption, observability *string) {
	switch {
	case c.auth:
		*auth = AuthCompare
	case c.observability:
		*observability = AuthCompare
	default:
		*encryption = AuthCompare
	}
}

func encryptionName(plain bool) string {
	if plain {
		return EncryptionPlain
	}
	return EncryptionSealed
}

func authName(open bool) string {
	if open {
		return AuthOpen
	}
	return AuthClosed
}

// authOrder returns, for round r (from 0), whether each of the round's two
// runs is open: closed then open in even rounds, open then closed in odd
// ones, so that neither variant always runs first (A B, B A, A B, ...).
func authOrder(r int) [2]bool {
	if r%2 == 0 {
		return [2]bool{false, true}
	}
	return [2]bool{true, false}
}

// figures are what the cost of authentication is computed from: one run's
// throughput, latency and CPU per operation (or per chain).
type figures struct {
	perS, p50, p99, cpu float64
}

// RatioSet is one figure of the closed service divided by the open one's,
// for each round (both measured in that round, one after the other), with
// their median, minimum and maximum.
type RatioSet struct {
	Rounds []float64 `json:"rounds"`
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
}

// AuthCost is what authentication costs at one load: the closed service's
// figures divided by the open one's, round by round. Throughput below 1,
// latency and CPU above 1, are the cost.
type AuthCost struct {
	Load string   `json:"load"`
	PerS RatioSet `json:"per_s"`
	P50  RatioSet `json:"p50"`
	P99  RatioSet `json:"p99"`
	CPU  RatioSet `json:"cpu"`
}

// costOf returns the cost of authentication at load from pairs of runs, one
// pair per round: [0] closed, [1] open.
func costOf(load string, pairs [][2]figures) AuthCost {
	set := func(f func(figures) float64) RatioSet {
		var s RatioSet
		for _, p := range pairs {
			if d := f(p[1]); d > 0 {
				s.Rounds = append(s.Rounds, round2(f(p[0])/d))
			}
		}
		if len(s.Rounds) == 0 {
			return s
		}
		sorted := slices.Sorted(slices.Values(s.Rounds))
		s.Min, s.Max = sorted[0], sorted[len(sorted)-1]
		if n := len(sorted); n%2 == 1 {
			s.Median = sorted[n/2]
		} else {
			s.Median = round2((sorted[n/2-1] + sorted[n/2]) / 2)
		}
		return s
	}
	return AuthCost{Load: load,
		PerS: set(func(f figures) float64 { return f.perS }),
		P50:  set(func(f figures) float64 { return f.p50 }),
		P99:  set(func(f figures) float64 { return f.p99 }),
		CPU:  set(func(f figures) float64 { return f.cpu })}
}

// printAuthCost prints the cost of authentication, one load a row: the
// median ratio of each figure with its range over the rounds. perS and cpu
// name the throughput and CPU columns.
func printAuthCost(w io.Writer, perS, cpu string, costs []AuthCost) error {
	return printCost(w, "the cost of authentication: closed ÷ open", perS, cpu, costs)
}

// printCost prints costs, the ratios of what, as a table.
func printCost(w io.Writer, what, perS, cpu string, costs []AuthCost) error {
	if len(costs) == 0 {
		return nil
	}
	rounds := len(costs[0].PerS.Rounds)
	fmt.Fprintf(w, "\n%s, measured in the same round; median of %d rounds [min–max]\n", what, rounds)
	cell := func(s RatioSet) string {
		if len(s.Rounds) == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f [%.2f–%.2f]", s.Median, s.Min, s.Max)
	}
	rows := make([][]string, len(costs))
	for i, c := range costs {
		rows[i] = []string{c.Load, cell(c.PerS), cell(c.P50), cell(c.P99), cell(c.CPU)}
	}
	return table(w, []string{"LOAD", perS, "P50", "P99", cpu}, rows)
}

// pairRounds pairs, round by round, the closed and the open figures of the
// cells that match (pick's last result): [0] closed, [1] open. A round
// missing either is left out.
func pairRounds[C any](rounds int, cells []C, pick func(C) (round int, auth string, f figures, match bool)) [][2]figures {
	var pairs [][2]figures
	for r := 1; r <= rounds; r++ {
		var p [2]figures
		var got [2]bool
		for _, c := range cells {
			round, auth, f, match := pick(c)
			if !match || round != r {
				continue
			}
			i := 0
			if auth == AuthOpen {
				i = 1
			}
			p[i], got[i] = f, true
		}
		if got[0] && got[1] {
			pairs = append(pairs, p)
		}
	}
	return pairs
}
