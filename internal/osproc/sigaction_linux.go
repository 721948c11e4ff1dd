package osproc

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// kernelSigaction is the kernel's struct sigaction on 64-bit Linux. Only
// all-zero (SIG_DFL) and SIG_IGN with no flags and an empty mask are
// ever written, so the order of the fields after the handler does not
// matter.
type kernelSigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

const sigIgn = 1

// SetSignalDisposition sets sig to SIG_DFL (ignore false) or SIG_IGN
// (ignore true) with rt_sigaction. It is for the signals that the Go
// runtime neither handles nor lets os/signal touch (32 to 34, which
// glibc uses inside a process): one inherited as ignored stays ignored
// in every child forked later, since SIG_IGN survives fork and exec.
// Do not use it for a signal the runtime or os/signal handles.
func SetSignalDisposition(sig syscall.Signal, ignore bool) error {
	var act kernelSigaction
	if ignore {
		act.handler = sigIgn
	}
	_, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, unsafe.Sizeof(act.mask), 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
