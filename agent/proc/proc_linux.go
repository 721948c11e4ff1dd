//go:build linux

package proc

import (
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

func sysProcAttr() *syscall.SysProcAttr {
	// Pdeathsig fires when the thread that forked the child exits; Go's
	// threads live as long as the process, so in practice it fires when the
	// agent dies, which is what we want. The agent's own cleanup is the
	// primary mechanism; this is the backstop for SIGKILL of the agent.
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// setPdeathsig sets the signal the child gets when the thread that forked
// it exits.
func setPdeathsig(attr *syscall.SysProcAttr, sig syscall.Signal) { attr.Pdeathsig = sig }

// startWithAffinity starts cmd with the given CPU set.
func startWithAffinity(cmd *exec.Cmd, cpus []int) error {
	return withAffinity(cpus, cmd.Start)
}

// withAffinity calls start, which forks, with the given CPU set (all CPUs
// when empty). A child inherits the affinity of the thread that forks it,
// so the mask is set on a locked OS thread around start and restored
// afterwards.
func withAffinity(cpus []int, start func() error) error {
	if len(cpus) == 0 {
		return start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return err
	}
	for _, c := range cpus {
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return err
	}
	defer unix.SchedSetaffinity(0, &old)
	return start()
}
