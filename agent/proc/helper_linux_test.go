//go:build linux

package proc

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gangway-hpc/gangway/agent/proc/proctest"
	"github.com/gangway-hpc/gangway/internal/osproc"
)

// testHelperEnv switches the test binary into one of this package's
// helper parts (testHelper), for tests that need a process of their own:
// an agent to kill, PID 1 of a PID namespace, a look at cgroup2 from a
// mount namespace.
const testHelperEnv = "GANGWAY_PROC_TEST"

// requireRootEnv, set to "1" (CI does), turns a skip for want of root
// into a failure.
const requireRootEnv = "GANGWAY_REQUIRE_ROOT_TESTS"

// testHelperMain plays the helper part testHelperEnv names, if any.
func testHelperMain() (int, bool) {
	mode := os.Getenv(testHelperEnv)
	if mode == "" {
		return 0, false
	}
	return testHelper(mode), true
}

func testHelper(mode string) int {
	switch mode {
	case "agent":
		return helperAgent()
	case "pid1":
		if code, ok := PID1(os.Args); ok {
			return code
		}
		return helperOrphans()
	case "sigdirty":
		return helperSigDirty()
	case "sigclean", "sigclean-supervised":
		// An agent started by sigdirty: its ranks print their signal state.
		// Direct ranks rely on what cmd/agent's main does first; the
		// supervisor does it on its own.
		spec := Spec{Argv: []string{"grep", "^Sig", "/proc/self/status"}, Env: []string{"PATH=/usr/bin:/bin"}}
		if mode == "sigclean-supervised" {
			spec.Supervisor = SupervisorExecutable()
		} else {
			DefaultSignalsForChildren()
		}
		p, err := Start(context.Background(), spec, func(_ int, _ Stream, b []byte) { os.Stdout.Write(b) })
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return p.Wait().Code
	case "findcgroup":
		if _, err := FindCgroupParent(); err != nil {
			fmt.Println("no cgroup:", err)
			return 0
		}
		fmt.Println("cgroup ok")
		return 0
	}
	fmt.Fprintf(os.Stderr, "unknown %s mode %q\n", testHelperEnv, mode)
	return 99
}

