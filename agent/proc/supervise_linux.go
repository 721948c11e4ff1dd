//go:build linux

package proc

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gangway-hpc/gangway/internal/osproc"
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

// settleFor is how long after its last reap a supervisor that is killing
// waits on SIGCHLD alone before it scans /proc for what is below it;
// scanEvery is how often it scans again while anything is left.
const (
	settleFor = 10 * time.Millisecond
	scanEvery = 20 * time.Millisecond
)

// forwarded are the signals a supervisor catches and forwards to its
// program's group: every signal of the allowlist that can be caught.
var forwarded = []os.Signal{
	syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2,
	syscall.SIGTERM, syscall.SIGCONT, syscall.SIGABRT, syscall.SIGALRM, syscall.SIGPIPE,
	syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGFPE, syscall.SIGILL,
}

// SupervisorMain is a job's supervisor (see Supervise). args are
// "CTLFD PARENT CRED": CTLFD is its end of the control socket to the
// agent, PARENT the agent's pid, CRED the user its programs run as
// (UID:GID:GROUPS; "-" for its own). The supervisor:
//
//   - makes itself a child subreaper, so every process below it that is
//     orphaned (a setsid'd, double-forked daemon included) reparents to it
//     and is reaped by it, never by init;
//   - reads the job (superSpec, one JSON line) from CTLFD and starts each
//     program, each leading a new session (and so process group), with
//     SIGKILL as its parent-death signal, as CRED's user (the supervisor
//     itself staying root, so no program can signal it or escape it), in
//     its working directory (entered as that user), with its environment,
//     CPU affinity and fds (stdio, PMI_FD) and the supervisor's cgroup, and
//     nothing else: no other program's fds, every signal at its default
//     disposition and none blocked, whatever the agent inherited; it
//     then closes its own copies of those fds, and CTLFD is close-on-exec;
//   - writes, for program I, "pid I N" once started or "err I CODE
//     MESSAGE" (code 127: not found, 126: cannot execute), and "exit I
//     STATUS" (the raw wait status) when it has ended; its process group
//     (what it left behind: a shell's background jobs, dataloader
//     workers) is killed before its pid is reaped;
//   - forwards to every live program's process group each catchable
//     signal it receives, and to program I's group the signals the agent
//     writes ("sig I N", SIGSTOP included);
//   - kills everything below it with SIGKILL, again and again until no
//     child is left (wait reports ECHILD), once every program has ended,
//     or when the agent goes: CTLFD reaches EOF, or the parent-death
//     signal arrives and its parent is no longer PARENT;
//   - then exits 0.
//
// It returns 2 for a bad command line or job (with a message on stderr),
// and 1 without starting anything when PARENT is already gone.
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
	ctl    int // the control socket's fd
	ranks  []superProc
	left   int // programs started and not yet reaped
	// killing is set once everything below must die; killFrom is when.
	killing  bool
	killFrom time.Time
	procOK   bool      // /proc is this PID namespace's: descendants can be found
	none     bool      // no child is left
	lastReap time.Time // when a child was last reaped
	scanning bool      // killing has turned to scanning /proc
	// tick wakes the loop while killing; tickC is nil until it runs.
	tick  *time.Ticker
	tickC <-chan time.Time
}

// superProc is one program: pid 0 when it never started.
type superProc struct {
	pid    int // also its process group id
	exited bool
}

// supervisorCmdLine is a command from the agent: signal sig to program
// rank, or to every program when all is set; rank < 0 when the agent is
// gone.
type supervisorCmdLine struct {
	rank int
	all  bool
	sig  syscall.Signal
}

func (s *supervisor) run(c supervisorCmd) int {
	sigs := make(chan os.Signal, 32)
	br, code := s.setUp(c, sigs)
	if br == nil {
		return code
	}
	cmds := make(chan supervisorCmdLine, 16)
	go readControl(br, cmds)
	s.loop(sigs, cmds)
	return 0
}

