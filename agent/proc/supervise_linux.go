//go:build linux

package proc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const supervisorSupported = true

// selfExe re-executes the running binary even when its file has been
// replaced or removed since it started (an upgrade in place), so a
// supervisor always speaks its agent's command line.
const selfExe = "/proc/self/exe"

// killBelowFor bounds how long a supervisor keeps killing: a process stuck
// in uninterruptible sleep (a dead NFS server) cannot die, and the rank's
// end must still be reported. What is left then has been sent SIGKILL and
// dies when the kernel lets it.
const killBelowFor = 30 * time.Second

// forwarded are the signals a supervisor catches and forwards to its
// program's group: every signal of the allowlist that can be caught.
var forwarded = []os.Signal{
	syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2,
	syscall.SIGTERM, syscall.SIGCONT, syscall.SIGABRT, syscall.SIGALRM, syscall.SIGPIPE,
	syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGFPE, syscall.SIGILL,
}

// SupervisorMain is a rank's supervisor (see Supervise). args are
// "CTLFD PARENT CRED PATH ARGV0 [ARGS...]": CTLFD is its end of the control
// socket to the agent, PARENT the agent's pid. The supervisor:
//
//   - makes itself a child subreaper, so every process below it that is
//     orphaned (a setsid'd, double-forked daemon included) reparents to it
//     and is reaped by it, never by init;
//   - starts PATH with ARGV as its only child, leading a new process group,
//     with SIGKILL as its parent-death signal, as CRED's user when CRED is
//     not "-" (UID:GID:GROUPS, the supervisor itself staying root, so the
//     program can neither signal it nor escape it), and everything else inherited
//     from the supervisor: environment, working directory, CPU affinity,
//     cgroup, stdio and the fds from 3 up to CTLFD (PMI_FD). The
//     supervisor itself then closes those fds (not stdio), and CTLFD is
//     close-on-exec;
//   - writes "pid N" (the program's pid) or "err MESSAGE" (it could not
//     start the program) and a newline to CTLFD;
//   - forwards to the program's process group every catchable signal it
//     receives, and every signal number (one byte each, SIGSTOP included)
//     the agent writes to CTLFD, while the program lives;
//   - kills everything below it with SIGKILL, again and again until no
//     child is left (wait reports ECHILD), when the program exits, when the
//     agent writes SIGKILL, or when the agent goes: CTLFD reaches EOF, or
//     the parent-death signal arrives and its parent is no longer PARENT;
//   - then exits with the program's status: its exit code, or death by the
//     signal that killed the program (re-raised, without a core dump), so
//     "killed by signal N" still reads right to the agent.
//
// It returns 2 for a bad command line (with a message on stderr), 127
// (not found) or 126 when the program cannot be started, and 1 without
// starting anything when PARENT is already gone.
func SupervisorMain(args []string) int {
	c, err := parseSupervisorArgs(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", supervisorArgv0, err)
		return 2
	}
	s := &supervisor{parent: c.parent}
	return s.run(c)
}

type supervisor struct {
	parent int
	prog   int  // the program's pid, which is also its process group id
	exited bool // the program has been reaped
	status syscall.WaitStatus
	// killing is set once everything below must die; killFrom is when.
	killing  bool
	killFrom time.Time
	procOK   bool // /proc is this PID namespace's: descendants can be found
	none     bool // no child is left
}

