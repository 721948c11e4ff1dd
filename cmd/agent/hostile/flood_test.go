package hostile_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
)

// floodStats counts a flood's connections by what the agent did with them.
type floodStats struct {
	dials    atomic.Int64 // TCP connections opened
	admitted atomic.Int64 // greeted with the SSH banner, then held idle
	closed   atomic.Int64 // of those, closed by the agent within the hold
	refused  atomic.Int64 // closed by the agent without a word: refused, or closed to make room before its banner
	stalled  atomic.Int64 // neither within the hold: never accepted
	failed   atomic.Int64 // the dial itself failed
}

func (s *floodStats) String() string {
	return fmt.Sprintf("%d connections: %d admitted and held idle (%d of them closed by the agent within the hold), %d closed before the banner, %d never accepted, %d dials failed",
		s.dials.Load(), s.admitted.Load(), s.closed.Load(), s.refused.Load(), s.stalled.Load(), s.failed.Load())
}

// flood is one flooding worker: it opens connections from src to dst, one
// at a time, until ctx ends or the flood has made max. An admitted
// connection is held idle for hold (the agent waits for a handshake); a
// refused one is followed by a pause, so the flood lasts.
func flood(ctx context.Context, src, dst string, max int64, hold time.Duration, st *floodStats) {
	buf := make([]byte, 256)
	for ctx.Err() == nil && st.dials.Load() < max {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
		c, err := d.DialContext(ctx, "tcp", dst)
		if err != nil {
			if ctx.Err() == nil {
				st.failed.Add(1)
			}
			pause(ctx, 50*time.Millisecond)
			continue
		}
		st.dials.Add(1)
		_ = c.SetReadDeadline(time.Now().Add(hold))
		n, err := c.Read(buf)
		var ne net.Error
		switch {
		case n > 0:
			st.admitted.Add(1)
			// Idle until the hold ends or the agent hangs up.
			if _, err := c.Read(buf); !errors.As(err, &ne) || !ne.Timeout() {
				st.closed.Add(1)
			}
		case errors.As(err, &ne) && ne.Timeout():
			st.stalled.Add(1)
		default:
			st.refused.Add(1)
			pause(ctx, 50*time.Millisecond)
		}
		c.Close()
	}
}

func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// startFlood runs workers flooding workers from src until the returned
// stop is called (it waits for them) or max connections are made.
func startFlood(t *testing.T, workers int, src, dst string, max int64, hold time.Duration) (*floodStats, func()) {
	st := &floodStats{}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { flood(ctx, src, dst, max, hold, st) })
	}
	stop := func() { cancel(); wg.Wait() }
	t.Cleanup(stop)
	return st, stop
}

// waitDials waits until the flood has made n connections.
func waitDials(t *testing.T, st *floodStats, n int64) {
	t.Helper()
	deadline := time.Now().Add(e2e.Deadline)
	for st.dials.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("the flood made only %v in %v", st, e2e.Deadline)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sampleFDs records the most file descriptors pid had open until stop.
func sampleFDs(pid int) (peak *atomic.Int64, stop func()) {
	peak = &atomic.Int64{}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			if n := int64(openFDs(pid)); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	return peak, func() { close(done); wg.Wait() }
}

func fileLimit(t *testing.T, pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		t.Fatal(err)
	}
	return regexp.MustCompile(`Max open files\s+(\d+)\s+(\d+)`).FindString(string(b))
}

// addrIn is address .i of the cluster's loopback block (127.0.B.i).
func addrIn(c *e2e.Cluster, i int) string {
	return fmt.Sprintf("%s.%d", c.Hosts[0].Addr[:strings.LastIndexByte(c.Hosts[0].Addr, '.')], i)
}

// TestFloodUnderLowFileLimit: an agent limited to 128 file descriptors
// takes a flood of at least 1000 idle, unauthenticated connections from
// one address, at most 200 open at once. The per-source cap holds at
// most 50 of them: past it, each new connection closes the oldest one
// whose client has sent nothing, so the agent never runs out of
// descriptors, and real OpenSSH logins from another address and from
// the flooding address itself succeed during the flood and after it; the
// agent is alive at the end.
func TestFloodUnderLowFileLimit(t *testing.T) {
	t.Parallel()
	c := agentProc(t, e2e.Wrapped("prlimit", "--nofile=128:128"))
	p, h := c.Procs[0], c.Hosts[0]
	if lim := fileLimit(t, p.Pid()); !strings.HasSuffix(lim, " 128") {
		t.Fatalf("the agent's file limit: %q, want 128", lim)
	}
	attacker, user := addrIn(c, 200), addrIn(c, 201)
	peakFDs, stopSampling := sampleFDs(p.Pid())
	st, stop := startFlood(t, 200, attacker, h.HostPort(), 20000, time.Second)
	waitDials(t, st, 300)
	t0 := time.Now()
	for i := range 3 {
		if _, err := sshLogin(t, c, user); err != nil {
			t.Fatalf("login %d during the flood (%v): %v", i+1, st, err)
		}
	}
	during := time.Since(t0)
	if _, err := sshLogin(t, c, attacker); err != nil {
		t.Fatalf("login from the flooding address during the flood (%v): %v", st, err)
	}
	if st.dials.Load() >= 20000 {
		t.Fatalf("the flood ended (%v) before the logins did", st)
	}
	waitDials(t, st, 1000)
	stop()
	stopSampling()
	alive(t, p)
	if _, err := sshLogin(t, c, user); err != nil {
		t.Fatalf("login after the flood: %v", err)
	}
	if _, err := sshLogin(t, c, attacker); err != nil {
		t.Fatalf("login from the flooding address after the flood: %v", err)
	}
	alive(t, p)
	if st.closed.Load() == 0 || st.dials.Load() < 1000 {
		t.Errorf("flood: %v; want at least 1000, some closed by the agent to make room", st)
	}
	if strings.Contains(p.Stderr.String(), "accept failed") {
		t.Errorf("the agent ran out of descriptors under the caps:\n%s", e2e.Tail(p.Stderr.String(), 2000))
	}
	if peakFDs.Load() >= 128 {
		t.Errorf("the agent had %d descriptors open, its limit is 128", peakFDs.Load())
	}
	logs := strings.Count(p.Stderr.String(), "closing idle connections")
	if logs == 0 || logs > 10 {
		t.Errorf("%d log lines about connections closed to make room, want a few (one per 10 s)", logs)
	}
	rss, peak := memKiB(t, p.Pid())
	t.Logf("flood: %v; 3 logins from another address took %v during it; the agent's descriptors peaked at %d of 128; %d log lines about closing, %d about refusing; RSS %d KiB (peak %d KiB)",
		st, during.Round(time.Millisecond), peakFDs.Load(), logs, strings.Count(p.Stderr.String(), "refusing connections over the cap"), rss, peak)
}

