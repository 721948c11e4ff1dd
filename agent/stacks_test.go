package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/gangway-hpc/gangway/agent/proc"
	"github.com/gangway-hpc/gangway/agent/proc/proctest"
	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/internal/osproc"
)

// framedPython is a rank whose Python frames are named after the file in
// its first argument: py-bt opens that file to print the frame's line.
const framedPython = `
import os, sys
code = compile("import time\nwhile True: time.sleep(1)\n", sys.argv[1], "exec")
print("ready", os.getpid(), flush=True)
exec(code)
`

// fifoFramedJob starts one rank whose Python frames are named after a
// FIFO: gdb's py-bt blocks opening it, as long as nothing writes to it.
// It returns the rank's pid once it is in its loop.
func fifoFramedJob(t *testing.T, c *client, id string) int {
	t.Helper()
	fifo := filepath.Join(t.TempDir(), "frames.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	c.startJob(wire.StartJob{JobID: id, Ranks: []wire.RankSpec{{Rank: 0, Argv: []string{"/usr/bin/python3", "-c", framedPython, fifo}}}})
	for {
		m, err := c.conn.Recv()
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		if m.Kind != wire.KindOutput {
			continue
		}
		if _, _, data, _ := m.Output(); strings.HasPrefix(string(data), "ready ") {
			pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(string(data), "ready ")))
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
	}
}

// gdbChildren lists this process's children running gdb.
func gdbChildren() []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := osproc.ReadStat(pid); err == nil && st.Comm == "gdb" && st.PPid == os.Getpid() {
			out = append(out, pid)
		}
	}
	return out
}

// procState is the state letter of /proc/PID/stat, "" when pid is gone.
func procState(pid int) string {
	if st, err := osproc.ReadStat(pid); err == nil {
		return string(st.State)
	}
	return ""
}

// recvDumped reads until Dumped, ignoring output.
func recvDumped(t *testing.T, c *client) wire.Dumped {
	t.Helper()
	var d wire.Dumped
	c.recv(wire.KindDumped, &d)
	return d
}

// TestDumpEndsWithinLaunchersWait: gdb blocked on a rank's frame named
// after a FIFO (the wait that used to last gdb's 20 s bound, then the
// next process's) is killed when the launcher's wait (Dump.Within, less
// the answer's margin) runs out; the answer comes in time, says why, no
// gdb is left, and the rank runs on, not left stopped.
func TestDumpEndsWithinLaunchersWait(t *testing.T) {
	proctest.RequireGDBPython(t)
	c := serve(t, &Agent{Name: "h0", Version: "test", Log: zaptest.NewLogger(t, zaptest.Level(zap.DebugLevel))})
	pid := fifoFramedJob(t, c, "fifo-within")
	within := 8 * time.Second
	begin := time.Now()
	c.send(wire.KindDump, wire.Dump{Within: within})
	d := recvDumped(t, c)
	took := time.Since(begin)
	t.Logf("Dumped after %v (Within %v, gdb's own bound %v):\n%s", took, within, gdbTimeout, d.Stacks[0])
	if took >= within {
		t.Errorf("Dumped after %v, not within the launcher's wait of %v", took, within)
	}
	if !strings.Contains(d.Stacks[0], "the dump's time is up") {
		t.Errorf("rank 0's stacks do not say the dump's time ran out:\n%s", d.Stacks[0])
	}
	if left := gdbChildren(); len(left) > 0 {
		t.Errorf("gdb still running after the answer: pids %v", left)
	}
	if st := procState(pid); st == "t" || st == "T" || st == "" {
		t.Errorf("rank pid %d in state %q after the dump, want it running", pid, st)
	}
	c.send(wire.KindStop, wire.Stop{Grace: time.Second})
	for m := c.next(); m.Kind != wire.KindDone; m = c.next() {
	}
}

