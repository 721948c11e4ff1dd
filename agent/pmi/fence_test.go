package pmi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// TestTwoHosts runs a 4-rank job as two servers ("hosts") joined by the
// in-test coordinator, which plays the launcher. Host A's ranks speak PMI-1,
// host B's PMI-2; every barrier costs one Fence per host, and every rank sees
// every host's puts after it.
// The Fencer is a blocking Fence (a goroutine waits per barrier) or, as
// the agent's session has it, an AsyncFencer completed from the last
// host's goroutine.
func TestTwoHosts(t *testing.T) {
	for _, async := range []bool{false, true} {
		t.Run(fmt.Sprintf("async=%v", async), func(t *testing.T) { testTwoHosts(t, async) })
	}
}

func testTwoHosts(t *testing.T, async bool) {
	const rounds = 20
	coord := newCoordinator(2)
	job := Job{KVSName: "kvs_2h", Size: 4, Mapping: wire.ProcessMapping([]int{0, 0, 1, 1})}
	if job.Mapping != "(vector,(0,2,2))" {
		t.Fatalf("mapping %q", job.Mapping)
	}
	fa, fb := coord.host(0), coord.host(1)
	if async {
		fa, fb = coord.asyncHost(0), coord.asyncHost(1)
	}
	a := newTestServer(t, job, []int{0, 1}, fa, Events{})
	b := newTestServer(t, job, []int{2, 3}, fb, Events{})
	ranks := []*client{fdClient(t, a, 0), fdClient(t, a, 1), fdClient(t, b, 2), fdClient(t, b, 3)}
	v1 := func(r int) bool { return r < 2 }

	for r, c := range ranks {
		if v1(r) {
			c.call("cmd=init pmi_version=1 pmi_subversion=1", "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0")
			c.call("cmd=get kvsname=kvs_2h key=PMI_process_mapping", "cmd=get_result rc=0 msg=success value=(vector,(0,2,2))")
		} else {
			pmi2Init(c, fmt.Sprint(r))
			c.expectFrame(fmt.Sprintf("cmd=fullinit-response;pmi-version=2;pmi-subversion=0;rank=%d;size=4;appnum=0;debugged=FALSE;pmiverbose=FALSE;rc=0;", r))
		}
	}
	value := func(r, e int) string {
		if v1(r) {
			return fmt.Sprintf("v1 from %d epoch %d", r, e) // spaces survive PMI-1 put
		}
		return fmt.Sprintf("v2;from;%d;epoch;%d", r, e) // ';' survives PMI-2
	}
	for e := 1; e <= rounds; e++ {
		for r, c := range ranks {
			key := fmt.Sprintf("k-%d-%d", r, e)
			if v1(r) {
				c.call("cmd=put kvsname=kvs_2h key="+key+" value="+value(r, e), "cmd=put_result rc=0 msg=success")
			} else {
				c.send2("cmd=kvs-put;key=" + key + ";value=" + escapePMI2(value(r, e)) + ";")
				c.expectFrame("cmd=kvs-put-response;rc=0;")
			}
		}
		// Three ranks enter; the fourth's host has not fenced, so nobody
		// is released, yet gets are still answered at once.
		for r, c := range ranks[:3] {
			if v1(r) {
				c.send("cmd=barrier_in")
			} else {
				c.send2("cmd=kvs-fence;")
			}
		}
		ranks[0].quiet(10 * time.Millisecond)
		ranks[3].send2("cmd=kvs-get;jobid=kvs_2h;srcid=0;key=" + fmt.Sprintf("k-0-%d", e) + ";")
		ranks[3].expectFrame("cmd=kvs-get-response;found=FALSE;rc=0;")
		ranks[3].send2("cmd=kvs-fence;")
		for r, c := range ranks {
			if v1(r) {
				c.expect("cmd=barrier_out")
			} else {
				c.expectFrame("cmd=kvs-fence-response;rc=0;")
			}
		}
		for r, c := range ranks {
			for src := range ranks {
				key := fmt.Sprintf("k-%d-%d", src, e)
				if v1(r) {
					c.call("cmd=get kvsname=kvs_2h key="+key, "cmd=get_result rc=0 msg=success value="+value(src, e))
				} else {
					c.send2(fmt.Sprintf("cmd=kvs-get;jobid=kvs_2h;srcid=%d;key=%s;", src, key))
					c.expectFrame("cmd=kvs-get-response;found=TRUE;value=" + escapePMI2(value(src, e)) + ";rc=0;")
				}
			}
		}
	}
	calls := coord.calls()
	if len(calls) != rounds {
		t.Fatalf("%d barriers fenced, want %d", len(calls), rounds)
	}
	for seq := 1; seq <= rounds; seq++ {
		if c := calls[seq]; c[0] != 1 || c[1] != 1 || len(c) != 2 {
			t.Errorf("barrier %d: Fence calls per host %v, want one each", seq, c)
		}
	}
}

