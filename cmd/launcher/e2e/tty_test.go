package e2e_test

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
)

// TestRanksHoldNoTerminal: an agent started from a terminal (the leader
// of a session whose controlling terminal is a pty, as `sudo agent` in a
// shell) starts 8 ranks on each of 2 such agents, and a stock SSH
// command: none of them can open /dev/tty or push input into the
// terminal with TIOCSTI, and each leads a session of its own, as under
// sshd.
func TestRanksHoldNoTerminal(t *testing.T) {
	t.Parallel()
	_, agentBin := e2e.BuildBinaries(t)
	c := e2e.StartProcs(t, 2, agentBin, e2e.Wrapped("env", e2e.PTYEnv+"=1", self(t)))
	l := c.StartLauncher(t, "-l", "-np", "16", "-H", c.HostList(8), "-x", e2e.TTYProbeEnv+"=1", self(t))
	if code := l.Wait(t); code != 0 {
		t.Fatalf("launcher exit %d:\n%s\nstderr:\n%s", code, l.Stdout, l.Stderr)
	}
	lines := e2e.RankLines(l.Stdout.String())
	for r := range 16 {
		checkNoTerminal(t, fmt.Sprintf("rank %d", r), lines[r])
	}
	h := c.Hosts[0]
	cmd := exec.Command("ssh", append(sshtest.SSHArgs(c.Keys, h.Port), "root@"+h.Addr,
		"env "+e2e.TTYProbeEnv+"=1 "+self(t))...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ssh: %v\n%s", err, out)
	}
	checkNoTerminal(t, "stock ssh command", strings.Split(strings.TrimSpace(string(out)), "\n"))
}

func checkNoTerminal(t *testing.T, who string, lines []string) {
	t.Helper()
	want := []string{"tty refused: no such device or address", "tiocsti fd 0: inappropriate ioctl for device",
		"tiocsti fd 1: inappropriate ioctl for device", "tiocsti fd 2: inappropriate ioctl for device", "session own"}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s printed %q, want %q", who, lines, want)
	}
}
