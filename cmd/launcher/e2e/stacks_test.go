package e2e_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gangway-hpc/gangway/agent"
	"github.com/gangway-hpc/gangway/agent/agenttest"
	"github.com/gangway-hpc/gangway/agent/proc/proctest"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
)

// Stacks of another user's ranks, collected by a root agent: gdb runs
// as the rank's user, bounded in memory, time and number. Each rank here
// names its Python frames after a file of its choice, which gdb's py-bt
// opens to print the frame's source line.

// framedRank is a rank whose Python frames are named after its first
// argument (rank 0) or its second (the other ranks); it says it is ready
// once in its loop, at line 2 of its code.
const framedRank = `
import os, sys
path = sys.argv[1] if os.environ["RANK"] == "0" else sys.argv[2]
code = compile("import time\nwhile True: time.sleep(1)\n", path, "exec")
print("ready", os.getpid(), flush=True)
exec(code)
`

// gdbLog starts one in-process agent whose log (debug and up) is
// recorded, so a test can read what each gdb took and its peak memory.
func gdbLog(t *testing.T) (*e2e.Cluster, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	c := e2e.StartLocal(t, 1, agenttest.WithAgent(func(_ int, a *agent.Agent) { a.Log = zap.New(core) }))
	return c, logs
}

// gdbRuns are the agent's records of its gdbs: rank, pid, time taken,
// peak resident memory.
func gdbRuns(t *testing.T, logs *observer.ObservedLogs) []map[string]any {
	var out []map[string]any
	for _, e := range logs.FilterMessage("gdb").All() {
		m := e.ContextMap()
		t.Logf("gdb for rank %v pid %v: took %v, peak %d MiB, %v bytes of output left out, err %v",
			m["rank"], m["pid"], m["took"], toUint(m["peak_rss"])>>20, m["output_left_out"], m["error"])
		out = append(out, m)
	}
	return out
}

func toUint(v any) uint64 {
	switch v := v.(type) {
	case uint64:
		return v
	case int64:
		return uint64(v)
	}
	return 0
}

// dumpWait is how long a test waits for the report of a SIGUSR1 dump:
// the launcher waits at most 60 s for the stacks (docs/wire.md, section
// 5), and an agent whose gdb reads without end (a frame named /dev/zero)
// answers just inside that on a loaded machine; the report follows.
const dumpWait = 60*time.Second + 30*time.Second

// dumpNow sends the launcher SIGUSR1 and waits for its stacks report;
// it returns how long that took.
func dumpNow(t *testing.T, l *e2e.Launch) time.Duration {
	t.Helper()
	begin := time.Now()
	l.Signal(syscall.SIGUSR1)
	if out, ok := l.Stderr.WaitFor(dumpWait, func(s string) bool { return strings.Contains(s, "printed last the longest ago") }); !ok {
		t.Fatalf("no stacks report after SIGUSR1:\n%s", out)
	}
	return time.Since(begin)
}

// stopLaunch ends a launch that goes on after a dump: SIGTERM, exit 143.
func stopLaunch(t *testing.T, l *e2e.Launch) {
	t.Helper()
	l.Signal(syscall.SIGTERM)
	if code := l.Wait(t); code != 143 {
		t.Errorf("launcher: exit code %d after SIGTERM, want 143\nstderr:\n%s", code, l.Stderr)
	}
}

