package e2e_test

import (
	"context"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/launcher"
	"github.com/gangway-hpc/gangway/launcher/diagnose"
	"github.com/gangway-hpc/gangway/launcher/transport"
)

// Hostile agents: whoever answers on a host's address speaks for it (in
// an mpi-operator pod, any pod that takes over a worker's name), so the
// launcher must stay bounded whatever an agent sends. Each test plays one
// attack with fake agents on net.Pipe and checks the launcher's exit
// status, its message naming the host, and, for floods, the heap.

// fakeSession is one fake agent's session, from the agent's side.
type fakeSession struct {
	c     *wire.Conn
	host  string
	ranks []int // the ranks the launcher gave it (StartJob)

	mu     sync.Mutex
	exited map[int]bool
}

// exit reports rank's end, once.
func (s *fakeSession) exit(x wire.Exit) error {
	s.mu.Lock()
	s.exited[x.Rank] = true
	s.mu.Unlock()
	return s.c.Send(wire.KindExit, x)
}

// stopped reports every rank not reported yet as stopped, then Done.
func (s *fakeSession) stopped() {
	for _, r := range s.ranks {
		s.mu.Lock()
		done := s.exited[r]
		s.exited[r] = true
		s.mu.Unlock()
		if !done && s.c.Send(wire.KindExit, wire.Exit{Rank: r, Pid: 1000 + r, Code: 143, Signal: 15, SignalName: "SIGTERM", Stopped: true}) != nil {
			return
		}
	}
	_ = s.c.Send(wire.KindDone, nil)
}

// fakeAgent is how one fake host behaves. It answers Hello, Start and Go
// as an agent does (Started with a pid for each of its ranks), then runs
// attack in a goroutine of its own. Unless deaf, it answers Dump with
// empty stacks and Stop (once attack has returned) with a stopped Exit
// for each rank not reported yet, then Done. It passes every preflight
// probe and reads everything else until the launcher hangs up.
type fakeAgent struct {
	attack func(s *fakeSession) error
	deaf   bool // ignores Dump and Stop
	mute   bool // reads nothing after Go (until the test ends)
	// selftest answers the fabric self-test's steps (but close); nil: the
	// agent predates it (no Facts.Selftest, its frames ignored).
	selftest func(st wire.Selftest) wire.SelftestResult
	// shared: its facts say TakesShared (the job frame, then starts that
	// refer to it); else it predates them.
	shared bool
	// record, if not nil, is given every message the fake takes.
	record func(m wire.Msg)
}

// fakeAgents is a Dialer serving each host with its fake agent (quiet
// when not named: no attack, honest answers). Cleanup waits for every
// fake's goroutines, which end when the launcher closes its sessions.
func fakeAgents(t *testing.T, agents map[string]fakeAgent) transport.Dialer {
	var wg sync.WaitGroup
	quit := make(chan struct{}) // closed when the test ends: mute fakes hang up
	t.Cleanup(func() {
		close(quit)
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(e2e.Deadline):
			t.Errorf("fake agents still running %v after the test", e2e.Deadline)
		}
	})
	return transport.DialerFunc(func(ctx context.Context, h hostfile.Host) (io.ReadWriteCloser, string, error) {
		ours, theirs := net.Pipe()
		a := agents[h.Name]
		wg.Go(func() {
			a.serve(t, &wg, quit, &fakeSession{c: wire.NewConn(theirs), host: h.Name, exited: map[int]bool{}})
		})
		return ours, "127.0.0.9", nil
	})
}

