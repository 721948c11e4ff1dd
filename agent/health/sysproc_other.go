//go:build !linux

package health

import "syscall"

// sysProcAttr puts the site check in a process group of its own, as
// cred's user.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
}
