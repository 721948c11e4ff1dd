// Package selftest plans and judges the fabric self-test (--selftest):
// which pairs of hosts are measured, in which steps, and which hosts are
// outliers. It does no I/O; launcher/engine drives the agents.
//
// Pairs: host i with its ring neighbour i+1 and with the chords i+N/2,
// i+N/4, ... (at most MaxChords), so a job of N hosts measures
// O(N log N) pairs, each host in 2 to 2+2*MaxChords of them. Steps: each
// pair is measured one direction at a time, and in a step every host is
// in at most one stream, so no figure is another stream's contention.
//
// Judgement: a pair's figure is its slower direction; a host's figure is
// the median of its pairs' figures; a host is an outlier ("far below"
// the others) when its figure is under Fraction (a third) of the median
// of the hosts' figures. A slow pair is thus blamed on the end whose
// other links are slow too. With 2 hosts there is one pair and no way to
// tell which end is slow: nothing is named.
//
// It imports no other launcher package; bench holds the report's types.
package selftest

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/gangway-hpc/gangway/bench"
)

// MaxChords bounds the chords per host beyond the ring neighbour.
const MaxChords = 4

// Fraction is "far below": a host whose figure is under this fraction of
// the median host's is an outlier.
const Fraction = 1.0 / 3

// Pair is two hosts, by index, A < B.
type Pair struct{ A, B int }

// Pairs are the pairs measured among n hosts, in a stable order: ring
// neighbours, then chords by decreasing length.
func Pairs(n int) []Pair {
	if n < 2 {
		return nil
	}
	dists := []int{1}
	for d := n / 2; d > 1 && len(dists) <= MaxChords; d /= 2 {
		dists = append(dists, d)
	}
	seen := map[Pair]bool{}
	var out []Pair
	for _, d := range dists {
		for i := range n {
			a, b := i, (i+d)%n
			if a > b {
				a, b = b, a
			}
			p := Pair{a, b}
			if a != b && !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// Stream is one direction of a pair: From sends to To.
type Stream struct{ From, To int }

// Steps orders the streams of pairs (both directions of each) into
// steps in which each host is in at most one stream. It is greedy: each
// step takes, in order, every stream left whose hosts are both free.
func Steps(pairs []Pair) [][]Stream {
	var left []Stream
	for _, p := range pairs {
		left = append(left, Stream{p.A, p.B}, Stream{p.B, p.A})
	}
	var steps [][]Stream
	for len(left) > 0 {
		busy := map[int]bool{}
		var step, rest []Stream
		for _, s := range left {
			if busy[s.From] || busy[s.To] {
				rest = append(rest, s)
				continue
			}
			busy[s.From], busy[s.To] = true, true
			step = append(step, s)
		}
		steps = append(steps, step)
		left = rest
	}
	return steps
}

// Measured is one stream's outcome.
type Measured struct {
	Stream
	Bytes int64
	Took  time.Duration
	Err   string
}

// MBps is the stream's bandwidth in MB/s (10^6 bytes per second); 0 for
// a failed stream.
func (m Measured) MBps() float64 {
	if m.Err != "" || m.Took <= 0 {
		return 0
	}
	return float64(m.Bytes) / m.Took.Seconds() / 1e6
}

// Result is a judged self-test: the report's record, and the outliers by
// host index (slowest first) for a step that leaves hosts out.
type Result struct {
	bench.Selftest
	Slow []int
}

// Judge makes the result of the streams measured among hosts (names by
// index) for pairs, each stream bounded by bytes and within.
func Judge(names []string, pairs []Pair, ms []Measured, bytes int64, within time.Duration) Result {
	got := map[Stream]Measured{}
	for _, m := range ms {
		got[m.Stream] = m
	}
	r := Result{Selftest: bench.Selftest{Bytes: bytes, WithinSec: within.Seconds(), Fraction: Fraction, Outliers: []string{}}}
	per := make([][]float64, len(names))
	for _, p := range pairs {
		ab, ba := got[Stream{p.A, p.B}], got[Stream{p.B, p.A}]
		sp := bench.SelftestPair{A: names[p.A], B: names[p.B], AToBMBps: ab.MBps(), BToAMBps: ba.MBps()}
		var errs []string
		for _, m := range []Measured{ab, ba} {
			if m.Err != "" {
				errs = append(errs, fmt.Sprintf("%s -> %s: %s", names[m.From], names[m.To], m.Err))
			}
		}
		sp.Err = strings.Join(errs, "; ")
		r.Pairs = append(r.Pairs, sp)
		v := min(sp.AToBMBps, sp.BToAMBps)
		per[p.A] = append(per[p.A], v)
		per[p.B] = append(per[p.B], v)
	}
	var figs []float64
	for i, name := range names {
		h := bench.SelftestHost{Name: name, Pairs: len(per[i])}
		if len(per[i]) > 0 {
			h.MBps = bench.Median(per[i])
			figs = append(figs, h.MBps)
		}
		r.Hosts = append(r.Hosts, h)
	}
	if len(figs) > 0 {
		r.MedianMBps = bench.Median(figs)
	}
	if len(names) < 3 {
		return r
	}
	for i := range r.Hosts {
		if r.Hosts[i].Pairs > 0 && r.Hosts[i].MBps < Fraction*r.MedianMBps {
			r.Hosts[i].Outlier = true
			r.Slow = append(r.Slow, i)
		}
	}
	sort.SliceStable(r.Slow, func(x, y int) bool { return r.Hosts[r.Slow[x]].MBps < r.Hosts[r.Slow[y]].MBps })
	for _, i := range r.Slow {
		r.Outliers = append(r.Outliers, names[i])
	}
	return r
}

// Write prints the result as the launcher does: one line per pair, the
// median, and the outliers with each one's figure.
func Write(w io.Writer, r Result) {
	width := 0
	for _, p := range r.Pairs {
		width = max(width, len(p.A), len(p.B))
	}
	fmt.Fprintf(w, "selftest: %d pairs of %d hosts, at most %s or %gs each way (MB/s = 10^6 bytes/s)\n",
		len(r.Pairs), len(r.Hosts), sizeString(r.Bytes), r.WithinSec)
	for _, p := range r.Pairs {
		fmt.Fprintf(w, "selftest:   %-*s -> %-*s %9.1f MB/s   %-*s -> %-*s %9.1f MB/s", width, p.A, width, p.B, p.AToBMBps, width, p.B, width, p.A, p.BToAMBps)
		if p.Err != "" {
			fmt.Fprintf(w, "   (%s)", p.Err)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "selftest: median host %.1f MB/s (a host's figure: the median over its pairs of their slower direction)\n", r.MedianMBps)
	switch {
	case len(r.Hosts) < 3:
		fmt.Fprintln(w, "selftest: 2 hosts: one pair, no outlier can be named")
	case len(r.Slow) == 0:
		fmt.Fprintf(w, "selftest: no outlier (none under %.0f%% of the median)\n", 100*Fraction)
	default:
		var names []string
		for _, i := range r.Slow {
			names = append(names, fmt.Sprintf("%s (%.1f MB/s)", r.Hosts[i].Name, r.Hosts[i].MBps))
		}
		fmt.Fprintf(w, "selftest: slow hosts, under %.0f%% of the median: %s\n", 100*Fraction, strings.Join(names, ", "))
	}
}

func sizeString(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}
