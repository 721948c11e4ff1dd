package e2e_test

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/proc/proctest"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
)

// The kill tests run a DGX node's shape: perHost ranks on each of two
// hosts, each rank with a child in its process group (withChild), every
// process of the job marked (newMark), so that "nothing is left" covers
// the children too.

// TestAgentKilled: SIGKILL one of two agent processes mid-job. The
// launcher fails naming that host, the other host's ranks are stopped,
// and the killed agent's ranks die with their supervisor (see also
// TestAgentKilledLeavesNothing).
func TestAgentKilled(t *testing.T) {
	t.Parallel()
	_, agentBin := e2e.BuildBinaries(t)
	c := e2e.StartProcs(t, 2, agentBin)
	j := startFaultJob(t, c, "--kill-grace", "5s")
	l, np, ranks, children, mark := j.l, j.np, j.ranks, j.children, j.mark
	host1, host2 := treesOf(t, ranks, children, span(0, perHost)...), treesOf(t, ranks, children, span(perHost, np)...)

	t0 := time.Now()
	if err := c.Procs[1].Kill(); err != nil {
		t.Fatal(err)
	}
	code := l.Wait(t)
	detect := l.Ended.Sub(t0)
	stderr := l.Stderr.String()
	if code != 255 {
		t.Errorf("exit code %d, want 255 (agent lost)", code)
	}
	if want := "lost the agent on " + c.Hosts[1].Addr; !strings.Contains(stderr, want) {
		t.Errorf("stderr does not say %q:\n%s", want, stderr)
	}
	left1 := proctest.WaitGone(e2e.Deadline, host1...)
	gone1 := time.Since(t0)
	left2 := proctest.WaitGone(e2e.Deadline, host2...)
	gone2 := time.Since(t0)
	if len(left1) > 0 || len(left2) > 0 {
		t.Errorf("ranks or children left running: host 1 %v, host 2 %v", left1, left2)
	}
	left := waitUnmarked(mark, e2e.Deadline)
	if len(left) > 0 {
		t.Errorf("processes of the job left running:%s", describe(left))
	}
	t.Logf("agent SIGKILL, %d ranks (%d per host) each with a child: launcher exited %d after %v; ranks and children gone on host 1 (%d) after %v, on host 2 (%d, its supervisor's) after %v; processes left: %d",
		np, perHost, code, detect.Round(time.Millisecond), len(host1), gone1.Round(time.Millisecond), len(host2), gone2.Round(time.Millisecond), len(left))
	t.Logf("launcher stderr:\n%s", stderr)
}

// TestLauncherKilled: SIGKILL a real launcher process mid-job; every agent
// sees the connection drop and kills its ranks and their children.
func TestLauncherKilled(t *testing.T) {
	t.Parallel()
	launcherBin, _ := e2e.BuildBinaries(t)
	c := e2e.StartLocal(t, 2)
	mark := newMark(t)
	killMarked(t, mark)
	np := 2 * perHost
	args := append(c.SSHFlags(), childRanks(np, c.HostList(perHost), mark, "--kill-grace", "5s")...)
	l := e2e.StartProc(t, nil, launcherBin, args...)
	ranks, children := startedWithChildren(t, l.Stdout, l.Stderr, np)
	pids := treesOf(t, ranks, children, span(0, np)...)
	t0 := time.Now()
	if err := l.Kill(); err != nil {
		t.Fatal(err)
	}
	left := proctest.WaitGone(e2e.Deadline, pids...)
	took := time.Since(t0)
	if len(left) > 0 {
		t.Fatalf("ranks or children still running %v after the launcher died:%s", took, describe(left))
	}
	if left := waitUnmarked(mark, e2e.Deadline); len(left) > 0 {
		t.Fatalf("processes of the job left running:%s", describe(left))
	}
	if code := l.Code(); code != -1 {
		t.Errorf("launcher exit code %d, want -1 (killed)", code)
	}
	t.Logf("launcher SIGKILL, %d ranks (%d per host) each with a child: all %d gone after %v; processes left: 0", np, perHost, len(pids), took.Round(time.Millisecond))
}

// TestAgentSIGTERMSaysWhy: the agent on one of two hosts is stopped
// mid-job as systemctl or docker stop it (SIGTERM; 8 ranks a host, each
// with a child). Its session tells the launcher why before the
// connection closes: the launcher fails with 255 naming the host and
// that its agent was stopped (not only that its connection closed), the
// other host's ranks are stopped, nothing is left on either, and the
// agent exits. Through the tree (make test's second run) host 1 is
// behind host 0, and its word comes through its relay.
func TestAgentSIGTERMSaysWhy(t *testing.T) {
	t.Parallel()
	_, agentBin := e2e.BuildBinaries(t)
	c := e2e.StartProcs(t, 2, agentBin)
	j := startFaultJob(t, c, "--kill-grace", "5s")
	l, np, ranks, children, mark := j.l, j.np, j.ranks, j.children, j.mark
	if err := syscall.Kill(c.Procs[1].Pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := l.Wait(t)
	stderr := l.Stderr.String()
	if code != 255 {
		t.Errorf("exit code %d, want 255 (agent lost)", code)
	}
	h1 := c.Hosts[1].Addr
	if want := "lost the agent on " + h1 + ": the agent was stopped (SIGTERM); its ranks are stopped"; !strings.Contains(stderr, want) {
		t.Errorf("stderr does not say %q:\n%s", want, stderr)
	}
	if left := proctest.WaitGone(e2e.Deadline, treesOf(t, ranks, children, span(0, np)...)...); len(left) > 0 {
		t.Errorf("ranks or children left running: %v", left)
	}
	if left := waitUnmarked(mark, e2e.Deadline); len(left) > 0 {
		t.Errorf("processes of the job left running:%s", describe(left))
	}
	select {
	case <-c.Procs[1].Done():
	case <-time.After(e2e.Deadline):
		t.Errorf("the agent did not exit within %v of its SIGTERM", e2e.Deadline)
	}
	t.Logf("launcher stderr:\n%s", stderr)
}
