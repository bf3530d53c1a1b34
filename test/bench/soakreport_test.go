package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// SoakResult is one soak run: its figures over the steady window, the figures derived from them for the real
// retention, and every sample.
type SoakResult struct {
	Shards          int     `json:"shards"`
	Rate            float64 `json:"offeredRatePerSecond"`
	DurationSeconds float64 `json:"durationSeconds"`
	Store           string  `json:"tombstoneStore"`
	Destination     string  `json:"destination"`
	Compressions    string  `json:"timeCompression"`
	Created         int64   `json:"created"`
	CreateFailed    int64   `json:"createsFailed"`
	// Succeeded and SucceededByShard are the actions this process's watch saw Succeeded, after the drain.
	Succeeded        int64   `json:"succeeded"`
	SucceededByShard []int64 `json:"succeededByShard"`
	// Drained says whether every created action ended within 2 minutes of the last create.
	Drained bool `json:"drained"`
	// Failed counts live actions in a terminal phase other than Succeeded at the end (should be 0).
	Failed int `json:"failed"`
	// Duplicates are keys the destination applied more than once (must be 0).
	Duplicates int `json:"duplicates"`
	// Replayed are answers the destination replayed from its dedup store (safe destination only).
	Replayed            int   `json:"replayed"`
	DestinationRequests int   `json:"destinationRequests"`
	Defrags             int64 `json:"defragmentations"`
	// DestinationShare is each manager's actionledger_shard_destination_share at the end (1/n of the limits).
	DestinationShare []float64 `json:"destinationShare"`
	// ManagerSucceeded is each manager's own Succeeded count at the end (actionledger_action_duration_seconds_count).
	ManagerSucceeded []float64 `json:"managerSucceeded"`
	// StoredPerLiveAction is etcd's key + value bytes per ExternalAction at the end; DBPerStored is the etcd
	// database after a compaction and defragmentation at the end over all stored bytes (bbolt's overhead).
	StoredPerLiveAction float64  `json:"etcdBytesPerLiveAction"`
	DBPerStored         float64  `json:"etcdDBBytesPerStoredByte"`
	PG                  *PGSizes `json:"pg,omitempty"`
	// APIPerAction are the API server's requests per action that succeeded over the steady window, by kind
	// (apiserver_request_total: writes of every resource, GETs of single objects).
	APIPerAction *Writes      `json:"apiRequestsPerAction,omitempty"`
	Steady       SoakSteady   `json:"steady"`
	Derived      SoakDerived  `json:"derived"`
	Samples      []SoakSample `json:"samples"`
}

