package osproc

import (
	"os"
	"syscall"
)

// ExitCode is the exit code bash reports for a child that ended with
// wait status ws: its exit status, or 128+N when signal N killed it, with
// sig N (0 when it exited).
func ExitCode(ws syscall.WaitStatus) (code int, sig syscall.Signal) {
	if ws.Signaled() {
		return SignalCode(ws.Signal()), ws.Signal()
	}
	return ws.ExitStatus(), 0
}

// SignalCode is the exit code bash reports for a death by signal sig:
// 128+sig.
func SignalCode(sig syscall.Signal) int { return 128 + int(sig) }

// ProcessExitCode is ExitCode for the state that Wait left (exec.Cmd's
// ProcessState); ok is false when there is none (ps is nil: the process
// was never started, or never waited for).
func ProcessExitCode(ps *os.ProcessState) (code int, sig syscall.Signal, ok bool) {
	if ps == nil {
		return 0, 0, false
	}
	if ws, isWS := ps.Sys().(syscall.WaitStatus); isWS {
		code, sig = ExitCode(ws)
		return code, sig, true
	}
	return ps.ExitCode(), 0, true
}
