package nettest

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed/roottest"
)

// Real MPICH (Debian's mpich 4.0.2, ch4:ucx, PMI-1 client) under the
// launcher, with no mpirun: the agents serve PMI, the launcher completes
// the job-wide barriers. The program is agent/pmi/testdata/mpitest.c.

const mpitestSrc = "../../../../agent/pmi/testdata/mpitest.c"

// mpichLoopEnv is the ranks' MPI environment on loopback agents: every
// rank runs on this machine, so UCX's shared-memory transports connect
// ranks of different "hosts" too (as in agent/pmi's tests); pinning
// UCX_TLS keeps UCX from probing network devices other tests add.
var mpichLoopEnv = []string{"-x", "UCX_TLS=self,sm", "-x", "UCX_WARN_UNUSED_ENV_VARS=n"}

// mpichLine is what mpitest prints for rank of size ranks, local of lsize
// on its node.
func mpichLine(rank, size, local, lsize int) string {
	return fmt.Sprintf("rank %d size %d local %d/%d sum %d bcast ok", rank, size, local, lsize, size*(size-1)/2)
}

// checkMPICHLines checks that every rank printed exactly its expected line.
func checkMPICHLines(t *testing.T, out string, size int, want func(rank int) string) {
	t.Helper()
	lines := e2e.RankLines(out)
	for r := range size {
		w := want(r)
		switch got := lines[r]; {
		case len(got) != 1:
			t.Errorf("rank %d printed %q, want [%q]", r, got, w)
		case got[0] != w:
			t.Errorf("rank %d printed %q, want %q", r, got[0], w)
		}
	}
	if len(lines) != size {
		t.Errorf("%d ranks printed, want %d", len(lines), size)
	}
}

// logRankLines logs the ranks' lines in rank order.
func logRankLines(t *testing.T, out string) {
	t.Helper()
	lines := e2e.RankLines(out)
	var b strings.Builder
	for _, r := range slices.Sorted(maps.Keys(lines)) {
		for _, l := range lines[r] {
			fmt.Fprintf(&b, "[%d] %s\n", r, l)
		}
	}
	t.Logf("rank lines:\n%s", b.String())
}

// TestMPICHLoopback: 16 ranks over 4 in-process agents, filled by slot
// and dealt by node. Each agent's PMI server serves its 4 ranks; the
// launcher joins the barriers.
func TestMPICHLoopback(t *testing.T) {
	bin := compileMPI(t, &mpichTest, "mpicc.mpich", mpitestSrc, "mpitest")
	c := e2e.StartLocal(t, 4)
	for _, tc := range []struct {
		name  string
		opts  []string
		local func(r int) int
	}{
		{"MapBySlot", nil, func(r int) int { return r % 4 }},
		{"MapByNode", []string{"-map-by", "node"}, func(r int) int { return r / 4 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tag := newTag(t)
			args := append([]string{"-l", "-np", "16", "-x", tagEnv + "=" + tag}, mpichLoopEnv...)
			args = append(append(args, tc.opts...), bin)
			l := launchInProc(t, c, 4, args...)
			if l.code != 0 {
				t.Fatalf("launcher: %v", l)
			}
			logRankLines(t, l.stdout.String())
			checkMPICHLines(t, l.stdout.String(), 16, func(r int) string { return mpichLine(r, 16, tc.local(r), 4) })
			left := waitNoTagged(t, tag, 10*time.Second)
			t.Logf("16 ranks on 4 loopback agents (%s): launcher ran %v; no rank left (checked in %v)", tc.name, l.took.Round(time.Millisecond), left.Round(time.Millisecond))
		})
	}
}

