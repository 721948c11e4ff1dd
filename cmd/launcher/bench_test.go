package main

// Throughput benchmarking through the real launcher: throughput summaries,
// JSON reports, plots and --analyze, from real ranks of examples/synthetic,
// the PyTorch example, and shell ranks printing a custom metric.

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"image/png"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/bench"
	"github.com/gangway-hpc/gangway/bench/benchtest"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
)

var plotDir = flag.String("plotdir", "", "also copy the tests' PNGs to this directory, to look at them")

// synthArgs make each synthetic rank take a fraction of a second of CPU
// (0.7 s for 8 ranks on 2 idle cores), its step times counted from its
// work (-clock work: a microsecond per hash), not measured: under make
// test's other packages even each rank's CPU clock moved by 10% and more
// between ranks, so that noise, not the 20% slowdown, picked the
// straggler. What these tests check is the launcher's summary of the
// figures the ranks print, which counted time makes exact.
var synthArgs = []string{"-steps", "40", "-warmup-steps", "4", "-display-every", "5", "-batch-size", "24", "-work", "1200",
	"-slow-ranks", "5", "-slowdown", "0.2", "-clock", "work"}

// buildSynthetic compiles examples/synthetic into dir.
func buildSynthetic(t *testing.T, dir string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build examples/synthetic")
	}
	bin := filepath.Join(dir, "synthetic")
	cmd := exec.CommandContext(t.Context(), goBin, "build", "-o", bin, "github.com/gangway-hpc/gangway/examples/synthetic")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build examples/synthetic: %v\n%s", err, out)
	}
	return bin
}

