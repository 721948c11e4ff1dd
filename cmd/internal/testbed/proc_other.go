//go:build !linux

package testbed

import (
	"errors"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// waitExited is Linux-only (waitid WNOWAIT). Elsewhere the group is not
// killed between exit and reaping; beds only exist on Linux anyway.
func waitExited(int) error { return errors.ErrUnsupported }
