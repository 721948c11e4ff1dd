package pmi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/internal/osproc"
)

// Real MPICH (Debian's mpich 4.0.2, ch4:ucx, PMI-1 client) against Servers
// started in this process. Ranks are started with os/exec the way the agent
// does: own process group, PMI_FD in ExtraFiles.

// jobTimeout bounds one MPI job; 2 shared cores run 4 busy-polling ranks.
const jobTimeout = 60 * time.Second

// mpiEnv is added to every rank's environment. ch4:ucx needs nothing in this
// sandbox: without RDMA hardware UCX reports "rdma_create_event_channel
// failed: No such device" at DIAG level and picks self, sysv/posix and cma
// by itself, as under mpiexec.mpich. The tests still pin UCX_TLS=self,sm:
// every rank runs on this machine (the two "hosts" too), and it keeps UCX
// from probing network devices that other tests on the machine may add.
var mpiEnv = []string{"UCX_TLS=self,sm", "UCX_WARN_UNUSED_ENV_VARS=n"}

// buildMPITest compiles testdata/mpitest.c with mpicc.mpich, or skips.
func buildMPITest(t *testing.T) string {
	t.Helper()
	cc, err := exec.LookPath("mpicc.mpich")
	if err != nil {
		msg := "SKIP real-MPICH tests: mpicc.mpich not found (install Debian's mpich and libmpich-dev)"
		fmt.Fprintln(os.Stderr, msg)
		t.Skip(msg)
	}
	bin := filepath.Join(t.TempDir(), "mpitest")
	out, err := exec.CommandContext(t.Context(), cc, "-O2", "-Wall", "-o", bin, "testdata/mpitest.c").CombinedOutput()
	if err != nil {
		t.Fatalf("mpicc.mpich: %v\n%s", err, out)
	}
	return bin
}

// rankProc is one started rank.
type rankProc struct {
	rank   int
	cmd    *exec.Cmd
	stdout bytes.Buffer
	stderr bytes.Buffer
	done   chan struct{}
	err    error // set before done is closed
}

// baseEnv is the test's environment without any launcher variables.
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PMI_") || strings.HasPrefix(kv, "PMIX_") ||
			strings.HasPrefix(kv, "MPI_LOCAL") || strings.HasPrefix(kv, "OMPI_") ||
			strings.HasPrefix(kv, "HYDRA_") || strings.HasPrefix(kv, "MPIR_CVAR_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, mpiEnv...)
}