// TestStopEndsDump: a Stop while gdb is blocked (the launcher stops the
// job: a rank failed, or a signal) ends the dump at once: the answer
// comes before gdb's own time bound, then Done.
func TestStopEndsDump(t *testing.T) {
	proctest.RequireGDBPython(t)
	c := serve(t, &Agent{Name: "h0", Version: "test", Log: zaptest.NewLogger(t)})
	fifoFramedJob(t, c, "fifo-stop")
	begin := time.Now()
	c.send(wire.KindDump, wire.Dump{Within: time.Minute})
	for len(gdbChildren()) == 0 {
		if time.Since(begin) > gdbTimeout {
			t.Fatal("no gdb started")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // into the FIFO's open
	c.send(wire.KindStop, wire.Stop{Grace: time.Second})
	var dumped wire.Dumped
	var took time.Duration
	for m := c.next(); m.Kind != wire.KindDone; m = c.next() {
		if m.Kind == wire.KindDumped {
			took = time.Since(begin)
			if err := m.Decode(&dumped); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("Dumped %v after the Dump, the Stop a second after gdb started", took)
	if took == 0 || took >= gdbTimeout {
		t.Errorf("Dumped after %v (0: never), want it before gdb's own bound of %v", took, gdbTimeout)
	}
	if !strings.Contains(dumped.Stacks[0], "the dump's time is up") {
		t.Errorf("rank 0's stacks do not say the dump ended:\n%s", dumped.Stacks[0])
	}
	if left := gdbChildren(); len(left) > 0 {
		t.Errorf("gdb still running after Done: pids %v", left)
	}
}

// TestTracerFor: what gdb runs with, by Yama's ptrace_scope, for ranks of
// another user and for the agent's own.
func TestTracerFor(t *testing.T) {
	user := &syscall.Credential{Uid: 1000, Gid: 1000}
	for _, tc := range []struct {
		scope  int
		cred   *syscall.Credential
		caps   int
		refuse string
	}{
		{-1, user, 0, ""},
		{0, user, 0, ""},
		{1, user, 1, ""},
		{2, user, 0, "ptrace_scope is 2"},
		{3, user, 0, "ptrace_scope is 3"},
		{-1, nil, 0, ""},
		{1, nil, 0, ""},
		{2, nil, 0, ""},
		{3, nil, 0, "ptrace_scope is 3"},
	} {
		tr := tracerFor("/usr/bin/gdb", tc.cred, tc.scope, zap.NewNop())
		if len(tr.caps) != tc.caps || (tc.refuse == "") != (tr.refuse == "") || !strings.Contains(tr.refuse, tc.refuse) {
			t.Errorf("scope %d, other user %v: caps %v, refuse %q; want %d caps, refuse %q", tc.scope, tc.cred != nil, tr.caps, tr.refuse, tc.caps, tc.refuse)
		}
		if tr.cred != tc.cred {
			t.Errorf("scope %d: credential %v, want the ranks' %v", tc.scope, tr.cred, tc.cred)
		}
	}
	if tr := tracerFor("", nil, -1, zap.NewNop()); !strings.Contains(tr.refuse, "gdb is not installed") {
		t.Errorf("without gdb: refuse %q", tr.refuse)
	}
}

// TestParallelGDBs: gdbs run four at a time, fewer where their memory
// bounds together would pass half of the memory available, at least one.
func TestParallelGDBs(t *testing.T) {
	for avail, want := range map[uint64]int{0: 4, 1 << 40: 4, 32 << 30: 4, 20 << 30: 2, 8 << 30: 1, 1 << 30: 1} {
		if got := parallelGDBs(avail); got != want {
			t.Errorf("%d GiB available: %d gdbs at a time, want %d", avail>>30, got, want)
		}
	}
}

// TestGDBBound: a rank's leader may take its share of the dump's time
// left over the rounds of leaders still to run, never less than
// gdbTimeout; other processes, and a dump without a deadline, get
// gdbTimeout.
func TestGDBBound(t *testing.T) {
	for _, tc := range []struct {
		i, leaders, parallel int
		left, want           time.Duration
	}{
		{0, 4, 4, 52 * time.Second, 52 * time.Second},     // every leader in one round
		{3, 4, 4, 52 * time.Second, 52 * time.Second},     // the last of them too
		{0, 8, 4, 52 * time.Second, 26 * time.Second},     // two rounds
		{4, 8, 4, 30 * time.Second, 30 * time.Second},     // the second round's leaders: what is left
		{0, 8, 4, 30 * time.Second, gdbTimeout},           // two rounds in 30 s: the floor
		{0, 8, 1, 57 * time.Second, gdbTimeout},           // one at a time: 7 s each, the floor
		{8, 8, 4, 57 * time.Second, gdbTimeout},           // a leader's child process
		{0, 4, 4, 0, gdbTimeout},                          // no deadline
		{0, 4, 0, 52 * time.Second, 52 * time.Second / 4}, // parallel 0 taken as 1
	} {
		if got := gdbBound(tc.i, tc.leaders, tc.parallel, tc.left); got != max(tc.want, gdbTimeout) {
			t.Errorf("target %d of %d leaders, %d at a time, %v left: %v, want %v", tc.i, tc.leaders, tc.parallel, tc.left, got, max(tc.want, gdbTimeout))
		}
	}
}

// TestStacksCaps: a dump attaches at most maxAttachPerRank processes of a
// rank and maxAttachPerDump in all, every rank's leader first, and each
// rank's text says how many were left out and why.
func TestStacksCaps(t *testing.T) {
	tr := tracer{refuse: "test", log: zap.NewNop()}
	pgids, members := map[int]int{}, map[int][]proc.Member{}
	nranks, per := 9, 12 // 9 ranks of 12 processes: both caps bind
	for r := range nranks {
		pgids[r] = 1_000_000 + 100*r
		for i := range per {
			members[r] = append(members[r], proc.Member{Pid: pgids[r] + i})
		}
	}
	out := tr.stacks(t.Context(), pgids, members)
	total := 0
	for r := range nranks {
		n := strings.Count(out[r], "== pid ")
		total += n
		if n > maxAttachPerRank {
			t.Errorf("rank %d: %d processes attached, more than %d", r, n, maxAttachPerRank)
		}
		if !strings.Contains(out[r], "== pid "+strconv.Itoa(pgids[r])+" ") {
			t.Errorf("rank %d: its leader %d is not among those attached:\n%s", r, pgids[r], out[r])
		}
		want := strconv.Itoa(per-n) + " more processes of the rank's group not attached (at most 8 per rank, 64 per dump)"
		if !strings.Contains(out[r], want) {
			t.Errorf("rank %d: does not say %q:\n%s", r, want, out[r])
		}
	}
	if total != maxAttachPerDump {
		t.Errorf("%d processes attached in all, want the cap %d", total, maxAttachPerDump)
	}
}

// TestFitStacks: texts that escape to six times their length in JSON
// (control bytes) are cut so that the answer fits one frame.
func TestFitStacks(t *testing.T) {
	stacks := map[int]string{}
	for r := range 16 {
		stacks[r] = strings.Repeat("\x01", wire.MaxStacks) + strings.Repeat("x", wire.MaxStacks)
	}
	fitStacks(stacks)
	b, err := json.Marshal(wire.Dumped{Stacks: stacks, Tools: []string{"gdb"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > wire.MaxJobControl {
		t.Errorf("encoded answer %d bytes, over the frame limit %d", len(b), wire.MaxJobControl)
	}
	if !strings.HasSuffix(stacks[3], "(cut to fit the agent's answer)\n") {
		t.Errorf("a cut text does not say so: ...%q", stacks[3][max(0, len(stacks[3])-60):])
	}
	small := map[int]string{0: "short"}
	if fitStacks(small); small[0] != "short" {
		t.Errorf("a text that fits was changed: %q", small[0])
	}
}

// TestDumpsBackToBack: a dump asked for right after the last one's answer
// (the launcher asks one at a time: a SIGUSR1, then a hang) is collected,
// not refused as overlapping the last, whose answer was on its way; Done
// still comes after the stacks of a dump that runs when the job ends.
func TestDumpsBackToBack(t *testing.T) {
	c := serve(t, &Agent{Name: "h0", Version: "test", Log: zaptest.NewLogger(t)})
	c.startJob(wire.StartJob{JobID: "dumps", Ranks: []wire.RankSpec{{Rank: 0, Argv: []string{"/bin/sleep", "600"}}}})
	c.recv(wire.KindStarted, nil)
	for i := range 200 {
		// Within a few milliseconds: each dump answers at once with its
		// time up, before gdb has anything.
		c.send(wire.KindDump, wire.Dump{Within: 2 * time.Millisecond})
		d := recvDumped(t, c)
		if _, ok := d.Stacks[0]; !ok {
			t.Fatalf("dump %d, right after the last one's answer: %+v, want rank 0's stacks (it was refused as overlapping)", i, d)
		}
	}
	c.send(wire.KindStop, wire.Stop{Grace: time.Second})
	for m := c.next(); m.Kind != wire.KindDone; m = c.next() {
	}
}
