package transport

import "syscall"

// srunProcAttr keeps srun in the launcher's process group and gives it
// SIGTERM when the thread that started it ends (see srunDialer.start).
func srunProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
