// Package proctest turns a test binary into a fake trainer and proves
// process death through /proc.
//
// A test package calls HelperMain from TestMain; when GANGWAY_FAKE is set
// the binary acts out that mode and exits, otherwise tests run normally:
//
//	func TestMain(m *testing.M) { proctest.HelperMain(); os.Exit(m.Run()) }
//
// Modes (GANGWAY_FAKE=mode[:arg]):
//
//	exit:N          print "rank R" and exit N
//	env             print RANK LOCAL_RANK WORLD_SIZE and selected variables
//	sleep           print "ready" and sleep until killed
//	ignoreterm      ignore SIGTERM, print "ready", sleep until SIGKILL
//	grandchild      start a grandchild sleeper, print "child PID", sleep
//	daemon[:N]      start a daemon the way daemons detach (a child calls
//	                setsid, starts a sleeper and exits, so the sleeper
//	                is orphaned outside the rank's group and session),
//	                print "daemon PID" (the sleeper's), then "ready PID"
//	                and sleep; with N > 0 exit 0 instead of sleeping
//	flood:N         print N numbered 100-byte lines on stdout and on stderr
//	longline:N      print one line of N bytes, then "end" with no newline
//	cat             copy stdin to stdout
//	kill:SIG        kill itself with signal SIG (number)
//	failafter:MS:N  sleep MS milliseconds then exit N
//	failonfile:P:N  print "ready PID", wait until file P exists, then
//	                write "rank R: fatal error, exiting N" on stderr, exit N
//	trapterm        print "ready PID"; on each SIGTERM print "term PID" and
//	                keep sleeping until SIGKILL
//	byrank:SPEC     act out a different mode per rank; SPEC is
//	                R=MODE,...,*=MODE (the * entry for every other rank),
//	                e.g. byrank:2=exit:7,*=sleep
package proctest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/internal/osproc"
)

// Env is the variable that switches a test binary into helper mode.
const Env = "GANGWAY_FAKE"

// HelperMain acts out the mode in GANGWAY_FAKE and exits; it returns at
// once when the variable is unset.
func HelperMain() {
	mode, ok := os.LookupEnv(Env)
	if !ok {
		return
	}
	os.Exit(run(mode))
}

func rank() string {
	for _, k := range []string{"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"} {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return "0"
}

func run(mode string) int {
	name, arg, _ := strings.Cut(mode, ":")
	n, _ := strconv.Atoi(strings.Split(arg, ":")[0])
	w := bufio.NewWriterSize(os.Stdout, 64<<10)
	defer w.Flush()
	switch name {
	case "exit":
		fmt.Fprintf(w, "rank %s\n", rank())
		w.Flush()
		return n
	case "env":
		for _, k := range strings.Split(os.Getenv("GANGWAY_FAKE_VARS"), ",") {
			if k != "" {
				fmt.Fprintf(w, "%s=%s\n", k, os.Getenv(k))
			}
		}
		return 0
	case "sleep":
		ready(w)
		return hang()
	case "ignoreterm":
		signal.Ignore(syscall.SIGTERM)
		ready(w)
		return hang()
	case "grandchild":
		return grandchild(w, n)
	case "daemon":
		return daemon(w, n)
	case "daemonize": // daemon's middle process
		return daemonize(w)
	case "flood":
		flood(w, n)
		return 0
	case "longline":
		w.WriteString(strings.Repeat("L", n))
		w.WriteString("\nend")
		return 0
	case "cat":
		w.Flush()
		if _, err := io.Copy(os.Stdout, os.Stdin); err != nil {
			return 3
		}
		return 0
	case "kill":
		w.Flush()
		syscall.Kill(os.Getpid(), syscall.Signal(n))
		return hang()
	case "failafter":
		return failAfter(w, arg)
	case "failonfile":
		return failOnFile(w, arg)
	case "trapterm":
		return trapTerm(w)
	case "byrank":
		if m, ok := byRank(arg); ok {
			return run(m)
		}
	}
	fmt.Fprintf(os.Stderr, "proctest: unknown mode %q\n", mode)
	return 99
}

// ready prints "ready PID".
func ready(w *bufio.Writer) {
	fmt.Fprintf(w, "ready %d\n", os.Getpid())
	w.Flush()
}

// hang sleeps until the test kills the process, an hour at most, and
// then exits 99.
func hang() int {
	time.Sleep(time.Hour)
	return 99
}

func grandchild(w *bufio.Writer, n int) int {
	c := exec.Command("sleep", "3600")
	if err := c.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Fprintf(w, "child %d\n", c.Process.Pid)
	w.Flush()
	if n > 0 { // exit early and leave the grandchild behind
		return 0
	}
	return hang()
}

func daemon(w *bufio.Writer, n int) int {
	c := exec.Command("/proc/self/exe")
	c.Env = append(os.Environ(), Env+"=daemonize")
	c.Stdout, c.Stderr = os.Stdout, os.Stderr
	w.Flush()
	if err := c.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "daemonize:", err)
		return 2
	}
	if n > 0 {
		return 0
	}
	ready(w)
	return hang()
}

