package ecosystem_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"

	"github.com/actionledger/actionledger/internal/limiter"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// contractMetrics is CONTRACT "Metrics" plus the documented additions (docs/metrics.md): type and the exact
// label names. Labels are low-cardinality: a destination, a result class, a decision, a phase or a reason.
var contractMetrics = map[string]struct {
	typ    dto.MetricType
	labels []string
}{
	"actionledger_attempts_total":                  {dto.MetricType_COUNTER, []string{"destination", "result"}},
	"actionledger_retries_total":                   {dto.MetricType_COUNTER, []string{"destination"}},
	"actionledger_replays_total":                   {dto.MetricType_COUNTER, nil},
	"actionledger_fingerprint_conflicts_total":     {dto.MetricType_COUNTER, nil},
	"actionledger_outcome_unknown":                 {dto.MetricType_GAUGE, nil},
	"actionledger_exhausted_total":                 {dto.MetricType_COUNTER, []string{"destination"}},
	"actionledger_manual_resolutions_total":        {dto.MetricType_COUNTER, []string{"decision"}},
	"actionledger_reconciliation_duration_seconds": {dto.MetricType_HISTOGRAM, nil},
	"actionledger_action_duration_seconds":         {dto.MetricType_HISTOGRAM, []string{"phase"}},
	"actionledger_attempt_duration_seconds":        {dto.MetricType_HISTOGRAM, []string{"destination"}},
	"actionledger_delayed_total":                   {dto.MetricType_COUNTER, []string{"destination", "reason"}},
	"actionledger_tombstone_store_up":              {dto.MetricType_GAUGE, []string{"store"}},
	"actionledger_tombstone_store_errors_total":    {dto.MetricType_COUNTER, []string{"store", "op"}},
}

