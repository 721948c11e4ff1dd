package bench

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The synthetic_untagged_N.log files are the stdout of
// `launcher -np N synthetic -steps 20 -display-every 10 -work 200
// -slow-ranks 1` (examples/synthetic) saved without rank tags, as `launcher
// ... | tee run.log` saves it, with the launcher's own summary at the end.

// finalsIn returns the "total images/sec: X" figures of a log, read
// without bench.
func finalsIn(t *testing.T, path string) []float64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var vs []float64
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "total images/sec: "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatal(err)
			}
			vs = append(vs, f)
		}
	}
	return vs
}

func sum(vs []float64) float64 {
	s := 0.0
	for _, v := range vs {
		s += v
	}
	return s
}

func TestAnalyzeUntagged(t *testing.T) {
	one := filepath.Join("testdata", "synthetic_untagged_1.log")
	for _, tc := range []struct {
		name  string
		files []string
		ranks int
	}{
		{"1 rank", []string{"synthetic_untagged_1.log"}, 1},
		{"4 ranks", []string{"synthetic_untagged_4.log"}, 4},
		{"16 ranks", []string{"synthetic_untagged_16.log"}, 16},
		{"two 1-rank logs", []string{"synthetic_untagged_1.log", "synthetic_untagged_1.log"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var paths []string
			var finals []float64
			for _, f := range tc.files {
				p := filepath.Join("testdata", f)
				paths = append(paths, p)
				finals = append(finals, finalsIn(t, p)...)
			}
			if len(finals) != tc.ranks {
				t.Fatalf("%v hold %d total lines, want %d", tc.files, len(finals), tc.ranks)
			}
			rep, err := AnalyzeFiles(t.Context(), paths, DefaultOptions())
			if err != nil {
				t.Fatal(err)
			}
			mr, ok := findMetric(rep, MetricTFCNN.Name)
			if !ok {
				t.Fatal("no tf_cnn metric")
			}
			if rep.Meta.Ranks != tc.ranks || mr.RanksReporting != tc.ranks || mr.RanksTotal != tc.ranks {
				t.Errorf("meta %d ranks, metric on %d of %d: want %d", rep.Meta.Ranks, mr.RanksReporting, mr.RanksTotal, tc.ranks)
			}
			notes := strings.Join(mr.Notes, "\n")
			if tc.ranks == 1 {
				// One rank: its series and statistics, as for a tagged log.
				if len(mr.Ranks) != 1 || mr.Ranks[0].Final == nil || *mr.Ranks[0].Final != finals[0] || mr.CI95 == nil {
					t.Errorf("one rank: %+v", mr.Ranks)
				}
				if strings.Contains(notes, "untagged") {
					t.Errorf("one rank's log needs no caveat: %q", notes)
				}
				return
			}
			if !near(mr.Value, sum(finals)) {
				t.Errorf("total %v, want the sum of the %d total lines %v", mr.Value, len(finals), sum(finals))
			}
			if len(mr.Ranks) != 0 || mr.CI95 != nil || mr.SlowestRank != nil || len(mr.Stragglers) != 0 {
				t.Errorf("ranks not told apart, yet per-rank figures: %+v", mr)
			}
			if !strings.Contains(notes, "sum of the "+strconv.Itoa(tc.ranks)+" end-of-run figures") {
				t.Errorf("notes %q do not say the total is a sum of end-of-run figures", notes)
			}
			var buf strings.Builder
			if err := WriteSummary(&buf, rep); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(buf.String(), "bench: "+strconv.Itoa(tc.ranks)+" ranks\n") || strings.Contains(buf.String(), "\n  stragglers") {
				t.Errorf("summary:\n%s", buf.String())
			}
		})
	}
	t.Run("tagged still by rank", func(t *testing.T) {
		rep, err := AnalyzeFiles(t.Context(), []string{"testdata/tfcnn_mpirun.log"}, DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		mr, _ := findMetric(rep, MetricTFCNN.Name)
		if len(mr.Ranks) != 4 || mr.RanksReporting != 4 || strings.Contains(strings.Join(mr.Notes, "\n"), "untagged") {
			t.Errorf("tagged log: %+v", mr)
		}
	})

	for _, tc := range []struct {
		name  string
		edit  func(string) string
		extra []string
		err   string
	}{
		{name: "interleaved, no totals", edit: func(s string) string { return dropLines(s, "total images/sec: ") },
			err: "step 1 printed 4 times in"},
		{name: "interleaved, one total", edit: func(s string) string {
			i := strings.Index(s, "total images/sec: ")
			i += strings.IndexByte(s[i:], '\n') + 1
			return s[:i] + dropLines(s[i:], "total images/sec: ")
		}, err: "and 1 end-of-run figure:"},
		{name: "tagged and untagged", edit: func(s string) string { return s }, extra: []string{"testdata/tfcnn_mpirun.log"},
			err: "both tagged and untagged lines"},
		{name: "two 1-rank logs, no totals", edit: func(s string) string { return dropLines(s, "total images/sec: ") },
			extra: []string{"-"}, err: "step lines in 2 files"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "testdata/synthetic_untagged_4.log"
			if len(tc.extra) > 0 && tc.extra[0] == "-" {
				src = one
			}
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(t.TempDir(), "run.log")
			if err := os.WriteFile(p, []byte(tc.edit(string(b))), 0o644); err != nil {
				t.Fatal(err)
			}
			paths := []string{p}
			for _, e := range tc.extra {
				if e == "-" {
					e = p
				}
				paths = append(paths, e)
			}
			_, err = AnalyzeFiles(t.Context(), paths, DefaultOptions())
			if !errors.Is(err, ErrUntaggedRanks) || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "-l") {
				t.Errorf("err = %v, want ErrUntaggedRanks saying %q and how to tag", err, tc.err)
			}
		})
	}
}

