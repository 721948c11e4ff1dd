package pmi

import (
	"errors"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Hostile ranks: the test binary as a real rank process (rank_test.go)
// floods its PMI socket, a real socketpair served by a real Server, while
// an honest job runs on another Server in the same process. The server's
// memory is this process's Go heap, measured after a GC: before the
// flood, after it with the flooded job still open, and after that job's
// Close.

// maxGrowth is the most the heap may grow for one flooded job: the
// default Limits (32 MiB of keys and values) plus what their maps and
// allocation classes cost beyond EntryOverhead.
const maxGrowth = 64 << 20

// released is how close to its start the heap must come once the flooded
// job is closed.
const released = 4 << 20

// liveHeap is the Go heap's live bytes after a full GC.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC() // the first may leave finalizers' objects for the second
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// peakSampler records the largest heap (live and garbage) and goroutine
// count while it runs.
type peakSampler struct {
	heap, goroutines int64
	stop             func()
}

func samplePeaks() *peakSampler {
	p := &peakSampler{}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/sched/goroutines:goroutines"}}
		for {
			metrics.Read(s)
			p.heap = max(p.heap, int64(s[0].Value.Uint64()))
			p.goroutines = max(p.goroutines, int64(s[1].Value.Uint64()))
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	p.stop = func() { close(done); wg.Wait() }
	return p
}

// startModeRank starts this test binary as rank of s in mode, sending n
// requests if it floods.
func startModeRank(t *testing.T, s *Server, mode string, rank, n int) *rankProc {
	t.Helper()
	child, err := s.RankFD(rank)
	if err != nil {
		t.Fatal(err)
	}
	env, err := s.Env(rank, 3)
	if err != nil {
		t.Fatal(err)
	}
	env = append(env, "PMI_RANK="+strconv.Itoa(rank), "PMI_SIZE="+strconv.Itoa(s.job.Size),
		rankModeEnv+"="+mode, rankNEnv+"="+strconv.Itoa(n))
	return startRank(t, os.Args[0], []string{"-test.run=^$"}, rank, env, child)
}

// waitRank waits for p's exit within the rank's own time limit and
// returns what it printed; it fails the test unless the exit code is
// want.
func waitRank(t *testing.T, p *rankProc, want int) string {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(rankTimeLimit + 30*time.Second):
		p.kill()
		t.Fatalf("rank %d still running; stdout %q stderr %q", p.rank, p.stdout.String(), p.stderr.String())
	}
	if code := p.cmd.ProcessState.ExitCode(); code != want {
		t.Fatalf("rank %d exited %d (%v), want %d; stdout %q stderr %q", p.rank, code, p.err, want, p.stdout.String(), p.stderr.String())
	}
	return strings.TrimSpace(p.stdout.String())
}

// honestJob runs a two-rank job of honest ranks on a server of its own
// and checks that both complete. It runs beside a flood.
func honestJob(t *testing.T) {
	t.Helper()
	s := newTestServer(t, Job{KVSName: "kvs_h", Size: 2}, []int{0, 1}, nil, Events{})
	ranks := []*rankProc{startModeRank(t, s, "honest", 0, 0), startModeRank(t, s, "honest", 1, 0)}
	for r, p := range ranks {
		if out := waitRank(t, p, 0); out != "honest rank "+strconv.Itoa(r)+" ok" {
			t.Errorf("honest rank %d printed %q", r, out)
		}
		if !s.Finalized(r) {
			t.Errorf("honest rank %d not finalized", r)
		}
	}
}

// attack floods a server of job with one hostile rank (rank 0 of mode,
// n requests) while an honest job runs, and checks the heap: bounded
// while the flooded job is open, back near its start after its Close.
// check inspects the flooded server and the hostile rank's output before
// the Close.
func attack(t *testing.T, job Job, ev Events, mode string, n int, check func(s *Server, out string)) {
	base := liveHeap()
	peaks := samplePeaks()
	s, err := NewServer(t.Context(), job, []int{0}, nil, ev)
	if err != nil {
		t.Fatal(err)
	}
	p := startModeRank(t, s, mode, 0, n)
	honestJob(t)
	out := waitRank(t, p, 0)
	peaks.stop()
	held := liveHeap()
	t.Logf("%s flood: %s", mode, out)
	t.Logf("heap: %.1f MiB before, %.1f MiB with the flooded job open (peak %.1f MiB of objects, %d goroutines)",
		mib(base), mib(held), mib(peaks.heap), peaks.goroutines)
	check(s, out)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = nil
	after := liveHeap()
	t.Logf("heap: %.1f MiB after the flooded job's Close", mib(after))
	if held-base > maxGrowth {
		t.Errorf("the flooded job holds %.1f MiB of heap, more than %d MiB", mib(held-base), maxGrowth>>20)
	}
	if after-base > released {
		t.Errorf("%.1f MiB of heap still held after the flooded job's Close, more than %d MiB", mib(after-base), released>>20)
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// TestPutFlood: 400,000 PMI-1 puts of 900-byte values (what took an
// agent from 13 MB to 470 MB) are refused with an error once the job
// holds the default bytes, the rank keeps its connection, and the heap
// stays bounded.
func TestPutFlood(t *testing.T) {
	attack(t, Job{KVSName: "kvs_a", Size: 1}, Events{}, "puts", 400000, func(s *Server, out string) {
		if !strings.Contains(out, "refused, the first with \"cmd=put_result rc=-1 msg=pmi:_limit_reached:_the_job's_PMI_key-value_space_on_this_host_holds_at_most_33554432_bytes") {
			t.Errorf("the flood saw no refusal at the byte limit: %s", out)
		}
		if used := s.kvs.budget.used; used.bytes > DefaultBytes || used.keys > DefaultKeys {
			t.Errorf("the job's usage %+v is past the limits", used)
		}
	})
}

// TestPaddedPutFlood: one-byte values on kilobyte lines cost what the
// server keeps of them (key, value, overhead), not the line: refused at
// the default key count, with the heap bounded.
func TestPaddedPutFlood(t *testing.T) {
	attack(t, Job{KVSName: "kvs_a", Size: 1}, Events{}, "padded", 300000, func(s *Server, out string) {
		if !strings.Contains(out, "refused, the first with \"cmd=put_result rc=-1 msg=pmi:_limit_reached:_the_job's_PMI_key-value_space_on_this_host_holds_at_most_262144_keys") {
			t.Errorf("the flood saw no refusal at the key limit: %s", out)
		}
	})
}

// TestBigValues: PMI-2 values beyond PMI2_MAX_VALLEN are refused, as put
// or node attribute, and values of the maximum length are refused at the
// job's byte limit.
func TestBigValues(t *testing.T) {
	attack(t, Job{KVSName: "kvs_a", Size: 1}, Events{}, "big", 60000, func(s *Server, out string) {
		for _, want := range []string{
			`"cmd=kvs-put-response;rc=1;errmsg=key or value too long;"`,
			`"cmd=info-putnodeattr-response;rc=1;errmsg=key or value too long;"`,
			`errmsg=pmi: limit reached: the job's PMI key-value space on this host holds at most 33554432 bytes`,
		} {
			if !strings.Contains(out, want) {
				t.Errorf("the flood's replies lack %s: %s", want, out)
			}
		}
	})
}

// TestLookupFlood: a rank that writes 300,000 lookup_name requests and
// reads no reply gets one request served at a time; once its socket is
// full of unread replies, the write timeout drops its connection and
// fails it (Events.Fail), with no goroutine or heap left growing.
func TestLookupFlood(t *testing.T) {
	type failure struct {
		rank int
		err  error
	}
	failed := make(chan failure, 2)
	ev := Events{Fail: func(rank int, err error) { failed <- failure{rank, err} }}
	job := Job{KVSName: "kvs_a", Size: 1, Limits: Limits{WriteTimeout: time.Second}}
	before := runtime.NumGoroutine()
	attack(t, job, ev, "lookups", 300000, func(s *Server, out string) {
		if !strings.HasPrefix(out, "dropped after ") {
			t.Errorf("the flood was not dropped: %s", out)
		}
		select {
		case f := <-failed:
			if f.rank != 0 || !errors.Is(f.err, ErrStalled) {
				t.Errorf("Fail(%d, %v), want rank 0 and ErrStalled", f.rank, f.err)
			}
			t.Logf("Fail(%d, %v)", f.rank, f.err)
		case <-time.After(replyTimeout):
			t.Error("no Fail event")
		}
		if err := s.Failed(0); !errors.Is(err, ErrStalled) {
			t.Errorf("Failed(0) = %v, want ErrStalled", err)
		}
		// The rank's connection is gone: its reader, its pending lookup and
		// writes all ended.
		deadline := time.Now().Add(replyTimeout)
		for {
			s.mu.Lock()
			n := len(s.conns)
			s.mu.Unlock()
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d connections still served", n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	if n := runtime.NumGoroutine(); n > before+10 {
		t.Errorf("%d goroutines after the flood, %d before", n, before)
	}
	select {
	case f := <-failed:
		t.Errorf("a second Fail(%d, %v)", f.rank, f.err)
	default:
	}
}
