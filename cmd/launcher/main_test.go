package main

// End-to-end tests of the real launcher with real processes. The test
// binary plays four parts (as litestream's tests do):
//
//   - the test runner (no special variable set);
//   - the launcher itself, when GANGWAY_TEST_LAUNCHER=1: TestMain calls
//     run() with main's signal wiring, so exit codes, signals and output are
//     the real binary's;
//   - a fake trainer rank, when GANGWAY_FAKE=mode (proctest.HelperMain).
//     Tests pass the mode with -x GANGWAY_FAKE=mode, so only ranks get it;
//   - a rank's supervisor (proc.Supervise), as bin/launcher re-executes
//     itself for local ranks.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/proc"
	"github.com/gangway-hpc/gangway/agent/proc/proctest"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
)

const (
	launcherEnv = "GANGWAY_TEST_LAUNCHER"
	// deadline bounds every wait; generous for a loaded 2-core machine.
	deadline = 60 * time.Second
)

func TestMain(m *testing.M) {
	if code, ok := proc.Supervise(os.Args); ok { // ranks' supervisors, as main does
		os.Exit(code)
	}
	proctest.HelperMain()
	if os.Getenv(launcherEnv) == "1" {
		os.Exit(run(os.Args[1:], launcherSignals())) // main's own wiring
	}
	e2e.DefaultSignals()
	os.Exit(m.Run())
}

// self is the test binary, used both as the launcher and as rank program.
func self(t *testing.T) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// fake returns launcher arguments that run n ranks of the test binary in
// the given proctest mode, followed by extra launcher options. It asks
// for [R] tags (-l): the tests read ranks' lines ("ready PID", floods) by
// them, and the launcher tags only a terminal by default; a later tag
// option in opts wins.
func fake(t *testing.T, n int, mode string, opts ...string) []string {
	args := append([]string{"-l", "-np", strconv.Itoa(n), "-x", proctest.Env + "=" + mode}, opts...)
	return append(args, self(t))
}

// launch is one launcher process started by a test.
type launch struct {
	t              *testing.T
	cmd            *exec.Cmd
	stdin          io.WriteCloser // nil unless asked for
	outPath        string
	errPath        string
	done           chan struct{}
	code           int // exit code; -1 when killed by a signal
	start, stopped time.Time
}

// startLauncher starts the launcher with args in its own process group,
// stdout and stderr going to files. Cleanup kills whatever is left: the
// launcher's group and the groups of every rank pid seen in its output.
func startLauncher(t *testing.T, withStdin bool, args ...string) *launch {
	t.Helper()
	return startLauncherEnv(t, nil, withStdin, args...)
}

