//go:build linux

package proc

import (
	"errors"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/internal/osproc"
)

// TestGroups: one pass over /proc lists each group's processes, its
// leader first, with start times that make a member current; a member
// whose start time differs (its pid reused) is not current, and Signal
// refuses it without signalling the process now holding the pid.
func TestGroups(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "sleep 60 & sleep 60 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	t.Cleanup(func() {
		_ = osproc.KillGroup(pgid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	var ms []Member
	for deadline := time.Now().Add(10 * time.Second); len(ms) < 3; ms = Groups([]int{pgid, 1 << 30})[pgid] {
		if time.Now().After(deadline) {
			t.Fatalf("group %d: %v, want the shell and its two sleeps", pgid, ms)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(ms) != 3 || ms[0].Pid != pgid || ms[1].Pid > ms[2].Pid {
		t.Fatalf("group %d: %v, want its leader first, then the others by pid", pgid, ms)
	}
	for _, m := range ms {
		if m.Start == 0 || !m.Current(pgid) || m.Current(pgid+1) {
			t.Errorf("member %+v: current in its group %v, in another %v", m, m.Current(pgid), m.Current(pgid+1))
		}
	}
	reused := Member{Pid: ms[1].Pid, Start: ms[1].Start + 1} // the same pid, a later process
	if reused.Current(pgid) {
		t.Errorf("a member with another start time is current")
	}
	if err := reused.Signal(pgid, syscall.SIGKILL); !errors.Is(err, ErrNotCurrent) {
		t.Errorf("Signal of a reused pid: %v, want ErrNotCurrent", err)
	}
	if !ms[1].Current(pgid) {
		t.Fatalf("the process holding the pid was signalled")
	}
	if err := ms[1].Signal(pgid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ms[1].Current(pgid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("member %d still current 10 s after SIGKILL", ms[1].Pid)
		}
	}
	if err := ms[1].Signal(pgid, syscall.SIGKILL); !errors.Is(err, ErrNotCurrent) {
		t.Errorf("Signal of a member that ended: %v, want ErrNotCurrent", err)
	}
}
