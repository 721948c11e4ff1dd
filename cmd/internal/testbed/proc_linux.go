//go:build linux

package testbed

import (
	"syscall"
	"unsafe"
)

func sysProcAttr() *syscall.SysProcAttr {
	// Pdeathsig fires when the thread that forked the child exits; Go's
	// threads normally live as long as the process, so in practice a test
	// binary killed mid-run takes its sshds and agents with it. It is a
	// backstop: Close is the mechanism.
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// waitExited blocks until process pid has exited, without reaping it
// (waitid with WNOWAIT), so its PID and process group ID stay reserved.
func waitExited(pid int) error {
	const pPID, wNOWAIT = 1, 0x1000000
	var info [16]uint64 // siginfo_t is 128 bytes
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info)), syscall.WEXITED|wNOWAIT, 0, 0)
		if errno != syscall.EINTR {
			if errno != 0 {
				return errno
			}
			return nil
		}
	}
}