// SoakSteady are the figures over the steady window: the samples whose whole period lies between
// soakConfig.Warm and the last create. Means unless named otherwise; CPU in cores; sizes in MiB. PGRowsMax and
// PGMaxMiB are over the whole run.
type SoakSteady struct {
	FromSeconds     float64 `json:"fromSeconds"`
	ToSeconds       float64 `json:"toSeconds"`
	Samples         int     `json:"samples"`
	OfferedPerSec   float64 `json:"offeredPerSecond"`
	SucceededPerSec float64 `json:"succeededPerSecond"`
	// ManagerSucceededPerSec is the managers' own Succeeded rate (SoakSample.ManagerSucceededPerSec).
	ManagerSucceededPerSec float64 `json:"managerSucceededPerSecond"`
	// P50Ms and P99Ms are the medians of the samples' percentiles; P99MaxMs the largest; the halves are the
	// medians of the first and the second half of the window.
	P50Ms           float64 `json:"p50Ms"`
	P99Ms           float64 `json:"p99Ms"`
	P99MaxMs        float64 `json:"p99MaxMs"`
	P99FirstHalfMs  float64 `json:"p99FirstHalfMs"`
	P99SecondHalfMs float64 `json:"p99SecondHalfMs"`
	// EtcdDB* are etcd_mvcc_db_total_size_in_bytes (the file the quota counts), the largest in the window and
	// in each half; EtcdInUseMaxMiB the largest in use.
	EtcdDBMaxMiB        float64   `json:"etcdDBMaxMiB"`
	EtcdDBFirstHalfMiB  float64   `json:"etcdDBFirstHalfMaxMiB"`
	EtcdDBSecondHalfMiB float64   `json:"etcdDBSecondHalfMaxMiB"`
	EtcdInUseMaxMiB     float64   `json:"etcdInUseMaxMiB"`
	LiveMean            float64   `json:"liveActions"`
	PendingMax          int64     `json:"pendingMax"`
	PendingEnd          int64     `json:"pendingEnd"`
	QueueDepthMax       float64   `json:"queueDepthMax"`
	ManagerCPU          []float64 `json:"managerCPUCores"`
	APIServerCPU        float64   `json:"apiserverCPUCores"`
	EtcdCPU             float64   `json:"etcdCPUCores"`
	BenchCPU            float64   `json:"benchCPUCores"`
	// *MsPerAction are CPU milliseconds per succeeded action (managers summed).
	ManagerMsPerAction   float64 `json:"managerCPUMsPerAction"`
	APIServerMsPerAction float64 `json:"apiserverCPUMsPerAction"`
	EtcdMsPerAction      float64 `json:"etcdCPUMsPerAction"`
	// ManagerRSS* are each manager's RSS at the window's first and last sample; APIServerRSSMaxMiB the largest.
	ManagerRSSFirstMiB []float64 `json:"managerRSSFirstMiB"`
	ManagerRSSLastMiB  []float64 `json:"managerRSSLastMiB"`
	APIServerRSSMaxMiB float64   `json:"apiserverRSSMaxMiB"`
	DestPeakPerSec     int       `json:"destinationPeakRequestsPerSecond"`
	PGRowsMax          int64     `json:"pgRowsMax"`
	PGMaxMiB           float64   `json:"pgMaxMiB"`
	// Sustained: the succeeded rate kept up with the offered rate (>= 97 %) and the backlog at the window's end
	// was at most 10 s of arrivals. Flat: p99's second half at most 1.5 × its first half + 100 ms, and the etcd
	// file's second-half maximum at most 1.2 × its first-half maximum; judged (FlatJudged) only when the window
	// spans two compaction intervals, so that each half holds a peak of etcd's saw tooth.
	Sustained  bool `json:"sustained"`
	Flat       bool `json:"flat"`
	FlatJudged bool `json:"flatJudged"`
}

// SoakDerived are figures for the real retention, derived from the measured ones (never measured).
type SoakDerived struct {
	// LiveActions is rate × the real ttlAfterFinished.
	LiveActions float64 `json:"liveActions"`
	// EtcdDBMiB is the measured largest etcd file plus the live actions the real TTL adds:
	// (LiveActions − measured live) × StoredPerLiveAction × DBPerStored.
	EtcdDBMiB float64 `json:"etcdDBMiB"`
	// TombstoneRows is rate × the real tombstoneTTL; PGGiB is that × the compact bytes per row (after VACUUM
	// FULL) × 1.2 (autovacuum's default 20 % of dead rows).
	TombstoneRows float64 `json:"tombstoneRows"`
	PGGiB         float64 `json:"pgGiB"`
}

// PerDay is the offered rate in actions a day.
func (r SoakResult) PerDay() float64 { return r.Rate * 86400 }