// readStacks reads rank r's stacks.txt under dir.
func readStacks(t *testing.T, dir string, r int) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "rank."+strconv.Itoa(r), "stacks.txt"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// userDir is a directory every user may enter and read (0755, root's).
func userDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "gangway-stacks-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestUserStacksNeverReadRootFiles: a user's rank names its frames after
// a root-only file (0600, in a directory anyone may enter) holding a
// secret; another rank after a file the user may read. With
// --hang-timeout (gdb, then faulthandler, then the job is stopped), the
// readable file's line is in rank 0's stacks (py-bt printed source
// lines), rank 1's frames are shown by name, and the secret is nowhere:
// not in the ranks' output, any file of the output directory, or the
// launcher's report.
func TestUserStacksNeverReadRootFiles(t *testing.T) {
	e2e.NoTree(t, "one host")
	agenttest.RequireRoot(t)
	proctest.RequireGDBPython(t)
	t.Parallel()
	u := agenttest.NewUser(t, "")
	keys := u.NewKeys(t)
	c := e2e.StartLocal(t, 1)
	h := c.Hosts[0]
	files := userDir(t)
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	secret := "GANGWAY-SECRET-" + hex.EncodeToString(b)
	public, private := filepath.Join(files, "public.py"), filepath.Join(files, "secret.key")
	if err := os.WriteFile(public, []byte(strings.Repeat("# MARK-VISIBLE to the rank's user\n", 4)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(private, []byte(strings.Repeat(secret+"\n", 4)), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	l := c.StartLauncher(t, "-l", "-i", keys.ClientKey, "-np", "2", "-H", asUser(u.Name, h, 2),
		"--output-filename", dir, "--hang-timeout", "20s", "/usr/bin/python3", "-c", framedRank, public, private)
	if out, ok := l.Stdout.WaitFor(e2e.Deadline, e2e.HasReady(2)); !ok {
		t.Fatalf("the ranks did not start:\n%s\n%s", out, l.Stderr)
	}
	code := l.Wait(t)
	errOut := l.Stderr.String()
	if code != 124 || !strings.Contains(errOut, "stacks of every rank in") {
		t.Errorf("exit code %d, want 124 after a hang and its stacks:\n%s", code, errOut)
	}
	s0, s1 := readStacks(t, dir, 0), readStacks(t, dir, 1)
	if !strings.Contains(s0, "MARK-VISIBLE") {
		t.Errorf("rank 0's stacks lack the line of its readable frame file (py-bt did not print source lines):\n%s", e2e.Tail(s0, 3000))
	}
	if !strings.Contains(s1, `File "`+private+`", line 2`) {
		t.Errorf("rank 1's stacks do not show its frame by name:\n%s", e2e.Tail(s1, 3000))
	}
	found := []string{}
	if strings.Contains(l.Stdout.String(), secret) {
		found = append(found, "the ranks' output")
	}
	if strings.Contains(errOut, secret) {
		found = append(found, "the launcher's report")
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), secret) {
				found = append(found, p)
			}
		}
		return nil
	})
	if len(found) > 0 {
		t.Errorf("the root-only file's secret reached %s", strings.Join(found, ", "))
	}
	for _, line := range strings.Split(s1, "\n") {
		if strings.Contains(line, private) {
			t.Logf("rank 1's frame as its user's gdb saw it: %s", line)
			break
		}
	}
}

// TestUserStacksDevZeroFrame: a frame named /dev/zero makes py-bt read
// without end. The user's gdb stops at its address-space bound (its peak
// resident memory, from the kernel, within the bound), and the process
// holding the agent (and the launcher: both run in this test process)
// keeps its resident memory: its peak after the dump is logged and
// compared with before. The job goes on.
func TestUserStacksDevZeroFrame(t *testing.T) {
	e2e.NoTree(t, "one host")
	agenttest.RequireRoot(t)
	proctest.RequireGDBPython(t)
	t.Parallel()
	u := agenttest.NewUser(t, "")
	keys := u.NewKeys(t)
	c, logs := gdbLog(t)
	h := c.Hosts[0]
	dir := t.TempDir()
	l := c.StartLauncher(t, "-l", "-i", keys.ClientKey, "-np", "1", "-H", asUser(u.Name, h, 1),
		"--output-filename", dir, "/usr/bin/python3", "-c", framedRank, "/dev/zero", "/dev/zero")
	if out, ok := l.Stdout.WaitFor(e2e.Deadline, e2e.HasReady(1)); !ok {
		t.Fatalf("the rank did not start:\n%s\n%s", out, l.Stderr)
	}
	// The kernel's peak (VmHWM) starts again from the current size.
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Fatal(err)
	}
	before := vmKiB(t, "VmRSS")
	took := dumpNow(t, l)
	peak := vmKiB(t, "VmHWM")
	t.Logf("dump took %v; this process (agent and launcher): %d MiB resident before, peak %d MiB during the dump", took, before>>10, peak>>10)
	if peak-before > 256<<10 {
		t.Errorf("this process's resident memory grew by %d MiB during the dump, want it bounded (under 256 MiB)", (peak-before)>>10)
	}
	runs := gdbRuns(t, logs)
	if len(runs) != 1 {
		t.Fatalf("%d gdb runs logged, want 1", len(runs))
	}
	const bound = 4 << 30 // agent's gdbMemory
	if p := toUint(runs[0]["peak_rss"]); p == 0 || p > bound {
		t.Errorf("gdb's peak resident memory %d MiB, want it within its %d MiB bound", p>>20, bound>>20)
	}
	// gdb ends at its memory bound (py-bt's read fails: "Error occurred
	// in Python", exit status 1) or, on a busy machine, at its time bound
	// first.
	s0 := readStacks(t, dir, 0)
	if !strings.Contains(s0, "MiB of its 4096 MiB bound)") {
		t.Errorf("rank 0's stacks do not say how gdb ended:\n%s", e2e.Tail(s0, 3000))
	}
	t.Logf("the end of rank 0's stacks:\n%s", e2e.Tail(s0, 400))
	stopLaunch(t, l)
}

