//go:build !linux

package agent

import (
	"os"
	"syscall"
)

func ptraceCaps() []uintptr { return nil }

func (t tracer) sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: t.cred}
}

func maxRSS(ps *os.ProcessState) uint64 { return 0 }

// idsMismatch has no /proc to read: another user's process is not
// attached.
func idsMismatch(pid int, c *syscall.Credential) string {
	return "the process's ids cannot be checked on this system"
}

func memAvailable() uint64 { return 0 }