// startLauncherEnv is startLauncher with env added to the launcher's
// environment.
func startLauncherEnv(t *testing.T, env []string, withStdin bool, args ...string) *launch {
	t.Helper()
	dir := t.TempDir()
	l := &launch{t: t, outPath: filepath.Join(dir, "stdout"), errPath: filepath.Join(dir, "stderr"), done: make(chan struct{})}
	stdout, err := os.Create(l.outPath)
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := os.Create(l.errPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self(t), args...)
	// Race-enabled binaries sleep a second at exit unless told not to;
	// ranks inherit this from the launcher.
	cmd.Env = append(os.Environ(), launcherEnv+"=1", "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	cmd.Env = append(cmd.Env, env...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if withStdin {
		if l.stdin, err = cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
	}
	l.start = time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stdout.Close()
	stderr.Close()
	l.cmd = cmd
	go func() {
		err := cmd.Wait()
		l.stopped = time.Now()
		l.code = cmd.ProcessState.ExitCode()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			l.code = -2
		}
		close(l.done)
	}()
	t.Cleanup(func() {
		select {
		case <-l.done:
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-l.done
		}
		if l.stdin != nil {
			l.stdin.Close()
		}
		// Ranks lead process groups that hold their grandchildren; a
		// grandchild whose rank is gone is killed by its own pid.
		for _, pid := range l.pids() {
			if !proctest.Gone(pid) {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if strings.Contains(l.stderr(), "WARNING: DATA RACE") {
			t.Errorf("the race detector fired in the launcher or a rank")
		}
		if t.Failed() {
			t.Logf("launcher %v\nstdout (tail):\n%s\nstderr (tail):\n%s", args, e2e.Tail(l.stdout(), 2000), e2e.Tail(l.stderr(), 4000))
		}
	})
	return l
}

func (l *launch) stdout() string {
	b, _ := os.ReadFile(l.outPath)
	return string(b)
}

func (l *launch) stderr() string {
	b, _ := os.ReadFile(l.errPath)
	return string(b)
}

// wait waits for the launcher to exit and returns its exit code.
func (l *launch) wait() int {
	l.t.Helper()
	select {
	case <-l.done:
		return l.code
	case <-time.After(deadline):
		l.t.Fatalf("launcher still running after %v", deadline)
		return 0
	}
}

func (l *launch) exited() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// waitStdout polls the launcher's stdout until ok accepts it.
func (l *launch) waitStdout(what string, ok func(out string) bool) string {
	l.t.Helper()
	end := time.Now().Add(deadline)
	for {
		ex := l.exited()
		out := l.stdout()
		if ok(out) {
			return out
		}
		if ex {
			l.t.Fatalf("launcher exited (code %d) before %s", l.code, what)
		}
		if time.Now().After(end) {
			l.t.Fatalf("no %s within %v", what, deadline)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitReady waits until n ranks printed "ready PID" and returns rank->pid.
func (l *launch) waitReady(n int) map[int]int {
	l.t.Helper()
	out := l.waitStdout(fmt.Sprintf("%d ready ranks", n), func(out string) bool { return len(tagged(out, "ready")) >= n })
	return tagged(out, "ready")
}

// pids lists every rank and grandchild pid the ranks printed so far.
func (l *launch) pids() []int {
	var out []int
	for _, word := range []string{"ready", "child"} {
		for _, p := range tagged(l.stdout(), word) {
			out = append(out, p)
		}
	}
	return out
}

// tagged parses "[R] WORD PID" lines into rank->pid.
func tagged(out, word string) map[int]int {
	m := map[int]int{}
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, "] "+word+" ") {
			continue // cheap filter: Sscanf on a flood's lines is slow
		}
		var r, pid int
		var w string
		if n, _ := fmt.Sscanf(line, "[%d] %s %d", &r, &w, &pid); n == 3 && w == word {
			m[r] = pid
		}
	}
	return m
}

func values(m map[int]int) []int {
	var out []int
	for _, v := range m {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// assertGone proves through /proc that every pid has ended. The launcher
// has exited when this is called; SIGKILLed grandchildren may take a
// moment to be torn down by the kernel, and nothing else would kill them.
func assertGone(t *testing.T, pids ...int) {
	t.Helper()
	if len(pids) == 0 {
		t.Fatal("no pids to check")
	}
	if left := proctest.WaitGone(10*time.Second, pids...); len(left) > 0 {
		for _, p := range left {
			t.Errorf("pid %d still running after the launcher exited (state %c)", p, proctest.State(p))
		}
	}
}

func assertCode(t *testing.T, l *launch, want int) {
	t.Helper()
	if got := l.wait(); got != want {
		t.Fatalf("launcher exit code %d, want %d", got, want)
	}
}

func lines(s string) []string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func TestRankEnvironment(t *testing.T) {
	t.Parallel()
	l := startLauncher(t, false, "-l", "-np", "4", "sh", "-c", "echo $RANK $LOCAL_RANK $WORLD_SIZE $OMPI_COMM_WORLD_RANK")
	assertCode(t, l, 0)
	got := lines(l.stdout())
	slices.Sort(got)
	want := []string{"[0] 0 0 4 0", "[1] 1 1 4 1", "[2] 2 2 4 2", "[3] 3 3 4 3"}
	if !slices.Equal(got, want) {
		t.Errorf("stdout lines %q, want %q", got, want)
	}
	t.Logf("launcher -np 4 sh -c 'echo $RANK $LOCAL_RANK $WORLD_SIZE $OMPI_COMM_WORLD_RANK' printed:\n%s", l.stdout())
}

func TestRankExitCode(t *testing.T) {
	t.Parallel()
	trigger := filepath.Join(t.TempDir(), "fail")
	l := startLauncher(t, false, fake(t, 4, "byrank:2=failonfile:"+trigger+":7,*=sleep")...)
	ready := l.waitReady(4)
	if err := os.WriteFile(trigger, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	assertCode(t, l, 7)
	errOut := l.stderr()
	for _, want := range []string{
		fmt.Sprintf("rank 2 on localhost (pid %d) exited with code 7", ready[2]),
		"rank 2 stderr: rank 2: fatal error, exiting 7",
		"3 other ranks were stopped",
		"exit code 7",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(errOut, "also failed") {
		t.Errorf("stopped ranks reported as failures:\n%s", errOut)
	}
	assertGone(t, values(ready)...)
}

func TestRankKilledBySignal(t *testing.T) {
	t.Parallel()
	l := startLauncher(t, false, fake(t, 2, "byrank:1=kill:9,*=sleep")...)
	assertCode(t, l, 137)
	errOut := l.stderr()
	for _, want := range []string{"rank 1 on localhost", "killed by signal 9 (SIGKILL)", "exit code 137"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if pids := l.pids(); len(pids) > 0 {
		assertGone(t, pids...)
	}
}

// TestGrandchildCleanup: ranks 0 and 1 sleep with a sleeping grandchild,
// rank 2 exits 0 at once leaving its grandchild behind, rank 3 fails; after
// the launcher exits every rank and grandchild is gone.
func TestGrandchildCleanup(t *testing.T) {
	t.Parallel()
	trigger := filepath.Join(t.TempDir(), "fail")
	l := startLauncher(t, false, fake(t, 4, "byrank:2=grandchild:1,3=failonfile:"+trigger+":5,*=grandchild")...)
	out := l.waitStdout("3 grandchildren and a ready rank", func(out string) bool {
		return len(tagged(out, "child")) == 3 && len(tagged(out, "ready")) == 1
	})
	var pids []int
	for r, c := range tagged(out, "child") {
		pids = append(pids, c)
		if r == 2 {
			continue // its parent may already have exited
		}
		ppid, err := parentOf(c)
		if err != nil {
			t.Fatalf("rank %d grandchild %d: %v", r, c, err)
		}
		pids = append(pids, ppid)
	}
	pids = append(pids, values(tagged(out, "ready"))...)
	if err := os.WriteFile(trigger, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	assertCode(t, l, 5)
	if len(pids) != 6 {
		t.Fatalf("pids %v: want 3 grandchildren and 3 ranks", pids)
	}
	assertGone(t, pids...)
}

// parentOf reads the parent pid from /proc/PID/stat.
func parentOf(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:])) // state ppid ...
	if i < 0 || len(f) < 2 {
		return 0, fmt.Errorf("bad stat %q", b)
	}
	return strconv.Atoi(f[1])
}

func TestStdinToRankZero(t *testing.T) {
	t.Parallel()
	l := startLauncher(t, true, fake(t, 2, "cat", "--stdin", "0")...)
	if _, err := io.WriteString(l.stdin, "hello\nworld\n"); err != nil {
		t.Fatal(err)
	}
	l.stdin.Close()
	assertCode(t, l, 0)
	if got, want := l.stdout(), "[0] hello\n[0] world\n"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
}

func TestStdinNone(t *testing.T) {
	t.Parallel()
	// Our end of the launcher's stdin stays open: rank 0 can only finish
	// if it got EOF from /dev/null.
	l := startLauncher(t, true, fake(t, 2, "cat", "--stdin", "none")...)
	if _, err := io.WriteString(l.stdin, "not for anyone\n"); err != nil {
		t.Fatal(err)
	}
	assertCode(t, l, 0)
	if got := l.stdout(); got != "" {
		t.Errorf("stdout %q, want nothing", got)
	}
}