func (s *supervisor) run(c supervisorCmd) int {
	sigs := make(chan os.Signal, 32)
	catch := []os.Signal{syscall.SIGCHLD, parentDeathSignal}
	for _, sig := range forwarded {
		// A signal the agent ignores (SIGHUP under nohup) stays ignored,
		// so the program inherits that as it would without a supervisor.
		if !signal.Ignored(sig) {
			catch = append(catch, sig)
		}
	}
	signal.Notify(sigs, catch...)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "%s: cannot become a subreaper: %v\n", supervisorArgv0, err)
		return 126
	}
	// The parent-death signal arriving before Notify was ignored by the Go
	// runtime: look at the parent now that it is caught.
	if s.parentGone() {
		return 1
	}
	syscall.CloseOnExec(c.ctlFD)
	ctl := os.NewFile(uintptr(c.ctlFD), "control")
	self, _ := os.Readlink("/proc/self")
	s.procOK = self == strconv.Itoa(os.Getpid())

	attr := &os.ProcAttr{
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: c.cred},
	}
	if c.cred != nil {
		// Enter the working directory again as the program's user, so
		// that a directory the user may not enter is refused as it would
		// be without a supervisor (the child changes directory after it
		// changes credentials).
		dir, err := os.Getwd()
		if err != nil {
			report(ctl, 0, err)
			return 126
		}
		attr.Dir = dir
	}
	p, err := os.StartProcess(c.path, c.argv, attr)
	if err != nil {
		report(ctl, 0, execError(c.argv[0], c.path, err))
		if errors.Is(err, fs.ErrNotExist) {
			return 127
		}
		return 126
	}
	s.prog = p.Pid
	report(ctl, s.prog, nil)
	// The program holds its own copies now; the supervisor keeps only
	// stdio (for its own messages) and the control socket.
	for fd := 3; fd < c.ctlFD; fd++ {
		syscall.Close(fd)
	}
	cmds := make(chan byte, 16)
	go readControl(ctl, cmds)

	var tick *time.Ticker
	var tickC <-chan time.Time
	for {
		select {
		case sig := <-sigs:
			switch {
			case sig == syscall.SIGCHLD:
			case sig == parentDeathSignal:
				if s.parentGone() {
					s.kill()
				}
			default:
				s.forward(sig.(syscall.Signal))
			}
		case b, ok := <-cmds:
			switch {
			case !ok: // the agent closed the socket, or died
				s.kill()
				cmds = nil
			case syscall.Signal(b) == syscall.SIGKILL:
				s.kill()
			default:
				s.forward(syscall.Signal(b))
			}
		case <-tickC:
		}
		s.reap()
		if s.killing && !s.none {
			// Scanning /proc costs; with no child left, nothing is below.
			s.killBelow()
			s.reap()
			if tick == nil {
				// SIGCHLD is not enough while killing: a process can fork just
				// before it dies, and its child reparents here silently.
				tick = time.NewTicker(20 * time.Millisecond)
				tickC = tick.C
			}
		}
		if s.none || s.killing && time.Since(s.killFrom) > killBelowFor {
			break
		}
	}
	if !s.exited {
		return 128 + int(syscall.SIGKILL)
	}
	return exitAs(s.status)
}

// readControl turns the control socket into commands, and closes cmds at
// EOF or on any error.
func readControl(f *os.File, cmds chan<- byte) {
	defer close(cmds)
	buf := make([]byte, 64)
	for {
		n, err := f.Read(buf)
		for _, b := range buf[:n] {
			cmds <- b
		}
		if err != nil {
			return
		}
	}
}

func (s *supervisor) parentGone() bool { return os.Getppid() != s.parent }

// forward delivers sig to the program's group while the program lives
// (unreaped, its pid is still its group's), or to the program alone when
// it left its group.
func (s *supervisor) forward(sig syscall.Signal) {
	if s.exited || s.killing || sig <= 0 || sig > 64 {
		return
	}
	if err := syscall.Kill(-s.prog, sig); errors.Is(err, syscall.ESRCH) {
		_ = syscall.Kill(s.prog, sig)
	}
}

func (s *supervisor) kill() {
	if !s.killing {
		s.killing, s.killFrom = true, time.Now()
	}
}

