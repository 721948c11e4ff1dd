package bench

import (
	"bytes"
	"math"
	"regexp"
	"strconv"
	"time"
)

// Scope says how a metric combines across ranks.
type Scope int

const (
	// ScopeRank is a per-rank figure: the job total is the sum over ranks.
	ScopeRank Scope = iota
	// ScopeGlobal is already a job-wide figure: it is reported, never summed.
	ScopeGlobal
)

// String returns "rank" or "global".
func (s Scope) String() string {
	if s == ScopeGlobal {
		return "global"
	}
	return "rank"
}

// ParseScope parses "rank" or "global" (the launcher's --metric-scope).
func ParseScope(s string) (Scope, error) {
	switch s {
	case "rank":
		return ScopeRank, nil
	case "global":
		return ScopeGlobal, nil
	}
	return 0, &scopeError{s}
}

type scopeError struct{ s string }

func (e *scopeError) Error() string {
	return "bad metric scope " + strconv.Quote(e.s) + ": want rank or global"
}

// Kind distinguishes series points from a tool's end-of-run figure.
type Kind int

const (
	// KindStep is one point of a rank's time series.
	KindStep Kind = iota
	// KindFinal is a tool's own end-of-run summary; it is never a series point.
	KindFinal
)

// Metric describes one quantity that recognisers report.
type Metric struct {
	// Name identifies the metric in reports, e.g. "tf_cnn_images_per_sec".
	Name string
	// Unit is printed next to values, e.g. "images/sec".
	Unit string
	// Scope says whether values are per rank (summed) or global.
	Scope Scope
	// ToolWarmup is true when the tool itself leaves its warm-up steps out
	// of what it prints, so the default warm-up trim is not applied.
	ToolWarmup bool
	// Images is true when values are samples per second, comparable with
	// Options.BaselineIPS for scaling efficiency.
	Images bool
	// Note is a caveat copied into every report of this metric.
	Note string
}

// Sample is one number recognised in one line.
type Sample struct {
	Metric *Metric
	Kind   Kind
	// Step is the tool's step or iteration number, or -1 when the line has none.
	Step  int
	Value float64
	// Time is a timestamp printed in the line itself (DLLogger), else zero.
	Time time.Time
}

// Recognizer turns one untagged output line into at most one Sample.
// Implementations must be safe for concurrent use and must not retain line.
type Recognizer interface {
	// Recognize returns the sample the line carries, if any.
	Recognize(line []byte) (Sample, bool)
	// Metrics lists every metric Recognize can report.
	Metrics() []*Metric
}

// num is docs/throughput.md's NUM.
const num = `[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?`

var numRE = regexp.MustCompile(`^` + num + `$`)

// parseNum parses a NUM token; it refuses anything else and non-finite values
// (strconv accepts "inf", hex floats and overflow to ±Inf, which we must not).
func parseNum(b []byte) (float64, bool) {
	if !numRE.Match(b) {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, false
	}
	return v, true
}

