//go:build !linux

package proc

import (
	"os/exec"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }

func startWithAffinity(cmd *exec.Cmd, cpus []int) error { return cmd.Start() }

func setPdeathsig(attr *syscall.SysProcAttr, sig syscall.Signal) {}