// killBelow sends SIGKILL to the program's group (only while its pid is
// pinned by the unreaped program) and to every process below the
// supervisor.
func (s *supervisor) killBelow() {
	if !s.exited {
		_ = syscall.Kill(-s.prog, syscall.SIGKILL)
	}
	if !s.procOK {
		return
	}
	for _, pid := range descendants(os.Getpid()) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// reap reaps every child that has exited, without blocking. The program
// is looked at before it is reaped: its group (whatever it left behind, a
// shell's background jobs, dataloader workers) is killed while the
// program's unreaped pid keeps the group id from being reused.
func (s *supervisor) reap() {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if errors.Is(err, syscall.ECHILD) {
			s.none = true
			return
		}
		pid := siginfoPid(&info)
		if err != nil || pid == 0 {
			return
		}
		if pid == s.prog && !s.exited {
			_ = syscall.Kill(-s.prog, syscall.SIGKILL)
			s.kill()
		}
		var ws syscall.WaitStatus
		for {
			_, err = syscall.Wait4(pid, &ws, 0, nil)
			if !errors.Is(err, syscall.EINTR) {
				break
			}
		}
		if pid == s.prog && !s.exited {
			s.exited, s.status = true, ws
		}
	}
}

// siginfoPid is si_pid of a waitid result: the first field of the union
// that follows si_signo, si_errno and si_code, aligned for pointers.
func siginfoPid(info *unix.Siginfo) int {
	off := uintptr(12)
	if unsafe.Sizeof(uintptr(0)) == 8 {
		off = 16
	}
	return int(*(*int32)(unsafe.Add(unsafe.Pointer(info), off)))
}

// descendants returns every process below pid, from the parent links in
// /proc.
func descendants(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	kids := map[int][]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp := ppid(p); pp > 0 {
			kids[pp] = append(kids[pp], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, k := range kids[p] {
			out = append(out, k)
			queue = append(queue, k)
		}
	}
	return out
}

// ppid reads the parent pid from /proc/PID/stat, or 0.
func ppid(pid int) int {
	f := statFields(pid)
	if len(f) < 2 {
		return 0
	}
	pp, _ := strconv.Atoi(f[1])
	return pp
}

// statFields are the fields of /proc/PID/stat after the command name
// (state, ppid, pgrp, ...), or nil.
func statFields(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// GroupMembers lists the processes of process group pgid, leader first.
func GroupMembers(pgid int) []int {
	out := []int{pgid}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == pgid {
			continue
		}
		if f := statFields(pid); len(f) >= 3 && f[2] == strconv.Itoa(pgid) {
			out = append(out, pid)
		}
	}
	return out
}

// exitAs returns ws's exit code, or dies of ws's signal: the default
// action is restored and the signal raised on this thread, with core
// dumps off (the program may have dumped its own core; the supervisor's
// is of no use). 128+N is returned only if the signal did not kill.
func exitAs(ws syscall.WaitStatus) int {
	if !ws.Signaled() {
		return ws.ExitStatus()
	}
	sig := ws.Signal()
	runtime.LockOSThread()
	_ = unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
	signal.Reset(sig)
	var dfl [4]uint64 // struct sigaction: SIG_DFL, no flags, empty mask
	_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0)
	var set unix.Sigset_t
	n, w := uint(sig)-1, uint(unsafe.Sizeof(set.Val[0]))*8
	set.Val[n/w] |= 1 << (n % w)
	_ = unix.PthreadSigmask(unix.SIG_UNBLOCK, &set, nil)
	_ = unix.Tgkill(os.Getpid(), unix.Gettid(), unix.Signal(sig))
	time.Sleep(100 * time.Millisecond)
	return 128 + int(sig)
}

// supervisorPath is the file to execute for Spec.Supervisor. selfExe
// becomes the binary's own path while that file is still the running
// binary, so ps names supervisors after the agent rather than "exe"; once
// the file has been replaced or removed it stays selfExe.
func supervisorPath(p string) string {
	if p != selfExe {
		return p
	}
	real, err := os.Readlink(selfExe)
	if err != nil || strings.HasSuffix(real, " (deleted)") {
		return selfExe
	}
	return real
}
