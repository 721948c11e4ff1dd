package e2e_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

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

// TestLauncherInBackground: `launcher ... > log 2>&1 &` typed in an
// interactive shell (a pty, bash with job control), eight ranks on each
// of two hosts. A read of the terminal from the background stops the
// launcher ("Stopped (tty input)"), and the job with it, so it reads no
// stdin there: rank 0's stdin is empty, as with < /dev/null, it says so,
// and the job runs to its end with exit 0.
func TestLauncherInBackground(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("script"); err != nil {
		t.Skip("no script(1) for a pseudo-terminal")
	}
	launcherBin, _ := e2e.BuildBinaries(t)
	c := e2e.StartLocal(t, 2)
	dir := t.TempDir()
	log := filepath.Join(dir, "launcher.log")
	mark := newMark(t)
	args := append([]string{launcherBin}, c.SSHFlags()...)
	args = append(args, "-l", "-np", "16", "-H", c.HostList(perHost), "sh", "-c", `read x || echo "rank $RANK: stdin empty"; echo "rank $RANK ran"`)
	var quoted []string
	for _, a := range args {
		quoted = append(quoted, "'"+strings.ReplaceAll(a, "'", `'\''`)+"'")
	}
	line := strings.Join(quoted, " ") + " > " + log + " 2>&1 & wait $!; echo \"status $?\""
	cmd := exec.CommandContext(t.Context(), "script", "-q", "-c", "bash --norc --noprofile -i -c 'set -m; "+strings.ReplaceAll(line, "'", `'\''`)+"'", os.DevNull)
	cmd.Env = append(os.Environ(), mark)
	cmd.WaitDelay = time.Second
	// A launcher stopped for tty input outlives a failed test: end what
	// carries the mark, by PID.
	t.Cleanup(func() {
		for _, pid := range marked(mark) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	done := make(chan struct{})
	var out []byte
	var err error
	go func() {
		defer close(done)
		out, err = cmd.CombinedOutput()
	}()
	select {
	case <-done:
	case <-time.After(e2e.Deadline):
		for _, pid := range marked(mark) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		<-done
		t.Fatalf("the shell's job did not end within %v (stopped for tty input?)", e2e.Deadline)
	}
	b, _ := os.ReadFile(log)
	if err != nil || !strings.Contains(string(out), "status 0") {
		t.Fatalf("shell: %v\n%s\nlauncher's log:\n%s", err, out, b)
	}
	got := string(b)
	if !strings.Contains(got, "launcher: warning: in the background of a terminal: stdin is not read; rank 0's stdin is empty") ||
		!strings.Contains(got, "rank 0: stdin empty") {
		t.Errorf("the launcher does not say it left stdin unread:\n%s", got)
	}
	for r := range 16 {
		if !strings.Contains(got, fmt.Sprintf("rank %d ran", r)) {
			t.Errorf("rank %d did not run:\n%s", r, got)
		}
	}
	if left := waitUnmarked(mark, e2e.Deadline); len(left) > 0 {
		t.Errorf("processes left:%s", describe(left))
	}
}