func (a fakeAgent) serve(t *testing.T, wg *sync.WaitGroup, quit <-chan struct{}, s *fakeSession) {
	defer s.c.Close()
	attacked := make(chan struct{})
	var stop sync.Once
	for {
		m, err := s.c.Recv()
		if err != nil {
			return
		}
		if a.record != nil {
			a.record(m)
		}
		switch m.Kind {
		case wire.KindHello:
			var h wire.Hello
			if err = m.Decode(&h); err == nil {
				f := fakeFacts(s.host, h.Peers)
				if a.selftest != nil {
					f.Selftest = wire.SelftestVersion
				}
				f.TakesShared = a.shared
				err = s.c.Send(wire.KindFacts, f)
			}
		case wire.KindStart:
			var j wire.StartJob
			if err = m.Decode(&j); err == nil {
				for _, r := range j.Ranks {
					s.ranks = append(s.ranks, r.Rank)
				}
				err = s.c.Send(wire.KindReady, wire.Ready{})
			}
		case wire.KindGo:
			pids := map[int]int{}
			for _, r := range s.ranks {
				pids[r] = 1000 + r
			}
			if err = s.c.Send(wire.KindStarted, wire.Started{Pids: pids}); err != nil {
				return
			}
			if a.mute {
				<-quit
				return
			}
			wg.Go(func() {
				defer close(attacked)
				if a.attack != nil {
					if err := a.attack(s); err != nil {
						t.Logf("fake agent %s: attack ended: %v", s.host, err)
					}
				}
			})
		case wire.KindProbe:
			var p wire.Probe
			if err = m.Decode(&p); err == nil {
				var r wire.ProbeResult
				for _, target := range p.Targets {
					r.Results = append(r.Results, wire.ProbeOne{Target: target})
				}
				err = s.c.Send(wire.KindProbeResult, r)
			}
		case wire.KindSelftest:
			var st wire.Selftest
			if err = m.Decode(&st); err == nil && a.selftest != nil && st.Op != wire.SelftestClose {
				err = s.c.Send(wire.KindSelftestResult, a.selftest(st))
			}
		case wire.KindDump:
			if !a.deaf {
				err = s.c.Send(wire.KindDumped, wire.Dumped{Stacks: map[int]string{}})
			}
		case wire.KindStop:
			if !a.deaf {
				stop.Do(func() {
					wg.Go(func() { <-attacked; s.stopped() })
				})
			}
		}
		if err != nil {
			return
		}
	}
}

// fakeFacts describe a host with one NIC that routes to every peer.
func fakeFacts(name string, peers []string) wire.Facts {
	f := wire.Facts{Version: wire.Version, Name: name, CPUs: 1,
		NICs: []wire.NIC{{Name: "eth0", Index: 2, Type: "device", Up: true, MTU: 1500, Addrs: []string{"198.18.0.1/24"}}}}
	for _, p := range peers {
		f.Routes = append(f.Routes, wire.Route{Peer: p, Addr: "198.18.0.2", Iface: "eth0"})
	}
	return f
}

// heapGrowth runs f and returns the most the heap grew above what it held
// before, sampled every few milliseconds.
func heapGrowth(f func()) (peak uint64) {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var max atomic.Uint64
	done := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > base && ms.HeapAlloc-base > max.Load() {
				max.Store(ms.HeapAlloc - base)
			}
			select {
			case <-t.C:
			case <-done:
				return
			}
		}
	})
	f()
	close(done)
	sampler.Wait()
	return max.Load()
}

// bigPuts are PMI puts of about n MiB, as one fence could carry.
func bigPuts(n int) map[string]string {
	puts := map[string]string{}
	v := strings.Repeat("v", 1<<20-64)
	for i := range n {
		puts["key"+strconv.Itoa(i)] = v
	}
	return puts
}

// The most the launcher's heap (with the fakes') may grow under a flood:
// a few of the flood's frames in flight, never the flood itself.
const (
	fenceHeapLimit = 256 << 20 // 15 MiB fences: frames, decoded maps, garbage
	floodHeapLimit = 64 << 20  // 900 KiB exits and aborts
)

