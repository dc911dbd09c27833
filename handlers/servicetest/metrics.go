package servicetest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics are the metric families of one scrape of a Prometheus endpoint,
// by name, parsed from its text format.
type Metrics map[string]*dto.MetricFamily

// Scrape GETs url (a /metrics endpoint) and parses what it answers; it
// fails the test unless the answer is a 200 in Prometheus's text format.
func Scrape(t testing.TB, url string) Metrics {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("servicetest: scrape %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("servicetest: scrape %s: %s: %s", url, resp.Status, b)
	}
	return parseMetrics(t, resp.Body)
}

// ScrapeHandler is Scrape of the handler h (Service.Metrics), served in
// this process without a listener.
func ScrapeHandler(t testing.TB, h http.Handler) Metrics {
	t.Helper()
	if h == nil {
		t.Fatal("servicetest: no metrics handler: Config.Metrics is nil")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("servicetest: scrape: %d: %s", rec.Code, rec.Body)
	}
	return parseMetrics(t, rec.Body)
}

func parseMetrics(t testing.TB, r io.Reader) Metrics {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		t.Fatalf("servicetest: the scrape does not parse: %v", err)
	}
	return fams
}

// series returns the series of family name whose labels include labels
// (pairs of name and value).
func (m Metrics) series(name string, labels ...string) []*dto.Metric {
	f := m[name]
	if f == nil {
		return nil
	}
	var out []*dto.Metric
	for _, s := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range s.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
				match = false
				break
			}
		}
		if match {
			out = append(out, s)
		}
	}
	return out
}

// Value returns the sum of the values of the counter or gauge series of
// name whose labels include labels (pairs of name and value), and whether
// there is any.
func (m Metrics) Value(name string, labels ...string) (float64, bool) {
	ss := m.series(name, labels...)
	v := 0.0
	for _, s := range ss {
		switch {
		case s.GetCounter() != nil:
			v += s.GetCounter().GetValue()
		case s.GetGauge() != nil:
			v += s.GetGauge().GetValue()
		case s.GetUntyped() != nil:
			v += s.GetUntyped().GetValue()
		}
	}
	return v, len(ss) > 0
}

// Histogram returns the sample count and sum of the histogram series of
// name whose labels include labels, added up, and whether there is any.
func (m Metrics) Histogram(name string, labels ...string) (count uint64, sum float64, ok bool) {
	for _, s := range m.series(name, labels...) {
		if h := s.GetHistogram(); h != nil {
			count += h.GetSampleCount()
			sum += h.GetSampleSum()
			ok = true
		}
	}
	return count, sum, ok
}

// LabelValues returns the values label takes among the series of name.
func (m Metrics) LabelValues(name, label string) []string {
	var out []string
	for _, s := range m.series(name) {
		for _, l := range s.GetLabel() {
			if l.GetName() == label {
				out = append(out, l.GetValue())
			}
		}
	}
	return out
}
