package health

import "syscall"

// sysProcAttr puts the site check in a process group of its own, as
// cred's user, killed if the agent's thread that started it dies.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
}