func daemonize(w *bufio.Writer) int {
	if _, err := syscall.Setsid(); err != nil {
		fmt.Fprintln(os.Stderr, "setsid:", err)
		return 2
	}
	c := exec.Command("sleep", "3600")
	if err := c.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Fprintf(w, "daemon %d\n", c.Process.Pid)
	return 0
}

// flood prints n numbered lines of 100 bytes with their newline on
// stdout, and every tenth on stderr.
func flood(w *bufio.Writer, n int) {
	r := rank()
	ew := bufio.NewWriterSize(os.Stderr, 64<<10)
	defer ew.Flush()
	pad := strings.Repeat("x", 100)
	for i := 0; i < n; i++ {
		// rank, index, checksum-free padding: 100 bytes with the newline
		line := fmt.Sprintf("r%s i%d ", r, i)
		line += pad[:99-len(line)]
		w.WriteString(line)
		w.WriteByte('\n')
		if i%10 == 0 {
			ew.WriteString(line)
			ew.WriteByte('\n')
		}
	}
}

func failAfter(w *bufio.Writer, arg string) int {
	parts := strings.Split(arg, ":")
	ms, _ := strconv.Atoi(parts[0])
	code := 1
	if len(parts) > 1 {
		code, _ = strconv.Atoi(parts[1])
	}
	fmt.Fprintf(w, "rank %s failing in %dms\n", rank(), ms)
	w.Flush()
	time.Sleep(time.Duration(ms) * time.Millisecond)
	fmt.Fprintf(os.Stderr, "rank %s: fatal error, exiting %d\n", rank(), code)
	return code
}

func failOnFile(w *bufio.Writer, arg string) int {
	path, code := arg, 1
	if i := strings.LastIndexByte(arg, ':'); i >= 0 {
		path = arg[:i]
		code, _ = strconv.Atoi(arg[i+1:])
	}
	ready(w)
	for {
		if _, err := os.Stat(path); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, "rank %s: fatal error, exiting %d\n", rank(), code)
	return code
}

func trapTerm(w *bufio.Writer) int {
	c := make(chan os.Signal, 4)
	signal.Notify(c, syscall.SIGTERM)
	ready(w)
	for range c {
		fmt.Fprintf(w, "term %d\n", os.Getpid())
		w.Flush()
	}
	return 0
}

// byRank is the mode SPEC (R=MODE,...,*=MODE) gives this rank.
func byRank(spec string) (string, bool) {
	r, def := rank(), ""
	for _, item := range strings.Split(spec, ",") {
		k, m, _ := strings.Cut(item, "=")
		if k == r {
			return m, true
		}
		if k == "*" {
			def = m
		}
	}
	return def, def != ""
}

// State returns the state letter of /proc/PID/stat ('R', 'S', 'Z'...), or
// 0 when the process does not exist.
func State(pid int) byte {
	s, err := osproc.ReadStat(pid)
	if err != nil {
		return 0
	}
	return s.State
}

// Gone reports whether pid no longer runs: no /proc entry, or a zombie
// (dead, waiting to be reaped; kill(pid, 0) would still succeed on it).
func Gone(pid int) bool {
	s := State(pid)
	return s == 0 || s == 'Z' || s == 'X'
}

// WaitGone waits up to d for every pid to be gone and returns the ones
// still running.
func WaitGone(d time.Duration, pids ...int) []int {
	deadline := time.Now().Add(d)
	for {
		var left []int
		for _, p := range pids {
			if !Gone(p) {
				left = append(left, p)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Fds returns the open descriptors of pid and what each refers to
// (readlink of /proc/PID/fd/N: "pipe:[123]", "socket:[456]", a path), or
// nil when they cannot be read.
func Fds(pid int) map[int]string {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	out := make(map[int]string, len(ents))
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		target, err := os.Readlink(dir + "/" + e.Name())
		if err != nil {
			continue // closed since the listing
		}
		out[fd] = target
	}
	return out
}

// WaitFds reads pid's descriptors (Fds) until ok accepts them or d has
// passed, and returns the last reading: a process in the middle of exec
// holds the dynamic loader's files (ld.so.cache, locale archives) for a
// moment, while a descriptor leaked to it stays.
func WaitFds(pid int, d time.Duration, ok func(map[int]string) bool) map[int]string {
	deadline := time.Now().Add(d)
	for {
		fds := Fds(pid)
		if ok(fds) || time.Now().After(deadline) {
			return fds
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// RequireGDBPython skips the test without gdb and Python's gdb extension
// (python3-dbg; make deps installs both), unless
// GANGWAY_REQUIRE_ROOT_TESTS=1 asks for every test, which makes it a
// failure.
func RequireGDBPython(t testing.TB) {
	t.Helper()
	why := ""
	if _, err := exec.LookPath("gdb"); err != nil {
		why = "gdb is not installed"
	} else if _, err := os.Stat("/usr/share/gdb/auto-load/usr/bin"); err != nil {
		why = "gdb has no Python extension (install python3-dbg)"
	}
	if why == "" {
		return
	}
	if os.Getenv("GANGWAY_REQUIRE_ROOT_TESTS") == "1" {
		t.Fatal(why)
	}
	t.Skip(why)
}
