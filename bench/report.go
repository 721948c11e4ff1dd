package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// SchemaID names the report format; bump it when report.schema.json changes
// incompatibly.
const SchemaID = "gangway-bench-report/v1"

// Meta is what the launcher knows about the job; it is copied into the report.
type Meta struct {
	// Command is the program and arguments that every rank ran.
	Command []string `json:"command"`
	// Hosts are the hosts in rank order of their first rank.
	Hosts []string `json:"hosts"`
	// Ranks is the number of ranks launched (0 when unknown).
	Ranks   int       `json:"ranks"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	Version string    `json:"gangway_version"`
}

// Report is the whole analysis; WriteJSON writes it as report.schema.json.
type Report struct {
	Schema  string         `json:"schema"`
	Meta    Meta           `json:"meta"`
	Options ReportOptions  `json:"options"`
	Lines   LineStats      `json:"lines"`
	Metrics []MetricReport `json:"metrics"`
	// Attempts are the job's whole-gang attempts (--max-restarts), in
	// order; the metrics are the last attempt's. Empty for --analyze.
	Attempts []Attempt `json:"attempts,omitempty"`
	// Failures are the last attempt's failed ranks, the blamed one first,
	// as the launcher's failure report prints them; absent when none
	// failed and for --analyze.
	Failures []Failure `json:"failures,omitempty"`
	// Lost names the agents lost during the last attempt, and why.
	Lost []string `json:"lost,omitempty"`
	// Goodput is Goodput(Attempts), absent with no attempts.
	Goodput *float64 `json:"goodput,omitempty"`
	// Selftest is the last attempt's fabric self-test (--selftest);
	// absent without one.
	Selftest *Selftest `json:"selftest,omitempty"`
}

// Selftest is a fabric self-test: the bandwidth of each pair of hosts
// measured (ring neighbours and a few chords), each host's figure and
// the outliers.
type Selftest struct {
	// Bytes and WithinSec bound each direction of each pair.
	Bytes     int64          `json:"bytes"`
	WithinSec float64        `json:"within_sec"`
	Pairs     []SelftestPair `json:"pairs"`
	Hosts     []SelftestHost `json:"hosts"`
	// MedianMBps is the median of the hosts' figures; a host whose figure
	// is under Fraction of it is an outlier.
	MedianMBps float64 `json:"median_mbps"`
	Fraction   float64 `json:"fraction"`
	// Outliers name the slow hosts, slowest first.
	Outliers []string `json:"outliers"`
	// Stopped is true when the self-test stopped the job (strict).
	Stopped bool `json:"stopped,omitempty"`
}

// SelftestPair is one pair of hosts, both directions, in MB/s (10^6
// bytes per second); a direction that failed has 0 and its error.
type SelftestPair struct {
	A        string  `json:"a"`
	B        string  `json:"b"`
	AToBMBps float64 `json:"a_to_b_mbps"`
	BToAMBps float64 `json:"b_to_a_mbps"`
	Err      string  `json:"err,omitempty"`
}

// SelftestHost is one host's figure: the median, over the pairs it is
// in, of each pair's slower direction.
type SelftestHost struct {
	Name    string  `json:"name"`
	MBps    float64 `json:"mbps"`
	Pairs   int     `json:"pairs"`
	Outlier bool    `json:"outlier"`
}

// Failure is one failed rank.
type Failure struct {
	Rank int    `json:"rank"`
	Host string `json:"host"`
	Pid  int    `json:"pid,omitempty"`
	// Blamed marks the failure that ended the job (the first).
	Blamed bool `json:"blamed"`
	// Cause is the launcher's one-line account ("rank 3 on b (pid 12)
	// exited with code 7").
	Cause    string `json:"cause"`
	ExitCode int    `json:"exit_code"`
	// Signal is the signal that killed the rank, 0 when none did.
	Signal     int    `json:"signal"`
	SignalName string `json:"signal_name,omitempty"`
	// StderrTail is the rank's last lines of stderr, oldest first.
	StderrTail []string `json:"stderr_tail"`
	// RootCause is what the rank's torch @record wrote to its
	// TORCHELASTIC_ERROR_FILE, when it wrote something readable.
	RootCause *RootCause `json:"root_cause,omitempty"`
}

// RootCause is a Python exception and the last frames of its traceback.
type RootCause struct {
	Exception string   `json:"exception"`
	Traceback []string `json:"traceback"`
}

// Attempt is one start of the whole gang and how it ended.
type Attempt struct {
	N        int       `json:"n"` // 0 for the first start, TORCHELASTIC_RESTART_COUNT
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	Cause    string    `json:"cause"` // why it ended; "" when every rank exited 0
	Rank     *int      `json:"rank,omitempty"`
	Host     string    `json:"host,omitempty"`
	ExitCode int       `json:"exit_code"` // what the launcher would exit with had this been the last
	// LastProgress is when the attempt's ranks last printed a benchmark
	// line (a throughput sample), nil when they printed none.
	LastProgress *time.Time `json:"last_progress,omitempty"`
	// Hosts are the hosts the attempt ran ranks on, in plan order.
	Hosts []string `json:"hosts,omitempty"`
	// LeftOut are the hosts left out of the job by this attempt (those
	// of earlier attempts included), and why.
	LeftOut []LeftOut `json:"left_out,omitempty"`
}

// LeftOut is a host taken out of the job, why, and the spare that took
// its place ("" when none did).
type LeftOut struct {
	Host  string `json:"host"`
	Why   string `json:"why"`
	Spare string `json:"spare,omitempty"`
}

// Goodput is the share of the run's wall time spent in attempts that
// ended in success or were making progress: a successful attempt counts
// whole, a failed one up to its last benchmark line (the work after it is
// what the restart redoes, at best), one without any such line not at
// all. The wall time runs from the first attempt's start to the last
// one's end, backoffs included. ok is false without attempts or wall
// time.
func Goodput(attempts []Attempt) (g float64, ok bool) {
	if len(attempts) == 0 {
		return 0, false
	}
	wall := attempts[len(attempts)-1].End.Sub(attempts[0].Start)
	if wall <= 0 {
		return 0, false
	}
	var good time.Duration
	for _, a := range attempts {
		switch {
		case a.Cause == "" && a.ExitCode == 0:
			good += a.End.Sub(a.Start)
		case a.LastProgress != nil && a.LastProgress.After(a.Start):
			good += min(a.LastProgress.Sub(a.Start), a.End.Sub(a.Start))
		}
	}
	return min(float64(good)/float64(wall), 1), true
}

// ReportOptions records the options the analysis ran with.
type ReportOptions struct {
	WarmupSteps        int      `json:"warmup_steps"`
	StragglerThreshold float64  `json:"straggler_threshold"`
	BaselineIPS        float64  `json:"baseline_ips"`
	CustomMetrics      []string `json:"custom_metrics"`
}

// LineStats counts lines. Dropped lines were lost because the Collector's
// queue was full (or arrived after Close); they were never parsed.
type LineStats struct {
	Observed int64 `json:"observed"`
	Dropped  int64 `json:"dropped"`
}

// TimeAxis values of MetricReport.TimeAxis.
const (
	// AxisSeconds: Point.T is seconds since Meta.Start (or the first sample).
	AxisSeconds = "seconds"
	// AxisLine: lines carried no time, so Point.T is the line's number in
	// its log file.
	AxisLine = "line"
)

// MetricReport is the job-level result for one metric.
type MetricReport struct {
	Name  string `json:"name"`
	Unit  string `json:"unit"`
	Scope string `json:"scope"`
	// Value is the job figure: for scope "rank" the sum of the per-rank
	// means, for scope "global" the value printed by SourceRank.
	Value float64 `json:"value"`
	// CI95 is the half-width of the 95% confidence interval of Value; absent
	// when it cannot be computed (fewer than two samples on some rank).
	CI95 *float64 `json:"ci95,omitempty"`
	// RanksReporting ranks printed this metric, of RanksTotal ranks.
	RanksReporting int `json:"ranks_reporting"`
	RanksTotal     int `json:"ranks_total"`
	// Coverage is "measured on k of N ranks" for rank metrics, and
	// "printed by rank r" for global ones.
	Coverage string `json:"coverage"`
	// SourceRank is the rank whose figure a global metric reports.
	SourceRank int    `json:"source_rank"`
	TimeAxis   string `json:"time_axis"`
	// MedianRank is the median of the per-rank means (rank metrics).
	MedianRank  float64      `json:"median_rank"`
	SlowestRank *Outlier     `json:"slowest_rank,omitempty"`
	SlowestHost *Outlier     `json:"slowest_host,omitempty"`
	Stragglers  []Outlier    `json:"stragglers"`
	Efficiency  *float64     `json:"efficiency,omitempty"`
	Notes       []string     `json:"notes"`
	Hosts       []HostReport `json:"hosts"`
	Ranks       []RankReport `json:"ranks"`
}

// Outlier is a slow rank or host and how far it is from the median.
type Outlier struct {
	Rank int    `json:"rank"` // -1 for a host
	Host string `json:"host"`
	// Value is the rank's mean, or the host's mean per rank.
	Value float64 `json:"value"`
	// DeviationPct is (Value - median) / median * 100; negative is slower.
	DeviationPct float64 `json:"deviation_pct"`
}

// HostReport is the subtotal of one host's ranks.
type HostReport struct {
	Host    string   `json:"host"`
	Ranks   []int    `json:"ranks"`
	Total   float64  `json:"total"`
	CI95    *float64 `json:"ci95,omitempty"`
	PerRank float64  `json:"per_rank"`
}

// RankReport is the statistics of one rank.
type RankReport struct {
	Rank int    `json:"rank"`
	Host string `json:"host"`
	// N is the number of series samples after warm-up; Mean, StdDev and
	// CI95 are over those. With N == 0, Mean is the tool's final figure.
	N      int      `json:"n"`
	Warmup int      `json:"warmup"`
	Mean   float64  `json:"mean"`
	StdDev float64  `json:"stddev"`
	CI95   *float64 `json:"ci95,omitempty"`
	// Final is the tool's own last end-of-run figure for this rank.
	Final  *float64 `json:"final,omitempty"`
	Series []Point  `json:"series"`
}

// Point is one series sample; warm-up samples are included and marked.
type Point struct {
	T      float64 `json:"t"`
	Step   int     `json:"step"` // -1 when the line had none
	Value  float64 `json:"value"`
	Warmup bool    `json:"warmup"`
}

// WriteJSON writes rep to path atomically: a temporary file in the same
// directory, synced, then renamed over path.
func (rep Report) WriteJSON(path string) error {
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report %s: %w", path, err)
	}
	return writeAtomic(path, append(data, '\n'))
}

// writeAtomic writes data to a temporary file beside path and renames it.
func writeAtomic(path string, data []byte) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = f.Chmod(0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
