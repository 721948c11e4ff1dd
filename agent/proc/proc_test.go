package proc

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/proc/proctest"
)

func TestMain(m *testing.M) {
	if code, ok := Supervise(os.Args); ok {
		os.Exit(code)
	}
	if code, ok := testHelperMain(); ok {
		os.Exit(code)
	}
	proctest.HelperMain()
	// This process starts ranks as the agent does: first what cmd/agent's
	// main does, so that a run under nohup (SIGHUP ignored, which survives
	// exec) still gives the direct ranks default signals, as the agent's.
	CloseOnExecInherited()
	DefaultSignalsForChildren()
	os.Exit(m.Run())
}

// bothWays runs f for a rank started directly (sup "") and for one under
// a supervisor (sup is this binary): the supervisor changes nothing a
// rank's owner sees but the pid.
func bothWays(t *testing.T, f func(t *testing.T, sup string)) {
	t.Helper()
	t.Run("direct", func(t *testing.T) { f(t, "") })
	if !supervisorSupported {
		return
	}
	sup := SupervisorExecutable()
	if sup == "" {
		t.Fatal("no supervisor executable: TestMain must call Supervise")
	}
	t.Run("supervised", func(t *testing.T) { f(t, sup) })
}

// capture collects output per stream and checks every chunk is whole lines.
type capture struct {
	mu  sync.Mutex
	out map[Stream]*bytes.Buffer
}

func newCapture() *capture {
	return &capture{out: map[Stream]*bytes.Buffer{Stdout: {}, Stderr: {}}}
}

func (c *capture) sink(rank int, s Stream, data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.out[s].Write(data)
}

func (c *capture) String(s Stream) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out[s].String()
}

func fake(t *testing.T, mode string, extra ...string) Spec {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), proctest.Env+"="+mode, "RANK=3")
	env = append(env, extra...)
	return Spec{Rank: 3, Argv: []string{exe}, Env: env, Grace: 2 * time.Second}
}

func start(t *testing.T, ctx context.Context, spec Spec, c *capture) *Proc {
	t.Helper()
	p, err := Start(ctx, spec, c.sink)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Kill(); p.Wait() })
	return p
}

