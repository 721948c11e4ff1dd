package selftest

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestPairs(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want []Pair
	}{
		{1, nil},
		{2, []Pair{{0, 1}}},
		{3, []Pair{{0, 1}, {1, 2}, {0, 2}}},
		{4, []Pair{{0, 1}, {1, 2}, {2, 3}, {0, 3}, {0, 2}, {1, 3}}},
		{5, []Pair{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {0, 4}, {0, 2}, {1, 3}, {2, 4}, {0, 3}, {1, 4}}},
	} {
		if got := Pairs(tc.n); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Pairs(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
	// O(N log N): ring plus at most MaxChords chords per host.
	for _, n := range []int{8, 64, 1000, 4096} {
		ps := Pairs(n)
		deg := make([]int, n)
		for _, p := range ps {
			if p.A >= p.B || p.B >= n {
				t.Fatalf("Pairs(%d): bad pair %v", n, p)
			}
			deg[p.A]++
			deg[p.B]++
		}
		for i, d := range deg {
			if d < 2 || d > 2+2*MaxChords {
				t.Fatalf("Pairs(%d): host %d in %d pairs", n, i, d)
			}
		}
		t.Logf("%d hosts: %d pairs, %d steps", n, len(ps), len(Steps(ps)))
	}
}

// TestSteps: every direction of every pair once, each host in at most one
// stream per step.
func TestSteps(t *testing.T) {
	for _, n := range []int{2, 3, 4, 7, 16, 100} {
		pairs := Pairs(n)
		seen := map[Stream]int{}
		steps := Steps(pairs)
		for k, step := range steps {
			busy := map[int]bool{}
			for _, s := range step {
				if busy[s.From] || busy[s.To] {
					t.Fatalf("%d hosts, step %d: host of %v already busy: %v", n, k, s, step)
				}
				busy[s.From], busy[s.To] = true, true
				seen[s]++
			}
		}
		for _, p := range pairs {
			if seen[Stream{p.A, p.B}] != 1 || seen[Stream{p.B, p.A}] != 1 {
				t.Fatalf("%d hosts: pair %v measured %d and %d times", n, p, seen[Stream{p.A, p.B}], seen[Stream{p.B, p.A}])
			}
		}
		if len(seen) != 2*len(pairs) {
			t.Fatalf("%d hosts: %d streams for %d pairs", n, len(seen), len(pairs))
		}
	}
}

// measure makes every stream of pairs among n hosts run at rate(from, to)
// MB/s (0: failed).
func measure(n int, rate func(from, to int) float64) ([]Pair, []Measured) {
	pairs := Pairs(n)
	var ms []Measured
	for _, step := range Steps(pairs) {
		for _, s := range step {
			m := Measured{Stream: s, Bytes: 100e6, Took: time.Second}
			if r := rate(s.From, s.To); r > 0 {
				m.Took = time.Duration(100 / r * float64(time.Second))
			} else {
				m.Err, m.Bytes = "connect: connection refused", 0
			}
			ms = append(ms, m)
		}
	}
	return pairs, ms
}

func names(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("h%d", i))
	}
	return out
}

func TestJudge(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
		rate func(from, to int) float64
		want []string
	}{
		{"even", 4, func(int, int) float64 { return 2000 }, nil},
		{"noisy but none far", 6, func(f, t int) float64 { return 1000 + float64(300*f+100*t) }, nil},
		{"into h3 slow", 4, func(f, t int) float64 {
			if t == 3 {
				return 90
			}
			return 2000
		}, []string{"h3"}},
		{"out of h1 slow, 3 hosts", 3, func(f, t int) float64 {
			if f == 1 {
				return 100
			}
			return 2000
		}, []string{"h1"}},
		{"two slow of 16, slowest first", 16, func(f, t int) float64 {
			switch {
			case f == 5 || t == 5:
				return 300
			case f == 9 || t == 9:
				return 100
			}
			return 3000
		}, []string{"h9", "h5"}},
		{"h2 unreachable", 5, func(f, t int) float64 {
			if f == 2 || t == 2 {
				return 0
			}
			return 1000
		}, []string{"h2"}},
		{"just above a third", 4, func(f, t int) float64 {
			if f == 3 || t == 3 {
				return 700
			}
			return 2000
		}, nil},
		{"two hosts: no blame", 2, func(f, t int) float64 {
			if t == 1 {
				return 10
			}
			return 2000
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pairs, ms := measure(tc.n, tc.rate)
			r := Judge(names(tc.n), pairs, ms, 64<<20, 2*time.Second)
			if got := r.Outliers; !reflect.DeepEqual(got, append([]string{}, tc.want...)) {
				t.Errorf("outliers %v, want %v (hosts %+v, median %.1f)", got, tc.want, r.Hosts, r.MedianMBps)
			}
			if len(r.Slow) != len(r.Outliers) {
				t.Errorf("slow %v for outliers %v", r.Slow, r.Outliers)
			}
			for k, i := range r.Slow {
				if r.Hosts[i].Name != r.Outliers[k] || !r.Hosts[i].Outlier {
					t.Errorf("slow %v does not match outliers %v", r.Slow, r.Outliers)
				}
			}
			if len(r.Pairs) != len(pairs) {
				t.Errorf("%d pairs reported, %d measured", len(r.Pairs), len(pairs))
			}
		})
	}
}

func TestWrite(t *testing.T) {
	pairs, ms := measure(4, func(f, t int) float64 {
		if t == 3 {
			return 10
		}
		return 2000
	})
	for i := range ms {
		if ms[i].Stream == (Stream{3, 2}) {
			ms[i].Err, ms[i].Bytes = "no count from the sink: EOF", 0
		}
	}
	var b bytes.Buffer
	Write(&b, Judge([]string{"node-a", "b", "c", "d"}, pairs, ms, 64<<20, 2*time.Second))
	out := b.String()
	t.Log("\n" + out)
	for _, want := range []string{
		"selftest: 6 pairs of 4 hosts, at most 64 MiB or 2s each way (MB/s = 10^6 bytes/s)\n",
		"selftest:   node-a -> b         2000.0 MB/s   b      -> node-a    2000.0 MB/s\n",
		"selftest:   c      -> d           10.0 MB/s   d      -> c            0.0 MB/s   (d -> c: no count from the sink: EOF)\n",
		"selftest: median host ",
		"selftest: slow hosts, under 33% of the median: d (10.0 MB/s)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}