// TestFenceError: a failed Fence fails the barrier for every local rank,
// whether Fence returns the error or FenceAsync's done carries it.
func TestFenceError(t *testing.T) {
	boom := errors.New("launcher gone")
	fencers := map[string]Fencer{
		"Fence":      fenceFunc(func(context.Context, int, map[string]string) (map[string]string, error) { return nil, boom }),
		"FenceAsync": failingAsync{boom},
	}
	for name, f := range fencers {
		t.Run(name, func(t *testing.T) { testFenceError(t, f) })
	}
}

type failingAsync struct{ err error }

func (f failingAsync) Fence(context.Context, int, map[string]string) (map[string]string, error) {
	return nil, f.err
}

func (f failingAsync) FenceAsync(_ int, _ map[string]string, done func(map[string]string, error)) {
	done(nil, f.err)
}

func testFenceError(t *testing.T, f Fencer) {
	s := newTestServer(t, Job{Size: 4}, []int{0, 1}, f, Events{})
	r0, r1 := fdClient(t, s, 0), fdClient(t, s, 1)
	r0.call("cmd=init pmi_version=1 pmi_subversion=1", "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0")
	pmi2Init(r1, "1")
	r1.frame()
	r0.send("cmd=barrier_in")
	r1.send2("cmd=kvs-fence;")
	r1.expectFrame("cmd=kvs-fence-response;rc=1;errmsg=barrier 1 failed: barrier 1: fence: launcher gone;")
	r0.eof() // barrier_out carries no rc: the PMI-1 rank loses its connection
}

// TestReleaseDoesNotWaitForAStuckRank: the goroutine that completes a
// barrier (the agent's session loop) writes every local rank's release
// without waiting: rank 0 entered first and then sent far more than a
// socket buffer of requests without reading any replies, and rank 1 is
// still released. Rank 0's requests wait for its release (one request at
// a time per rank); it gets its barrier_out, whole, and then every reply,
// once it reads.
func TestReleaseDoesNotWaitForAStuckRank(t *testing.T) {
	coord := newCoordinator(2)
	s := newTestServer(t, Job{Size: 4, KVSName: "kvs_s"}, []int{0, 1}, coord.asyncHost(0), Events{})
	r0, r1 := fdClient(t, s, 0), fdClient(t, s, 1)
	r0.send("cmd=barrier_in")
	r1.send("cmd=barrier_in")
	// Rank 0 asks for far more than a socket buffer of replies without
	// reading any.
	const gets = 20000
	req := []byte(strings.Repeat("cmd=get kvsname=kvs_s key=PMI_process_mapping\n", gets))
	sent := make(chan error, 1)
	go func() { _, err := r0.nc.Write(req); sent <- err }()
	time.Sleep(50 * time.Millisecond) // rank 0 reads nothing meanwhile: its reader fills the socket
	done := make(chan struct{})
	go func() {
		defer close(done)
		coord.asyncHost(1).FenceAsync(1, nil, func(map[string]string, error) {}) // the other host arrives
	}()
	select {
	case <-done:
	case <-time.After(replyTimeout):
		t.Fatal("completing the barrier waited for rank 0, which reads nothing")
	}
	r1.expect("cmd=barrier_out")
	r0.expect("cmd=barrier_out")
	for range gets {
		r0.expect("cmd=get_result rc=-1 msg=key_PMI_process_mapping_not_found value=unknown")
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}

// TestCloseWhileFencing: Close cancels a Fence that waits for another host
// and ends every connection.
func TestCloseWhileFencing(t *testing.T) {
	coord := newCoordinator(2) // the other host never comes
	s, err := NewServer(t.Context(), Job{Size: 4}, []int{0, 1}, coord.host(0), Events{})
	if err != nil {
		t.Fatal(err)
	}
	r0, r1 := fdClient(t, s, 0), fdClient(t, s, 1)
	r0.send("cmd=barrier_in")
	r1.send("cmd=barrier_in")
	deadline := time.Now().Add(replyTimeout)
	for len(coord.calls()[1]) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("Fence was never called")
		}
		time.Sleep(time.Millisecond)
	}
	done := make(chan error)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(replyTimeout):
		t.Fatal("Close hung")
	}
	r0.eof()
	r1.eof()
	if _, err := s.RankFD(2); !errors.Is(err, ErrClosed) {
		t.Errorf("RankFD after Close: %v", err)
	}
}

