package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestScaleFlags: -scale-counts and -scale-widths take comma-separated
// integers in their ranges and name the first one that is not.
func TestScaleFlags(t *testing.T) {
	for _, tc := range []struct {
		args           []string
		counts, widths []int
		err            string
	}{
		{nil, nil, nil, ""},
		{[]string{"-scale-counts", "1024, 10000", "-scale-widths", "32,0"}, []int{1024, 10000}, []int{32, 0}, ""},
		{[]string{"-scale-counts", "0"}, nil, nil, `-scale-counts: "0" is not a count from 1 to 20000`},
		{[]string{"-scale-counts", "256,many"}, nil, nil, `-scale-counts: "many" is not a count`},
		{[]string{"-scale-widths", "1"}, nil, nil, `-scale-widths: "1" is not 0 (flat) or a tree width from 2 to 1024`},
		{[]string{"-scale-widths", "4,2048"}, nil, nil, `"2048" is not 0 (flat)`},
	} {
		var stderr strings.Builder
		o, err := parseFlags(tc.args, &stderr)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want %q", tc.args, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case tc.err == "" && (!slices.Equal(o.scaleCounts, tc.counts) || !slices.Equal(o.scaleWidths, tc.widths)):
			t.Errorf("%q: counts %v widths %v, want %v %v", tc.args, o.scaleCounts, o.scaleWidths, tc.counts, tc.widths)
		}
	}
}

// TestScaleRanks: -scale-ranks takes 1 to 16 ranks per agent; a case of
// more than one names them, one rank keeps the name the targets read.
func TestScaleRanks(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
		err  string
	}{
		{nil, 1, ""},
		{[]string{"-scale-ranks", "8"}, 8, ""},
		{[]string{"-scale-ranks", "0"}, 0, "-scale-ranks must be 1..16"},
		{[]string{"-scale-ranks", "17"}, 0, "-scale-ranks must be 1..16"},
	} {
		o, err := parseFlags(tc.args, io.Discard)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%q: %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || o.scaleRanks != tc.want {
			t.Errorf("%q: %d, %v; want %d", tc.args, o.scaleRanks, err, tc.want)
		}
	}
	if got, want := scaleRanksCase(1024, 8, 32), "1024 agents x 8 ranks, tree (--tree-width 32)"; got != want {
		t.Errorf("case: %q, want %q", got, want)
	}
	if got := scaleRanksCase(1024, 1, 0); got != scaleCase(1024, 0) {
		t.Errorf("one rank per agent: %q, want %q", got, scaleCase(1024, 0))
	}
}

func TestCPUAt(t *testing.T) {
	t0 := time.Unix(1000, 0)
	trace := []cpuSample{{t0, 10 * time.Millisecond}, {t0.Add(time.Second), 50 * time.Millisecond}, {t0.Add(2 * time.Second), 70 * time.Millisecond}}
	for _, c := range []struct {
		at   time.Duration
		want time.Duration
	}{
		{-time.Millisecond, 0},
		{0, 10 * time.Millisecond},
		{999 * time.Millisecond, 10 * time.Millisecond},
		{time.Second, 50 * time.Millisecond},
		{3 * time.Second, 70 * time.Millisecond},
	} {
		if got := cpuAt(trace, t0.Add(c.at)); got != c.want {
			t.Errorf("cpuAt(t0%+v) = %v, want %v", c.at, got, c.want)
		}
	}
	if got := cpuAt(nil, t0); got != 0 {
		t.Errorf("cpuAt of no trace = %v", got)
	}
}

// TestTasksFit: a scale count is skipped, with the limit named, when its
// ranks (two tasks each) and the tasks running now would pass pid_max or
// threads-max; an unknown limit (0) does not skip.
func TestTasksFit(t *testing.T) {
	for _, tc := range []struct {
		n, k int
		l    taskLimits
		err  string
	}{
		{10000, 1, taskLimits{32768, 1031013, 900}, ""},
		{1536, 8, taskLimits{32768, 1031013, 900}, ""},
		{2048, 8, taskLimits{32768, 1031013, 300}, "2048 agents x 8 ranks need about 35068 tasks (16384 ranks at two tasks each, 300 running now, 2000 for threads), over this machine's kernel.pid_max 32768"},
		{1024, 8, taskLimits{4194304, 15000, 100}, "over this machine's kernel.threads-max 15000"},
		{100000, 16, taskLimits{}, ""},
	} {
		err := tasksFit(tc.n, tc.k, tc.l)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%d x %d, %+v: %v, want none", tc.n, tc.k, tc.l, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%d x %d, %+v: %v, want %q", tc.n, tc.k, tc.l, err, tc.err)
		}
	}
	if l := readTaskLimits(); l.pidMax <= 0 || l.now <= 0 {
		t.Errorf("readTaskLimits here: %+v, want pid_max and the tasks running", l)
	}
}