// TestMPICHAbortLoopback: rank 1 calls MPI_Abort(MPI_COMM_WORLD, 9); the
// launcher exits 9 and no process of the job is left.
func TestMPICHAbortLoopback(t *testing.T) {
	bin := compileMPI(t, &mpichTest, "mpicc.mpich", mpitestSrc, "mpitest")
	c := e2e.StartLocal(t, 2)
	tag := newTag(t)
	args := append([]string{"-np", "4", "-x", tagEnv + "=" + tag, "--kill-grace", "2s"}, mpichLoopEnv...)
	l := launchInProc(t, c, 2, append(args, bin, "abort")...)
	if l.code != 9 {
		t.Fatalf("launcher exit code %d, want 9: %v", l.code, l)
	}
	if !strings.Contains(l.stderr.String(), "MPI_Abort") {
		t.Errorf("launcher's report does not mention MPI_Abort:\n%s", l.stderr.String())
	}
	left := waitNoTagged(t, tag, 10*time.Second)
	t.Logf("abort: launcher exited 9 after %v; no rank left (checked in %v)\nstderr:\n%s", l.took.Round(time.Millisecond), left.Round(time.Millisecond), l.stderr.String())
}

// mpichNetEnv is the ranks' MPI environment on namespace hosts, found by
// experiment (UCX 1.13.1, MPICH 4.0.2; see UCX_LOG_LEVEL=debug's
// "ep ...: lane[i]" lines):
//
//   - UCX_TLS=tcp,self,sm works, but UCX then uses shared memory (sysv,
//     posix, cma) between ranks of different namespace hosts too: they
//     share one kernel, /dev/shm and PID namespace, and UCX's sm
//     reachability test cannot tell namespaces apart. So MPI traffic does
//     not cross the data network here; PMI (agents and launcher) does.
//   - UCX_TLS=tcp,self (tcp between all ranks, over UCX_NET_DEVICES)
//     deadlocks in MPI_Finalize: every rank prints its line, then some
//     spin in ucp_ep_close (flush) on endpoints whose peers already sit in
//     the blocking PMI barrier that follows, so they never answer. Debian's
//     mpiexec.hydra hangs the same way on the same hosts, so it is
//     MPICH/UCX, not gangway.
//   - UCX_NET_DEVICES keeps UCX's tcp interface, where it is used, on the
//     data NIC (a bed with DeadEnd NICs has another one UCX would offer).
//   - The namespace hosts' identical hostnames do not matter: the launcher
//     serves PMI_process_mapping, so MPICH never falls back to comparing
//     hostnames.
func mpichNetEnv(nic string) []string {
	return []string{"-x", "UCX_TLS=tcp,self,sm", "-x", "UCX_NET_DEVICES=" + nic, "-x", "UCX_WARN_UNUSED_ENV_VARS=n"}
}