// TestContextCancel: the caller's context ends the server like Close.
func TestContextCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	s, err := NewServer(ctx, Job{Size: 1}, []int{0}, nil, Events{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := fdClient(t, s, 0)
	c.call("cmd=get_appnum", "cmd=appnum appnum=0")
	cancel()
	c.eof()
}

func TestNewServerValidation(t *testing.T) {
	f := newCoordinator(2).host(0)
	tests := []struct {
		job   Job
		local []int
		f     Fencer
		want  string
	}{
		{Job{Size: 0}, []int{0}, nil, "job size 0"},
		{Job{Size: 2}, nil, f, "no local ranks"},
		{Job{Size: 2}, []int{0, 2}, f, "local rank 2 outside job of size 2"},
		{Job{Size: 2}, []int{1, 1}, f, "local rank 1 listed twice"},
		{Job{Size: 2}, []int{0}, nil, "no Fencer for a job with 1 of 2 ranks local"},
		{Job{Size: 2, KVSName: "a b"}, []int{0}, f, `bad kvsname "a b"`},
		{Job{Size: 2, Mapping: "(vector, (0,2,1))"}, []int{0}, f, "contains spaces"},
	}
	for _, tt := range tests {
		_, err := NewServer(t.Context(), tt.job, tt.local, tt.f, Events{})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewServer(%+v, %v): %v, want %q", tt.job, tt.local, err, tt.want)
		}
	}
}

func TestEnv(t *testing.T) {
	s := newTestServer(t, Job{Size: 8}, []int{4, 6, 5}, newCoordinator(2).host(0), Events{})
	env, err := s.Env(6, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"PMI_FD=3"}
	if !slices.Equal(env, want) || !slices.IsSorted(env) {
		t.Errorf("Env = %q, want %q", env, want)
	}
	if _, err := s.Env(0, 3); err == nil {
		t.Error("Env of a remote rank succeeded")
	}
	f, err := s.RankFD(4)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := s.RankFD(4); err == nil {
		t.Error("second RankFD for rank 4 succeeded")
	}
}

// TestBarrierLongAfterLastReply: a barrier that completes longer than
// the write timeout after the rank's previous reply (the first barrier of
// thousands of hosts; MPI_Finalize's after hours of work) still releases
// the rank: the deadline of an earlier reply is not left on the socket
// to fail the release's write. PMI-1 (barrier_out) and PMI-2 (fence),
// the release written from the completing host's goroutine as the
// agent's session does.
func TestBarrierLongAfterLastReply(t *testing.T) {
	const timeout = 200 * time.Millisecond
	coord := newCoordinator(2)
	job := Job{KVSName: "kvs_late", Size: 2, Mapping: wire.ProcessMapping([]int{0, 1}), Limits: Limits{WriteTimeout: timeout}}
	a := newTestServer(t, job, []int{0}, coord.asyncHost(0), Events{})
	b := newTestServer(t, job, []int{1}, coord.asyncHost(1), Events{})
	r0, r1 := fdClient(t, a, 0), fdClient(t, b, 1)
	r0.call("cmd=init pmi_version=1 pmi_subversion=1", "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0")
	pmi2Init(r1, "1")
	r1.expectFrame("cmd=fullinit-response;pmi-version=2;pmi-subversion=0;rank=1;size=2;appnum=0;debugged=FALSE;pmiverbose=FALSE;rc=0;")
	time.Sleep(3 * timeout) // every deadline of those replies has passed
	r0.send("cmd=barrier_in")
	time.Sleep(3 * timeout)
	r1.send2("cmd=kvs-fence;")
	r1.expectFrame("cmd=kvs-fence-response;rc=0;")
	r0.expect("cmd=barrier_out")
}