func dropLines(s, prefix string) string {
	var keep []string
	for line := range strings.SplitSeq(s, "\n") {
		if !strings.HasPrefix(line, prefix) {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}

// TestAnalyzeUntaggedMore: the step lines show more ranks than printed a
// total (one rank died before its summary).
func TestAnalyzeUntaggedMore(t *testing.T) {
	b, err := os.ReadFile("testdata/synthetic_untagged_4.log")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.LastIndex(s, "total images/sec: ")
	j := strings.IndexByte(s[i:], '\n')
	p := filepath.Join(t.TempDir(), "run.log")
	if err := os.WriteFile(p, []byte(s[:i]+s[i+j+1:]), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := AnalyzeFiles(t.Context(), []string{p}, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	mr, _ := findMetric(rep, MetricTFCNN.Name)
	if mr.RanksReporting != 3 || rep.Meta.Ranks != 4 || !strings.Contains(strings.Join(mr.Notes, "\n"), "at least 4 ranks, but only 3 end-of-run figures") {
		t.Errorf("%d of %d ranks (meta %d), notes %q", mr.RanksReporting, mr.RanksTotal, rep.Meta.Ranks, mr.Notes)
	}
}

// TestAnalyzeUntaggedNoSteps: a custom per-rank metric without a step
// group cannot show interleaved ranks; the report says what it assumed.
func TestAnalyzeUntaggedNoSteps(t *testing.T) {
	p := filepath.Join(t.TempDir(), "run.log")
	if err := os.WriteFile(p, []byte("loss 1.5\nloss 1.25\nloss 1.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := ParseMetric("loss=^loss (?P<value>[0-9.]+)$", ScopeRank)
	if err != nil {
		t.Fatal(err)
	}
	opts := DefaultOptions()
	opts.Metrics = []Recognizer{m}
	rep, err := AnalyzeFiles(t.Context(), []string{p}, opts)
	if err != nil {
		t.Fatal(err)
	}
	mr, ok := findMetric(rep, "loss")
	if !ok || mr.RanksReporting != 1 || !strings.Contains(strings.Join(mr.Notes, "\n"), "without step numbers: taken as one rank's 3 samples") {
		t.Errorf("%+v", mr)
	}
}