// summarize fills r.Steady and r.Derived from r.Samples (r's end-of-run figures must be set).
func summarize(r *SoakResult, cfg soakConfig) {
	var win []SoakSample
	for _, s := range r.Samples {
		if steadySample(s, cfg) && s.AtSeconds <= cfg.Duration.Seconds()+cfg.Sample.Seconds()/2 {
			win = append(win, s)
		}
	}
	st := &r.Steady
	if len(win) == 0 {
		return
	}
	st.FromSeconds, st.ToSeconds, st.Samples = win[0].AtSeconds, win[len(win)-1].AtSeconds, len(win)
	first, second := win[:len(win)/2], win[len(win)/2:]
	col := func(ss []SoakSample, f func(SoakSample) float64) []float64 {
		out := make([]float64, 0, len(ss))
		for _, s := range ss {
			out = append(out, f(s))
		}
		return out
	}
	p99 := func(s SoakSample) float64 { return s.P99Ms }
	db := func(s SoakSample) float64 { return s.Etcd.DBTotal / (1 << 20) }
	st.OfferedPerSec = mean(col(win, func(s SoakSample) float64 { return s.OfferedPerSec }))
	st.SucceededPerSec = mean(col(win, func(s SoakSample) float64 { return s.SucceededPerSec }))
	st.ManagerSucceededPerSec = mean(col(win, func(s SoakSample) float64 { return s.ManagerSucceededPerSec }))
	st.P50Ms, st.P99Ms = median(col(win, func(s SoakSample) float64 { return s.P50Ms })), median(col(win, p99))
	st.P99MaxMs, st.P99FirstHalfMs, st.P99SecondHalfMs = maxOf(col(win, p99)), median(col(first, p99)), median(col(second, p99))
	st.EtcdDBMaxMiB, st.EtcdDBFirstHalfMiB, st.EtcdDBSecondHalfMiB = maxOf(col(win, db)), maxOf(col(first, db)), maxOf(col(second, db))
	st.EtcdInUseMaxMiB = maxOf(col(win, func(s SoakSample) float64 { return s.Etcd.DBInUse / (1 << 20) }))
	st.LiveMean = mean(col(win, func(s SoakSample) float64 { return float64(s.Live) }))
	st.PendingMax, st.PendingEnd = int64(maxOf(col(win, func(s SoakSample) float64 { return float64(s.Pending) }))), win[len(win)-1].Pending
	st.QueueDepthMax = maxOf(col(win, func(s SoakSample) float64 { return s.QueueDepth }))
	st.APIServerCPU = mean(col(win, func(s SoakSample) float64 { return s.APIServerCPU }))
	st.EtcdCPU = mean(col(win, func(s SoakSample) float64 { return s.EtcdCPU }))
	st.BenchCPU = mean(col(win, func(s SoakSample) float64 { return s.BenchCPU }))
	var mgr float64
	for i := range win[0].ManagerCPU {
		c := mean(col(win, func(s SoakSample) float64 { return s.ManagerCPU[i] }))
		st.ManagerCPU = append(st.ManagerCPU, c)
		mgr += c
		st.ManagerRSSFirstMiB = append(st.ManagerRSSFirstMiB, win[0].ManagerRSS[i]/(1<<20))
		st.ManagerRSSLastMiB = append(st.ManagerRSSLastMiB, win[len(win)-1].ManagerRSS[i]/(1<<20))
	}
	if st.SucceededPerSec > 0 {
		st.ManagerMsPerAction, st.APIServerMsPerAction = mgr*1000/st.SucceededPerSec, st.APIServerCPU*1000/st.SucceededPerSec
		st.EtcdMsPerAction = st.EtcdCPU * 1000 / st.SucceededPerSec
	}
	st.APIServerRSSMaxMiB = maxOf(col(win, func(s SoakSample) float64 { return s.APIServerRSS / (1 << 20) }))
	st.DestPeakPerSec = int(maxOf(col(win, func(s SoakSample) float64 { return float64(s.DestPeakPerSec) })))
	st.PGRowsMax = int64(maxOf(col(r.Samples, func(s SoakSample) float64 { return float64(s.PGRows) })))
	st.PGMaxMiB = maxOf(col(r.Samples, func(s SoakSample) float64 { return float64(s.PGBytes) / (1 << 20) }))
	st.Sustained = st.OfferedPerSec > 0 && st.SucceededPerSec >= 0.97*st.OfferedPerSec && float64(st.PendingEnd) <= 10*cfg.Rate
	st.Flat = st.P99SecondHalfMs <= 1.5*st.P99FirstHalfMs+100 && st.EtcdDBSecondHalfMiB <= 1.2*st.EtcdDBFirstHalfMiB
	st.FlatJudged = st.ToSeconds-st.FromSeconds+cfg.Sample.Seconds() >= 2*cfg.Compaction.Seconds()
	d := &r.Derived
	d.LiveActions = cfg.Rate * cfg.TTL.Seconds()
	d.EtcdDBMiB = st.EtcdDBMaxMiB + (d.LiveActions-st.LiveMean)*r.StoredPerLiveAction*r.DBPerStored/(1<<20)
	d.TombstoneRows = cfg.Rate * cfg.TombstoneTTL.Seconds()
	if r.PG != nil && r.PG.Rows > 0 {
		d.PGGiB = d.TombstoneRows * float64(r.PG.TotalAfterVacuumFull) / float64(r.PG.Rows) * 1.2 / (1 << 30)
	}
}