// setUp makes this process the supervisor SupervisorMain describes,
// reads its job from the control socket and starts every program. It
// returns the control socket's reader for the agent's further lines, or
// nil and the exit code when the supervisor must end at once.
func (s *supervisor) setUp(c supervisorCmd, sigs chan<- os.Signal) (*bufio.Reader, int) {
	// The job's fds came as fds 3 on, without close-on-exec: each program
	// gets its own as its 0, 1, 2 and PMI_FD (ForkExec's dup2 clears the
	// flag on those alone), and none of another program's.
	CloseOnExecInherited()
	// Every signal forwarded is caught, so the programs start with it at
	// its default (a fork resets caught signals) even where the agent was
	// started ignoring it (SIGHUP under nohup), as sshd and systemd start
	// a session's; the rest that the runtime leaves ignored are reset too.
	DefaultSignalsForChildren()
	signal.Notify(sigs, append([]os.Signal{syscall.SIGCHLD, parentDeathSignal}, forwarded...)...)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "%s: cannot become a subreaper: %v\n", supervisorArgv0, err)
		return nil, 2
	}
	// The parent-death signal arriving before Notify was ignored by the Go
	// runtime: look at the parent now that it is caught.
	if s.parentGone() {
		return nil, 1
	}
	s.ctl = c.ctlFD
	ctl := os.NewFile(uintptr(c.ctlFD), "control")
	self, _ := os.Readlink("/proc/self")
	s.procOK = self == strconv.Itoa(os.Getpid())

	br := bufio.NewReaderSize(ctl, 64<<10)
	spec, code := readJob(br)
	if code != 0 {
		return nil, code
	}
	s.startAll(spec, c.cred)
	if s.left == 0 {
		s.kill()
	}
	return br, 0
}

// readJob reads the job, one JSON line, and gives each program the job's
// common environment followed by its own. The code is 1 when the agent
// went before it said what to run, 2 for a job that does not parse.
func readJob(br *bufio.Reader) (superSpec, int) {
	line, err := br.ReadBytes('\n')
	if err != nil {
		return superSpec{}, 1
	}
	var spec superSpec
	if err := json.Unmarshal(line, &spec); err != nil {
		fmt.Fprintf(os.Stderr, "%s: job: %v\n", supervisorArgv0, err)
		return superSpec{}, 2
	}
	for i, r := range spec.Ranks {
		spec.Ranks[i].Env = append(spec.Env[:len(spec.Env):len(spec.Env)], r.Env...)
	}
	return spec, 0
}

// loop serves signals and the agent's commands, reaping after each, until
// everything below the supervisor is dead once killing has begun.
func (s *supervisor) loop(sigs <-chan os.Signal, cmds <-chan supervisorCmdLine) {
	for {
		select {
		case sig := <-sigs:
			s.onSignal(sig.(syscall.Signal))
		case cmd, ok := <-cmds:
			if !ok || cmd.rank < 0 { // the agent closed the socket, or died
				s.kill()
				cmds = nil
			} else {
				s.onCommand(cmd)
			}
		case <-s.tickC:
		}
		s.reap()
		if s.killing && s.killStep() {
			return
		}
	}
}

// onSignal handles a signal the supervisor caught: SIGCHLD only wakes
// it to reap, the parent-death signal starts the killing when the agent
// is gone, and every other one goes to every live program's group.
func (s *supervisor) onSignal(sig syscall.Signal) {
	switch {
	case sig == syscall.SIGCHLD:
	case sig == parentDeathSignal:
		if s.parentGone() {
			s.kill()
		}
	default:
		for i := range s.ranks {
			s.forward(i, sig)
		}
	}
}

// onCommand delivers the agent's signal to one program or to all.
func (s *supervisor) onCommand(cmd supervisorCmdLine) {
	switch {
	case cmd.all:
		for i := range s.ranks {
			s.signal(i, cmd.sig)
		}
	case cmd.rank >= len(s.ranks):
	default:
		s.signal(cmd.rank, cmd.sig)
	}
}

// killStep goes on killing everything below the supervisor, and reports
// whether it is done: no child left, or killBelowFor spent.
func (s *supervisor) killStep() bool {
	if !s.none && time.Since(s.lastReap) < settleFor {
		// What is left of the programs' groups got SIGKILL when their
		// leaders were reaped, and is dying: let SIGCHLD reap it first.
		// A scan of /proc costs milliseconds, and tens of them while a
		// host's ranks all exit at once (81 ms measured with 8 ranks
		// and their children on each of 16 namespace hosts).
		s.wakeEvery(settleFor, false)
		return false
	}
	if !s.none {
		// Scanning /proc costs; with no child left, nothing is below.
		s.killBelow()
		s.reap()
		if !s.scanning {
			// SIGCHLD is not enough while killing: a process can fork just
			// before it dies, and its child reparents here silently.
			s.scanning = true
			s.wakeEvery(scanEvery, true)
		}
	}
	return s.none || time.Since(s.killFrom) > killBelowFor
}