var destinationLabel = regexp.MustCompile(`^(Destination/[a-z0-9.-]+/[a-z0-9.-]+|ClusterDestination/[a-z0-9.-]+)$`)

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scraping %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scraping %s: HTTP %d", url, resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing the scrape: %v", err)
	}
	return fams
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// sampleValue sums the counter or gauge samples of fam whose labels include want.
func sampleValue(fam *dto.MetricFamily, want map[string]string) float64 {
	var v float64
	for _, m := range fam.GetMetric() {
		match := true
		for k, val := range want {
			if labelValue(m, k) != val {
				match = false
			}
		}
		if match {
			v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return v
}

func checkMetrics(t *testing.T, run *realPhases) {
	// The OutcomeUnknown gauge is refreshed by the leader every 15s: poll the endpoint until it counts ours.
	var fams map[string]*dto.MetricFamily
	deadline := time.Now().Add(45 * time.Second)
	for {
		fams = scrape(t, run.metricsURL)
		if f := fams["actionledger_outcome_unknown"]; f != nil && sampleValue(f, nil) >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("actionledger_outcome_unknown never counted the OutcomeUnknown action: %v", fams["actionledger_outcome_unknown"])
		}
		time.Sleep(500 * time.Millisecond)
	}

	for name, want := range contractMetrics {
		fam := fams[name]
		if fam == nil {
			t.Errorf("%s is missing from the scrape after a run that exercised it", name)
			continue
		}
		if fam.GetType() != want.typ {
			t.Errorf("%s has type %s, want %s", name, fam.GetType(), want.typ)
		}
		for _, m := range fam.GetMetric() {
			got := make([]string, 0, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				got = append(got, l.GetName())
				v := l.GetValue()
				if strings.Contains(v, "xa-") || strings.Contains(v, run.ns+"/xa") {
					t.Errorf("%s label %s=%q carries an action's name: unbounded cardinality", name, l.GetName(), v)
				}
				if l.GetName() == "destination" && !destinationLabel.MatchString(v) {
					t.Errorf("%s destination label %q is not Destination/<ns>/<name> or ClusterDestination/<name>", name, v)
				}
			}
			slices.Sort(got)
			if fmt.Sprint(got) != fmt.Sprint(want.labels) && (len(got) != 0 || len(want.labels) != 0) {
				t.Errorf("%s has labels %v, want %v", name, got, want.labels)
			}
		}
	}

	dest := func(name string) string { return "Destination/" + run.ns + "/" + name }
	for _, c := range []struct {
		metric string
		labels map[string]string
	}{
		{"actionledger_attempts_total", map[string]string{"destination": dest("payments"), "result": "Success"}},
		{"actionledger_attempts_total", map[string]string{"destination": dest("payments"), "result": "Rejected"}},
		{"actionledger_attempts_total", map[string]string{"destination": dest("slow"), "result": "Uncertain"}},
		{"actionledger_retries_total", map[string]string{"destination": dest("slow")}},
		{"actionledger_fingerprint_conflicts_total", nil},
		{"actionledger_exhausted_total", map[string]string{"destination": dest("payments")}},
		{"actionledger_manual_resolutions_total", map[string]string{"decision": "retry"}},
		{"actionledger_delayed_total", map[string]string{"destination": dest("busy"), "reason": "RateLimited"}},
	} {
		if fams[c.metric] == nil || sampleValue(fams[c.metric], c.labels) < 1 {
			t.Errorf("%s%v = 0 after a run that must have counted it", c.metric, c.labels)
		}
	}
	var attemptsObserved uint64
	for _, m := range fams["actionledger_attempt_duration_seconds"].GetMetric() {
		if labelValue(m, "destination") == dest("slow") {
			attemptsObserved += m.GetHistogram().GetSampleCount()
		}
	}
	if attemptsObserved < 2 {
		t.Errorf("actionledger_attempt_duration_seconds{destination=%q} observed %d attempts, want >= 2", dest("slow"), attemptsObserved)
	}

	t.Run("rules", func(t *testing.T) { checkRules(t, fams) })
	t.Run("dashboard", func(t *testing.T) { checkDashboard(t, fams) })
}

// prometheusRule is the part of a PrometheusRule the checks read.
type prometheusRule struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   map[string]any `json:"metadata"`
	Spec       struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

func checkRules(t *testing.T, fams map[string]*dto.MetricFamily) {
	root := envtestutil.RepoRoot()
	b, err := os.ReadFile(filepath.Join(root, "config", "prometheus", "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	pr := &prometheusRule{}
	if err := yaml.UnmarshalStrict(b, pr); err != nil {
		t.Fatalf("rules.yaml does not parse: %v", err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		t.Errorf("rules.yaml is %s %s, want monitoring.coreos.com/v1 PrometheusRule", pr.APIVersion, pr.Kind)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	alerts := map[string]string{}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("rule %+v lacks alert, expr, severity or summary", r)
			}
			alerts[r.Alert] = r.Expr
			checkExpr(t, "alert "+r.Alert, r.Expr, fams)
			if !strings.Contains(string(doc), "### "+r.Alert) {
				t.Errorf("docs/metrics.md has no runbook section \"### %s\"", r.Alert)
			}
			if !strings.HasSuffix(r.Annotations["runbook_url"], "#"+strings.ToLower(r.Alert)) {
				t.Errorf("%s runbook_url %q does not point at its docs/metrics.md section", r.Alert, r.Annotations["runbook_url"])
			}
			if _, err := model.ParseDuration(orZero(r.For)); err != nil {
				t.Errorf("%s: for %q: %v", r.Alert, r.For, err)
			}
		}
	}
	// The alerts the issue asks for, on the right signals.
	for alert, wants := range map[string][]string{
		"ActionledgerFingerprintConflict":  {"increase(actionledger_fingerprint_conflicts_total", "> 0"},
		"ActionledgerOutcomeUnknown":       {"actionledger_outcome_unknown", "> 0"},
		"ActionledgerExhaustedRateRising":  {"rate(actionledger_exhausted_total"},
		"ActionledgerRetryBudgetExhausted": {`actionledger_delayed_total{reason="` + string(limiter.ReasonRetryBudgetExhausted) + `"}`, "> 0"},
	} {
		expr, ok := alerts[alert]
		if !ok {
			t.Errorf("alert %s is missing", alert)
			continue
		}
		for _, w := range wants {
			if !strings.Contains(expr, w) {
				t.Errorf("alert %s expr %q does not contain %q", alert, expr, w)
			}
		}
	}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "ActionledgerOutcomeUnknown" && r.For != "15m" {
				t.Errorf("ActionledgerOutcomeUnknown for = %q, want 15m", r.For)
			}
		}
	}
}

func orZero(d string) string {
	if d == "" {
		return "0s"
	}
	return d
}

