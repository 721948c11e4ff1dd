//go:build linux

package proc

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/proc/proctest"
	"github.com/gangway-hpc/gangway/internal/osproc"
)

// TestPID1ReapsOrphans runs this binary as PID 1 of a new PID namespace
// (unshare --pid --fork --mount-proc), where PID1 starts it again as its
// child. The child leaves 8 orphans to PID 1, which end; then no process
// of the namespace is a zombie. SIGTERM to PID 1 reaches the child, whose
// exit code (7) becomes PID 1's, and nothing of the namespace is left.
func TestPID1ReapsOrphans(t *testing.T) {
	requireRoot(t, "make a PID namespace")
	self, _ := os.Executable()
	cmd := exec.Command("unshare", "--pid", "--fork", "--mount-proc", self)
	cmd.Env = append(os.Environ(), testHelperEnv+"=pid1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = osproc.KillGroup(cmd.Process.Pid, syscall.SIGKILL)
		<-done
	})
	lines := newLineReader(out.(*os.File)).untilAll(t, 60*time.Second, "sleepers", "zombies", "ready")
	if n := field(t, lines, "sleepers"); n != 0 {
		t.Fatalf("%d orphaned sleepers still running after 20s: %q", n, lines)
	}
	if n := field(t, lines, "zombies"); n != 0 {
		t.Fatalf("%d zombies in the PID namespace: PID 1 did not reap its orphans (%q)", n, lines)
	}
	// PID 1 of the namespace is unshare's child.
	var init1 int
	for _, p := range procs() {
		if p.PPid == cmd.Process.Pid {
			init1 = p.Pid
		}
	}
	if init1 == 0 {
		t.Fatal("no PID 1 under unshare")
	}
	inside := []int{init1}
	for _, m := range descendants(init1) {
		inside = append(inside, m.Pid)
	}
	if err := syscall.Kill(init1, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("PID 1 did not end within 30s of SIGTERM")
	}
	if code := cmd.ProcessState.ExitCode(); code != 7 {
		t.Errorf("exit code %d, want the child's 7", code)
	}
	if left := proctest.WaitGone(10*time.Second, inside...); len(left) > 0 {
		t.Errorf("left in the namespace: %v of %v", left, inside)
	}
}