// wakeEvery makes the loop wake every d, starting a ticker if there is
// none; reset sets a running one to d.
func (s *supervisor) wakeEvery(d time.Duration, reset bool) {
	switch {
	case s.tick == nil:
		s.tick = time.NewTicker(d)
		s.tickC = s.tick.C
	case reset:
		s.tick.Reset(d)
	}
}

// startAll starts every program of spec and reports each start, then
// closes the supervisor's copies of their fds.
func (s *supervisor) startAll(spec superSpec, cred *syscall.Credential) {
	s.ranks = make([]superProc, len(spec.Ranks))
	for i, r := range spec.Ranks {
		files := make([]uintptr, len(r.Files))
		for k, fd := range r.Files {
			if fd < 0 {
				fd = 0 // the supervisor's own stdin: /dev/null
			}
			files[k] = uintptr(fd)
		}
		pid, err := startOne(r, files, cred)
		if err != nil {
			code := 126
			if errors.Is(err, ErrNotFound) {
				code = 127
			}
			s.send(fmt.Sprintf("err %d %d %s\n", i, code, strings.ReplaceAll(err.Error(), "\n", " ")))
			continue
		}
		s.ranks[i].pid = pid
		s.left++
		s.send(fmt.Sprintf("pid %d %d\n", i, pid))
	}
	// The programs hold their own copies now; the supervisor keeps its
	// stdio (for its own messages) and the control socket.
	for _, r := range spec.Ranks {
		for _, fd := range r.Files {
			if fd > 2 && fd != s.ctl {
				syscall.Close(fd)
			}
		}
	}
}

func argv0(r superRank) string {
	if len(r.Argv) > 0 {
		return r.Argv[0]
	}
	return r.Path
}

// startOne forks and executes one program: syscall.ForkExec rather than
// os.StartProcess, which would hold a pidfd per program and probe for
// pidfd support first; the supervisor reaps by pid.
func startOne(r superRank, files []uintptr, cred *syscall.Credential) (int, error) {
	if len(r.Argv) == 0 || r.Path == "" {
		return 0, fmt.Errorf("%s: cannot start: empty command", argv0(r))
	}
	attr := &syscall.ProcAttr{Dir: r.Dir, Env: r.Env, Files: files,
		// The child changes credentials before it changes directory, so a
		// directory the user may not enter is refused as it would be
		// without a supervisor.
		Sys: &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}}
	var pid int
	// The supervisor's own mask is empty (StartGroup started it clean),
	// and a fork restores it: a locked thread is needed only to give the
	// program a CPU set.
	fork := func(start func() error) error { return start() }
	if len(r.CPUs) > 0 {
		fork = func(start func() error) error { return startClean(r.CPUs, start) }
	}
	err := fork(func() (err error) {
		pid, err = syscall.ForkExec(r.Path, r.Argv, attr)
		return err
	})
	if err != nil {
		return 0, startError(r, cred, err)
	}
	return pid, nil
}

// startError words why r could not be started, looking at its files as
// its user (the supervisor is root; what it tells must not be more than
// the user could learn).
func startError(r superRank, cred *syscall.Credential, err error) error {
	abs := r.Path
	if !filepath.IsAbs(abs) && r.Dir != "" {
		abs = filepath.Join(r.Dir, abs)
	}
	var errno syscall.Errno
	if r.Dir != "" && errors.As(err, &errno) && errno == syscall.ENOENT {
		if serr := Enterable(cred, r.Dir); serr != nil {
			return fmt.Errorf("%s: cannot start: working directory %s: %w", argv0(r), r.Dir, serr)
		}
	}
	_ = AsUser(cred, func() error {
		err = execError(argv0(r), abs, err)
		return nil
	})
	return err
}

// send writes one report line to the agent; MSG_NOSIGNAL, so an agent
// that is gone makes no SIGPIPE (which would be forwarded).
func (s *supervisor) send(line string) {
	b := []byte(line)
	for len(b) > 0 {
		n, err := unix.SendmsgN(s.ctl, b, nil, nil, unix.MSG_NOSIGNAL)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return
		}
		b = b[n:]
	}
}

// signal delivers an agent's signal to program i: SIGKILL to its whole
// group while its pid pins the group, any other signal as forward does.
func (s *supervisor) signal(i int, sig syscall.Signal) {
	if sig != syscall.SIGKILL {
		s.forward(i, sig)
		return
	}
	if p := s.ranks[i]; p.pid > 0 && !p.exited {
		_ = osproc.KillGroup(p.pid, syscall.SIGKILL)
	}
}

