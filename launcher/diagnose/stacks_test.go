package diagnose

import (
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const pyCollective = `Fatal Python error: Aborted

Thread 0x00007f62430476c0 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait
  File "/usr/lib/python3.11/threading.py", line 995 in _bootstrap

Current thread 0x00007f6243302040 (most recent call first):
  File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", line 1536 in all_reduce
  File "/job/hang.py", line 20 in <module>
`

const pySleep = `Fatal Python error: Aborted

Current thread 0x00007f6243302040 (most recent call first):
  File "/job/hang.py", line 15 in <module>
`

const gdbSleep = `Thread 2 (Thread 0x7f1 (LWP 12) "python3"):
#0  0x00007f in futex_wait (private=0) at ../sysdeps/nptl/futex-internal.h:146
Thread 1 (Thread 0x7f0 (LWP 11) "python3"):
#0  0x00007f0 in __GI___clock_nanosleep (clock_id=clock_id@entry=0, flags=flags@entry=0) at ../sysdeps/unix/sysv/linux/clock_nanosleep.c:78
#1  0x00007f1 in __GI___nanosleep (req=<optimized out>) at nanosleep.c:25
`

// readStacks is testdata/NAME.txt: stacks as an agent's gdb wrote them
// for real MPICH ranks, 8 on each of 2 hosts, one asleep instead of in
// the first collective.
func readStacks(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".txt"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCallPath(t *testing.T) {
	for _, tt := range []struct {
		name, stacks string
		want         []string
	}{
		{"python current thread", pyCollective, []string{`File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", line 1536 in all_reduce`, `File "/job/hang.py", line 20 in <module>`}},
		{"python sleep", pySleep, []string{`File "/job/hang.py", line 15 in <module>`}},
		{"python before gdb", gdbSleep + "\n" + pySleep, []string{`File "/job/hang.py", line 15 in <module>`}},
		{"gdb only: thread 1", gdbSleep, []string{"__GI___clock_nanosleep at ../sysdeps/unix/sysv/linux/clock_nanosleep.c:78", "__GI___nanosleep at nanosleep.c:25"}},
		{"python without a current thread", "Thread 0x00007f (most recent call first):\n  File \"a.py\", line 3 in f\n", []string{`File "a.py", line 3 in f`}},
		{"gdb py-bt", gdbSleep + "\nThread 1 (Thread 0x7fea (LWP 23953) \"python3\"):\nTraceback (most recent call first):\n  <built-in method sleep of module object at remote 0x7fea>\n  File \"<string>\", line 2, in load_batch\n  File \"<string>\", line 3, in <module>\n", []string{`File "<string>", line 2 in load_batch`, `File "<string>", line 3 in <module>`}},
		{"py-bt's form is faulthandler's", "Traceback (most recent call first):\n  File \"/job/hang.py\", line 20, in <module>\n", []string{`File "/job/hang.py", line 20 in <module>`}},
		{"py-bt with source lines", "Thread 1 (Thread 0x7f (LWP 7) \"python3\"):\nTraceback (most recent call first):\n  <built-in method wait of PyCapsule object at remote 0x7fca>\n  File \"/d/distributed_c10d.py\", line 1541, in all_reduce\n    work.wait()\n  File \"/job/hang.py\", line 30, in <module>\n    dist.all_reduce(t)\n[Inferior 1 (process 7517) detached]\n", []string{`File "/d/distributed_c10d.py", line 1541 in all_reduce`, `File "/job/hang.py", line 30 in <module>`}},
		{"faulthandler before py-bt", pySleep + "\nTraceback (most recent call first):\n  File \"x.py\", line 1, in f\n", []string{`File "/job/hang.py", line 15 in <module>`}},
		{"stripped MPICH", readStacks(t, "gdb-mpich-collective"), append(slices.Repeat([]string{"??"}, 11), "PMPI_Comm_split_type", "main")},
		{"MPICH rank asleep", readStacks(t, "gdb-mpich-sleep"), []string{"__GI___clock_nanosleep at ../sysdeps/unix/sysv/linux/clock_nanosleep.c:48", "__GI___nanosleep at ../sysdeps/unix/sysv/linux/nanosleep.c:25", "__sleep at ../sysdeps/posix/sleep.c:55", "main"}},
		{"gdb out of time", readStacks(t, "gdb-mpich-timeout"), nil},
		{"a frame at a line's start", "Thread 1 (x):\n#0  main () at a.c:5\n", []string{"main at a.c:5"}},
		{"nothing", "gdb: ptrace: Operation not permitted.\n", nil},
	} {
		if got := callPath(tt.stacks); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestInnermost(t *testing.T) {
	for _, tt := range []struct {
		path []string
		want string
	}{
		{[]string{"??", "??", "PMPI_Barrier", "main"}, "PMPI_Barrier"},
		{[]string{"??"}, "?? (a frame without symbols)"},
		{[]string{"f at a.c:3"}, "f at a.c:3"},
		{nil, ""},
	} {
		if got := innermost(tt.path); got != tt.want {
			t.Errorf("innermost(%q) = %q, want %q", tt.path, got, tt.want)
		}
	}
}

func TestOddRanks(t *testing.T) {
	out := func(stacks string) []string { // outermost first, as StackFindings gives them
		p := callPath(stacks)
		slices.Reverse(p)
		return slices.DeleteFunc(p, func(f string) bool { return f == "??" })
	}
	c, s := out(pyCollective), out(pySleep)
	mc, ms := out(readStacks(t, "gdb-mpich-collective")), out(readStacks(t, "gdb-mpich-sleep"))
	// Ranks spinning in the collective, caught deeper in it, in frames
	// that have names: still the majority's place, not odd.
	deeper := append(slices.Clone(mc), "ucp_worker_progress")
	deeper2 := append(slices.Clone(mc), "ucs_callbackq_dispatch", "uct_mm_iface_progress")
	sixteen := map[int][]string{}
	for r := range 16 {
		sixteen[r] = [][]string{mc, deeper, deeper2}[r%3]
	}
	sixteen[2] = ms
	for _, tt := range []struct {
		name       string
		paths      map[int][]string
		wantCommon string
		wantOdd    map[int]string
	}{
		{"one sleeper among four", map[int][]string{0: c, 1: c, 2: s, 3: c}, `File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", line 1536 in all_reduce`, map[int]string{2: `File "/job/hang.py", line 15 in <module>`}},
		{"no stacks from one rank", map[int][]string{0: c, 1: nil, 2: c}, `File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", line 1536 in all_reduce`, map[int]string{}},
		{"all alike", map[int][]string{0: c, 1: c}, `File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", line 1536 in all_reduce`, map[int]string{}},
		{"a tie goes to the lowest rank's path", map[int][]string{0: s, 1: c}, `File "/job/hang.py", line 15 in <module>`, map[int]string{1: `File "/job/hang.py", line 20 in <module>`}},
		{"stripped MPICH, 16 ranks, one asleep", sixteen, "PMPI_Comm_split_type", map[int]string{2: "__sleep at ../sysdeps/posix/sleep.c:55"}},
		{"only deeper or shallower", map[int][]string{0: mc, 1: deeper, 2: deeper2, 3: mc}, "PMPI_Comm_split_type", map[int]string{}},
		{"parted deeper only once", map[int][]string{0: {"main", "a", "x"}, 1: {"main", "a", "x"}, 2: {"main", "a", "x"}, 3: {"main", "a", "y"}, 4: {"main", "b"}}, "x", map[int]string{4: "b"}},
		{"nothing at all", map[int][]string{0: nil, 1: nil}, "", map[int]string{}},
	} {
		common, odd := oddRanks(tt.paths)
		if common != tt.wantCommon || !maps.Equal(odd, tt.wantOdd) {
			t.Errorf("%s: common %q odd %v, want %q %v", tt.name, common, odd, tt.wantCommon, tt.wantOdd)
		}
	}
}

func TestQuietest(t *testing.T) {
	start := time.Unix(1000, 0)
	now := start.Add(60 * time.Second)
	last := map[int]time.Time{0: start.Add(59 * time.Second), 1: {}, 2: start.Add(10 * time.Second), 3: start.Add(59 * time.Second)}
	if got, want := quietest(last, start, now, 2), []string{"rank 1 (1m0s)", "rank 2 (50s)"}; !reflect.DeepEqual(got, want) {
		t.Errorf("quietest: %v, want %v", got, want)
	}
}

// TestStackFindingsCounts: "the other rank" when one rank is left, "the
// other N ranks" otherwise.
func TestStackFindingsCounts(t *testing.T) {
	host := func(int) string { return "h" }
	start := time.Now()
	for _, tc := range []struct {
		stacks map[int]string
		want   string
	}{
		{map[int]string{0: pyCollective, 1: pySleep}, "the other rank: "},
		{map[int]string{0: pyCollective, 1: pySleep, 2: pyCollective, 3: pyCollective}, "the other 3 ranks: "},
	} {
		got := StackFindings(tc.stacks, len(tc.stacks), host, nil, start, start)
		if !slices.ContainsFunc(got, func(l string) bool { return strings.HasPrefix(l, tc.want) }) {
			t.Errorf("%d ranks: %q, want a line starting %q", len(tc.stacks), got, tc.want)
		}
	}
}

// TestStackFindingsMPICH: the report of 16 MPICH ranks on 2 hosts, rank 2
// asleep, the others in the first collective of a stripped MPICH, and the
// gdbs of four ranks a host out of the dump's time: one odd one out, the
// collective named, the ranks without stacks on one line.
func TestStackFindingsMPICH(t *testing.T) {
	coll, sleep, none := readStacks(t, "gdb-mpich-collective"), readStacks(t, "gdb-mpich-sleep"), readStacks(t, "gdb-mpich-timeout")
	stacks := map[int]string{}
	for r := range 16 {
		switch {
		case r == 2:
			stacks[r] = sleep
		case r%8 >= 4:
			stacks[r] = none
		default:
			stacks[r] = coll
		}
	}
	host := func(r int) string { return []string{"h1", "h2"}[r/8] }
	start := time.Now()
	got := StackFindings(stacks, 16, host, nil, start, start)
	want := []string{
		"odd one out: rank 2 on h1: __GI___clock_nanosleep at ../sysdeps/unix/sysv/linux/clock_nanosleep.c:48 (in __sleep at ../sysdeps/posix/sleep.c:55)",
		"the other 7 ranks: PMPI_Comm_split_type",
		"no stacks from ranks 4-7,12-15 (why: in their stacks.txt)",
	}
	if !slices.Equal(got[:len(want)], want) {
		t.Errorf("findings:\n%s\nwant first:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// FuzzStackFindings: stacks as any agent may send them (bytes from the
// network) never make the report panic; it ends with the quietest ranks,
// and its odd ones out and "the other N ranks" never pass the job's
// ranks, nor are there odd ones without others.
func FuzzStackFindings(f *testing.F) {
	for _, s := range []string{pyCollective, pySleep, gdbSleep, "Thread 1 (x):\n#0  main () at a.c:5\n", "#1 ?? ()\n", "Traceback (most recent call first):\n  File \"a\", line 1, in f\n    x\n",
		"Current thread 0x1 (most recent call first):\n", "Thread 1 \n#", "\x00#0 0x in (", ""} {
		f.Add(s, pySleep)
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		stacks := map[int]string{0: a, 1: b, 2: a, 3: pyCollective}
		start := time.Unix(1000, 0)
		got := StackFindings(stacks, 4, func(int) string { return "h" }, nil, start, start)
		if len(got) == 0 || !strings.HasPrefix(got[len(got)-1], "printed last the longest ago: ") {
			t.Fatalf("findings %q", got)
		}
		odd, others := 0, 0
		for _, l := range got {
			if strings.HasPrefix(l, "odd one out: rank ") {
				odd++
			}
			if rest, ok := strings.CutPrefix(l, "the other "); ok {
				others = 1
				if n, _, ok := strings.Cut(rest, " ranks: "); ok {
					others, _ = strconv.Atoi(n)
				}
			}
		}
		if odd+others > 4 || odd > 0 && others == 0 {
			t.Fatalf("%d odd ones out and %d others of 4 ranks: %q", odd, others, got)
		}
	})
}