// TestMPICHNetns: 2 namespace hosts x 8 ranks (a DGX host's shape), each
// host a real agent process: a job, an MPI_Abort, and a hang. In the
// hang, rank 2 sleeps while the others wait in the first collective of a
// stripped MPICH (frames without symbols, a progress engine caught at
// any depth); with --hang-timeout the launcher collects the stacks, names
// rank 2 alone as the odd one out and the others' collective, every
// rank's stacks come (the agents stop the ranks for the dump), it exits
// 124, and nothing is left.
func TestMPICHNetns(t *testing.T) {
	roottest.RequireRoot(t)
	bin := compileMPI(t, &mpichTest, "mpicc.mpich", mpitestSrc, "mpitest")
	_, launcherBin := binaries(t)
	b := newAgentBed(t, testbed.Options{Prefix: "gwn0", Hosts: 2, Subnet: 180})
	hosts, agents, keys, kh := b.hosts, b.agents, b.keys, b.knownHosts
	conn := []string{"-i", keys.ClientKey, "--known-hosts", kh, "-H", hosts[0].Addr + ":8," + hosts[1].Addr + ":8", "-l"}
	nothingLeft := func(t *testing.T, tag string) time.Duration {
		t.Helper()
		left := waitNoTagged(t, tag, 10*time.Second)
		for i, h := range hosts {
			waitNetnsOnly(t, h.NS, 10*time.Second, agents[i].Pid)
		}
		return left
	}

	t.Run("TwoHosts", func(t *testing.T) {
		tag := newTag(t)
		args := append(append(conn, "-np", "16", "-x", tagEnv+"="+tag), mpichNetEnv(testbed.DefaultDataNIC)...)
		l := run(t, nil, launcherBin, append(args, bin)...)
		if l.code != 0 {
			t.Fatalf("launcher: %v", l)
		}
		logRankLines(t, l.stdout.String())
		checkMPICHLines(t, l.stdout.String(), 16, func(r int) string { return mpichLine(r, 16, r%8, 8) })
		left := nothingLeft(t, tag)
		t.Logf("16 ranks on 2 netns hosts: launcher ran %v; no rank left (checked in %v)", l.took.Round(time.Millisecond), left.Round(time.Millisecond))
	})

	t.Run("Abort", func(t *testing.T) {
		tag := newTag(t)
		args := append(append(conn, "-np", "16", "-x", tagEnv+"="+tag, "--kill-grace", "2s"), mpichNetEnv(testbed.DefaultDataNIC)...)
		l := run(t, nil, launcherBin, append(args, bin, "abort")...)
		if l.code != 9 {
			t.Fatalf("launcher exit code %d, want 9: %v", l.code, l)
		}
		left := nothingLeft(t, tag)
		t.Logf("abort on 2 netns hosts: launcher exited 9 after %v; no rank left (checked in %v)\nstderr:\n%s", l.took.Round(time.Millisecond), left.Round(time.Millisecond), l.stderr.String())
	})

	t.Run("Hang", func(t *testing.T) {
		if _, err := exec.LookPath("gdb"); err != nil {
			t.Skip("gdb not installed (Debian: gdb)")
		}
		tag := newTag(t)
		dir := t.TempDir()
		args := append(append(conn, "-np", "16", "-x", tagEnv+"="+tag, "--hang-timeout", "10s", "--output-filename", dir), mpichNetEnv(testbed.DefaultDataNIC)...)
		l := run(t, nil, launcherBin, append(args, bin, "hang")...)
		errOut := l.stderr.String()
		if l.code != 124 || !strings.Contains(errOut, "no rank printed anything for 10s") {
			t.Fatalf("launcher exit code %d, want 124 after a hang: %v", l.code, l)
		}
		odd := e2e.LineWith(errOut, "launcher: odd one out: ")
		if want := "launcher: odd one out: rank 2 on " + hosts[0].Addr + ": "; !strings.HasPrefix(odd, want) || !strings.Contains(odd, "(in __sleep") {
			t.Errorf("the report does not name rank 2 in its sleep (%q):\n%s", want, errOut)
		}
		if n := strings.Count(errOut, "odd one out: "); n != 1 {
			t.Errorf("%d odd ones out, want rank 2 alone:\n%s", n, errOut)
		}
		// Which frame inside MPICH the others share depends on where
		// their progress engines were caught; each is inside the
		// collective rank 2 never joined.
		others := e2e.LineWith(errOut, "launcher: the other ")
		if others == "" {
			t.Errorf("the report does not say where the other ranks are:\n%s", errOut)
		}
		// The agents stop the ranks for the dump (it ends them): their
		// spinning takes nothing from the gdbs, and every rank's come.
		if l := e2e.LineWith(errOut, "no stacks from"); l != "" {
			t.Errorf("%s", l)
		}
		b, err := os.ReadFile(filepath.Join(dir, "rank.0", "stacks.txt"))
		if err != nil || !strings.Contains(string(b), "in PMPI_Comm_split_type ") {
			t.Errorf("rank 0's stacks.txt does not show the collective (%v):\n%s", err, e2e.Tail(string(b), 1500))
		}
		left := nothingLeft(t, tag)
		t.Logf("hang on 2 netns hosts: launcher exited 124 after %v; no rank left (checked in %v)\nstderr:\n%s", l.took.Round(time.Millisecond), left.Round(time.Millisecond), errOut)
	})
}