// helperSigDirty execs this binary in the mode GANGWAY_PROC_TEST_NEXT
// names with the signal state a careless parent leaves: SIGHUP and
// SIGPIPE ignored (nohup, a Python parent), SIGUSR2 blocked, as exec
// keeps them.
func helperSigDirty() int {
	runtime.LockOSThread()
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
	if err := osproc.SetSignalDisposition(32, true); err != nil { // as some CI runners start us
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var set unix.Sigset_t
	set.Val[0] = 1 << (uint(syscall.SIGUSR2) - 1)
	if err := unix.PthreadSigmask(unix.SIG_BLOCK, &set, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env := append(slicesDelete(os.Environ(), testHelperEnv), testHelperEnv+"="+os.Getenv(testHelperEnv+"_NEXT"))
	self, _ := os.Executable()
	err := syscall.Exec(self, []string{self}, env)
	fmt.Fprintln(os.Stderr, "exec:", err)
	return 1
}

// helperAgent plays an agent: it starts one supervised rank running
// `sh -c 'sleep 3600 & echo bg $!; exec SELF'` in proctest's daemon mode
// (a background job in the rank's group, a setsid'd daemon outside it),
// prints "supervisor PID" and the rank's output, and waits to be killed.
func helperAgent() int {
	self, _ := os.Executable()
	env := append(os.Environ(), proctest.Env+"=daemon")
	env = slicesDelete(env, testHelperEnv)
	var mu sync.Mutex
	sink := func(rank int, s Stream, data []byte) {
		mu.Lock()
		defer mu.Unlock()
		os.Stdout.Write(data)
	}
	p, err := Start(context.Background(), Spec{
		Argv:       []string{"sh", "-c", `sleep 3600 & echo bg $!; exec "$0"`, self},
		Env:        env,
		Supervisor: SupervisorExecutable(),
	}, sink)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mu.Lock()
	fmt.Printf("supervisor %d\n", p.pid)
	mu.Unlock()
	p.Wait()
	return 0
}

// helperOrphans is PID 1's child in TestPID1ReapsOrphans: it leaves 8
// orphans to PID 1 (4 × `sh -c 'sleep 0.5 & sleep 0.5 & exit 0'`), waits
// until they have ended, counts the zombies of its PID namespace, prints
// "zombies N" and "ready", then exits 7 at SIGTERM.
func helperOrphans() int {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	for range 4 {
		if err := exec.Command("sh", "-c", "sleep 0.5 & sleep 0.5 & exit 0").Run(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && countComm("sleep") > 0 {
		time.Sleep(20 * time.Millisecond)
	}
	// PID 1 reaps on SIGCHLD; give a late reap up to 10 s (a loaded
	// machine) before counting.
	zombies := 0
	for range 500 {
		if zombies = countState('Z'); zombies == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Printf("sleepers %d\nzombies %d\nready\n", countComm("sleep"), zombies)
	select {
	case <-term:
		fmt.Println("got SIGTERM")
		return 7
	case <-time.After(time.Minute):
		return 1
	}
}

// procs returns every process in /proc.
func procs() []osproc.Stat {
	ents, _ := os.ReadDir("/proc")
	var out []osproc.Stat
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s, err := osproc.ReadStat(pid); err == nil {
			out = append(out, s)
		}
	}
	return out
}

// ppid reads the parent pid from /proc/PID/stat, or 0.
func ppid(pid int) int {
	s, _ := osproc.ReadStat(pid)
	return s.PPid
}

func countComm(comm string) int {
	n := 0
	for _, p := range procs() {
		if p.Comm == comm && p.State != 'Z' {
			n++
		}
	}
	return n
}

func countState(st byte) int {
	n := 0
	for _, p := range procs() {
		if p.State == st {
			n++
		}
	}
	return n
}

func slicesDelete(env []string, key string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// lineReader collects a process's stdout lines for tests to wait on.
type lineReader struct {
	lines chan string
}

func newLineReader(f *os.File) *lineReader {
	lr := &lineReader{lines: make(chan string, 64)}
	go func() {
		defer close(lr.lines)
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			lr.lines <- sc.Text()
		}
	}()
	return lr
}

// untilAll returns the lines read until there has been one starting
// "KEY " (or that is "KEY") for every key, failing the test at EOF or after d.
func (lr *lineReader) untilAll(t *testing.T, d time.Duration, keys ...string) []string {
	t.Helper()
	var got []string
	timer := time.NewTimer(d)
	defer timer.Stop()
	missing := func() []string {
		var m []string
		for _, k := range keys {
			if !slices.ContainsFunc(got, func(l string) bool { return l == k || strings.HasPrefix(l, k+" ") }) {
				m = append(m, k)
			}
		}
		return m
	}
	for len(missing()) > 0 {
		select {
		case l, ok := <-lr.lines:
			if !ok {
				t.Fatalf("no line for %q before EOF; got %q", missing(), got)
			}
			got = append(got, l)
		case <-timer.C:
			t.Fatalf("no line for %q within %v; got %q", missing(), d, got)
		}
	}
	return got
}

// field returns the number after "key " in lines, or fails the test.
func field(t *testing.T, lines []string, key string) int {
	t.Helper()
	for _, l := range lines {
		if v, ok := strings.CutPrefix(l, key+" "); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err == nil {
				return n
			}
		}
	}
	t.Fatalf("no %q line in %q", key, lines)
	return 0
}

// requireRoot skips the test unless it runs as root, or fails it when
// GANGWAY_REQUIRE_ROOT_TESTS=1.
func requireRoot(t *testing.T, why string) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv(requireRootEnv) == "1" {
		t.Fatalf("needs root to %s (and %s=1)", why, requireRootEnv)
	}
	t.Skipf("needs root to %s; run as root (set %s=1 to make this skip a failure)", why, requireRootEnv)
}