var (
	metricRef = regexp.MustCompile(`\bactionledger_[a-z_]+`)
	matchers  = regexp.MustCompile(`(actionledger_[a-z_]+)\{([^}]*)\}`)
	matcher   = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"\s*$`)
	grouping  = regexp.MustCompile(`\b(?:by|on|without|ignoring)\s*\(([^)]*)\)`)
)

// family resolves a series name in an expression to its metric family (histogram series end in
// _bucket, _sum or _count).
func family(name string, fams map[string]*dto.MetricFamily) (*dto.MetricFamily, bool) {
	if f, ok := fams[name]; ok {
		return f, false
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if f, ok := fams[base]; ok && f.GetType() == dto.MetricType_HISTOGRAM {
				return f, suffix == "_bucket"
			}
		}
	}
	return nil, false
}

func familyLabels(f *dto.MetricFamily, bucket bool) map[string]bool {
	out := map[string]bool{}
	if bucket {
		out["le"] = true
	}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			out[l.GetName()] = true
		}
	}
	return out
}

// checkExpr checks that every metric an expression names exists in the scrape and that every label it
// matches or groups by exists on those metrics. Label values matched with = must have been seen.
func checkExpr(t *testing.T, what, expr string, fams map[string]*dto.MetricFamily) {
	t.Helper()
	refs := metricRef.FindAllString(expr, -1)
	if len(refs) == 0 {
		t.Errorf("%s: expr %q names no actionledger metric", what, expr)
	}
	labels := map[string]bool{}
	for _, ref := range refs {
		f, bucket := family(ref, fams)
		if f == nil {
			t.Errorf("%s: %s does not exist in the manager's metrics", what, ref)
			continue
		}
		for l := range familyLabels(f, bucket) {
			labels[l] = true
		}
	}
	for _, m := range matchers.FindAllStringSubmatch(expr, -1) {
		f, bucket := family(m[1], fams)
		if f == nil {
			continue
		}
		have := familyLabels(f, bucket)
		for part := range strings.SplitSeq(m[2], ",") {
			if strings.TrimSpace(part) == "" {
				continue
			}
			mm := matcher.FindStringSubmatch(part)
			if mm == nil {
				t.Errorf("%s: cannot read matcher %q", what, part)
				continue
			}
			if !have[mm[1]] {
				t.Errorf("%s: %s has no label %q", what, m[1], mm[1])
			}
			if mm[2] == "=" && !strings.Contains(mm[3], "$") && mm[1] != "le" {
				if _, ok := labelValues(f, mm[1])[mm[3]]; !ok && mm[1] != "reason" {
					t.Errorf("%s: %s{%s=%q} was never emitted", what, m[1], mm[1], mm[3])
				}
			}
		}
	}
	for _, g := range grouping.FindAllStringSubmatch(expr, -1) {
		for l := range strings.SplitSeq(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !labels[l] {
				t.Errorf("%s: groups by %q, which none of %v carries", what, l, refs)
			}
		}
	}
}

func labelValues(f *dto.MetricFamily, name string) map[string]bool {
	out := map[string]bool{}
	for _, m := range f.GetMetric() {
		out[labelValue(m, name)] = true
	}
	return out
}

// dashboard is the part of a Grafana dashboard the checks read.
type dashboard struct {
	Title  string `json:"title"`
	UID    string `json:"uid"`
	Panels []struct {
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func checkDashboard(t *testing.T, fams map[string]*dto.MetricFamily) {
	b, err := os.ReadFile(filepath.Join(envtestutil.RepoRoot(), "config", "grafana", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	d := &dashboard{}
	if err := json.Unmarshal(b, d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	used := map[string]bool{}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			checkExpr(t, "panel "+p.Title, q.Expr, fams)
			for _, ref := range metricRef.FindAllString(q.Expr, -1) {
				if f, _ := family(ref, fams); f != nil {
					used[f.GetName()] = true
				}
			}
		}
	}
	// Attempts, retries, replays, conflicts, unknowns, exhausted and latencies (per destination).
	for _, m := range []string{
		"actionledger_attempts_total", "actionledger_retries_total", "actionledger_replays_total",
		"actionledger_fingerprint_conflicts_total", "actionledger_outcome_unknown", "actionledger_exhausted_total",
		"actionledger_attempt_duration_seconds", "actionledger_action_duration_seconds",
		"actionledger_manual_resolutions_total", "actionledger_delayed_total",
	} {
		if !used[m] {
			t.Errorf("no dashboard panel shows %s", m)
		}
	}
}
