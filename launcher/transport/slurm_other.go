//go:build !linux

package transport

import "syscall"

// srunProcAttr: no parent-death signal outside Linux (Slurm runs on
// Linux); srun still ends with the step when the agents lose the launcher.
func srunProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