// vmKiB reads a Vm* line of this process's /proc status, in KiB.
func vmKiB(t *testing.T, key string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + key + `:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no %s in /proc/self/status", key)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// TestUserStacksFIFOFrame: a frame named after a FIFO blocks py-bt's
// open. The dump still ends within the launcher's wait (60 s): the one
// rank's leader may use the dump's time (its share of what is left, at
// least gdb's 20 s), and is stopped at that bound or at the dump's end;
// rank 0's stacks say so; the rank is left running, not stopped, and the job goes on.
func TestUserStacksFIFOFrame(t *testing.T) {
	e2e.NoTree(t, "one host")
	agenttest.RequireRoot(t)
	proctest.RequireGDBPython(t)
	t.Parallel()
	u := agenttest.NewUser(t, "")
	keys := u.NewKeys(t)
	c, logs := gdbLog(t)
	h := c.Hosts[0]
	fifo := filepath.Join(userDir(t), "frames.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(fifo, int(u.Uid), int(u.Gid)); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	l := c.StartLauncher(t, "-l", "-i", keys.ClientKey, "-np", "1", "-H", asUser(u.Name, h, 1),
		"--output-filename", dir, "/usr/bin/python3", "-c", framedRank, fifo, fifo)
	out, ok := l.Stdout.WaitFor(e2e.Deadline, e2e.HasReady(1))
	if !ok {
		t.Fatalf("the rank did not start:\n%s\n%s", out, l.Stderr)
	}
	pid := e2e.ReadyPids(out)[0]
	took := dumpNow(t, l)
	gdbRuns(t, logs)
	t.Logf("dump with a FIFO frame took %v", took)
	if took > 60*time.Second {
		t.Errorf("the dump took %v, beyond the launcher's 60 s wait", took)
	}
	if s0 := readStacks(t, dir, 0); !strings.Contains(s0, "(gdb stopped at its time bound, ") && !strings.Contains(s0, ": the dump's time is up;") {
		t.Errorf("rank 0's stacks do not say gdb was stopped at its bound:\n%s", e2e.Tail(s0, 2000))
	}
	if st := stateOf(pid); st != "S" && st != "R" {
		t.Errorf("rank pid %d in state %q after the dump, want it running (S or R)", pid, st)
	}
	stopLaunch(t, l)
}

// stateOf is the state letter of /proc/PID/stat ("" when gone).
func stateOf(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i > 0 && i+2 < len(s) {
		return s[i+2 : i+3]
	}
	return ""
}

// TestUserStacksProcessCap: a rank whose group holds 21 processes (its
// shell and 20 sleeps) gets 8 attached, its leader first, and its stacks
// say how many were left out and why.
func TestUserStacksProcessCap(t *testing.T) {
	e2e.NoTree(t, "one host")
	agenttest.RequireRoot(t)
	proctest.RequireGDBPython(t)
	t.Parallel()
	u := agenttest.NewUser(t, "")
	keys := u.NewKeys(t)
	c, logs := gdbLog(t)
	h := c.Hosts[0]
	dir := t.TempDir()
	l := c.StartLauncher(t, "-l", "-i", keys.ClientKey, "-np", "1", "-H", asUser(u.Name, h, 1), "--output-filename", dir,
		"sh", "-c", `i=0; while [ $i -lt 20 ]; do sleep 300 & i=$((i+1)); done; echo ready $$; wait`)
	out, ok := l.Stdout.WaitFor(e2e.Deadline, e2e.HasReady(1))
	if !ok {
		t.Fatalf("the rank did not start:\n%s\n%s", out, l.Stderr)
	}
	pid := e2e.ReadyPids(out)[0]
	took := dumpNow(t, l)
	runs := gdbRuns(t, logs)
	t.Logf("dump of a group of 21 processes took %v, %d gdbs", took, len(runs))
	s0 := readStacks(t, dir, 0)
	if n := strings.Count(s0, "== pid "); n != 8 || len(runs) != 8 {
		t.Errorf("%d processes in rank 0's stacks, %d gdbs run; want 8 (the cap)", n, len(runs))
	}
	if !strings.HasPrefix(s0, fmt.Sprintf("== pid %d (sh) ==", pid)) {
		t.Errorf("rank 0's stacks do not start with its leader, pid %d:\n%s", pid, e2e.Tail(s0, 500))
	}
	if want := "== 13 more processes of the rank's group not attached (at most 8 per rank, 64 per dump) =="; !strings.Contains(s0, want) {
		t.Errorf("rank 0's stacks do not say %q:\n%s", want, e2e.Tail(s0, 500))
	}
	stopLaunch(t, l)
}
