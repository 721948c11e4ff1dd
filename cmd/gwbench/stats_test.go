package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want Summary
	}{
		{nil, Summary{}},
		{[]float64{3}, Summary{N: 1, Median: 3, Min: 3, Max: 3}},
		{[]float64{5, 1, 3}, Summary{N: 3, Median: 3, Min: 1, Max: 5}},
		{[]float64{4, 1, 3, 2}, Summary{N: 4, Median: 2.5, Min: 1, Max: 4}},
	} {
		in := append([]float64(nil), tc.in...)
		if got := Summarize(tc.in); got != tc.want {
			t.Errorf("Summarize(%v) = %+v, want %+v", tc.in, got, tc.want)
		}
		for i := range in {
			if in[i] != tc.in[i] {
				t.Errorf("Summarize reordered its input: %v", tc.in)
			}
		}
	}
}

func TestRatio(t *testing.T) {
	if r := Ratio(50, 500); r != 0.1 {
		t.Errorf("Ratio(50, 500) = %v", r)
	}
	for _, p := range [][2]float64{{1, 0}, {0, 1}, {-1, 2}} {
		if r := Ratio(p[0], p[1]); r != 0 {
			t.Errorf("Ratio(%v, %v) = %v, want 0 (none)", p[0], p[1], r)
		}
	}
	if s := fmtRatio(0); s != "-" {
		t.Errorf("fmtRatio(0) = %q", s)
	}
	if s := fmtRatio(0.1234); s != "0.123x" {
		t.Errorf("fmtRatio(0.1234) = %q", s)
	}
}

// TestFillRatios: peers get gangway/peer, gangway rows get ours over the
// best peer (lowest median for times, highest for throughput).
func TestFillRatios(t *testing.T) {
	mk := func(metric, name string, k Kind, higher bool, v ...float64) *Result {
		return &Result{Scenario: "s", Case: "c", Metric: metric, Launcher: name, Kind: k, Higher: higher, Values: v}
	}
	gw := mk("t", lGangway, Ours, false, 40, 50, 60)
	cold := mk("t", lGangwayCold, Ours, false, 200)
	hy := mk("t", lHydra, Peer, false, 400, 500)
	mp := mk("t", lMpirun, Peer, false, 1000)
	fail := mk("t", lPdsh, Peer, false)
	tgw := mk("thr", lGangway, Ours, true, 300)
	thy := mk("thr", lHydra, Peer, true, 100)
	tmp := mk("thr", lMpirun, Peer, true, 150)
	floor := mk("thr", lPipes, Floor, true, 1000)
	fillRatios([]*Result{gw, cold, hy, mp, fail, tgw, thy, tmp, floor})
	for _, c := range []struct {
		r     *Result
		ratio float64
		vs    string
	}{
		{gw, 50.0 / 450, lHydra}, {cold, 200.0 / 450, lHydra}, {hy, 50.0 / 450, lGangway}, {mp, 50.0 / 1000, lGangway}, {fail, 0, ""},
		{tgw, 2, lMpirun}, {thy, 3, lGangway}, {tmp, 2, lGangway}, {floor, 0.3, lGangway},
	} {
		if d := c.r.Ratio - c.ratio; d > 1e-9 || d < -1e-9 || c.r.RatioVs != c.vs {
			t.Errorf("%s %s: ratio %v vs %q, want %v vs %q", c.r.Metric, c.r.Launcher, c.r.Ratio, c.r.RatioVs, c.ratio, c.vs)
		}
	}
	if gw.Median != 50 || hy.Median != 450 {
		t.Errorf("medians %v %v", gw.Median, hy.Median)
	}
	var b bytes.Buffer
	writeTable(&b, []*Result{gw, hy, fail})
	for _, want := range []string{"0.111x vs mpiexec.hydra", "450.0", "\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestVerifier(t *testing.T) {
	line := func(rank int, seq int64) string {
		b := make([]byte, lineLen)
		fillLine(b, rank, seq)
		return string(b)
	}
	var s strings.Builder
	for seq := range int64(3) {
		s.WriteString("[0] " + line(0, seq))
		s.WriteString("[1,1]<stdout>:" + line(1, seq))
	}
	s.WriteString("launcher: a message\n")
	v := newVerifier(2, 3)
	if err := v.run(strings.NewReader(s.String())); err != nil {
		t.Fatal(err)
	}
	if v.Good != 6 || v.Bad != 0 || v.Lost() != 0 || v.Gaps != 0 || v.Other != 1 {
		t.Errorf("intact output: %v (other %d)", v, v.Other)
	}

	// Two lines glued (as a launcher that splits at buffer boundaries
	// makes them), one line missing, one line tagged with the wrong rank.
	a, b := line(0, 0), line(1, 0)
	glued := "[0] " + a[:40] + "[1] " + b
	bad := glued + "[0] " + line(0, 2) + "[1] " + line(0, 1)
	v = newVerifier(2, 3)
	if err := v.run(strings.NewReader(bad)); err != nil {
		t.Fatal(err)
	}
	if v.Good != 1 || v.Bad != 2 || v.Gaps != 1 || v.Lost() != 5 {
		t.Errorf("bad output: %v", v)
	}

	v = newVerifier(1, 2)
	v.untagged = true
	if err := v.run(strings.NewReader(line(0, 0) + line(0, 1))); err != nil {
		t.Fatal(err)
	}
	if v.Good != 2 || v.Lost() != 0 {
		t.Errorf("untagged: %v", v)
	}
}

func TestGenMain(t *testing.T) {
	var b bytes.Buffer
	if code := genMain([]string{"1000", "7"}, &b); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if b.Len() != 1000 || !strings.HasPrefix(b.String(), "r00007 l0000000000 aaaa") || !strings.Contains(b.String(), "r00007 l0000000009 jjjj") {
		t.Errorf("generator wrote %d bytes: %.120q", b.Len(), b.String())
	}
}