// startRank starts bin as rank with env (and the PMI socket as fd 3 when
// child is not nil). The rank's process group is killed at cleanup.
func startRank(t *testing.T, bin string, args []string, rank int, env []string, child *os.File) *rankProc {
	t.Helper()
	p := &rankProc{rank: rank, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(baseEnv(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if child != nil {
		p.cmd.ExtraFiles = []*os.File{child}
	}
	err := p.cmd.Start()
	if child != nil {
		child.Close() // the rank holds the only copy now: its exit is EOF
	}
	if err != nil {
		t.Fatalf("start rank %d: %v", rank, err)
	}
	go func() { // owned by the cleanup below, which waits for done
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.kill)
	return p
}

// kill kills the rank's process group and waits until it is reaped, after
// which its output may be read.
func (p *rankProc) kill() {
	_ = osproc.KillGroup(p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// startFDRank starts a rank in PMI_FD mode on s.
func startFDRank(t *testing.T, s *Server, bin string, args []string, rank int) *rankProc {
	t.Helper()
	child, err := s.RankFD(rank)
	if err != nil {
		t.Fatal(err)
	}
	env, err := s.Env(rank, 3) // ExtraFiles[0] is fd 3
	if err != nil {
		t.Fatal(err)
	}
	// The rank's identity, as the launcher sets it.
	env = append(env, "PMI_RANK="+strconv.Itoa(rank), "PMI_SIZE="+strconv.Itoa(s.job.Size))
	return startRank(t, bin, args, rank, env, child)
}

// waitRanks waits for every rank to exit 0 and checks its one line. At the
// deadline it reports every rank's state, kills them all and fails.
func waitRanks(t *testing.T, ctx context.Context, procs []*rankProc, want func(rank int) string) {
	t.Helper()
	for _, p := range procs {
		select {
		case <-p.done:
			continue
		case <-ctx.Done():
		}
		var states []string
		for _, q := range procs {
			states = append(states, fmt.Sprintf("rank %d pid %d state %q", q.rank, q.cmd.Process.Pid, procState(q.cmd.Process.Pid)))
		}
		for _, q := range procs {
			q.kill()
			t.Logf("rank %d: %v stdout %q stderr %q", q.rank, q.err, q.stdout.String(), q.stderr.String())
		}
		t.Fatalf("job still running at the deadline: %s", strings.Join(states, ", "))
	}
	for _, p := range procs {
		if p.err != nil {
			t.Errorf("rank %d: %v; stderr:\n%s", p.rank, p.err, p.stderr.String())
		}
		got := strings.TrimSuffix(p.stdout.String(), "\n")
		t.Logf("rank %d printed %q", p.rank, got)
		if w := want(p.rank); got != w {
			t.Errorf("rank %d printed %q, want %q", p.rank, got, w)
		}
	}
}

func line(rank, size, local, lsize int) string {
	return fmt.Sprintf("rank %d size %d local %d/%d sum %d bcast ok", rank, size, local, lsize, size*(size-1)/2)
}

func TestMPICH(t *testing.T) {
	bin := buildMPITest(t)

	t.Run("OneHostFD", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), jobTimeout)
		defer cancel()
		job := Job{KVSName: "kvs_gw_1", Size: 4, Mapping: wire.ProcessMapping([]int{0, 0, 0, 0})}
		s := newTestServer(t, job, []int{0, 1, 2, 3}, nil, Events{})
		var procs []*rankProc
		for r := range 4 {
			procs = append(procs, startFDRank(t, s, bin, nil, r))
		}
		waitRanks(t, ctx, procs, func(r int) string { return line(r, 4, r, 4) })
		for r := range 4 {
			if !s.Initialized(r) || !s.Finalized(r) {
				t.Errorf("rank %d: initialized %v finalized %v", r, s.Initialized(r), s.Finalized(r))
			}
		}
	})

	t.Run("TwoHostsFD", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), jobTimeout)
		defer cancel()
		coord := newCoordinator(2)
		job := Job{KVSName: "kvs_gw_2", Size: 4, Mapping: wire.ProcessMapping([]int{0, 0, 1, 1})}
		if job.Mapping != "(vector,(0,2,2))" {
			t.Fatalf("mapping %q", job.Mapping)
		}
		hosts := []*Server{
			newTestServer(t, job, []int{0, 1}, coord.host(0), Events{}),
			newTestServer(t, job, []int{2, 3}, coord.host(1), Events{}),
		}
		var procs []*rankProc
		for r := range 4 {
			procs = append(procs, startFDRank(t, hosts[r/2], bin, nil, r))
		}
		waitRanks(t, ctx, procs, func(r int) string { return line(r, 4, r%2, 2) })
		calls := coord.calls()
		if len(calls) < 3 {
			t.Errorf("only %d barriers", len(calls))
		}
		for seq := 1; seq <= len(calls); seq++ {
			if c := calls[seq]; len(c) != 2 || c[0] != 1 || c[1] != 1 {
				t.Errorf("barrier %d: Fence calls per host %v, want one each", seq, c)
			}
		}
		t.Logf("%d barriers, one Fence per host each", len(calls))
	})

	// Without PMI_process_mapping MPICH exchanges hostnames through the KVS
	// (hostname[r] puts, a barrier, gets), here across two servers. The
	// "hosts" share this machine's hostname, so MPICH puts all 4 ranks on
	// one node.
	t.Run("TwoHostsNoMapping", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), jobTimeout)
		defer cancel()
		coord := newCoordinator(2)
		job := Job{KVSName: "kvs_gw_5", Size: 4}
		hosts := []*Server{
			newTestServer(t, job, []int{0, 1}, coord.host(0), Events{}),
			newTestServer(t, job, []int{2, 3}, coord.host(1), Events{}),
		}
		var procs []*rankProc
		for r := range 4 {
			procs = append(procs, startFDRank(t, hosts[r/2], bin, nil, r))
		}
		waitRanks(t, ctx, procs, func(r int) string { return line(r, 4, r, 4) })
		for r := range 4 {
			if key := fmt.Sprintf("hostname[%d]", r); !coord.fenced(key) {
				t.Errorf("%s was not exchanged", key)
			}
		}
	})

	t.Run("Abort", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), jobTimeout)
		defer cancel()
		type abort struct{ rank, code int }
		aborts := make(chan abort, 4)
		var mu sync.Mutex
		var disconnected []int
		ev := Events{
			Abort: func(rank, code int, _ string) { aborts <- abort{rank, code} },
			disconnect: func(rank int, finalized bool) {
				mu.Lock()
				defer mu.Unlock()
				if !finalized {
					disconnected = append(disconnected, rank)
				}
			},
		}
		job := Job{KVSName: "kvs_gw_4", Size: 2, Mapping: wire.ProcessMapping([]int{0, 0})}
		s := newTestServer(t, job, []int{0, 1}, nil, ev)
		procs := []*rankProc{startFDRank(t, s, bin, []string{"abort"}, 0), startFDRank(t, s, bin, []string{"abort"}, 1)}

		select {
		case a := <-aborts:
			if a != (abort{1, 9}) {
				t.Fatalf("Abort(rank %d, code %d), want rank 1 code 9", a.rank, a.code)
			}
		case <-ctx.Done():
			procs[1].kill()
			t.Fatalf("no Abort event; rank 1 stderr:\n%s", procs[1].stderr.String())
		}
		// The ranks wait to be killed, as hydra's would.
		for _, p := range procs {
			if st := procState(p.cmd.Process.Pid); st == 0 || st == 'Z' {
				t.Fatalf("rank %d ended by itself (state %q) before the kill", p.rank, rune(st))
			}
		}
		for _, p := range procs {
			if err := osproc.SignalGroup(p.cmd.Process.Pid, syscall.SIGKILL); err != nil {
				t.Fatalf("kill group of rank %d: %v", p.rank, err)
			}
		}
		// Dead means no member of either group in any state but zombie;
		// kill(pid, 0) would still succeed on a zombie.
		for _, p := range procs {
			pgid := p.cmd.Process.Pid
			for alive := groupAlive(pgid); len(alive) > 0; alive = groupAlive(pgid) {
				if ctx.Err() != nil {
					t.Fatalf("group %d still has live processes %v", pgid, alive)
				}
				time.Sleep(10 * time.Millisecond)
			}
			select {
			case <-p.done:
			case <-ctx.Done():
				t.Fatalf("rank %d not reaped", p.rank)
			}
			var ee *exec.ExitError
			if !errors.As(p.err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Errorf("rank %d ended with %v, want SIGKILL", p.rank, p.err)
			}
			if st := procState(pgid); st != 0 {
				t.Errorf("rank %d: /proc/%d/stat still there after reaping (state %q)", p.rank, pgid, rune(st))
			}
		}
		// Both connections ended without finalize and were reported.
		deadline := time.Now().Add(replyTimeout)
		for {
			mu.Lock()
			got := slices.Sorted(slices.Values(disconnected))
			mu.Unlock()
			if slices.Equal(got, []int{0, 1}) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("abnormal disconnects %v, want [0 1]", got)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if s.Finalized(0) || s.Finalized(1) {
			t.Error("an aborted rank counts as finalized")
		}
	})
}

// procState is the state letter of pid from /proc/PID/stat, or 0 if there
// is no such process.
func procState(pid int) byte {
	s, _ := osproc.ReadStat(pid)
	return s.State
}

// groupAlive lists the processes of group pgid that are not zombies.
func groupAlive(pgid int) []int {
	ents, _ := os.ReadDir("/proc")
	var alive []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s, err := osproc.ReadStat(pid); err == nil && s.Pgrp == pgid && s.Live() {
			alive = append(alive, pid)
		}
	}
	return alive
}