// TestFloodPastFileLimit: with the startup caps set above its file limit
// the agent does run out of descriptors (accept4: too many open files).
// It backs off and keeps serving, logging once per backoff episode, and
// a login succeeds once the flood is over; the agent is alive at the end.
func TestFloodPastFileLimit(t *testing.T) {
	t.Parallel()
	c := agentProc(t, e2e.Wrapped("prlimit", "--nofile=128:128"),
		e2e.AgentArgs("--max-startups", "1000", "--max-startups-per-source", "1000", "-v"))
	p, h := c.Procs[0], c.Hosts[0]
	attacker, user := addrIn(c, 202), addrIn(c, 203)
	st, stop := startFlood(t, 200, attacker, h.HostPort(), 1000, time.Second)
	waitDials(t, st, 1000)
	stop()
	alive(t, p)
	// The agent drains what the flood left in its accept queue first.
	deadline := time.Now().Add(e2e.Deadline)
	var err error
	for {
		if _, err = sshLogin(t, c, user); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("no login within %v after the flood: %v", e2e.Deadline, err)
	}
	alive(t, p)
	log := p.Stderr.String()
	episodes := strings.Count(log, "accept failed; retrying with backoff")
	recovered := strings.Count(log, "accepting again")
	if episodes == 0 || !strings.Contains(log, "too many open files") {
		t.Errorf("the agent never ran out of descriptors (flood: %v); the test proves nothing", st)
	}
	if episodes != recovered {
		t.Errorf("%d accept-failure log lines for %d backoff episodes, want one each", episodes, recovered)
	}
	failures := 0
	for _, m := range regexp.MustCompile(`"accepting again".*?"failures":(\d+)`).FindAllStringSubmatch(log, -1) {
		var n int
		fmt.Sscan(m[1], &n)
		failures += n
	}
	t.Logf("flood: %v; the agent ran out of descriptors in %d episodes (%d failed accepts, %d warnings) and kept serving",
		st, recovered, failures, episodes)
}

// TestIdleFloodFromLauncherAddress: idle, unauthenticated connections
// from the launcher's own source address (a login node's launchers share
// it), 200 open at a time and each reopened as soon as the agent closes
// it, do not keep the launcher out: its connection sends its version
// line at once, so each idle one past the caps makes room for it, and an
// 8-rank job starts and exits 0.
func TestIdleFloodFromLauncherAddress(t *testing.T) {
	t.Parallel()
	launcherBin, _ := e2e.BuildBinaries(t)
	c := agentProc(t)
	p, h := c.Procs[0], c.Hosts[0]
	// The address the kernel gives the launcher's connections.
	probe, err := net.Dial("tcp", h.HostPort())
	if err != nil {
		t.Fatal(err)
	}
	src := probe.LocalAddr().(*net.TCPAddr).IP.String()
	probe.Close()
	peakFDs, stopSampling := sampleFDs(p.Pid())
	st, stop := startFlood(t, 200, src, h.HostPort(), 1_000_000, time.Minute)
	waitDials(t, st, 400)
	l := e2e.StartProc(t, nil, launcherBin, append(append([]string{"-np", "8", "-H", c.HostList(8)}, c.SSHFlags()...),
		"/bin/sh", "-c", "echo rank-$RANK-ok")...)
	code := l.Wait(t)
	took := l.Ended.Sub(l.Started)
	during := st.String()
	stop()
	stopSampling()
	alive(t, p)
	if code != 0 || strings.Count(l.Stdout.String(), "-ok") != 8 {
		t.Fatalf("the job during the flood (%v): exit %d\nstdout:\n%s\nstderr:\n%s", during, code, l.Stdout, l.Stderr)
	}
	if st.closed.Load() == 0 {
		t.Errorf("flood: %v; want idle connections closed by the agent", st)
	}
	if !strings.Contains(p.Stderr.String(), "closing idle connections") {
		t.Errorf("the agent did not log the connections it closed to make room:\n%s", e2e.Tail(p.Stderr.String(), 2000))
	}
	t.Logf("flood from the launcher's address %s: %v when the job ended; the 8-rank job took %v and exited 0; the agent's descriptors peaked at %d",
		src, during, took.Round(time.Millisecond), peakFDs.Load())
}
