package bench

import (
	"math"
	"testing"
)

func TestGrade(t *testing.T) {
	for _, tc := range []struct {
		dev, thr float64
		want     int
	}{
		{+3, 5, gradeNormal},
		{0, 5, gradeNormal},
		{-0.3, 5, gradeNormal}, // a host 0.3% below the median is not a straggler
		{-1, 5, gradeNormal},
		{-1.5, 5, gradeSlight},
		{-2.5, 5, gradeSlight},
		{-3, 5, gradeSlow},
		{-5, 5, gradeSlow},
		{-5.1, 5, gradeStraggler},
		{-25, 5, gradeStraggler},
		{-0.3, 1, gradeSlight}, // threshold 1%: slight from 0.2%
		{-0.1, 1, gradeNormal},
		{-0.6, 1, gradeSlow},
		{-1.2, 1, gradeStraggler},
		{-15, 20, gradeSlow},
	} {
		if got := grade(tc.dev, tc.thr); got != tc.want {
			t.Errorf("grade(%v, %v) = %d, want %d", tc.dev, tc.thr, got, tc.want)
		}
	}
}

func TestGradeLabels(t *testing.T) {
	got := gradeLabels(5)
	want := [4]string{"within 1% of median", "1–2.5% below", "2.5–5% below", "straggler: >5% below"}
	if got != want {
		t.Errorf("gradeLabels(5) = %q, want %q", got, want)
	}
}

func TestFitRange(t *testing.T) {
	for _, tc := range []struct {
		name   string
		vals   []float64
		lo, hi float64
	}{
		{"margin at least 1% of the top", []float64{2800, 2840, 2900}, 2771, 2929},
		{"not forced to zero", []float64{2000, 3000}, 1880, 3120},
		{"nonnegative never below zero", []float64{1, 100}, 0, 111.88},
		{"negative allowed", []float64{-10, 10}, -12.4, 12.4},
		{"one value: 1% margin", []float64{500}, 495, 505},
		{"zero only", []float64{0}, 0, 1},
		{"nothing", nil, 0, 1},
		{"NaN and Inf ignored", []float64{math.NaN(), 10, math.Inf(1), 20}, 8.8, 21.2},
	} {
		lo, hi := fitRange(tc.vals...)
		if math.Abs(lo-tc.lo) > 1e-9 || math.Abs(hi-tc.hi) > 1e-9 {
			t.Errorf("%s: fitRange(%v) = %v, %v; want %v, %v", tc.name, tc.vals, lo, hi, tc.lo, tc.hi)
		}
	}
}

func TestRankBars(t *testing.T) {
	mr := MetricReport{
		MedianRank: 1000,
		Stragglers: []Outlier{{Rank: 2, Host: "b", Value: 800}},
		Ranks: []RankReport{
			{Rank: 0, Host: "a", N: 5, Mean: 1000},
			{Rank: 1, Host: "a", N: 5, Mean: 997},  // 0.3% below: normal
			{Rank: 2, Host: "b", N: 5, Mean: 800},  // straggler
			{Rank: 3, Host: "b", N: 5, Mean: 980},  // 2% below
			{Rank: 4, Host: "c", N: 5, Mean: 940},  // 6% below but not called a straggler: slow
			{Rank: 5, Host: "c", N: 0, Mean: 0},    // did not report
			{Rank: 6, Host: "c", N: 5, Mean: 1030}, // above
		},
	}
	got := rankBars(mr, 0.05)
	want := []struct {
		rank, grade int
		straggler   bool
	}{{0, gradeNormal, false}, {1, gradeNormal, false}, {2, gradeStraggler, true}, {3, gradeSlight, false},
		{4, gradeSlow, false}, {6, gradeNormal, false}}
	if len(got) != len(want) {
		t.Fatalf("rankBars: %d bars, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].Rank != w.rank || got[i].Grade != w.grade || got[i].Straggler != w.straggler {
			t.Errorf("bar %d = %+v, want rank %d grade %d straggler %v", i, got[i], w.rank, w.grade, w.straggler)
		}
	}
	if d := got[1].DevPct; math.Abs(d+0.3) > 1e-9 {
		t.Errorf("rank 1 deviation %v, want -0.3", d)
	}
	mr.Hosts = []HostReport{{Host: "a", PerRank: 998.5}, {Host: "b", PerRank: 890}, {Host: "c", PerRank: 985}}
	gs := hostGroups(mr, got, 0.05)
	if len(gs) != 3 || gs[0].Host != "a" || gs[0].First != 0 || gs[0].Last != 1 || gs[2].First != 4 || gs[2].Last != 5 {
		t.Fatalf("hostGroups = %+v", gs)
	}
	if gs[0].Grade != gradeNormal || gs[1].Grade != gradeStraggler || gs[2].Grade != gradeNormal {
		t.Errorf("host grades = %d %d %d, want normal, straggler, normal", gs[0].Grade, gs[1].Grade, gs[2].Grade)
	}
}
