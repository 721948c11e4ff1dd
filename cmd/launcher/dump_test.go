package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// waitingPython is a rank that says it is ready and then waits in a
// function named for what it does: rank 1 in load_batch, the others in
// all_reduce.
const waitingPython = `
import os, time
def all_reduce(): time.sleep(3600)
def load_batch(): time.sleep(3600)
print("ready", os.getpid(), flush=True)
(load_batch if os.environ["RANK"] == "1" else all_reduce)()
`

// TestDumpPythonWithoutStopping: SIGUSR1 to the launcher collects every
// rank's stacks and lets the job go on. Where gdb has Python's extension
// (Debian: gdb and python3-dbg, which make test installs), the stacks
// carry each rank's Python frames although nothing was stopped, and the
// report names rank 1 in load_batch as the odd one out.
func TestDumpPythonWithoutStopping(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("gdb"); err != nil {
		requireOrSkip(t, "gdb is not installed: %v", err)
	}
	if _, err := os.Stat("/usr/share/gdb/auto-load/usr/bin"); err != nil {
		requireOrSkip(t, "gdb has no Python extension (install python3-dbg): %v", err)
	}
	dir := t.TempDir()
	l := startLauncher(t, false, "-l", "-np", "3", "--output-filename", dir, "/usr/bin/python3", "-c", waitingPython)
	l.waitReady(3)
	if err := syscall.Kill(l.cmd.Process.Pid, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(deadline)
	for !strings.Contains(l.stderr(), "printed last the longest ago") {
		if time.Now().After(end) || l.exited() {
			t.Fatalf("no dump report after SIGUSR1 (exited %v):\n%s", l.exited(), l.stderr())
		}
		time.Sleep(50 * time.Millisecond)
	}
	errOut := l.stderr()
	if !strings.Contains(errOut, "gdb py-bt") {
		t.Errorf("the dump did not use gdb's py-bt:\n%s", errOut)
	}
	if !strings.Contains(errOut, `odd one out: rank 1 on localhost: File "<string>", line 4 in load_batch`) {
		t.Errorf("the report does not name rank 1 in load_batch:\n%s", errOut)
	}
	if !strings.Contains(errOut, `the other 2 ranks: File "<string>", line 3 in all_reduce`) {
		t.Errorf("the report does not put the other ranks in all_reduce:\n%s", errOut)
	}
	b, err := os.ReadFile(filepath.Join(dir, "rank.1", "stacks.txt"))
	if err != nil || !strings.Contains(string(b), "in load_batch") || !strings.Contains(string(b), "Thread 1 ") {
		t.Errorf("rank 1's stacks.txt (%v) lacks its native and Python stacks:\n%s", err, b)
	}
	if l.exited() {
		t.Fatalf("the job ended after SIGUSR1:\n%s", errOut)
	}
	if err := syscall.Kill(l.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := l.wait(); code != 143 {
		t.Errorf("exit code %d after SIGTERM, want 143", code)
	}
	assertGone(t, values(tagged(l.stdout(), "ready"))...)
}

// requireOrSkip skips the test for a missing package, unless the run
// requires every test (GANGWAY_REQUIRE_ROOT_TESTS=1, as CI does, where
// make test installs the packages): then it fails.
func requireOrSkip(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("GANGWAY_REQUIRE_ROOT_TESTS") == "1" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}
