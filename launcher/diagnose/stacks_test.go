package diagnose

import (
	"reflect"
	"slices"
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

func TestInnermost(t *testing.T) {
	for _, tt := range []struct{ name, stacks, want string }{
		{"python current thread", pyCollective, `File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", line 1536 in all_reduce`},
		{"python sleep", pySleep, `File "/job/hang.py", line 15 in <module>`},
		{"python before gdb", gdbSleep + "\n" + pySleep, `File "/job/hang.py", line 15 in <module>`},
		{"gdb only: thread 1", gdbSleep, "__GI___clock_nanosleep at ../sysdeps/unix/sysv/linux/clock_nanosleep.c:78"},
		{"python without a current thread", "Thread 0x00007f (most recent call first):\n  File \"a.py\", line 3 in f\n", `File "a.py", line 3 in f`},
		{"gdb py-bt", gdbSleep + "\nThread 1 (Thread 0x7fea (LWP 23953) \"python3\"):\nTraceback (most recent call first):\n  <built-in method sleep of module object at remote 0x7fea>\n  File \"<string>\", line 2, in load_batch\n  File \"<string>\", line 3, in <module>\n", `File "<string>", line 2, in load_batch`},
		{"faulthandler before py-bt", pySleep + "\nTraceback (most recent call first):\n  File \"x.py\", line 1, in f\n", `File "/job/hang.py", line 15 in <module>`},
		{"nothing", "gdb: ptrace: Operation not permitted.\n", ""},
	} {
		if got := innermost(tt.stacks); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestOddRanks(t *testing.T) {
	c, s := innermost(pyCollective), innermost(pySleep)
	for _, tt := range []struct {
		name       string
		frames     map[int]string
		wantCommon string
		wantOdd    []int
	}{
		{"one sleeper among four", map[int]string{0: c, 1: c, 2: s, 3: c}, c, []int{2}},
		{"no stacks from one rank", map[int]string{0: c, 1: "", 2: c}, c, []int{1}},
		{"all alike", map[int]string{0: c, 1: c}, c, nil},
		{"a tie goes to the lowest rank's frame", map[int]string{0: s, 1: c}, s, []int{1}},
		{"nothing at all", map[int]string{0: "", 1: ""}, "", []int{0, 1}},
	} {
		common, odd := oddRanks(tt.frames)
		if common != tt.wantCommon || !reflect.DeepEqual(odd, tt.wantOdd) {
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
