package e2e_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/proc/proctest"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
	"github.com/gangway-hpc/gangway/launcher/diagnose"
	"github.com/gangway-hpc/gangway/launcher/transport"
)

// TestAgentStopped: an agent that stops answering without dropping its
// TCP connection (SIGSTOP here; a hung host or a silent network cut in
// life) is found by the launcher's keepalives and the job fails naming
// the host. When the agent resumes it finds its launcher gone and stops
// its ranks and their children (perHost ranks on each of two hosts, each
// with a child). Not parallel: it shortens the package-level keepalive
// timing (to 1 s and 5 s: the healthy agent, busy starting 16 ranks on a
// loaded machine, must still answer within the timeout).
func TestAgentStopped(t *testing.T) {
	oldI, oldT := transport.KeepaliveInterval, transport.KeepaliveTimeout
	transport.KeepaliveInterval, transport.KeepaliveTimeout = time.Second, 5*time.Second
	defer func() { transport.KeepaliveInterval, transport.KeepaliveTimeout = oldI, oldT }()

	_, agentBin := e2e.BuildBinaries(t)
	c := e2e.StartProcs(t, 2, agentBin)
	j := startFaultJob(t, c, "--kill-grace", "5s")
	l, np, ranks, children, mark := j.l, j.np, j.ranks, j.children, j.mark
	host1, host2 := treesOf(t, ranks, children, span(0, perHost)...), treesOf(t, ranks, children, span(perHost, np)...)
	stopped := c.Procs[1].Pid()
	t0 := time.Now()
	if err := syscall.Kill(stopped, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(stopped, syscall.SIGCONT) })
	code := l.Wait(t)
	detect := l.Ended.Sub(t0)
	if code != diagnose.ExitLost {
		t.Errorf("exit code %d, want %d (agent lost)", code, diagnose.ExitLost)
	}
	if want := "lost the agent on " + c.Hosts[1].Addr + ": no answer to SSH keepalives"; !strings.Contains(l.Stderr.String(), want) {
		t.Errorf("stderr does not say %q:\n%s", want, l.Stderr)
	}
	if left := proctest.WaitGone(e2e.Deadline, host1...); len(left) > 0 {
		t.Errorf("host 1's ranks still running: %v", left)
	}
	if err := syscall.Kill(stopped, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if left := proctest.WaitGone(e2e.Deadline, host2...); len(left) > 0 {
		t.Errorf("the resumed agent left its ranks running: %v", left)
	}
	if left := waitUnmarked(mark, e2e.Deadline); len(left) > 0 {
		t.Errorf("processes of the job left running:%s", describe(left))
	}
	t.Logf("stopped agent detected after %v (keepalive every %v, timeout %v)", detect.Round(time.Millisecond), transport.KeepaliveInterval, transport.KeepaliveTimeout)
}

// TestAgentStoppedServerAlive: the keepalive timing comes from the ssh
// configuration as for ssh (-F here: ServerAliveInterval 1,
// ServerAliveCountMax 5, a user's setting for nodes that must be found
// sooner than the default's 15 s): a stopped agent is lost after 5 s
// without an answer and the launcher says so, whether it holds the host
// or a relay of the agent tree does (make test's second run).
func TestAgentStoppedServerAlive(t *testing.T) {
	_, agentBin := e2e.BuildBinaries(t)
	c := e2e.StartProcs(t, 2, agentBin)
	cfg := filepath.Join(t.TempDir(), "ssh_config")
	if err := os.WriteFile(cfg, []byte("Host *\n    ServerAliveInterval 1\n    ServerAliveCountMax 5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	j := startFaultJob(t, c, "--kill-grace", "5s", "-F", cfg)
	l, ranks, children, mark := j.l, j.ranks, j.children, j.mark
	host1 := treesOf(t, ranks, children, span(0, perHost)...)
	stopped := c.Procs[1].Pid()
	if err := syscall.Kill(stopped, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(stopped, syscall.SIGCONT) })
	if code := l.Wait(t); code != diagnose.ExitLost {
		t.Errorf("exit code %d, want %d (agent lost)", code, diagnose.ExitLost)
	}
	stderr := l.Stderr.String()
	if !strings.Contains(stderr, "lost the agent on "+c.Hosts[1].Addr) || !strings.Contains(stderr, "no answer to SSH keepalives for 5s") {
		t.Errorf("stderr does not say the agent on %s gave no answer to SSH keepalives for 5s:\n%s", c.Hosts[1].Addr, stderr)
	}
	if left := proctest.WaitGone(e2e.Deadline, host1...); len(left) > 0 {
		t.Errorf("host 1's ranks still running: %v", left)
	}
	if err := syscall.Kill(stopped, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if left := waitUnmarked(mark, e2e.Deadline); len(left) > 0 {
		t.Errorf("processes of the job left running:%s", describe(left))
	}
}
