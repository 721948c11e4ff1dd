package diagnose

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gangway-hpc/gangway/launcher/plan"
)

// callPath is the frames of the thread a rank waits in, innermost first:
// from Python's faulthandler dump ("Current thread ... (most recent call
// first):" then `File "x.py", line N in f`), else its first Python
// thread, else gdb's py-bt of the first thread, else gdb's frames of
// thread 1 ("#N  0x... in f (...) at file:line" as "f at file:line", a
// frame without symbols as "??"). nil when there is none.
func callPath(stacks string) []string {
	lines := strings.Split(stacks, "\n")
	// frames are those read by frame after the first line after says
	// starts them, up to a blank or unindented line that is not one:
	// indented lines between frames are py-bt's built-ins and source.
	frames := func(after func(string) bool, frame func(string) (string, bool)) []string {
		var out []string
		in := false
		for _, l := range lines {
			if !in {
				in = after(l)
				continue
			}
			f, ok := frame(l)
			switch {
			case ok:
				out = append(out, f)
			case strings.TrimSpace(l) != "" && (l[0] == ' ' || l[0] == '\t'):
			case len(out) > 0:
				return out
			}
		}
		return out
	}
	// faulthandler writes `File "x.py", line 3 in f`, gdb's py-bt
	// `line 3, in f`: one form, so that ranks whose stacks came from
	// either compare alike.
	pyFrame := func(l string) (string, bool) {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "File \"") {
			return "", false
		}
		if a, b, ok := strings.Cut(l, ", in "); ok && strings.Contains(a, ", line ") {
			l = a + " in " + b
		}
		return l, true
	}
	if fs := frames(func(l string) bool { return strings.HasPrefix(l, "Current thread ") }, pyFrame); fs != nil {
		return fs
	}
	if fs := frames(func(l string) bool {
		return strings.HasPrefix(l, "Thread 0x") && strings.HasSuffix(l, "(most recent call first):")
	}, pyFrame); fs != nil {
		return fs
	}
	// gdb's py-bt: "Traceback (most recent call first):", maybe a
	// built-in's line, then `File "x.py", line N, in f`.
	if fs := frames(func(l string) bool { return strings.TrimSpace(l) == "Traceback (most recent call first):" }, pyFrame); fs != nil {
		return fs
	}
	return frames(func(l string) bool { return strings.HasPrefix(l, "Thread 1 ") }, gdbFrame)
}

// gdbFrame reads one frame of gdb's backtrace: "#3  0x00007f... in
// clock_nanosleep (...) at file:line" as "clock_nanosleep at file:line",
// "#1  0x... in PMPI_Barrier () from /lib/libmpich.so.12" as
// "PMPI_Barrier", a frame without symbols as "??".
func gdbFrame(l string) (string, bool) {
	n, f, ok := strings.Cut(l, " ")
	if !ok || len(n) < 2 || n[0] != '#' || strings.Trim(n[1:], "0123456789") != "" {
		return "", false
	}
	f = strings.TrimSpace(f)
	if strings.HasPrefix(f, "0x") {
		if _, after, ok := strings.Cut(f, " in "); ok {
			f = after
		}
	}
	name, rest, _ := strings.Cut(f, " (")
	if _, at, ok := strings.Cut(rest, ") at "); ok {
		return name + " at " + at, true
	}
	return name, true
}

// noSymbols is gdb's name of a frame without symbols (a stripped
// library's, common in MPI and NCCL): where in the library a rank
// spinning there happens to be, not a place to compare ranks by.
const noSymbols = "??"

// innermost is the innermost frame of a call path that has a name, the
// frame the rank waits in as far as can be said; "" for no frames.
func innermost(path []string) string {
	for _, f := range path {
		if f != noSymbols {
			return f
		}
	}
	if len(path) > 0 {
		return noSymbols + " (a frame without symbols)"
	}
	return ""
}

// oddRanks compares ranks by where their call paths part (paths by rank,
// outermost first, frames without symbols left out), as a stack trace
// merger does: from the outermost frame inwards, the ranks that follow
// the frame most of them share (ties: the lowest rank's) stay together,
// and at the first depth where some of them call something else, those
// are the odd ones out (odd, with the frame they took there). Ranks only
// deeper or shallower than the others are not odd: inside a collective,
// a spinning progress engine is sampled at any depth. common is the
// deepest frame a majority of the ranks that stayed share. Ranks without
// a path take no part.
func oddRanks(paths map[int][]string) (common string, odd map[int]string) {
	var group []int
	for r, p := range paths {
		if len(p) > 0 {
			group = append(group, r)
		}
	}
	slices.Sort(group)
	odd = map[int]string{}
	parted := false
	for d := 0; len(group) > 0; d++ {
		count := map[string]int{}
		f := ""
		for _, r := range group {
			if d < len(paths[r]) {
				g := paths[r][d]
				count[g]++
				if count[g] > count[f] {
					f = g
				}
			}
		}
		if f == "" || 2*count[f] < len(group) {
			break // no frame most of them share any more: they are alike
		}
		var stay []int
		for _, r := range group {
			switch {
			case d >= len(paths[r]):
			case paths[r][d] == f:
				stay = append(stay, r)
			case !parted:
				odd[r] = paths[r][d]
			}
		}
		parted = parted || len(odd) > 0
		group, common = stay, f
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
// the odd ones out, whose call path parts from the majority's (oddRanks),
// with the innermost frame the majority shares, the ranks whose stacks
// did not come (one line), and which ranks printed last the longest ago
// (last: each rank's last output, zero for never, counted from start;
// at: when the collection began).
func StackFindings(stacks map[int]string, ranks int, hostOf func(rank int) string, last map[int]time.Time, start, at time.Time) []string {
	paths := make(map[int][]string, ranks)
	var none []int
	for r := range ranks {
		p := callPath(stacks[r])
		if len(p) == 0 {
			none = append(none, r)
		}
		slices.Reverse(p)
		paths[r] = slices.DeleteFunc(p, func(f string) bool { return f == noSymbols })
		if len(p) > 0 && len(paths[r]) == 0 {
			paths[r] = []string{noSymbols} // only frames without symbols
		}
	}
	var out []string
	if len(none) < ranks {
		common, odd := oddRanks(paths)
		for _, r := range slices.Sorted(maps.Keys(odd)) {
			p := slices.Clone(paths[r])
			slices.Reverse(p)
			f := innermost(p)
			if odd[r] != f {
				f += " (in " + odd[r] + ")"
			}
			out = append(out, fmt.Sprintf("odd one out: rank %d on %s: %s", r, hostOf(r), f))
		}
		if common == "" || common == noSymbols {
			common = noSymbols + " (a frame without symbols)"
		}
		n := ranks - len(none) - len(odd)
		switch {
		case len(odd) == 0:
			out = append(out, "no odd one out: every rank with stacks is in "+common)
		case n == 1:
			out = append(out, "the other rank: "+common)
		default:
			out = append(out, fmt.Sprintf("the other %d ranks: %s", n, common))
		}
	}
	if len(none) > 0 {
		out = append(out, fmt.Sprintf("no stacks from %s (why: in %s stacks.txt)", rankWord(none), map[bool]string{true: "its", false: "their"}[len(none) == 1]))
	}
	return append(out, "printed last the longest ago: "+strings.Join(quietest(last, start, at, 3), ", "))
}

// rankWord is "rank 3" or "ranks 4-7,12-15".
func rankWord(ranks []int) string {
	if len(ranks) == 1 {
		return fmt.Sprintf("rank %d", ranks[0])
	}
	return "ranks " + plan.Ranges(ranks)
}
