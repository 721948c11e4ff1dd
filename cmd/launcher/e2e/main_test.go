// Package e2e_test holds the launcher's end-to-end tests on loopback: the
// real launcher, in process or as bin/launcher, against several agents, in
// process or as bin/agent processes (cmd/internal/e2e), with this test
// binary as the rank program. Tests with network-namespace hosts are in
// the nettest and hostnet packages below.
package e2e_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/agent/proc"
	"github.com/gangway-hpc/gangway/agent/proc/proctest"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
)

// TestMain lets the test binary double as the rank program (launcher
// arguments -x GANGWAY_FAKE=mode make a rank act out a proctest mode) and
// as the ranks' supervisor for in-process agents.
func TestMain(m *testing.M) {
	if code, ok := proc.Supervise(os.Args); ok {
		os.Exit(code)
	}
	proctest.HelperMain()
	e2e.HelperMain() // an isolated rank, or a careless parent of a launcher
	e2e.DefaultSignals()
	code := m.Run()
	e2e.RemoveBinaries()
	os.Exit(code)
}

// self is the test binary, the rank program.
func self(t testing.TB) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// fake returns launcher arguments running np ranks of the test binary in
// a proctest mode over hosts, after extra launcher options. It asks for
// [R] tags (-l): the tests find ranks' "ready PID" lines by them, and
// the launcher tags only a terminal by default.
func fake(t testing.TB, np int, hosts, mode string, opts ...string) []string {
	args := append([]string{"-l", "-np", strconv.Itoa(np), "-H", hosts, "-x", proctest.Env + "=" + mode}, opts...)
	return append(args, self(t))
}

// perHost is how many ranks each host runs in the fault tests: a DGX
// node's eight, one per GPU.
const perHost = 8

// withChild is the rank program of the fault tests: a shell that starts a
// child in its process group (a dataloader worker's stand-in), prints
// "child PID" and "ready PID", and becomes a sleep, so that the child's
// parent is the rank.
const withChild = `sleep 600 & echo "child $!"; echo "ready $$"; exec sleep 600`

// childRanks returns launcher arguments running np withChild ranks over
// hosts, after extra launcher options, every process carrying mark (-x;
// see newMark). Like fake, it asks for [R] tags.
func childRanks(np int, hosts, mark string, opts ...string) []string {
	args := append([]string{"-l", "-np", strconv.Itoa(np), "-H", hosts, "-x", mark}, opts...)
	return append(args, "sh", "-c", withChild)
}

// faultJob is the fault tests' job on a cluster of agent processes:
// perHost withChild ranks on every host, each process marked.
type faultJob struct {
	l               *e2e.Launch
	np              int
	ranks, children map[int]int // pids by rank
	mark            string
}

// startFaultJob runs childRanks over every host of c, perHost ranks
// each, with the launcher options opts; every process of the job is
// marked (and killed when the test ends, if left). It returns once every
// rank and its child run (startedWithChildren).
func startFaultJob(t *testing.T, c *e2e.Cluster, opts ...string) faultJob {
	t.Helper()
	j := faultJob{np: len(c.Hosts) * perHost, mark: newMark(t)}
	killMarked(t, j.mark)
	j.l = c.StartLauncher(t, childRanks(j.np, c.HostList(perHost), j.mark, opts...)...)
	j.ranks, j.children = startedWithChildren(t, j.l.Stdout, j.l.Stderr, j.np)
	return j
}

// startedWithChildren waits until np withChild ranks have printed their
// pids, checks that every rank and every child runs and that each child's
// parent is its rank, and returns the ranks' and the children's pids by
// rank.
func startedWithChildren(t *testing.T, out *e2e.Output, stderr fmt.Stringer, np int) (ranks, children map[int]int) {
	t.Helper()
	s, ok := out.WaitFor(e2e.Deadline, e2e.HasReady(np))
	if !ok {
		t.Fatalf("not every rank started:\n%s\nstderr:\n%s", s, stderr)
	}
	ranks, children = e2e.ReadyPids(s), e2e.ChildPids(s)
	for r := range np {
		rank, child := ranks[r], children[r]
		if rank == 0 || child == 0 {
			t.Fatalf("rank %d printed rank pid %d, child pid %d:\n%s", r, rank, child, s)
		}
		if proctest.Gone(rank) || proctest.Gone(child) || parentOf(child) != rank {
			t.Fatalf("rank %d: want rank %d and its child %d running, the child's parent the rank:%s", r, rank, child, describe([]int{rank, child}))
		}
	}
	return ranks, children
}

// treesOf returns the pids of the given ranks and of their children.
func treesOf(t testing.TB, ranks, children map[int]int, rs ...int) []int {
	t.Helper()
	return append(pidsOf(t, ranks, rs...), pidsOf(t, children, rs...)...)
}

// span is the ranks lo..hi-1.
func span(lo, hi int) []int {
	out := make([]int, 0, hi-lo)
	for r := lo; r < hi; r++ {
		out = append(out, r)
	}
	return out
}

// pidsOf returns the pids of the given ranks.
func pidsOf(t testing.TB, ready map[int]int, ranks ...int) []int {
	t.Helper()
	var out []int
	for _, r := range ranks {
		p, ok := ready[r]
		if !ok {
			t.Fatalf("rank %d printed no ready line", r)
		}
		out = append(out, p)
	}
	return out
}

// lines splits output into non-empty lines.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}