// readControl turns the control socket's lines ("sig I N", "sig * N" for
// every program) into commands, and closes cmds at EOF or on any error.
func readControl(br *bufio.Reader, cmds chan<- supervisorCmdLine) {
	defer close(cmds)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "sig" {
			continue
		}
		all := f[1] == "*"
		rank, err1 := strconv.Atoi(f[1])
		sig, err2 := strconv.Atoi(f[2])
		if all {
			rank, err1 = 0, nil
		}
		if err1 != nil || err2 != nil || rank < 0 || sig <= 0 || sig > 64 {
			continue
		}
		cmds <- supervisorCmdLine{rank: rank, all: all, sig: syscall.Signal(sig)}
	}
}

func (s *supervisor) parentGone() bool { return os.Getppid() != s.parent }

// forward delivers sig to program i's group while it lives (unreaped, its
// pid is still its group's), or to the program alone when it left its
// group.
func (s *supervisor) forward(i int, sig syscall.Signal) {
	p := s.ranks[i]
	if p.pid == 0 || p.exited || s.killing || sig <= 0 || sig > 64 {
		return
	}
	if err := osproc.SignalGroup(p.pid, sig); errors.Is(err, syscall.ESRCH) {
		_ = syscall.Kill(p.pid, sig)
	}
}

func (s *supervisor) kill() {
	if !s.killing {
		s.killing, s.killFrom = true, time.Now()
	}
}

// killBelow sends SIGKILL to each live program's group (only while its
// pid is pinned by the unreaped program) and to every process below the
// supervisor.
func (s *supervisor) killBelow() {
	for _, p := range s.ranks {
		if p.pid > 0 && !p.exited {
			_ = osproc.KillGroup(p.pid, syscall.SIGKILL)
		}
	}
	if !s.procOK {
		return
	}
	for _, m := range descendants(os.Getpid()) {
		m.kill()
	}
}

// rankOf is the index of the live program with pid, or -1.
func (s *supervisor) rankOf(pid int) int {
	for i, p := range s.ranks {
		if p.pid == pid && !p.exited {
			return i
		}
	}
	return -1
}

// reap reaps every child that has exited, without blocking. A program is
// looked at before it is reaped: its group (whatever it left behind, a
// shell's background jobs, dataloader workers) is killed while the
// program's unreaped pid keeps the group id from being reused. Its end is
// reported, and once every program has ended everything below dies.
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
		i := s.rankOf(pid)
		if i >= 0 {
			_ = osproc.KillGroup(pid, syscall.SIGKILL)
		}
		var ws syscall.WaitStatus
		for {
			_, err = syscall.Wait4(pid, &ws, 0, nil)
			if !errors.Is(err, syscall.EINTR) {
				break
			}
		}
		s.lastReap = time.Now()
		if i >= 0 {
			s.ranks[i].exited = true
			s.left--
			s.send(fmt.Sprintf("exit %d %d\n", i, uint32(ws)))
			if s.left == 0 {
				s.kill()
			}
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

// descendants returns every process below pid, with its start time,
// from the parent links in one pass over /proc.
func descendants(pid int) []Member {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	kids := map[int][]Member{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s, err := osproc.ReadStat(p); err == nil && s.PPid > 0 {
			kids[s.PPid] = append(kids[s.PPid], Member{Pid: p, Start: s.Start})
		}
	}
	var out []Member
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, k := range kids[p] {
			out = append(out, k)
			queue = append(queue, k.Pid)
		}
	}
	return out
}

// kill sends SIGKILL to m if it is still the process the snapshot saw
// (the same start time), through a pidfd opened before the check, so a
// later process given the same pid is never hit: a descendant that its
// own parent reaped frees its pid at once. Without pidfds (Linux before
// 5.3) the check and the kill are a moment apart.
func (m Member) kill() {
	fd, err := unix.PidfdOpen(m.Pid, 0)
	if err != nil {
		if !errors.Is(err, unix.ESRCH) {
			if m.same() {
				_ = syscall.Kill(m.Pid, syscall.SIGKILL)
			}
		}
		return
	}
	defer unix.Close(fd)
	if m.same() {
		_ = unix.PidfdSendSignal(fd, syscall.SIGKILL, nil, 0)
	}
}

// same reports whether m's pid still names the process the snapshot saw.
func (m Member) same() bool {
	s, err := osproc.ReadStat(m.Pid)
	return err == nil && s.Start == m.Start
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
