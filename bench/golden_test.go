package bench

import (
	"bytes"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.summary.golden")

// The logs are written by testdata/gen.py with each tool's format strings;
// the figures below are the ones its comments state.
var goldenCases = []struct {
	log       string
	rankHosts []string
	metric    string
	value     float64
	reporting int
	total     int
	source    int // global metrics: the rank whose figure is reported
	straggler []int
}{
	{log: "tfcnn_untagged.log", metric: "tf_cnn_images_per_sec", value: 2840.5, reporting: 1, total: 1},
	{log: "tfcnn_mpirun.log", rankHosts: []string{"a", "a", "b", "b"}, metric: "tf_cnn_images_per_sec",
		value: 1000 + 1010 + 990 + 800, reporting: 4, total: 4, straggler: []int{3}},
	{log: "tfcnn_gangway_ewma.log", metric: "tf_cnn_images_per_sec", value: 3001, reporting: 2, total: 2},
	{log: "horovod_hvdrun.log", metric: "horovod_img_per_sec", value: 300.5, reporting: 1, total: 4},
	{log: "horovod_hvdrun.log", metric: "horovod_total_img_per_sec", value: 1202, reporting: 1, total: 4},
	{log: "dllogger_tf1.log", metric: "dllogger_total_ips", value: 2750.125, reporting: 1, total: 2},
	{log: "dllogger_pytorch.log", metric: "dllogger_total_ips", value: 2901.77, reporting: 1, total: 1},
	{log: "nccl_mpirun.log", metric: "nccl_busbw", value: 30.25, reporting: 1, total: 1},
	{log: "nccl_nocheck.log", metric: "nccl_busbw", value: 30.25, reporting: 1, total: 1},
	{log: "generic_total.log", metric: "total_images_per_sec", value: 1234.56, reporting: 1, total: 1},
}

func findMetric(rep Report, name string) (MetricReport, bool) {
	for _, m := range rep.Metrics {
		if m.Name == name {
			return m, true
		}
	}
	return MetricReport{}, false
}

func TestAnalyzeFilesGolden(t *testing.T) {
	for _, tc := range goldenCases {
		t.Run(tc.log+"/"+tc.metric, func(t *testing.T) {
			opts := DefaultOptions()
			opts.RankHosts = tc.rankHosts
			path := filepath.Join("testdata", tc.log)
			rep, err := AnalyzeFiles(t.Context(), []string{path}, opts)
			if err != nil {
				t.Fatal(err)
			}
			mr, ok := findMetric(rep, tc.metric)
			if !ok {
				t.Fatalf("metric %s missing; report has %d metrics", tc.metric, len(rep.Metrics))
			}
			if !near(mr.Value, tc.value) || mr.RanksReporting != tc.reporting || mr.RanksTotal != tc.total {
				t.Errorf("value %v on %d of %d ranks; want %v on %d of %d", mr.Value, mr.RanksReporting, mr.RanksTotal,
					tc.value, tc.reporting, tc.total)
			}
			if mr.Scope == "rank" {
				sum := 0.0
				for _, rr := range mr.Ranks {
					sum += rr.Mean
				}
				if !near(sum, mr.Value) {
					t.Errorf("total %v != sum of rank means %v", mr.Value, sum)
				}
			} else if mr.SourceRank != tc.source {
				t.Errorf("source rank %d, want %d", mr.SourceRank, tc.source)
			}
			var got []int
			for _, s := range mr.Stragglers {
				got = append(got, s.Rank)
			}
			if !equalInts(got, tc.straggler) {
				t.Errorf("stragglers %v, want %v", got, tc.straggler)
			}
			var buf bytes.Buffer
			if err := WriteSummary(&buf, rep); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", strings.TrimSuffix(tc.log, ".log")+".summary.golden")
			if *update {
				if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./bench -run Golden -update)", err)
			}
			if buf.String() != string(want) {
				t.Errorf("summary differs from %s:\n--- got\n%s--- want\n%s", golden, buf.String(), want)
			}
		})
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestAnalyzeFilesDetails(t *testing.T) {
	opts := DefaultOptions()
	rep, err := AnalyzeFiles(t.Context(), []string{"testdata/tfcnn_mpirun.log", "testdata/horovod_hvdrun.log"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Metrics) != 3 || rep.Metrics[0].Scope != "rank" || rep.Metrics[1].Scope != "rank" || rep.Metrics[2].Scope != "global" {
		t.Fatalf("want two rank metrics then one global, got %+v", rep.Metrics)
	}
	hvd, _ := findMetric(rep, "horovod_img_per_sec")
	if hvd.Coverage != "measured on 1 of 4 ranks" || !strings.Contains(strings.Join(hvd.Notes, "\n"), "only 1 of 4 ranks") {
		t.Errorf("horovod coverage %q notes %q: must say one rank measured", hvd.Coverage, hvd.Notes)
	}
	tf, _ := findMetric(rep, "tf_cnn_images_per_sec")
	if tf.TimeAxis != AxisLine || rep.Lines.Observed == 0 {
		t.Errorf("untimed logs: axis %q, lines %d", tf.TimeAxis, rep.Lines.Observed)
	}
	r0 := tf.Ranks[0]
	if r0.N != 12 || r0.Warmup != 0 || r0.Final == nil || *r0.Final != 1000 || r0.CI95 == nil {
		t.Errorf("rank 0: %+v", r0)
	}
	// Per step the values alternate 1002.5 / 997.5: sd and t interval by hand.
	// sd = 2.5*sqrt(12/11); t(0.975, 11) = 2.200985.
	if !near(r0.StdDev, 2.5*1.0444659357341871) || !nearTol(*r0.CI95, 2.200985*r0.StdDev/3.4641016151377544, 1e-6) {
		t.Errorf("rank 0 sd %v ci %v", r0.StdDev, *r0.CI95)
	}
	// DLLogger lines carry time stamps: seconds from the first.
	rep, err = AnalyzeFiles(t.Context(), []string{"testdata/dllogger_tf1.log"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	dl := rep.Metrics[0]
	if dl.TimeAxis != AxisSeconds || dl.Ranks[0].Series[1].T != 1.107961 || rep.Meta.Ranks != 2 {
		t.Errorf("dllogger axis %q series %+v ranks %d", dl.TimeAxis, dl.Ranks[0].Series[:2], rep.Meta.Ranks)
	}
	// Default warm-up for a tool that does not leave it out: 10% of samples.
	if w := dl.Ranks[0].Warmup; w != 0 {
		t.Errorf("8 samples: 10%% is 0 samples, got %d", w)
	}
}

func nearTol(a, b, rel float64) bool {
	d := a - b
	if d < 0 {
		d = -d
	}
	return d <= rel*max(1, a, -a, b, -b)
}

func TestAnalyzeFilesErrors(t *testing.T) {
	if _, err := AnalyzeFiles(t.Context(), nil, DefaultOptions()); err == nil {
		t.Error("no paths: want error")
	}
	_, err := AnalyzeFiles(t.Context(), []string{"testdata/missing.log"}, DefaultOptions())
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "testdata/missing.log") {
		t.Errorf("missing file: %v", err)
	}
	long := filepath.Join(t.TempDir(), "long.log")
	data := append([]byte("ok\n"), bytes.Repeat([]byte("x"), maxLine+1)...)
	if err := os.WriteFile(long, data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = AnalyzeFiles(t.Context(), []string{long}, DefaultOptions())
	if err == nil || !strings.Contains(err.Error(), long+":2:") {
		t.Errorf("over-long line: want error naming %s:2, got %v", long, err)
	}
	bad := DefaultOptions()
	bad.StragglerThreshold = 1.5
	if _, err := AnalyzeFiles(t.Context(), []string{"testdata/generic_total.log"}, bad); err == nil {
		t.Error("threshold 1.5: want error")
	}
}