// TestHostileFences: a host may have one fence in flight, for the next
// barrier. Fences with fresh sequence numbers, sent without waiting for
// the barrier (which the quiet host never enters), end the host at the
// second; they no longer pile up (60 fences of 15 MiB: 1.4 GB before).
func TestHostileFences(t *testing.T) {
	for _, tt := range []struct {
		name  string
		seqs  []int
		puts  int // MiB per fence
		want  string
		flood bool
	}{
		{"Flood", seqRange(1, 60), 15, "lost the agent on liar: protocol violation: it sent fence 2 while its fence 1 was not released", true},
		{"OutOfOrder", []int{5}, 0, "lost the agent on liar: protocol violation: it sent fence 5, but the next barrier is 1", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			puts := bigPuts(tt.puts)
			remote := fakeAgents(t, map[string]fakeAgent{"liar": {attack: func(s *fakeSession) error {
				for _, seq := range tt.seqs {
					if err := s.c.Send(wire.KindFence, wire.Fence{Seq: seq, Puts: puts}); err != nil {
						return err
					}
				}
				return nil
			}}})
			var stderr string
			var code int
			grew := heapGrowth(func() {
				_, stderr, code = e2e.Run(t, launcher.Deps{Remote: remote}, "--output-filename", t.TempDir(), "--timeout", "30", "-np", "2", "-H", "quiet:1,liar:1", "true")
			})
			t.Logf("launcher heap grew by %d MiB; stderr:\n%s", grew>>20, stderr)
			if code != diagnose.ExitLost || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, want %d and %q", code, diagnose.ExitLost, tt.want)
			}
			if tt.flood && grew > fenceHeapLimit {
				t.Errorf("the launcher's heap grew by %d MiB under the flood, want at most %d", grew>>20, fenceHeapLimit>>20)
			}
		})
	}
}

// clipLines is s with each line cut to 200 bytes (the floods' messages
// are long).
func clipLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if len(l) > 200 {
			lines[i] = l[:200] + "..."
		}
	}
	return strings.Join(lines, "\n")
}