// parseStep parses a non-negative step number that fits in an int.
func parseStep(b []byte) (int, bool) {
	n, err := strconv.Atoi(string(b))
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// Builtin returns the recognisers for the formats of docs/throughput.md.
func Builtin() []Recognizer {
	return []Recognizer{tfCNN{}, horovod{}, dllogger{}, ncclTests{}, genericTotal{}}
}

// builtinStart marks the bytes a line can start with for a built-in
// recogniser to match it: every built-in pattern is anchored at the
// start of the line (after its tag), with a digit or blanks (tf_cnn_benchmarks
// steps, nccl-tests rows, "  Total images/sec = X"), 't' ("total
// images/sec"), 'I' ("Iter #", "Img/sec per"), 'T' ("Total img/sec",
// "Total images/sec"), '#' (nccl-tests' average) or 'D' ("DLL ").
// FuzzRecognize checks that no built-in matches a line mayMatchBuiltin
// refuses.
var builtinStart = [256]bool{' ': true, '\t': true, 't': true, 'I': true, 'T': true, '#': true, 'D': true,
	'0': true, '1': true, '2': true, '3': true, '4': true, '5': true, '6': true, '7': true, '8': true, '9': true}

// mayMatchBuiltin is the cheap test every line passes before any regex
// runs: its first byte, then the substrings of the figures.
func mayMatchBuiltin(line []byte) bool {
	if len(line) == 0 || !builtinStart[line[0]] {
		return false
	}
	return bytes.Contains(line, []byte("/sec")) ||
		bytes.HasPrefix(line, []byte("DLL ")) ||
		bytes.Contains(line, []byte("bandwidth")) ||
		startsWithDigit(line)
}

func startsWithDigit(line []byte) bool {
	for _, b := range line {
		if b != ' ' && b != '\t' {
			return b >= '0' && b <= '9'
		}
	}
	return false
}

// Built-in metrics.
var (
	// MetricTFCNN is tf_cnn_benchmarks' per-rank images/sec.
	MetricTFCNN = &Metric{Name: "tf_cnn_images_per_sec", Unit: "images/sec", Scope: ScopeRank, ToolWarmup: true, Images: true}
	// MetricHorovod is Horovod's synthetic benchmark per-device img/sec.
	MetricHorovod = &Metric{Name: "horovod_img_per_sec", Unit: "img/sec", Scope: ScopeRank, ToolWarmup: true, Images: true}
	// MetricHorovodTotal is the total Horovod's script prints on rank 0.
	MetricHorovodTotal = &Metric{Name: "horovod_total_img_per_sec", Unit: "img/sec", Scope: ScopeGlobal, ToolWarmup: true, Images: true,
		Note: "as printed by rank 0; Horovod's own script computes it as size x rank 0's mean (gangway's example sums every rank's mean): compare with the per-rank total"}
	// MetricDLLogger is DLLogger's global total_ips / train_throughput.
	MetricDLLogger = &Metric{Name: "dllogger_total_ips", Unit: "images/sec", Scope: ScopeGlobal, Images: true}
	// MetricNCCL is nccl-tests' bus bandwidth (mean of out-of-place and in-place per row).
	MetricNCCL = &Metric{Name: "nccl_busbw", Unit: "GB/s", Scope: ScopeGlobal, ToolWarmup: true}
	// MetricTotal is a generic "Total images/sec = X" summary line.
	MetricTotal = &Metric{Name: "total_images_per_sec", Unit: "images/sec", Scope: ScopeGlobal, Images: true}
)

// tfCNN recognises tf_cnn_benchmarks step lines and its total line.
type tfCNN struct{}

var (
	tfStepRE = regexp.MustCompile(`^(\d+)\timages/sec: (` + num + `)(?: \+/- (?:` + num + `) \(jitter = (?:` + num + `)\))?\t(?:` + num + `|[-+]?nan|[-+]?inf)`)
	// A Python "\s*$" written as [ \t]* (docs/throughput.md): a Go \s also matches \v, a stray
	// control character we do not want to let through.
	tfTotalRE = regexp.MustCompile(`^total images/sec: (` + num + `)[ \t]*$`)
)

func (tfCNN) Metrics() []*Metric { return []*Metric{MetricTFCNN} }

func (tfCNN) Recognize(line []byte) (Sample, bool) {
	if !bytes.Contains(line, []byte("images/sec: ")) {
		return Sample{}, false
	}
	if m := tfStepRE.FindSubmatch(line); m != nil {
		step, ok1 := parseStep(m[1])
		v, ok2 := parseNum(m[2])
		return Sample{Metric: MetricTFCNN, Kind: KindStep, Step: step, Value: v}, ok1 && ok2
	}
	if m := tfTotalRE.FindSubmatch(line); m != nil {
		v, ok := parseNum(m[1])
		return Sample{Metric: MetricTFCNN, Kind: KindFinal, Step: -1, Value: v}, ok
	}
	return Sample{}, false
}

// horovod recognises Horovod's pytorch_synthetic_benchmark.py lines.
type horovod struct{}

var (
	hvdIterRE  = regexp.MustCompile(`^Iter #(\d+): (` + num + `) img/sec per (?:GPU|CPU)[ \t]*$`)
	hvdMeanRE  = regexp.MustCompile(`^Img/sec per (?:GPU|CPU): (` + num + `) \+-(?:` + num + `)[ \t]*$`)
	hvdTotalRE = regexp.MustCompile(`^Total img/sec on \d+ (?:GPU|CPU)\(s\): (` + num + `) \+-(?:` + num + `)[ \t]*$`)
)

func (horovod) Metrics() []*Metric { return []*Metric{MetricHorovod, MetricHorovodTotal} }

func (horovod) Recognize(line []byte) (Sample, bool) {
	switch {
	case bytes.HasPrefix(line, []byte("Iter #")):
		if m := hvdIterRE.FindSubmatch(line); m != nil {
			step, ok1 := parseStep(m[1])
			v, ok2 := parseNum(m[2])
			return Sample{Metric: MetricHorovod, Kind: KindStep, Step: step, Value: v}, ok1 && ok2
		}
	case bytes.HasPrefix(line, []byte("Img/sec per ")):
		if m := hvdMeanRE.FindSubmatch(line); m != nil {
			v, ok := parseNum(m[1])
			return Sample{Metric: MetricHorovod, Kind: KindFinal, Step: -1, Value: v}, ok
		}
	case bytes.HasPrefix(line, []byte("Total img/sec on ")):
		if m := hvdTotalRE.FindSubmatch(line); m != nil {
			v, ok := parseNum(m[1])
			return Sample{Metric: MetricHorovodTotal, Kind: KindFinal, Step: -1, Value: v}, ok
		}
	}
	return Sample{}, false
}

// genericTotal recognises "Total images/sec = X".
type genericTotal struct{}

var genericRE = regexp.MustCompile(`^[ \t]*Total images/sec[ \t]*=[ \t]*(` + num + `)[ \t]*$`)

func (genericTotal) Metrics() []*Metric { return []*Metric{MetricTotal} }

func (genericTotal) Recognize(line []byte) (Sample, bool) {
	if !bytes.Contains(line, []byte("Total images/sec")) {
		return Sample{}, false
	}
	if m := genericRE.FindSubmatch(line); m != nil {
		v, ok := parseNum(m[1])
		return Sample{Metric: MetricTotal, Kind: KindFinal, Step: -1, Value: v}, ok
	}
	return Sample{}, false
}

// ncclTests recognises nccl-tests result rows and the average footer.
type ncclTests struct{}

var (
	ncclRowRE = regexp.MustCompile(`^[ \t]*(\d+)[ \t]+\d+[ \t]+\w+[ \t]+\w+[ \t]+-?\d+[ \t]+` +
		`(?:` + num + `)[ \t]+(?:` + num + `)[ \t]+(` + num + `)[ \t]+\S+[ \t]+` +
		`(?:` + num + `)[ \t]+(?:` + num + `)[ \t]+(` + num + `)[ \t]+\S+`)
	ncclAvgRE = regexp.MustCompile(`^#[ \t]*Avg bus bandwidth[ \t]*:[ \t]*(` + num + `)`)
)

func (ncclTests) Metrics() []*Metric { return []*Metric{MetricNCCL} }

func (ncclTests) Recognize(line []byte) (Sample, bool) {
	if len(line) > 0 && line[0] == '#' {
		if m := ncclAvgRE.FindSubmatch(line); m != nil {
			v, ok := parseNum(m[1])
			return Sample{Metric: MetricNCCL, Kind: KindFinal, Step: -1, Value: v}, ok
		}
		return Sample{}, false
	}
	if !startsWithDigit(line) {
		return Sample{}, false
	}
	m := ncclRowRE.FindSubmatch(line)
	if m == nil {
		return Sample{}, false
	}
	size, ok1 := parseStep(m[1])
	oop, ok2 := parseNum(m[2])
	ip, ok3 := parseNum(m[3])
	v := (oop + ip) / 2
	ok := ok1 && ok2 && ok3 && !math.IsInf(v, 0)
	return Sample{Metric: MetricNCCL, Kind: KindStep, Step: size, Value: v}, ok
}
