package e2e_test

import (
	"strings"
	"testing"
	"time"

	"gangway/agent/proc/proctest"
	"gangway/cmd/internal/e2e"
)

// TestAgentKilled: SIGKILL one of two agent processes mid-job. The
// launcher fails naming that host, the other host's ranks are stopped,
// and the killed agent's ranks die with their supervisors (see also
// TestAgentKilledLeavesNothing).
func TestAgentKilled(t *testing.T) {
	t.Parallel()
	_, agentBin := e2e.BuildBinaries(t)
	c := e2e.StartProcs(t, 2, agentBin)
	l := c.StartLauncher(t, fake(t, 4, c.HostList(2), "sleep", "--kill-grace", "5s")...)
	out, ok := l.Stdout.WaitFor(e2e.Deadline, e2e.HasReady(4))
	if !ok {
		t.Fatalf("not every rank started:\n%s\nstderr:\n%s", out, l.Stderr)
	}
	ready := e2e.ReadyPids(out)
	host1, host2 := pidsOf(t, ready, 0, 1), pidsOf(t, ready, 2, 3)

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
		t.Errorf("ranks left running: host 1 %v, host 2 %v", left1, left2)
	}
	t.Logf("agent SIGKILL: launcher exited %d after %v; ranks gone on host 1 after %v, on host 2 (supervisors) after %v; processes left: %d",
		code, detect.Round(time.Millisecond), gone1.Round(time.Millisecond), gone2.Round(time.Millisecond), len(left1)+len(left2))
	t.Logf("launcher stderr:\n%s", stderr)
}

// TestLauncherKilled: SIGKILL a real launcher process mid-job; every agent
// sees the connection drop and kills its ranks.
func TestLauncherKilled(t *testing.T) {
	t.Parallel()
	launcherBin, _ := e2e.BuildBinaries(t)
	c := e2e.StartLocal(t, 2)
	args := append(c.SSHFlags(), fake(t, 4, c.HostList(2), "sleep", "--kill-grace", "5s")...)
	l := e2e.StartProc(t, nil, launcherBin, args...)
	out, ok := l.Stdout.WaitFor(e2e.Deadline, e2e.HasReady(4))
	if !ok {
		t.Fatalf("not every rank started:\n%s\nstderr:\n%s", out, l.Stderr)
	}
	pids := pidsOf(t, e2e.ReadyPids(out), 0, 1, 2, 3)
	t0 := time.Now()
	if err := l.Kill(); err != nil {
		t.Fatal(err)
	}
	left := proctest.WaitGone(e2e.Deadline, pids...)
	took := time.Since(t0)
	if len(left) > 0 {
		t.Fatalf("ranks still running %v after the launcher died: %v", took, left)
	}
	if code := l.Code(); code != -1 {
		t.Errorf("launcher exit code %d, want -1 (killed)", code)
	}
	t.Logf("launcher SIGKILL: every rank on both agents gone after %v (agent grace %v); processes left: 0", took.Round(time.Millisecond), "2s")
}
