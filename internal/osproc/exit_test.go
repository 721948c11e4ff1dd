package osproc

import (
	"os/exec"
	"syscall"
	"testing"
)

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		script string
		code   int
		sig    syscall.Signal
	}{
		{"exit 0", 0, 0},
		{"exit 3", 3, 0},
		{"exit 255", 255, 0},
		{"kill -TERM $$", 143, syscall.SIGTERM},
		{"kill -KILL $$", 137, syscall.SIGKILL},
		{"kill -SEGV $$", 139, syscall.SIGSEGV},
	} {
		cmd := exec.Command("/bin/sh", "-c", tc.script)
		_ = cmd.Run() // an *exec.ExitError for all but exit 0
		code, sig, ok := ProcessExitCode(cmd.ProcessState)
		if !ok || code != tc.code || sig != tc.sig {
			t.Errorf("%s: ProcessExitCode = %d, %v, %v; want %d, %v, true", tc.script, code, sig, ok, tc.code, tc.sig)
		}
		ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if code, sig := ExitCode(ws); code != tc.code || sig != tc.sig {
			t.Errorf("%s: ExitCode = %d, %v; want %d, %v", tc.script, code, sig, tc.code, tc.sig)
		}
	}
}

func TestProcessExitCodeWithoutState(t *testing.T) {
	cmd := exec.Command("/nonexistent/program")
	if err := cmd.Run(); err == nil {
		t.Fatal("a missing program ran")
	}
	if code, sig, ok := ProcessExitCode(cmd.ProcessState); ok {
		t.Errorf("ProcessExitCode of a start failure = %d, %v, true; want ok false", code, sig)
	}
}

func TestSignalCode(t *testing.T) {
	if got := SignalCode(syscall.SIGKILL); got != 137 {
		t.Errorf("SignalCode(SIGKILL) = %d, want 137", got)
	}
}
