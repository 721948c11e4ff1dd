package osproc

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// recorder is a signal function that records what it was asked to send.
type recorder struct {
	sent []syscall.Signal
	fail syscall.Signal // the signal that fails, 0 for none
}

func (r *recorder) signal(sig syscall.Signal) error {
	r.sent = append(r.sent, sig)
	if sig == r.fail {
		return errors.New("no such luck")
	}
	return nil
}

func TestShutdownOrder(t *testing.T) {
	closed := make(chan struct{})
	close(closed)
	for _, tc := range []struct {
		name   string
		grace  time.Duration
		exited <-chan struct{}
		fail   syscall.Signal
		want   []syscall.Signal
		err    string
	}{
		{"exited within the grace", time.Hour, closed, 0, []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}, ""},
		{"grace over", 10 * time.Millisecond, nil, 0, []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}, ""},
		{"no grace", 0, nil, 0, []syscall.Signal{syscall.SIGKILL}, ""},
		{"SIGTERM fails", time.Hour, nil, syscall.SIGTERM, []syscall.Signal{syscall.SIGTERM}, "SIGTERM: no such luck"},
		{"SIGKILL fails", time.Hour, closed, syscall.SIGKILL, []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}, "SIGKILL: no such luck"},
	} {
		r := &recorder{fail: tc.fail}
		err := Shutdown(r.signal, tc.grace, tc.exited)
		if !slices.Equal(r.sent, tc.want) {
			t.Errorf("%s: sent %v, want %v", tc.name, r.sent, tc.want)
		}
		if (err == nil) != (tc.err == "") || err != nil && err.Error() != tc.err {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
		}
	}
}

func TestStopGroupRefusesBadGroups(t *testing.T) {
	for _, pgid := range []int{-5, 0, 1} {
		if err := StopGroup(pgid, 0, nil); err == nil || !strings.Contains(err.Error(), "refusing") {
			t.Errorf("StopGroup(%d): %v, want a refusal", pgid, err)
		}
	}
}

// startGroup starts argv as the leader of a new process group and returns
// it with a channel closed once it has been reaped.
func startGroup(t *testing.T, argv []string) (*exec.Cmd, <-chan struct{}) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = KillGroup(cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})
	return cmd, exited
}

func TestStopGroupEscalatesToKill(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	cmd, exited := startGroup(t, []string{"/bin/sh", "-c", `trap "" TERM; : > "$0"; exec sleep 3600`, ready})
	waitFile(t, ready) // SIGTERM is ignored from here on
	t0 := time.Now()
	if err := StopGroup(cmd.Process.Pid, 300*time.Millisecond, exited); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(t0); el < 250*time.Millisecond {
		t.Errorf("SIGKILL after %v, before the grace", el)
	}
	<-exited
	if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("ended with %v, want SIGKILL", cmd.ProcessState)
	}
}

// TestStopGroupKillsLeftovers: the leader dies of SIGTERM at once; a group
// member that ignores SIGTERM gets its SIGKILL then, not after the grace.
func TestStopGroupKillsLeftovers(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd, exited := startGroup(t, []string{"/bin/sh", "-c", `(trap "" TERM; exec sleep 3600) & echo $! > "$0"; wait`, pidFile})
	var member int
	for deadline := time.Now().Add(20 * time.Second); member == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no pid file from the shell")
		}
		b, _ := os.ReadFile(pidFile)
		member, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	time.Sleep(100 * time.Millisecond) // let the subshell set the trap and exec
	t0 := time.Now()
	if err := StopGroup(cmd.Process.Pid, time.Minute, exited); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(t0); el > 20*time.Second {
		t.Errorf("StopGroup took %v although the leader died of SIGTERM", el)
	}
	if !waitGone(10*time.Second, member) {
		t.Fatalf("group member %d ignoring SIGTERM still runs after StopGroup", member)
	}
}

// waitFile waits until path exists.
func waitFile(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
	}
}

// waitGone waits up to d for pid to be gone from /proc or a zombie (which
// kill(pid, 0) would still find), and reports whether it is.
func waitGone(d time.Duration, pid int) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		if s, err := ReadStat(pid); err != nil || !s.Live() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

func TestSignalGroupReportsAGoneGroup(t *testing.T) {
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	// The group's only process has been reaped: its id names no group
	// (pids are not reused this soon on a machine with pid_max >= 32768;
	// signal 0 harms none that is).
	pgid := cmd.Process.Pid
	if err := SignalGroup(pgid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("SignalGroup(%d) after its end: %v, want ESRCH", pgid, err)
	}
	if err := KillGroup(pgid, 0); err != nil {
		t.Errorf("KillGroup(%d) after its end: %v, want nil", pgid, err)
	}
	if err := SignalGroup(1, 0); err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Errorf("SignalGroup(1): %v, want a refusal", err)
	}
}