// steadySample reports whether s's whole period (the Sample before it) lies after cfg.Warm.
func steadySample(s SoakSample, cfg soakConfig) bool {
	return s.AtSeconds-cfg.Sample.Seconds() >= cfg.Warm().Seconds()
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func maxOf(xs []float64) float64 {
	var m float64
	for i, x := range xs {
		if i == 0 || x > m {
			m = x
		}
	}
	return m
}

// soakCSVHeader names the CSV's columns: seconds, counts, per-second rates, milliseconds, MiB and cores.
var soakCSVHeader = []string{"at_s", "created", "succeeded", "offered_per_s", "succeeded_per_s", "manager_succeeded_per_s", "p50_ms", "p99_ms",
	"pending", "queue_depth", "live_actions", "etcd_tombstones", "etcd_db_total_mib", "etcd_db_in_use_mib", "pg_rows", "pg_total_mib",
	"manager_cpu_cores", "apiserver_cpu_cores", "etcd_cpu_cores", "bench_cpu_cores", "manager_rss_mib", "apiserver_rss_mib",
	"etcd_rss_mib", "destination_peak_per_s", "succeeded_shard1", "succeeded_shard2"}

// soakCSVRows are the samples as CSV rows under soakCSVHeader (managers' CPU and RSS summed; shard 2's count
// empty with one shard).
func soakCSVRows(samples []SoakSample) [][]string {
	f := func(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	mib := func(b float64) string { return f(b/(1<<20), 2) }
	rows := make([][]string, 0, len(samples))
	for _, s := range samples {
		shard2 := ""
		if len(s.SucceededByShard) > 1 {
			shard2 = i(s.SucceededByShard[1])
		}
		var shard1 int64
		if len(s.SucceededByShard) > 0 {
			shard1 = s.SucceededByShard[0]
		}
		rows = append(rows, []string{f(s.AtSeconds, 1), i(s.Created), i(s.Succeeded), f(s.OfferedPerSec, 2), f(s.SucceededPerSec, 2),
			f(s.ManagerSucceededPerSec, 2), f(s.P50Ms, 1), f(s.P99Ms, 1), i(s.Pending), f(s.QueueDepth, 0), i(s.Live), i(s.EtcdTombstones), mib(s.Etcd.DBTotal),
			mib(s.Etcd.DBInUse), i(s.PGRows), mib(float64(s.PGBytes)), f(sumF(s.ManagerCPU), 3), f(s.APIServerCPU, 3), f(s.EtcdCPU, 3),
			f(s.BenchCPU, 3), mib(sumF(s.ManagerRSS)), mib(s.APIServerRSS), mib(s.EtcdRSS), strconv.Itoa(s.DestPeakPerSec), i(shard1), shard2})
	}
	return rows
}

func sumF(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}

// soakBase is the file name of a run's files without extension: soak-<n>shard(s).
func soakBase(shards int) string {
	if shards == 1 {
		return "soak-1shard"
	}
	return fmt.Sprintf("soak-%dshards", shards)
}

// writeSoakFiles writes the run's CSV, JSON and PNG into dir.
func writeSoakFiles(dir string, r SoakResult) error {
	base := filepath.Join(dir, soakBase(r.Shards))
	var b strings.Builder
	w := csv.NewWriter(&b)
	_ = w.Write(soakCSVHeader)
	_ = w.WriteAll(soakCSVRows(r.Samples))
	if err := w.Error(); err != nil {
		return fmt.Errorf("writing CSV: %w", err)
	}
	if err := os.WriteFile(base+".csv", []byte(b.String()), 0o600); err != nil { //nolint:gosec // BENCH_SOAK_OUT is the user's own choice
		return err
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(base+".json", data, 0o600); err != nil { //nolint:gosec // BENCH_SOAK_OUT is the user's own choice
		return err
	}
	return plotSoak(base+".png", r)
}

// soakTable is the runs side by side as a markdown table, measured figures first, then the derived ones.
func soakTable(cfg soakConfig, rs []SoakResult) string {
	var b strings.Builder
	b.WriteString("| figure |")
	for _, r := range rs {
		fmt.Fprintf(&b, " %d shard(s) |", r.Shards)
	}
	b.WriteString("\n|---|")
	for range rs {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	row := func(name string, f func(r SoakResult) string) {
		b.WriteString("| " + name + " |")
		for _, r := range rs {
			b.WriteString(" " + f(r) + " |")
		}
		b.WriteString("\n")
	}
	for _, fig := range soakFigures(cfg) {
		row(fig.name, fig.value)
	}
	return b.String()
}

// soakFigure is one row of soakTable.
type soakFigure struct {
	name  string
	value func(SoakResult) string
}

func soakFigures(cfg soakConfig) []soakFigure {
	mib := func(v float64) string { return fmt.Sprintf("%.0f MiB", v) }
	list := func(xs []float64, format string) string {
		parts := make([]string, 0, len(xs))
		for _, x := range xs {
			parts = append(parts, fmt.Sprintf(format, x))
		}
		return strings.Join(parts, " + ")
	}
	return []soakFigure{
		{"offered rate (actions a day)", func(r SoakResult) string { return fmt.Sprintf("%.1f/s (%.1fM)", r.Rate, r.PerDay()/1e6) }},
		{"window, steady part", func(r SoakResult) string {
			return fmt.Sprintf("%.0f s of arrivals; steady %.0f-%.0f s (%d samples)", r.DurationSeconds, r.Steady.FromSeconds, r.Steady.ToSeconds, r.Steady.Samples)
		}},
		{"created (failed creates)", func(r SoakResult) string { return fmt.Sprintf("%d (%d)", r.Created, r.CreateFailed) }},
		{"**succeeded / offered, steady** (the managers' own count)", func(r SoakResult) string {
			return fmt.Sprintf("**%.1f / %.1f per s** (%.1f; sustained: %v)", r.Steady.SucceededPerSec, r.Steady.OfferedPerSec,
				r.Steady.ManagerSucceededPerSec, r.Steady.Sustained)
		}},
		{"**p50 / p99 create → Succeeded** (median of samples; p99 max)", func(r SoakResult) string {
			return fmt.Sprintf("**%.0f / %.0f ms** (max %.0f)", r.Steady.P50Ms, r.Steady.P99Ms, r.Steady.P99MaxMs)
		}},
		{"p99 first half / second half", func(r SoakResult) string {
			return fmt.Sprintf("%.0f / %.0f ms", r.Steady.P99FirstHalfMs, r.Steady.P99SecondHalfMs)
		}},
		{"**etcd file, largest** (first / second half; in use max)", func(r SoakResult) string {
			return fmt.Sprintf("**%s** (%s / %s; %s)", mib(r.Steady.EtcdDBMaxMiB), mib(r.Steady.EtcdDBFirstHalfMiB), mib(r.Steady.EtcdDBSecondHalfMiB), mib(r.Steady.EtcdInUseMaxMiB))
		}},
		{"flat (p99 and etcd)", func(r SoakResult) string {
			if !r.Steady.FlatJudged {
				return "not judged: the window is shorter than two compaction intervals"
			}
			return strconv.FormatBool(r.Steady.Flat)
		}},
		{"live ExternalActions, mean", func(r SoakResult) string { return fmt.Sprintf("%.0f", r.Steady.LiveMean) }},
		{"backlog (created − ended): max / at the end; drained after", func(r SoakResult) string {
			return fmt.Sprintf("%d / %d; %v", r.Steady.PendingMax, r.Steady.PendingEnd, r.Drained)
		}},
		{"workqueue depth, max", func(r SoakResult) string { return fmt.Sprintf("%.0f", r.Steady.QueueDepthMax) }},
		{"succeeded per shard (share)", func(r SoakResult) string { return shardShares(r.SucceededByShard) }},
		{"succeeded per manager (its own metric)", func(r SoakResult) string { return list(r.ManagerSucceeded, "%.0f") }},
		{"shard destination share (1/n of the limits)", func(r SoakResult) string {
			if len(r.DestinationShare) == 0 {
				return "n/a (not sharded)"
			}
			return list(r.DestinationShare, "%.2f")
		}},
		{"destination: peak requests in one second (rateLimit)", func(r SoakResult) string {
			return fmt.Sprintf("%d (%d/s)", r.Steady.DestPeakPerSec, cfg.RateLimit)
		}},
		{"keys applied twice (answers replayed by the destination's dedup)", func(r SoakResult) string {
			return fmt.Sprintf("%d (%d)", r.Duplicates, r.Replayed)
		}},
		{"API requests per action, steady (ExternalAction writes; GETs)", func(r SoakResult) string {
			if r.APIPerAction == nil {
				return "not read"
			}
			w := r.APIPerAction
			return fmt.Sprintf("create %.2f, status %.2f, update+patch %.2f, delete %.2f, tombstones %.2f, events %.2f; GETs %.2f",
				w.Creates, w.StatusWrites, w.Updates+w.Patches, w.Deletes, w.Tombstones, w.Events, w.Reads)
		}},
		{"CPU cores: manager(s) / API server / etcd / bench process (load generator, destination, watch, sampler; PostgreSQL not measured)", func(r SoakResult) string {
			return fmt.Sprintf("%s / %.2f / %.2f / %.2f", list(r.Steady.ManagerCPU, "%.2f"), r.Steady.APIServerCPU, r.Steady.EtcdCPU, r.Steady.BenchCPU)
		}},
		{"CPU ms per action: manager(s) / API server / etcd", func(r SoakResult) string {
			return fmt.Sprintf("%.2f / %.2f / %.2f", r.Steady.ManagerMsPerAction, r.Steady.APIServerMsPerAction, r.Steady.EtcdMsPerAction)
		}},
		{"manager RSS, start → end of the window", func(r SoakResult) string {
			return list(r.Steady.ManagerRSSFirstMiB, "%.0f") + " → " + list(r.Steady.ManagerRSSLastMiB, "%.0f") + " MiB"
		}},
		{"API server RSS, max", func(r SoakResult) string { return mib(r.Steady.APIServerRSSMaxMiB) }},
		{"PostgreSQL tombstones: rows max, table max", func(r SoakResult) string {
			return fmt.Sprintf("%d, %.1f MiB", r.Steady.PGRowsMax, r.Steady.PGMaxMiB)
		}},
		{"etcd B per live action; db B per stored B", func(r SoakResult) string {
			return fmt.Sprintf("%.0f; %.2f", r.StoredPerLiveAction, r.DBPerStored)
		}},
		{"*derived*: live actions at the real ttlAfterFinished", func(r SoakResult) string { return fmt.Sprintf("%.0f", r.Derived.LiveActions) }},
		{"*derived*: etcd file at the real ttlAfterFinished", func(r SoakResult) string { return mib(r.Derived.EtcdDBMiB) }},
		{"*derived*: tombstone rows, PostgreSQL at the real tombstoneTTL", func(r SoakResult) string {
			return fmt.Sprintf("%.3gM, %.0f GiB", r.Derived.TombstoneRows/1e6, r.Derived.PGGiB)
		}},
	}
}

// shardShares prints each shard's count and its share of the total ("5012 (0.50) + 4988 (0.50)").
func shardShares(by []int64) string {
	var total int64
	for _, n := range by {
		total += n
	}
	parts := make([]string, 0, len(by))
	for _, n := range by {
		share := 0.0
		if total > 0 {
			share = float64(n) / float64(total)
		}
		parts = append(parts, fmt.Sprintf("%d (%.2f)", n, share))
	}
	return strings.Join(parts, " + ")
}
