package diagnose

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// innermost is the innermost frame of a rank's stacks, the frame it is
// waiting in: from Python's faulthandler dump ("Current thread ... (most
// recent call first):" then `File "x.py", line N in f`), else the first
// Python thread, else gdb's py-bt of the first thread, else gdb's first frame of thread 1 ("#0  0x... in f (...)
// at file:line"). "" when there is none.
func innermost(stacks string) string {
	lines := strings.Split(stacks, "\n")
	first := func(after func(string) bool, frame func(string) (string, bool)) string {
		in := false
		for _, l := range lines {
			if after(l) {
				in = true
				continue
			}
			if in {
				if f, ok := frame(l); ok {
					return f
				}
			}
		}
		return ""
	}
	pyFrame := func(l string) (string, bool) {
		l = strings.TrimSpace(l)
		return l, strings.HasPrefix(l, "File \"")
	}
	if f := first(func(l string) bool { return strings.HasPrefix(l, "Current thread ") }, pyFrame); f != "" {
		return f
	}
	if f := first(func(l string) bool {
		return strings.HasPrefix(l, "Thread 0x") && strings.HasSuffix(l, "(most recent call first):")
	}, pyFrame); f != "" {
		return f
	}
	// gdb's py-bt: "Traceback (most recent call first):", maybe a
	// built-in's line, then `File "x.py", line N, in f`.
	if f := first(func(l string) bool { return strings.TrimSpace(l) == "Traceback (most recent call first):" }, pyFrame); f != "" {
		return f
	}
	return first(func(l string) bool { return strings.HasPrefix(l, "Thread 1 ") }, func(l string) (string, bool) {
		if !strings.HasPrefix(l, "#0 ") {
			return "", false
		}
		// "#0  0x00007f... in clock_nanosleep (...) at file:line": the
		// function and where, without the address and arguments.
		f := strings.TrimSpace(strings.TrimPrefix(l, "#0 "))
		if _, after, ok := strings.Cut(f, " in "); ok {
			f = after
		}
		name, rest, _ := strings.Cut(f, " (")
		if _, at, ok := strings.Cut(rest, ") at "); ok {
			return name + " at " + at, true
		}
		return name, true
	})
}

// oddRanks groups ranks by their innermost frame: common is the frame of
// the largest group (ties: the frame of the lowest rank), odd the ranks
// whose frame differs, in rank order. Ranks without stacks are odd.
func oddRanks(frames map[int]string) (common string, odd []int) {
	count := map[string]int{}
	for _, f := range frames {
		if f != "" {
			count[f]++
		}
	}
	ranks := make([]int, 0, len(frames))
	for r := range frames {
		ranks = append(ranks, r)
	}
	slices.Sort(ranks)
	for _, r := range ranks {
		if f := frames[r]; f != "" && count[f] > count[common] {
			common = f
		}
	}
	for _, r := range ranks {
		if frames[r] != common || common == "" {
			odd = append(odd, r)
		}
	}
	return common, odd
}

// quietest lists up to n ranks by how long ago they last printed, longest
// first; a rank that never printed counts from the job's start.
func quietest(last map[int]time.Time, start, now time.Time, n int) []string {
	type quiet struct {
		rank int
		for_ time.Duration
	}
	var qs []quiet
	for r, t := range last {
		if t.IsZero() {
			t = start
		}
		qs = append(qs, quiet{r, now.Sub(t)})
	}
	slices.SortFunc(qs, func(a, b quiet) int { return cmp.Or(cmp.Compare(b.for_, a.for_), cmp.Compare(a.rank, b.rank)) })
	var out []string
	for _, q := range qs[:min(n, len(qs))] {
		out = append(out, fmt.Sprintf("rank %d (%v)", q.rank, q.for_.Round(time.Second)))
	}
	return out
}

// StackFindings is what the launcher says of the stacks collected from
// every one of ranks ranks (stacks by rank; hostOf names a rank's host):
// the odd ones out, whose innermost frame differs from the majority's,
// with the majority's frame, and which ranks printed last the longest
// ago (last: each rank's last output, zero for never, counted from start;
// at: when the collection began).
func StackFindings(stacks map[int]string, ranks int, hostOf func(rank int) string, last map[int]time.Time, start, at time.Time) []string {
	frames := make(map[int]string, ranks)
	for r := range ranks {
		frames[r] = innermost(stacks[r])
	}
	var out []string
	common, odd := oddRanks(frames)
	if len(odd) < ranks {
		for _, r := range odd {
			f := frames[r]
			if f == "" {
				f = "no stacks"
			}
			out = append(out, fmt.Sprintf("odd one out: rank %d on %s: %s", r, hostOf(r), f))
		}
		if common == "??" {
			common = "?? (a frame without symbols)"
		}
		if len(odd) == 0 {
			out = append(out, "every rank's innermost frame: "+common)
		} else {
			if n := ranks - len(odd); n == 1 {
				out = append(out, "the other rank: "+common)
			} else {
				out = append(out, fmt.Sprintf("the other %d ranks: %s", n, common))
			}
		}
	}
	return append(out, "printed last the longest ago: "+strings.Join(quietest(last, start, at, 3), ", "))
}
