//go:build linux

package proc

import (
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gangway-hpc/gangway/internal/osproc"
)

// What a child of ours starts with, beyond what exec.Cmd and
// syscall.ForkExec give it: only the descriptors it was handed, every
// signal at its default disposition and none blocked, whatever this
// process inherited. sshd does the same for a session (closefrom, signal
// dispositions reset, an empty mask), and so does systemd for a service.
//
// Go opens every descriptor of its own close-on-exec, and passes a child
// only what it is given; two things still leak through exec:
//
//   - descriptors this process inherited without close-on-exec (a shell's
//     or CI runner's stray pipe, a job's pipes handed to its supervisor);
//   - the signal state: a disposition the Go runtime does not take over
//     (SIGHUP and SIGINT when inherited ignored, as under nohup or `cmd &`
//     in a script; SIGTSTP, SIGTTIN, SIGTTOU, SIGCONT) survives exec, and
//     a forked child restores the mask of the thread that forked it.

// CloseOnExecInherited marks every descriptor above stderr close-on-exec,
// so nothing this process inherited reaches a child it starts: cmd/agent
// and cmd/launcher call it first thing, a supervisor before it starts its
// programs.
func CloseOnExecInherited() {
	closeOnExecFrom(3)
}

func closeOnExecFrom(low int) {
	if unix.CloseRange(uint(low), ^uint(0), unix.CLOSE_RANGE_CLOEXEC) == nil {
		return
	}
	// Kernels before 5.11: walk the table.
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd >= low {
			syscall.CloseOnExec(fd) // the directory's own fd is gone by now: EBADF, ignored
		}
	}
}

// childDefaults are the signals whose disposition the Go runtime leaves
// as inherited (see runtime.sigtable: _SigDefault, and SIGHUP and SIGINT
// when ignored), so that an ignored one would stay ignored in every
// child. Catching one instead makes a fork reset it to the default.
var childDefaults = []syscall.Signal{
	syscall.SIGHUP, syscall.SIGINT, syscall.SIGCONT,
	syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU,
}

// swallowed receives the signals DefaultSignalsForChildren catches in
// place of ignoring them; nobody reads it, and signal.Notify never blocks
// on a full channel.
var swallowed = make(chan os.Signal, 1)

// DefaultSignalsForChildren makes every child this process forks start
// with default signal dispositions, while this process goes on ignoring
// what it was started ignoring (an agent under nohup still survives its
// terminal's hangup): each inherited SIG_IGN that the Go runtime leaves
// in place is replaced by a handler that drops the signal, and a fork
// resets handled signals to SIG_DFL. Signals 32 to 34, which the runtime
// neither handles nor lets os/signal catch (glibc's own, inside a
// process), are set back to SIG_DFL here as well: nothing of ours uses
// them. Call it before anything catches those signals for real
// (signal.Notify wins for its own channel).
func DefaultSignalsForChildren() {
	ign := ignoredSignals()
	for _, sig := range childDefaults {
		if ign&(1<<(uint(sig)-1)) != 0 {
			signal.Notify(swallowed, sig)
		}
	}
	for _, sig := range runtimeReserved {
		if ign&(1<<(uint(sig)-1)) != 0 {
			_ = osproc.SetSignalDisposition(sig, false) // best effort: the rank then starts with it ignored
		}
	}
}

// runtimeReserved are the real-time signals the Go runtime leaves alone
// (runtime.sigtable: _SigSetStack without _SigNotify).
var runtimeReserved = []syscall.Signal{32, 33, 34}

// ignoredSignals is this process's SigIgn mask from /proc/self/status
// (bit N-1 for signal N), 0 where it cannot be read.
func ignoredSignals() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return n
		}
	}
	return 0
}

// startClean calls start, which forks, on a locked OS thread whose signal
// mask is empty and, when cpus is not empty, whose CPU affinity is cpus:
// a forked child inherits both from the thread that forked it (the Go
// runtime saves that thread's mask before the fork and the child restores
// it). The thread's mask and affinity are restored afterwards.
func startClean(cpus []int, start func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var empty, oldMask unix.Sigset_t
	if err := unix.PthreadSigmask(unix.SIG_SETMASK, &empty, &oldMask); err != nil {
		return err
	}
	defer unix.PthreadSigmask(unix.SIG_SETMASK, &oldMask, nil)
	if len(cpus) == 0 {
		return start()
	}
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

// StartClean starts cmd as startClean does: with an empty signal mask,
// whatever this process was started with. For children that are not
// ranks (a stock SSH session's shell).
func StartClean(cmd *exec.Cmd) error { return startClean(nil, cmd.Start) }
