package bench

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// buildSynthetic compiles examples/synthetic into a temporary directory.
func buildSynthetic(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build examples/synthetic")
	}
	bin := filepath.Join(t.TempDir(), "synthetic")
	cmd := exec.CommandContext(t.Context(), goBin, "build", "-o", bin, "github.com/gangway-hpc/gangway/examples/synthetic")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build examples/synthetic: %v\n%s", err, out)
	}
	return bin
}

// TestSyntheticEndToEnd runs four ranks of examples/synthetic as separate
// processes, rank 2 slowed by half, and feeds their stdout to a Collector the
// way the launcher does. On a shared machine an unslowed rank can be a few
// percent slow too (SMT siblings, caches), so the test asks that rank 2 be
// flagged and be the slowest, not that it be the only straggler.
func TestSyntheticEndToEnd(t *testing.T) {
	bin := buildSynthetic(t)
	c, err := NewCollector(DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	wait := runCollector(t, t.Context(), c)
	const ranks = 4
	hosts := []string{"h0", "h0", "h1", "h1"}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, ranks)
	for r := range ranks {
		cmd := exec.CommandContext(t.Context(), bin, "-steps", "40", "-warmup-steps", "4", "-display-every", "5",
			"-batch-size", "16", "-work", "800", "-slow-ranks", "2", "-slowdown", "0.5")
		cmd.Env = append(os.Environ(), fmt.Sprintf("RANK=%d", r))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				c.Observe(r, hosts[r], time.Now(), sc.Bytes())
			}
			errs[r] = cmd.Wait()
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	rep := c.Report(Meta{Command: []string{bin}, Hosts: []string{"h0", "h1"}, Ranks: ranks, Start: start, End: time.Now()})
	var summary strings.Builder
	if err := WriteSummary(&summary, rep); err != nil {
		t.Fatal(err)
	}
	t.Logf("summary:\n%s", summary.String())
	if *plotDir != "" {
		if err := WritePlot(filepath.Join(*plotDir, "synthetic-e2e.png"), rep); err != nil {
			t.Fatal(err)
		}
	}
	mr := findMetricMust(t, rep, MetricTFCNN.Name)
	if mr.RanksReporting != ranks || rep.Lines.Dropped != 0 {
		t.Fatalf("%s, %d dropped", mr.Coverage, rep.Lines.Dropped)
	}
	sum := 0.0
	for _, rr := range mr.Ranks {
		sum += rr.Mean
		// Steps 1, 5, 10, ..., 40 are printed; the tool leaves warm-up out.
		if rr.N != 9 || rr.Warmup != 0 || rr.Final == nil || rr.CI95 == nil {
			t.Errorf("rank %d: n=%d warmup=%d final=%v ci=%v", rr.Rank, rr.N, rr.Warmup, rr.Final, rr.CI95)
		}
	}
	if !near(mr.Value, sum) {
		t.Errorf("total %v != sum of rank means %v", mr.Value, sum)
	}
	flagged := slices.ContainsFunc(mr.Stragglers, func(o Outlier) bool { return o.Rank == 2 && o.Host == "h1" })
	if !flagged || mr.SlowestRank == nil || mr.SlowestRank.Rank != 2 {
		t.Errorf("stragglers %+v, slowest %+v: want rank 2 on h1 flagged and slowest", mr.Stragglers, mr.SlowestRank)
	}
}