func waitFor(t *testing.T, c *capture, s Stream, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(c.String(s), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in stream %d: %q", want, s, c.String(s))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestExitCodes(t *testing.T) {
	bothWays(t, func(t *testing.T, sup string) {
		for _, tc := range []struct {
			mode string
			code int
			sig  syscall.Signal
		}{
			{"exit:0", 0, 0},
			{"exit:3", 3, 0},
			{"exit:255", 255, 0},
			{"kill:9", 137, syscall.SIGKILL},
			{"kill:15", 143, syscall.SIGTERM},
			{"kill:1", 129, syscall.SIGHUP},
		} {
			t.Run(tc.mode, func(t *testing.T) {
				c := newCapture()
				spec := fake(t, tc.mode)
				spec.Supervisor = sup
				p := start(t, t.Context(), spec, c)
				r := p.Wait()
				if r.Code != tc.code || r.Signal != tc.sig || r.Rank != 3 || r.Stopped {
					t.Fatalf("result %+v, want code %d signal %d", r, tc.code, tc.sig)
				}
				if proctest.State(r.Pid) != 0 {
					t.Fatalf("pid %d still in /proc (state %c): not reaped", r.Pid, proctest.State(r.Pid))
				}
			})
		}
	})
}

func TestNotFound(t *testing.T) {
	_, err := Start(t.Context(), Spec{Rank: 1, Argv: []string{"no-such-program-gw"}, Env: []string{"PATH=/usr/bin:/bin"}}, newCapture().sink)
	if err == nil {
		t.Fatal("started a missing program")
	}
	r := StartResult(1, err)
	if r.Code != 127 || !strings.Contains(err.Error(), "no-such-program-gw") {
		t.Fatalf("got %v code %d, want 127 naming the program", err, r.Code)
	}
	dir := t.TempDir()
	os.WriteFile(dir+"/noexec", []byte("#!/bin/sh\n"), 0o644)
	_, err = Start(t.Context(), Spec{Argv: []string{dir + "/noexec"}}, newCapture().sink)
	if r := StartResult(0, err); err == nil || r.Code != 126 {
		t.Fatalf("non-executable: err %v code %d, want 126", err, r.Code)
	}
}

func TestRankPATHIsUsed(t *testing.T) {
	bothWays(t, func(t *testing.T, sup string) {
		dir := t.TempDir()
		os.WriteFile(dir+"/gw-only-here", []byte("#!/bin/sh\necho found-in-rank-path\n"), 0o755)
		c := newCapture()
		p := start(t, t.Context(), Spec{Argv: []string{"gw-only-here"}, Env: []string{"PATH=" + dir + ":/usr/bin:/bin"}, Supervisor: sup}, c)
		if r := p.Wait(); r.Code != 0 || c.String(Stdout) != "found-in-rank-path\n" {
			t.Fatalf("result %+v output %q", r, c.String(Stdout))
		}
	})
}

func TestStopEscalatesToKill(t *testing.T) {
	bothWays(t, func(t *testing.T, sup string) {
		c := newCapture()
		spec := fake(t, "ignoreterm")
		spec.Supervisor = sup
		p := start(t, t.Context(), spec, c)
		waitFor(t, c, Stdout, "ready")
		t0 := time.Now()
		p.Stop(300 * time.Millisecond)
		r := p.Wait()
		if r.Signal != syscall.SIGKILL || r.Code != 137 || !r.Stopped {
			t.Fatalf("result %+v, want SIGKILL after grace", r)
		}
		if el := time.Since(t0); el < 250*time.Millisecond {
			t.Fatalf("killed after %v, before the grace period", el)
		}
	})
}

func TestStopTermIsEnough(t *testing.T) {
	bothWays(t, func(t *testing.T, sup string) {
		c := newCapture()
		spec := fake(t, "sleep")
		spec.Supervisor = sup
		p := start(t, t.Context(), spec, c)
		waitFor(t, c, Stdout, "ready")
		p.Stop(time.Minute)
		if r := p.Wait(); r.Signal != syscall.SIGTERM || !r.Stopped {
			t.Fatalf("result %+v, want SIGTERM", r)
		}
	})
}

func TestContextCancelStops(t *testing.T) {
	bothWays(t, func(t *testing.T, sup string) {
		ctx, cancel := context.WithCancel(t.Context())
		c := newCapture()
		spec := fake(t, "sleep")
		spec.Supervisor = sup
		p := start(t, ctx, spec, c)
		waitFor(t, c, Stdout, "ready")
		cancel()
		select {
		case <-p.Done():
		case <-time.After(20 * time.Second):
			t.Fatal("rank still running 20s after cancel")
		}
		if r := p.Wait(); !r.Stopped || r.Code != 143 {
			t.Fatalf("result %+v", r)
		}
	})
}

func grandchildPid(t *testing.T, c *capture) int {
	t.Helper()
	waitFor(t, c, Stdout, "child ")
	f := strings.Fields(c.String(Stdout))
	pid, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func TestGrandchildDiesOnStop(t *testing.T) {
	bothWays(t, func(t *testing.T, sup string) {
		c := newCapture()
		spec := fake(t, "grandchild")
		spec.Supervisor = sup
		p := start(t, t.Context(), spec, c)
		gc := grandchildPid(t, c)
		if proctest.Gone(gc) {
			t.Fatal("grandchild not running before stop")
		}
		p.Stop(time.Second)
		r := p.Wait()
		if left := proctest.WaitGone(10*time.Second, r.Pid, gc); len(left) > 0 {
			t.Fatalf("still running after stop: %v", left)
		}
	})
}

func TestGrandchildDiesWhenRankExits(t *testing.T) {
	bothWays(t, func(t *testing.T, sup string) {
		c := newCapture()
		spec := fake(t, "grandchild:1")
		spec.Supervisor = sup
		p := start(t, t.Context(), spec, c)
		r := p.Wait()
		gc := grandchildPid(t, c)
		if r.Code != 0 {
			t.Fatalf("result %+v", r)
		}
		if left := proctest.WaitGone(10*time.Second, gc); len(left) > 0 {
			t.Fatalf("grandchild %d outlived its rank", gc)
		}
	})
}

func TestFloodWholeLines(t *testing.T) {
	bothWays(t, func(t *testing.T, sup string) {
		const n = 100000
		var mu sync.Mutex
		var lines, errLines int
		var bad []string
		sink := func(rank int, s Stream, data []byte) {
			mu.Lock()
			defer mu.Unlock()
			if len(data) == 0 || data[len(data)-1] != '\n' {
				bad = append(bad, fmt.Sprintf("chunk not ending in newline: %q", tail(data)))
			}
			for _, l := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
				if len(l) != 99 || !bytes.HasPrefix(l, []byte("r3 i")) {
					bad = append(bad, string(l))
				}
				if s == Stdout {
					lines++
				} else {
					errLines++
				}
			}
		}
		spec := fake(t, "flood:"+strconv.Itoa(n))
		spec.Supervisor = sup
		p, err := Start(t.Context(), spec, sink)
		if err != nil {
			t.Fatal(err)
		}
		if r := p.Wait(); r.Code != 0 {
			t.Fatalf("result %+v", r)
		}
		if len(bad) > 0 {
			t.Fatalf("%d broken lines, first %q", len(bad), bad[0])
		}
		if lines != n || errLines != n/10 {
			t.Fatalf("got %d stdout and %d stderr lines, want %d and %d", lines, errLines, n, n/10)
		}
	})
}

func tail(b []byte) []byte {
	if len(b) > 40 {
		return b[len(b)-40:]
	}
	return b
}

func TestLongLineAndFinalPartialLine(t *testing.T) {
	bothWays(t, func(t *testing.T, sup string) {
		const n = 1 << 20
		var mu sync.Mutex
		var chunks [][]byte
		spec := fake(t, "longline:"+strconv.Itoa(n))
		spec.Supervisor = sup
		p, err := Start(t.Context(), spec, func(rank int, s Stream, data []byte) {
			mu.Lock()
			chunks = append(chunks, bytes.Clone(data))
			mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
		p.Wait()
		if len(chunks) != 2 {
			t.Fatalf("got %d chunks, want the long line whole and the final partial line", len(chunks))
		}
		if len(chunks[0]) != n+1 || string(chunks[1]) != "end" {
			t.Fatalf("chunks of %d and %q", len(chunks[0]), chunks[1])
		}
	})
}

func TestStdin(t *testing.T) {
	bothWays(t, func(t *testing.T, sup string) {
		c := newCapture()
		spec := fake(t, "cat")
		spec.Stdin = true
		spec.Supervisor = sup
		p := start(t, t.Context(), spec, c)
		in := p.Stdin()
		fmt.Fprintf(in, "hello\nworld\n")
		in.Close()
		if r := p.Wait(); r.Code != 0 || c.String(Stdout) != "hello\nworld\n" {
			t.Fatalf("result %+v output %q", r, c.String(Stdout))
		}
	})
}

// TestNoStdin: a rank without Spec.Stdin reads end of file at once.
func TestNoStdin(t *testing.T) {
	bothWays(t, func(t *testing.T, sup string) {
		c := newCapture()
		spec := fake(t, "cat")
		spec.Supervisor = sup
		p := start(t, t.Context(), spec, c)
		if r := p.Wait(); r.Code != 0 || c.String(Stdout) != "" || p.Stdin() != nil {
			t.Fatalf("result %+v output %q", r, c.String(Stdout))
		}
	})
}

func TestSignalAllowlist(t *testing.T) {
	for _, ok := range []string{"TERM", "SIGTERM", "kill", "USR1"} {
		if _, err := ParseSignal(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "SIG", "99", "WINCH; rm"} {
		if _, err := ParseSignal(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestAffinity(t *testing.T) {
	bothWays(t, func(t *testing.T, sup string) {
		c := newCapture()
		p := start(t, t.Context(), Spec{Argv: []string{"sh", "-c", "grep Cpus_allowed_list /proc/self/status"}, Env: []string{"PATH=/usr/bin:/bin"}, CPUs: []int{0}, Supervisor: sup}, c)
		p.Wait()
		if !strings.Contains(c.String(Stdout), "Cpus_allowed_list:\t0\n") {
			t.Fatalf("affinity not applied: %q", c.String(Stdout))
		}
	})
}

func TestSignalName(t *testing.T) {
	for _, tc := range []struct {
		sig  syscall.Signal
		want string
	}{
		{syscall.SIGKILL, "SIGKILL"}, {syscall.SIGTERM, "SIGTERM"}, {syscall.SIGSEGV, "SIGSEGV"},
		{0, ""}, {syscall.SIGXCPU, ""},
	} {
		if got := SignalName(tc.sig); got != tc.want {
			t.Errorf("SignalName(%d) = %q, want %q", int(tc.sig), got, tc.want)
		}
	}
	// Every name in the table parses back to its signal.
	for name, sig := range signals {
		if got, err := ParseSignal(SignalName(sig)); err != nil || got != sig {
			t.Errorf("%s: ParseSignal(SignalName) = %v, %v", name, got, err)
		}
	}
}
