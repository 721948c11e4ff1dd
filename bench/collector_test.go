package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"
)

// runCollector starts c.Run the way the launcher does and returns a
// function that closes c, waits for Run and returns its error.
func runCollector(t *testing.T, ctx context.Context, c *Collector) func() error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return func() error {
		c.Close()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after Close")
			return nil
		}
	}
}

// tfLine prints a tf_cnn_benchmarks step line with its exact format.
func tfLine(step int, v float64) []byte {
	return fmt.Appendf(nil, "%d\t%s\t%.3f\n", step, fmt.Sprintf("images/sec: %.1f +/- %.1f (jitter = %.1f)", v, 1.0, 2.0), 7.1)
}

func TestCollectorStraggler(t *testing.T) {
	opts := DefaultOptions()
	opts.BaselineIPS = 1000
	c, err := NewCollector(opts)
	if err != nil {
		t.Fatal(err)
	}
	wait := runCollector(t, t.Context(), c)
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	hosts := []string{"a", "a", "a", "a", "b", "b", "b", "b"}
	var wg sync.WaitGroup
	for r := range 8 {
		wg.Go(func() {
			base := 1000.0
			if r == 5 {
				base = 800 // 20% slower
			}
			d := float64(r + 1)
			for i := range 20 {
				v := base + d
				if i%2 == 1 {
					v = base - d
				}
				c.Observe(r, hosts[r], t0.Add(time.Duration(i)*time.Second), tfLine(10*(i+1), v))
				c.Observe(r, hosts[r], t0, []byte("some unrelated log line\n"))
			}
		})
	}
	wg.Wait()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	rep := c.Report(Meta{Ranks: 8, Hosts: []string{"a", "b"}, Start: t0})
	if rep.Lines.Observed != 320 || rep.Lines.Dropped != 0 {
		t.Errorf("lines %+v, want 320 observed, none dropped", rep.Lines)
	}
	mr, ok := findMetric(rep, MetricTFCNN.Name)
	if !ok {
		t.Fatal("tf_cnn metric missing")
	}
	sum, sq := 0.0, 0.0
	for _, rr := range mr.Ranks {
		sum += rr.Mean
		sq += *rr.CI95 * *rr.CI95
	}
	if !near(mr.Value, sum) || !near(mr.Value, 7800) || !near(*mr.CI95, math.Sqrt(sq)) {
		t.Errorf("total %v ± %v; want sum of means %v = 7800 ± %v", mr.Value, *mr.CI95, sum, math.Sqrt(sq))
	}
	if len(mr.Stragglers) != 1 || mr.Stragglers[0].Rank != 5 || mr.Stragglers[0].Host != "b" || !near(mr.Stragglers[0].DeviationPct, -20) {
		t.Errorf("stragglers %+v, want rank 5 on b at -20%%", mr.Stragglers)
	}
	if s := mr.SlowestRank; s == nil || s.Rank != 5 || s.Host != "b" {
		t.Errorf("slowest rank %+v", s)
	}
	if s := mr.SlowestHost; s == nil || s.Host != "b" || !near(s.Value, 950) || !near(s.DeviationPct, -2.5641025641025643) {
		t.Errorf("slowest host %+v, want b at 950/rank (median host 975)", s)
	}
	if len(mr.Hosts) != 2 || !near(mr.Hosts[0].Total, 4000) || !near(mr.Hosts[1].Total, 3800) {
		t.Errorf("hosts %+v", mr.Hosts)
	}
	if mr.Efficiency == nil || !near(*mr.Efficiency, 7800.0/8000) {
		t.Errorf("efficiency %v, want 0.975", mr.Efficiency)
	}
	if mr.Coverage != "measured on 8 of 8 ranks" || mr.TimeAxis != AxisSeconds || mr.Ranks[0].Series[19].T != 19 {
		t.Errorf("coverage %q axis %q", mr.Coverage, mr.TimeAxis)
	}
	// A threshold above the slowdown flags nobody.
	opts.StragglerThreshold = 0.25
	c2, _ := NewCollector(opts)
	c2.acc = c.acc
	if got := c2.Report(Meta{}); len(findMetricMust(t, got, MetricTFCNN.Name).Stragglers) != 0 {
		t.Error("threshold 25%: rank 5 (-20%) must not be flagged")
	}
}

func findMetricMust(t *testing.T, rep Report, name string) MetricReport {
	t.Helper()
	mr, ok := findMetric(rep, name)
	if !ok {
		t.Fatalf("metric %s missing", name)
	}
	return mr
}

func TestObserveNeverBlocks(t *testing.T) {
	opts := DefaultOptions()
	opts.QueueSize = 4
	c, err := NewCollector(opts)
	if err != nil {
		t.Fatal(err)
	}
	// No Run yet: the queue fills after 4 lines and the rest must drop.
	finished := make(chan struct{})
	var wg sync.WaitGroup
	go func() {
		for r := range 4 {
			wg.Go(func() {
				for i := range 25 {
					c.Observe(r, "h", time.Time{}, tfLine(i+1, 100))
				}
			})
		}
		wg.Wait()
		close(finished)
	}()
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		t.Fatal("Observe blocked on a full queue")
	}
	if got := c.dropped.Load(); got != 96 {
		t.Errorf("dropped %d, want 96", got)
	}
	wait := runCollector(t, t.Context(), c)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	c.Observe(0, "h", time.Time{}, tfLine(99, 100)) // after Close: dropped, not stuck
	rep := c.Report(Meta{})
	if rep.Lines.Observed != 101 || rep.Lines.Dropped != 97 {
		t.Errorf("lines %+v, want 101 observed, 97 dropped", rep.Lines)
	}
	mr := findMetricMust(t, rep, MetricTFCNN.Name)
	n := 0
	for _, rr := range mr.Ranks {
		n += rr.N
	}
	if n != 4 {
		t.Errorf("parsed %d samples, want the 4 queued", n)
	}
}