// TestBenchSynthetic runs 8 ranks of examples/synthetic with rank 5 slowed
// by 20%: locally, then over two in-process agents, then --analyze over
// the saved logs ([R] and mpirun tags). It does not run in parallel
// with this package's other tests, so that they do not add noise between
// ranks.
func TestBenchSynthetic(t *testing.T) {
	bin := buildSynthetic(t, t.TempDir())
	var localLog string
	var localRep bench.Report
	t.Run("local", func(t *testing.T) {
		dir := t.TempDir()
		rj, pp := filepath.Join(dir, "r.json"), filepath.Join(dir, "p.png")
		args := append([]string{"-l", "-np", "8", "--report", rj, "--plot", pp, bin}, synthArgs...)
		l := startLauncher(t, false, args...)
		assertCode(t, l, 0)
		localLog = l.stdout()
		sum := summaryAfterRanks(t, localLog)
		t.Logf("console summary:\n%s", sum)
		localRep = readReport(t, rj)
		mr := checkSynthetic(t, localRep, sum, "localhost", []string{"localhost"})
		if len(mr.Hosts) != 1 || mr.Hosts[0].Total != mr.Value {
			t.Errorf("hosts %+v: want one subtotal equal to the total %v", mr.Hosts, mr.Value)
		}
		if want := append([]string{bin}, synthArgs...); !slices.Equal(localRep.Meta.Command, want) {
			t.Errorf("meta command %q, want %q", localRep.Meta.Command, want)
		}
		checkPlot(t, pp, "synthetic-8-ranks.png")
	})
	t.Run("two hosts", func(t *testing.T) {
		c := e2e.StartLocal(t, 2)
		h1, h2 := c.Hosts[0].Addr, c.Hosts[1].Addr
		// Flat, and through the agent tree (make test's tree phase does not
		// run this package: its other launches are local).
		for _, width := range []string{"0", "1"} {
			t.Run("tree width "+width, func(t *testing.T) {
				dir := t.TempDir()
				rj, pp := filepath.Join(dir, "r.json"), filepath.Join(dir, "p.png")
				args := append([]string{"-l", "-H", c.HostList(4), "-np", "8", "--tree-width", width, "--report", rj, "--plot", pp, bin}, synthArgs...)
				stdout, stderr, code := c.RunLauncher(t, args...)
				if code != 0 {
					t.Fatalf("launcher exit code %d\nstdout:\n%s\nstderr:\n%s", code, e2e.Tail(stdout, 2000), stderr)
				}
				sum := summaryAfterRanks(t, stdout)
				t.Logf("console summary:\n%s", sum)
				mr := checkSynthetic(t, readReport(t, rj), sum, h2, []string{h1, h2})
				for _, h := range []string{h1, h2} {
					if !regexp.MustCompile(`(?m)^  host ` + regexp.QuoteMeta(h) + ` +[0-9.]+ ± [0-9.]+ images/sec  \(4 ranks, `).MatchString(sum) {
						t.Errorf("summary lacks the subtotal of host %s", h)
					}
				}
				if len(mr.Hosts) != 2 || !near(mr.Hosts[0].Total+mr.Hosts[1].Total, mr.Value) {
					t.Fatalf("hosts %+v: want two subtotals adding up to %v", mr.Hosts, mr.Value)
				}
				for _, hr := range mr.Hosts {
					want := []int{0, 1, 2, 3}
					if hr.Host == h2 {
						want = []int{4, 5, 6, 7}
					}
					if !slices.Equal(hr.Ranks, want) {
						t.Errorf("host %s has ranks %v, want %v", hr.Host, hr.Ranks, want)
					}
				}
				if mr.SlowestHost == nil {
					t.Error("no slowest host")
				} else {
					t.Logf("slowest host %s at %+.2f%% (the slowed rank is on %s)", mr.SlowestHost.Host, mr.SlowestHost.DeviationPct, h2)
				}
				checkPlot(t, pp, "synthetic-2-hosts.png")
			})
		}
	})
	t.Run("analyze", func(t *testing.T) {
		if localLog == "" {
			t.Skip("the local run failed")
		}
		dir := t.TempDir()
		// The local run's stdout, "[R] " tags, summary included (as
		// `launcher -l ... | tee run.log` saves it).
		plain := filepath.Join(dir, "default.log")
		if err := os.WriteFile(plain, []byte(localLog), 0o644); err != nil {
			t.Fatal(err)
		}
		sameTotals(t, analyzeLog(t, plain), localRep)

		// A fresh run with mpirun tags, against its own report.
		rj := filepath.Join(dir, "tagged.json")
		l := startLauncher(t, false, append([]string{"-np", "4", "--tag-output", "--report", rj, bin}, synthArgs...)...)
		assertCode(t, l, 0)
		out := l.stdout()
		if !strings.HasPrefix(out, "[1,") || !strings.Contains(out, "]<stdout>:total images/sec: ") {
			t.Fatalf("not mpirun-tagged output:\n%s", e2e.Tail(out, 1000))
		}
		tagged := filepath.Join(dir, "tagged.log")
		if err := os.WriteFile(tagged, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		sameTotals(t, analyzeLog(t, tagged), readReport(t, rj))

		// A fresh run without tags (stdout into a file, the default
		// for `| tee`): the ranks cannot be told apart, so --analyze
		// sums their four end-of-run figures and says so.
		rj = filepath.Join(dir, "untagged.json")
		l = startLauncher(t, false, append([]string{"-np", "4", "--report", rj, bin}, synthArgs...)...)
		assertCode(t, l, 0)
		out = l.stdout()
		if strings.Count(out, "\ntotal images/sec: ") != 4 || benchRankTag.MatchString(out) {
			t.Fatalf("not 4 ranks' untagged output:\n%s", e2e.Tail(out, 1000))
		}
		untagged := filepath.Join(dir, "untagged.log")
		if err := os.WriteFile(untagged, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		live := metric(t, readReport(t, rj), bench.MetricTFCNN.Name)
		finals := 0.0
		for _, rr := range live.Ranks {
			finals += *rr.Final
		}
		got := metric(t, analyzeLog(t, untagged), bench.MetricTFCNN.Name)
		if !near(got.Value, finals) || got.RanksReporting != 4 || len(got.Ranks) != 0 ||
			!strings.Contains(strings.Join(got.Notes, "\n"), "sum of the 4 end-of-run figures") {
			t.Errorf("untagged --analyze: %v on %d ranks, notes %q; want the live ranks' end-of-run figures summed, %v on 4",
				got.Value, got.RanksReporting, got.Notes, finals)
		}
		// Without the end-of-run lines it cannot tell, and says so.
		cut := filepath.Join(dir, "cut.log")
		var keep []string
		for _, line := range lines(out) {
			if !strings.HasPrefix(line, "total images/sec: ") {
				keep = append(keep, line)
			}
		}
		if err := os.WriteFile(cut, []byte(strings.Join(keep, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		l = startLauncher(t, false, "--analyze", cut)
		assertCode(t, l, 1)
		if !strings.Contains(l.stderr(), "cannot tell the ranks apart") {
			t.Errorf("--analyze of interleaved untagged steps: stderr %q", l.stderr())
		}
	})
}

// checkSynthetic checks the tf_cnn_benchmarks metric of an 8-rank synthetic
// run, rank 5 slowed, and returns it.
func checkSynthetic(t *testing.T, rep bench.Report, sum, host5 string, hosts []string) bench.MetricReport {
	t.Helper()
	mr := metric(t, rep, bench.MetricTFCNN.Name)
	if rep.Meta.Ranks != 8 || !slices.Equal(rep.Meta.Hosts, hosts) || rep.Lines.Dropped != 0 {
		t.Errorf("meta %d ranks on %q, %d lines dropped: want 8 ranks on %q, none dropped", rep.Meta.Ranks, rep.Meta.Hosts, rep.Lines.Dropped, hosts)
	}
	if mr.Scope != "rank" || mr.RanksReporting != 8 || len(mr.Ranks) != 8 {
		t.Fatalf("%s scope %s, %s: want per-rank on 8 of 8 ranks", mr.Name, mr.Scope, mr.Coverage)
	}
	checkSum(t, mr)
	for _, rr := range mr.Ranks {
		// Steps 1, 5, 10, ..., 40 are printed; the tool leaves warm-up out.
		if rr.N != 9 || rr.Warmup != 0 || rr.Final == nil {
			t.Errorf("rank %d: n=%d warmup=%d final=%v: want 9 samples, no warm-up, a final figure", rr.Rank, rr.N, rr.Warmup, rr.Final)
		}
	}
	if !strings.Contains(sum, fmt.Sprintf("bench: 8 ranks on %d host", len(hosts))) {
		t.Errorf("summary header does not say 8 ranks on %d hosts", len(hosts))
	}
	if want := fmt.Sprintf("\n  total         %.2f ± ", mr.Value); !strings.Contains(sum, want) {
		t.Errorf("summary lacks the JSON total %q", want)
	}
	flagged := slices.ContainsFunc(mr.Stragglers, func(o bench.Outlier) bool { return o.Rank == 5 && o.Host == host5 })
	if !flagged || mr.SlowestRank == nil || mr.SlowestRank.Rank != 5 || mr.SlowestRank.Host != host5 {
		t.Errorf("stragglers %+v, slowest %+v: want rank 5 on %s flagged and slowest", mr.Stragglers, mr.SlowestRank, host5)
	}
	if !strings.Contains(sum, "slowest rank  rank 5 on "+host5+": ") ||
		!regexp.MustCompile(`(?m)^  stragglers .*rank 5 on `+regexp.QuoteMeta(host5)+` \(-`).MatchString(sum) {
		t.Errorf("summary does not name rank 5 on %s as slowest and straggler", host5)
	}
	if len(mr.Stragglers) > 1 {
		t.Logf("other ranks flagged too (noise on a shared machine): %+v", mr.Stragglers)
	}
	return mr
}

// checkSum: the total is the sum of the per-rank means.
func checkSum(t *testing.T, mr bench.MetricReport) {
	t.Helper()
	sum := 0.0
	for _, rr := range mr.Ranks {
		sum += rr.Mean
	}
	if !near(sum, mr.Value) {
		t.Errorf("%s total %v != sum of per-rank means %v", mr.Name, mr.Value, sum)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

// summaryAfterRanks returns the summary in stdout and checks that it
// comes after every line of rank output.
func summaryAfterRanks(t *testing.T, stdout string) string {
	t.Helper()
	i := strings.Index(stdout, "\nbench: ")
	if i < 0 {
		t.Fatalf("no bench summary in stdout:\n%s", e2e.Tail(stdout, 2000))
	}
	sum := stdout[i+1:]
	for _, line := range lines(sum) {
		if benchRankTag.MatchString(line) {
			t.Errorf("rank output after the summary: %q", line)
		}
	}
	return sum
}

var benchRankTag = regexp.MustCompile(`^\[(?:\d+|1,\d+)\]`)

// readReport reads a --report file, validates it against
// bench/report.schema.json and decodes it.
func readReport(t *testing.T, path string) bench.Report {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	errs, err := benchtest.ValidateReport(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(errs) > 0 {
		t.Fatalf("%s does not match report.schema.json:\n%s", path, strings.Join(errs, "\n"))
	}
	var rep bench.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

func metric(t *testing.T, rep bench.Report, name string) bench.MetricReport {
	t.Helper()
	for _, mr := range rep.Metrics {
		if mr.Name == name {
			return mr
		}
	}
	t.Fatalf("report has no metric %s (has %d metrics)", name, len(rep.Metrics))
	return bench.MetricReport{}
}

// checkPlot decodes a --plot PNG and copies it to -plotdir.
func checkPlot(t *testing.T, path, name string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() < 600 || b.Dy() < 200 {
		t.Errorf("%s is %dx%d: too small to read", path, b.Dx(), b.Dy())
	}
	if *plotDir != "" {
		if err := os.WriteFile(filepath.Join(*plotDir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// analyzeLog runs launcher --analyze --report over a saved log.
func analyzeLog(t *testing.T, log string) bench.Report {
	t.Helper()
	rj := log + ".json"
	l := startLauncher(t, false, "--analyze", "--report", rj, log)
	assertCode(t, l, 0)
	summaryAfterRanks(t, "\n"+l.stdout())
	t.Logf("launcher --analyze %s:\n%s", filepath.Base(log), l.stdout())
	return readReport(t, rj)
}

// sameTotals: the analysis of a saved log gives the live run's figures.
func sameTotals(t *testing.T, got, live bench.Report) {
	t.Helper()
	g, w := metric(t, got, bench.MetricTFCNN.Name), metric(t, live, bench.MetricTFCNN.Name)
	if !near(g.Value, w.Value) || g.RanksReporting != w.RanksReporting {
		t.Errorf("--analyze total %v on %d ranks, live run %v on %d ranks", g.Value, g.RanksReporting, w.Value, w.RanksReporting)
	}
	for i := range min(len(g.Ranks), len(w.Ranks)) {
		if g.Ranks[i].Rank != w.Ranks[i].Rank || !near(g.Ranks[i].Mean, w.Ranks[i].Mean) {
			t.Errorf("--analyze rank %d mean %v, live rank %d mean %v", g.Ranks[i].Rank, g.Ranks[i].Mean, w.Ranks[i].Rank, w.Ranks[i].Mean)
		}
	}
}

// TestBenchPyTorch runs examples/pytorch/synthetic_benchmark.py as 4 CPU
// ranks (gloo) under the launcher; the launcher's total, the sum of the
// per-rank means, must match the all-reduced total rank 0 prints.
func TestBenchPyTorch(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the PyTorch run")
	}
	t.Parallel()
	const python = "/usr/bin/python3"
	if out, err := exec.CommandContext(t.Context(), python, "-c", "import torch.distributed").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import torch.distributed (Debian's python3-torch): %v\n%s", python, err, out)
	}
	script, err := filepath.Abs("../../examples/pytorch/synthetic_benchmark.py")
	if err != nil {
		t.Fatal(err)
	}
	rj := filepath.Join(t.TempDir(), "r.json")
	l := startLauncher(t, false, "-l", "-np", "4", "--report", rj, python, script, "--no-cuda",
		"--num-iters", "3", "--num-batches-per-iter", "2", "--num-warmup-batches", "1", "--batch-size", "8", "--image-size", "16")
	assertCode(t, l, 0)
	out := l.stdout()
	sum := summaryAfterRanks(t, out)
	t.Logf("console summary:\n%s", sum)
	m := regexp.MustCompile(`(?m)^\[0\] Total img/sec on 4 CPU\(s\): ([0-9.]+) \+-`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("rank 0 printed no total:\n%s", e2e.Tail(out, 2000))
	}
	printed, _ := strconv.ParseFloat(m[1], 64)
	rep := readReport(t, rj)
	mr := metric(t, rep, bench.MetricHorovod.Name)
	if mr.RanksReporting != 4 || len(mr.Ranks) != 4 {
		t.Fatalf("%s: want all 4 ranks", mr.Coverage)
	}
	for _, rr := range mr.Ranks {
		if rr.N != 3 {
			t.Errorf("rank %d: %d samples, want the 3 iterations", rr.Rank, rr.N)
		}
	}
	checkSum(t, mr)
	// Iteration figures and the total are printed with one decimal: four
	// rank means and the total are each off by at most 0.05.
	if d := math.Abs(mr.Value - printed); d > 0.05*5+1e-9 {
		t.Errorf("launcher total %.2f vs the script's all-reduced total %.1f", mr.Value, printed)
	}
	if want := fmt.Sprintf("\n  total         %.2f ± ", mr.Value); !strings.Contains(sum, want) {
		t.Errorf("summary lacks the total %q", want)
	}
}

// rateRanks print "rate 100+10R" and "rate 102+10R": rank R's mean is
// 101+10R, so 4 ranks sum to 464 and rank 0 alone says 101.
var rateRanks = []string{"sh", "-c", `echo "rate $((100 + 10 * RANK))"; echo "rate not a number"; echo "rate $((102 + 10 * RANK))"`}

const rateMetric = `myips=^rate (?P<value>[0-9.]+)`

func TestBenchCustomMetric(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		scope []string
		value float64
		line  string
	}{
		{nil, 464, "myips [no unit, per rank, measured on 4 of 4 ranks]\n  total         464.00 ± "},
		{[]string{"--metric-scope", "global"}, 101, "myips [no unit, global, printed by rank 0]\n  value         101.00 ± "},
	} {
		t.Run(fmt.Sprint(tc.scope), func(t *testing.T) {
			t.Parallel()
			rj := filepath.Join(t.TempDir(), "r.json")
			args := append([]string{"-l", "-np", "4", "--warmup-steps", "0", "--metric", rateMetric, "--report", rj}, tc.scope...)
			l := startLauncher(t, false, append(args, rateRanks...)...)
			assertCode(t, l, 0)
			sum := summaryAfterRanks(t, l.stdout())
			t.Logf("console summary:\n%s", sum)
			if !strings.Contains(sum, tc.line) {
				t.Errorf("summary lacks %q", tc.line)
			}
			mr := metric(t, readReport(t, rj), "myips")
			if mr.Value != tc.value || mr.RanksReporting != 4 {
				t.Errorf("myips %v on %d ranks, want %v on 4", mr.Value, mr.RanksReporting, tc.value)
			}
			if tc.scope == nil {
				checkSum(t, mr)
			}
		})
	}
}

// TestBenchSameWithoutTags: the summary and --report do not depend on the
// console's tags (the collector attributes each line by the rank whose
// output frame carried it). The same job runs untagged (the default into
// a file), with -l and with --tag-output: every report has the same
// per-rank means and total, and the untagged console holds exactly the
// lines the ranks printed, then the summary.
func TestBenchSameWithoutTags(t *testing.T) {
	t.Parallel()
	type run struct {
		stdout string
		rep    bench.Report
	}
	runs := map[string]run{}
	for _, tags := range [][]string{nil, {"-l"}, {"--tag-output"}} {
		rj := filepath.Join(t.TempDir(), "r.json")
		args := append(append([]string{"-np", "4", "--warmup-steps", "0", "--metric", rateMetric, "--report", rj}, tags...), rateRanks...)
		l := startLauncher(t, false, args...)
		assertCode(t, l, 0)
		runs[strings.Join(tags, " ")] = run{l.stdout(), readReport(t, rj)}
	}
	want := map[int]float64{0: 101, 1: 111, 2: 121, 3: 131}
	for name, r := range runs {
		mr := metric(t, r.rep, "myips")
		got := map[int]float64{}
		for _, rr := range mr.Ranks {
			got[rr.Rank] = rr.Mean
		}
		if mr.Value != 464 || mr.RanksReporting != 4 || !maps.Equal(got, want) {
			t.Errorf("tags %q: total %v on %d ranks, means %v; want 464 on 4, %v", name, mr.Value, mr.RanksReporting, got, want)
		}
	}
	out := runs[""].stdout
	i := strings.Index(out, "\nbench: ")
	if i < 0 {
		t.Fatalf("untagged run: no summary in stdout:\n%s", out)
	}
	ranks := lines(out[:i+1])
	slices.Sort(ranks)
	var wantLines []string
	for r := range 4 {
		wantLines = append(wantLines, fmt.Sprintf("rate %d", 100+10*r), fmt.Sprintf("rate %d", 102+10*r), "rate not a number")
	}
	slices.Sort(wantLines)
	if !slices.Equal(ranks, wantLines) {
		t.Errorf("untagged rank lines %q, want exactly %q", ranks, wantLines)
	}
}
