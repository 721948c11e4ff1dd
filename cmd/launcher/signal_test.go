package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
	"github.com/gangway-hpc/gangway/agent/proc/proctest"
)

// runTimeout is the --timeout of the tests that let it expire. It counts
// from the launcher's start, and the tests need every rank to have printed
// "ready" (its pid) before it expires, to prove each rank gone after: on
// CI's loaded 2-CPU machine two ranks of the test binary took over 2 s to
// print it, so 2 s failed there.
const runTimeout = "10"

func TestTimeout(t *testing.T) {
	t.Parallel()
	l := startLauncher(t, false, fake(t, 2, "sleep", "--timeout", runTimeout)...)
	assertCode(t, l, 124)
	if errOut := l.stderr(); !strings.Contains(errOut, "--timeout "+runTimeout+"s expired") {
		t.Errorf("stderr does not say the timeout expired:\n%s", errOut)
	}
	ready := tagged(l.stdout(), "ready")
	if len(ready) != 2 {
		t.Fatalf("ready ranks %v, want 2", ready)
	}
	assertGone(t, values(ready)...)
}

// TestTimeoutFromEnv: MPIEXEC_TIMEOUT, which scripts written for mpiexec
// set, is --timeout when the command line gives none: the same message
// and exit status 124. A --timeout on the command line wins.
func TestTimeoutFromEnv(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, env string
		flags     []string
		want      string
	}{
		{"env", runTimeout, nil, "--timeout " + runTimeout + "s expired"},
		{"flag wins", "3600", []string{"--timeout", runTimeout}, "--timeout " + runTimeout + "s expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := startLauncherEnv(t, []string{"MPIEXEC_TIMEOUT=" + tc.env}, false, fake(t, 2, "sleep", tc.flags...)...)
			assertCode(t, l, 124)
			if errOut := l.stderr(); !strings.Contains(errOut, "launcher: "+tc.want) {
				t.Errorf("stderr does not say %q:\n%s", tc.want, errOut)
			}
			ready := tagged(l.stdout(), "ready")
			if len(ready) != 2 {
				t.Fatalf("ready ranks %v, want 2", ready)
			}
			assertGone(t, values(ready)...)
		})
	}
}

// TestSignalEscalation: the first SIGINT sends SIGTERM to ranks that do
// not die of it (and --kill-grace 1h would not kill them); the second
// SIGINT kills them. Launcher exits 130.
func TestSignalEscalation(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"ignoreterm", "trapterm"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			l := startLauncher(t, false, fake(t, 2, mode, "--kill-grace", "1h")...)
			ready := l.waitReady(2)
			pids := values(ready)
			if err := syscall.Kill(l.cmd.Process.Pid, syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			waitStderr(t, l, "launcher: got SIGINT, stopping every rank (again to kill)")
			if mode == "trapterm" {
				// Each rank reports the SIGTERM it got, and lives on.
				l.waitStdout("SIGTERM at both ranks", func(out string) bool { return len(tagged(out, "term")) == 2 })
			} else {
				time.Sleep(300 * time.Millisecond) // let the SIGTERM land
			}
			for _, p := range pids {
				if proctest.Gone(p) {
					t.Fatalf("rank pid %d died of SIGTERM, but it ignores it", p)
				}
			}
			if l.exited() {
				t.Fatalf("launcher exited (code %d) after one SIGINT with --kill-grace 1h", l.code)
			}
			if err := syscall.Kill(l.cmd.Process.Pid, syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			assertCode(t, l, 130)
			if errOut := l.stderr(); !strings.Contains(errOut, "launcher: got SIGINT again, killing every rank") {
				t.Errorf("stderr does not report the kill:\n%s", errOut)
			}
			assertGone(t, pids...)
		})
	}
}

func TestSIGTERM(t *testing.T) {
	t.Parallel()
	l := startLauncher(t, false, fake(t, 3, "sleep")...)
	ready := l.waitReady(3)
	if err := syscall.Kill(l.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	assertCode(t, l, 143)
	assertGone(t, values(ready)...)
}

func waitStderr(t *testing.T, l *launch, want string) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !strings.Contains(l.stderr(), want) {
		if l.exited() || time.Now().After(end) {
			t.Fatalf("stderr never said %q", want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// countingListener counts connections on a TCP port of every address.
type countingListener struct {
	ln net.Listener
	n  atomic.Int64
	wg sync.WaitGroup
}

func (c *countingListener) accepted() int64 { return c.n.Load() }

func listenAny(t *testing.T) (*countingListener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	c := &countingListener{ln: ln}
	c.wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			c.n.Add(1)
			conn.Close()
		}
	})
	t.Cleanup(func() { ln.Close(); c.wg.Wait() })
	return c, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// TestModesEndOnSignals: `launcher --rsh` in the middle of an SSH
// handshake with a host that never answers, and `launcher --analyze` of a
// pipe whose writer says nothing, each end at a signal with 128+N, not
// at a handshake deadline or the pipe's end.
func TestModesEndOnSignals(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Go(func() { // accepts and says nothing: no SSH banner
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		for _, c := range held {
			c.Close()
		}
	})
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	keys, err := sshtest.GenKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rsh := startLauncher(t, false, "--rsh", "-p", port, "-i", keys.ClientKey, "--accept-new-host-keys",
		"--known-hosts", filepath.Join(t.TempDir(), "kh"), "127.0.0.1", "true")
	analyze := startLauncher(t, true, "--analyze", "/dev/stdin")
	// Both blocked, in the handshake and in a read, past their signal
	// set-up (engine.Begin comes before the dial and before the file is
	// opened). SigCgt cannot tell: the Go runtime catches every signal
	// from its start, and dies of one nobody asked for.
	waitUntil(t, "--rsh connected", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(held) > 0
	})
	waitUntil(t, "--analyze opened /dev/stdin", func() bool { return opened(analyze.cmd.Process.Pid) })
	if err := syscall.Kill(rsh.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(analyze.cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	assertCode(t, rsh, 143)
	assertCode(t, analyze, 130)
	// The signal by its name, not Go's word for it ("interrupted by interrupt").
	if want := "launcher: interrupted by SIGINT\n"; analyze.stderr() != want {
		t.Errorf("--analyze stderr %q, want %q", analyze.stderr(), want)
	}
	t.Logf("--rsh ended %v after its start, --analyze %v", rsh.stopped.Sub(rsh.start).Round(time.Millisecond), analyze.stopped.Sub(analyze.start).Round(time.Millisecond))
}

// waitUntil polls cond until it holds, failing the test past deadline.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("not within %v: %s", deadline, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// opened reports whether pid holds a descriptor above 2 on what its
// stdin is: it opened /dev/stdin.
func opened(pid int) bool {
	fd := fmt.Sprintf("/proc/%d/fd/", pid)
	in, err := os.Readlink(fd + "0")
	if err != nil {
		return false
	}
	ents, _ := os.ReadDir(fd)
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > 2 {
			if l, _ := os.Readlink(fd + e.Name()); l == in {
				return true
			}
		}
	}
	return false
}