func TestCollectorRunLifecycle(t *testing.T) {
	m, err := ParseMetric(`loss=^loss (?P<value>\S+)$`, ScopeGlobal)
	if err != nil {
		t.Fatal(err)
	}
	opts := DefaultOptions()
	opts.Metrics = []Recognizer{m}
	c, err := NewCollector(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	for i := range 10 {
		c.Observe(-1, "", time.Time{}, fmt.Appendf(nil, "[3] loss %d\r\n", i))
	}
	_ = c.Report(Meta{}) // a snapshot while Run works must be safe
	stop := errors.New("rank 2 failed")
	cancel(stop)
	if err := <-done; !errors.Is(err, stop) {
		t.Errorf("Run after cancel = %v, want the cause", err)
	}
	if err := c.Run(t.Context()); !errors.Is(err, ErrRunning) {
		t.Errorf("second Run = %v, want ErrRunning", err)
	}
	c.Close()
	c.Close()
	rep := c.Report(Meta{})
	mr := findMetricMust(t, rep, "loss")
	if mr.SourceRank != 3 || mr.RanksTotal != 4 || rep.Lines.Observed != 10 {
		t.Errorf("custom metric from the tag's rank: %+v lines %+v", mr, rep.Lines)
	}
	var got int
	for _, rr := range mr.Ranks {
		got += rr.N + rr.Warmup
	}
	if got+int(rep.Lines.Dropped) != 10 {
		t.Errorf("%d samples + %d dropped, want 10 lines accounted for", got, rep.Lines.Dropped)
	}
	if len(rep.Options.CustomMetrics) != 1 || rep.Options.CustomMetrics[0] != "loss" {
		t.Errorf("custom metrics %v", rep.Options.CustomMetrics)
	}
}

func TestNewCollectorOptions(t *testing.T) {
	dup, _ := ParseMetric(`x=(?P<value>\d+)`, ScopeRank)
	dup2, _ := ParseMetric(`x=v(?P<value>\d+)`, ScopeRank)
	for _, o := range []Options{
		{WarmupSteps: -2},
		{StragglerThreshold: 1},
		{StragglerThreshold: -0.1},
		{BaselineIPS: math.Inf(1)},
		{BaselineIPS: math.NaN()},
		{BaselineIPS: -1},
		{QueueSize: -1},
		{Metrics: []Recognizer{dup, dup2}},
	} {
		if _, err := NewCollector(o); err == nil {
			t.Errorf("NewCollector(%+v): want error", o)
		}
	}
	c, err := NewCollector(Options{})
	if err != nil || c.opts.StragglerThreshold != DefaultStragglerThreshold || cap(c.q) != DefaultQueueSize {
		t.Errorf("zero Options: %v threshold %v queue %d", err, c.opts.StragglerThreshold, cap(c.q))
	}
}

func TestWarmupCut(t *testing.T) {
	steps := func(ss ...int) []point {
		ps := make([]point, len(ss))
		for i, s := range ss {
			ps[i] = point{step: s}
		}
		return ps
	}
	twenty := make([]int, 20)
	for i := range twenty {
		twenty[i] = -1
	}
	tests := []struct {
		name       string
		ps         []point
		steps      int
		toolWarmup bool
		want       int
	}{
		{"default, tool leaves warm-up out", steps(1, 10, 20), -1, true, 0},
		{"default 10%", steps(twenty...), -1, false, 2},
		{"default 10% of 9 is none", steps(1, 2, 3, 4, 5, 6, 7, 8, 9), -1, false, 0},
		{"by step number", steps(1, 10, 20, 30, 40), 20, true, 3},
		{"by step from first step", steps(100, 110, 120), 15, false, 2},
		{"zero", steps(1, 2, 3), 0, false, 0},
		{"no steps: count samples", steps(-1, -1, -1, -1), 3, false, 3},
		{"steps reset: count samples", steps(50, 100, 50, 100), 1, false, 1},
		{"more than all", steps(1, 2), 10, false, 2},
	}
	for _, tt := range tests {
		if got := warmupCut(tt.ps, tt.steps, tt.toolWarmup); got != tt.want {
			t.Errorf("%s: warmupCut = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestAllWarmupRankDoesNotReport(t *testing.T) {
	opts := DefaultOptions()
	opts.WarmupSteps = 100
	c, _ := NewCollector(opts)
	wait := runCollector(t, t.Context(), c)
	c.Observe(0, "a", time.Time{}, tfLine(10, 500))
	c.Observe(1, "a", time.Time{}, tfLine(10, 500))
	c.Observe(1, "a", time.Time{}, tfLine(200, 600))
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	mr := findMetricMust(t, c.Report(Meta{}), MetricTFCNN.Name)
	if mr.RanksReporting != 1 || mr.Value != 600 || mr.CI95 != nil || len(mr.Notes) < 2 {
		t.Errorf("%+v: want only rank 1 (600, no interval) and notes", mr)
	}
}