func seqRange(from, to int) []int {
	var s []int
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

// TestHostileExitFlood: one Exit per rank. A repeated Exit ends the host
// at the second as a protocol violation; the rank is counted once (600
// exits with 900 KiB messages: 1.4 GiB and "600 of 1 ranks failed" before).
func TestHostileExitFlood(t *testing.T) {
	msg := strings.Repeat("e", 900<<10)
	remote := fakeAgents(t, map[string]fakeAgent{"liar": {attack: func(s *fakeSession) error {
		for range 600 {
			if err := s.exit(wire.Exit{Rank: 0, Pid: 1000, Code: 1, Err: msg}); err != nil {
				return err
			}
		}
		return nil
	}}})
	var stderr string
	var code int
	grew := heapGrowth(func() {
		_, stderr, code = e2e.Run(t, launcher.Deps{Remote: remote}, "--output-filename", t.TempDir(), "--timeout", "30", "-np", "1", "-H", "liar:1", "true")
	})
	t.Logf("launcher heap grew by %d MiB; stderr: %d bytes", grew>>20, len(stderr))
	want := "lost the agent on liar: protocol violation: it sent a second exit for rank 0"
	if code != 1 || !strings.Contains(stderr, want) || !strings.Contains(stderr, "job failed: rank 0 on liar") {
		t.Errorf("exit %d, want 1, the rank's failure and %q in:\n%s", code, want, clipLines(stderr))
	}
	if strings.Contains(stderr, "ranks failed") || strings.Contains(stderr, "also failed") {
		t.Errorf("the rank was counted more than once:\n%s", clipLines(stderr))
	}
	if grew > floodHeapLimit {
		t.Errorf("the launcher's heap grew by %d MiB under the flood, want at most %d", grew>>20, floodHeapLimit>>20)
	}
}

// TestHostileAbortFlood: a rank may call abort more than once (PMI lets
// it), so repeated Aborts are not a violation, but they count once. 100
// aborts with 900 KiB messages (as many as the race detector decodes in
// a few seconds) grew the heap by 222 MiB before, with "100 of 1 ranks
// failed" (600: 1.3 GiB). The grace outlasts the flood, which the fake
// sends before it answers the stop: the host is not cut off before the
// flood is in.
func TestHostileAbortFlood(t *testing.T) {
	e2e.NoTree(t, "one host")
	msg := strings.Repeat("a", 900<<10)
	remote := fakeAgents(t, map[string]fakeAgent{"liar": {attack: func(s *fakeSession) error {
		e, err := wire.Encode(wire.KindAbort, wire.Abort{Rank: 0, Code: 3, Msg: msg})
		for i := 0; i < 100 && err == nil; i++ {
			err = s.c.SendEncoded(e)
		}
		return err
	}}})
	var stderr string
	var code int
	grew := heapGrowth(func() {
		_, stderr, code = e2e.Run(t, launcher.Deps{Remote: remote}, "--output-filename", t.TempDir(), "--timeout", "50", "--kill-grace", "30s", "-np", "1", "-H", "liar:1", "true")
	})
	t.Logf("launcher heap grew by %d MiB; stderr: %d bytes", grew>>20, len(stderr))
	if code != 3 || !strings.Contains(stderr, "job failed: rank 0 on liar: called MPI_Abort with code 3") {
		t.Errorf("exit %d, want 3 and rank 0's abort in:\n%s", code, clipLines(stderr))
	}
	if strings.Contains(stderr, "ranks failed") || strings.Contains(stderr, "also failed") {
		t.Errorf("the rank was counted more than once:\n%s", clipLines(stderr))
	}
	if strings.Contains(stderr, "did not confirm") {
		t.Errorf("the host was cut off before it answered the stop:\n%s", clipLines(stderr))
	}
	if grew > floodHeapLimit {
		t.Errorf("the launcher's heap grew by %d MiB under the flood, want at most %d", grew>>20, floodHeapLimit>>20)
	}
}

// TestHostileDeafAgentTimeout: an agent that ignores Dump and Stop does
// not hold the launcher past --timeout: the stacks are waited for at
// most --kill-grace, the stop at most --kill-grace and a few seconds,
// then the host is cut off (79 s for --timeout 3 --kill-grace 1s before).
func TestHostileDeafAgentTimeout(t *testing.T) {
	remote := fakeAgents(t, map[string]fakeAgent{"deaf": {deaf: true}})
	l := e2e.Start(t, launcher.Deps{Remote: remote}, "--output-filename", t.TempDir(), "--timeout", "3", "--kill-grace", "1s", "-np", "2", "-H", "deaf:1,quiet:1", "true")
	code := l.Wait(t)
	stderr := l.Stderr.String()
	t.Logf("ended %v after the start (--timeout 3 --kill-grace 1s); stderr:\n%s", l.Ended.Sub(l.Started).Round(time.Millisecond), stderr)
	for _, want := range []string{
		"not every host sent its ranks' stacks in time",
		"launcher: deaf (did not confirm the end of its ranks)",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	if code != diagnose.ExitTimeout {
		t.Errorf("exit %d, want %d", code, diagnose.ExitTimeout)
	}
	if strings.Contains(stderr, "quiet (did not confirm") {
		t.Errorf("the quiet host, which confirmed its stop, was cut off too")
	}
}

// TestHostileMuteAgentTimeout: an agent that stops reading its session
// (an SSH channel whose window it never opens; here a pipe nobody reads)
// blocked the launcher's next send to it, and with it the job loop,
// --timeout and signals, for ever. A write that makes no progress for
// transport.StallTimeout now cuts the agent off.
func TestHostileMuteAgentTimeout(t *testing.T) {
	remote := fakeAgents(t, map[string]fakeAgent{"mute": {mute: true}})
	l := e2e.Start(t, launcher.Deps{Remote: remote}, "--output-filename", t.TempDir(), "--timeout", "3", "--kill-grace", "1s", "-np", "2", "-H", "mute:1,quiet:1", "true")
	code := l.Wait(t)
	stderr := l.Stderr.String()
	t.Logf("ended %v after the start (--timeout 3 --kill-grace 1s, stall timeout %v); stderr:\n%s", l.Ended.Sub(l.Started).Round(time.Millisecond), transport.StallTimeout, stderr)
	want := "lost the agent on mute: stopped reading what the launcher sends: a write made no progress for " + transport.StallTimeout.String()
	if code != diagnose.ExitTimeout || !strings.Contains(stderr, want) {
		t.Errorf("exit %d, want %d and %q", code, diagnose.ExitTimeout, want)
	}
}
