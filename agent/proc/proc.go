// Package proc runs and supervises rank processes: one process group per
// rank, output pumped as whole lines, shell-style exit codes, and a stop
// that escalates from SIGTERM to SIGKILL and reaches grandchildren. So
// that a rank's containment does not depend on the agent staying alive,
// a job's ranks on a host can run under one supervisor (the agent's
// binary re-executed: StartGroup, Supervise, SupervisorMain) and in the
// job's cgroup (Cgroup).
//
// The same code runs ranks for the in-process local agent and for remote
// agents; there is no second code path.
package proc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gangway-hpc/gangway/internal/fdio"
	"github.com/gangway-hpc/gangway/internal/osproc"
	"github.com/gangway-hpc/gangway/internal/syncx"
	"github.com/gangway-hpc/gangway/internal/textx"
)

// Stream says which output stream a chunk came from.
type Stream uint8

// Output streams; the values match agent/wire.
const (
	Stdout Stream = 1
	Stderr Stream = 2
)

// Sink receives rank output. Data always ends with '\n' except the final
// chunk of a stream whose last line had none, or a line longer than
// MaxLine (cut in pieces). Data is only valid during the call. Output calls
// for one stream are serialised; calls for different streams and ranks are
// concurrent.
type Sink func(rank int, s Stream, data []byte)

// MaxLine is the longest line delivered whole, not counting its newline.
// Longer lines are delivered in pieces of MaxLine bytes plus one, so one
// runaway rank cannot exhaust the agent's memory.
const MaxLine = 16 << 20

// Spec describes one rank's process.
type Spec struct {
	Rank int
	Argv []string
	// Env is the complete environment of the process (KEY=VALUE).
	Env []string
	Dir string
	// ExtraFiles become fds 3, 4, ... in the child (PMI_FD).
	ExtraFiles []*os.File
	// Stdin, when true, gives the process a pipe as stdin (Proc.Stdin);
	// otherwise stdin is /dev/null.
	Stdin bool
	// CPUs, when non-empty, is the CPU affinity set the process starts with.
	CPUs []int
	// Grace is the time between SIGTERM and SIGKILL when ctx is cancelled
	// or Stop is called without an explicit grace. Zero means 5s.
	Grace time.Duration
	// Supervisor, when set, is the binary re-executed as the supervisor
	// (SupervisorExecutable()) of the ranks started together (StartGroup;
	// Start makes a group of one), which runs the programs as its children
	// (SupervisorMain) and kills everything below it when the last one
	// ends or the agent dies. Signals reach a program's group through it;
	// Pid and Result are still the program's. "" runs the program
	// directly, contained by its process group and Pdeathsig alone.
	Supervisor string
	// Cgroup, when set, is the job's group the rank starts in
	// (CLONE_INTO_CGROUP), supervisor and all.
	Cgroup *Cgroup
	// Credential, when set, runs the program as another user (uid, gid,
	// supplementary groups); the caller must be allowed to (root). With a
	// supervisor, the supervisor stays the caller's user and starts the
	// program with the credential, so the program cannot signal or outlive
	// what contains it.
	Credential *syscall.Credential
}

// Result is how a rank ended.
type Result struct {
	Rank int
	Pid  int
	// Code follows bash: the exit status, 128+N for signal N, 127 when the
	// program was not found, 126 when it could not be executed.
	Code   int
	Signal syscall.Signal // the signal that ended it, 0 if none
	// Err is set when the process could not be started.
	Err error
	// Stopped is true when the rank ended after Stop (or ctx cancel).
	Stopped bool
}

func (r Result) String() string {
	switch {
	case r.Err != nil:
		return fmt.Sprintf("rank %d: %v (exit code %d)", r.Rank, r.Err, r.Code)
	case r.Signal != 0 && SignalName(r.Signal) != "":
		return fmt.Sprintf("rank %d (pid %d): killed by signal %d (%s), exit code %d", r.Rank, r.Pid, int(r.Signal), SignalName(r.Signal), r.Code)
	case r.Signal != 0:
		return fmt.Sprintf("rank %d (pid %d): killed by signal %d, exit code %d", r.Rank, r.Pid, int(r.Signal), r.Code)
	default:
		return fmt.Sprintf("rank %d (pid %d): exit code %d", r.Rank, r.Pid, r.Code)
	}
}

// Proc is a running rank. Its owner must call Wait.
type Proc struct {
	spec  Spec
	cmd   *exec.Cmd
	pid   int
	stdin *os.File
	// sup is the program's part in its supervisor's group; nil without a
	// supervisor, when pid is the program's and cmd its process.
	sup *supervised

	done   chan struct{}
	res    Result
	reaped chan struct{} // closed when cmd.Wait has returned
	// stoppers are the Shutdowns that Stop started; supervise waits for
	// them before Done.
	stoppers sync.WaitGroup
	stopMu   sync.Mutex
	stopd    bool
	exited   bool
}

// ErrNotFound is wrapped in a start error when the program does not exist.
var ErrNotFound = errors.New("program not found")

// Start starts the rank. When ctx is cancelled the rank is stopped with the
// spec's grace. The returned Proc has already been started; a start failure
// is returned as an error and also as a Result with Code 127 or 126 by
// StartResult.
func Start(ctx context.Context, spec Spec, out Sink) (*Proc, error) {
	if len(spec.Argv) == 0 {
		return nil, fmt.Errorf("rank %d: empty command", spec.Rank)
	}
	if spec.Grace <= 0 {
		spec.Grace = 5 * time.Second
	}
	if spec.Supervisor != "" {
		procs, errs := StartGroup(ctx, []Spec{spec}, out)
		return procs[0], errs[0]
	}
	var path string
	err := AsUser(spec.Credential, func() (err error) {
		path, err = lookPath(spec.Argv[0], envValue(spec.Env, "PATH"), spec.Dir)
		return err
	})
	if err != nil {
		return nil, err
	}
	cmd := &exec.Cmd{Path: path, Args: spec.Argv, Env: spec.Env, Dir: spec.Dir, ExtraFiles: spec.ExtraFiles}
	cmd.SysProcAttr = sysProcAttr()
	cmd.SysProcAttr.Credential = spec.Credential
	if spec.Cgroup != nil {
		applyCgroup(cmd.SysProcAttr, spec.Cgroup)
	}
	rp, err := newRankPipes(spec)
	if err != nil {
		return nil, err
	}
	defer rp.closeTheirs()
	cmd.Stdout, cmd.Stderr = rp.outW, rp.errW
	if rp.stdinR != nil { // else /dev/null
		cmd.Stdin = rp.stdinR
	}
	if err := startWithAffinity(cmd, spec.CPUs); err != nil {
		rp.closeOurs()
		abs := path
		if !filepath.IsAbs(abs) && spec.Dir != "" {
			abs = filepath.Join(spec.Dir, abs)
		}
		_ = AsUser(spec.Credential, func() error {
			err = execError(spec.Argv[0], abs, err)
			return nil
		})
		return nil, err
	}
	p := &Proc{spec: spec, cmd: cmd, pid: cmd.Process.Pid, stdin: rp.stdinW, done: make(chan struct{}), reaped: make(chan struct{})}
	go p.supervise(ctx, out, rp.outR, rp.errR)
	return p, nil
}

// rankPipes are a rank's stdio pipes: the agent's ends (stdinW, outR,
// errR) and the program's.
type rankPipes struct {
	stdinR, stdinW *os.File // nil without Spec.Stdin
	outR, outW     *os.File
	errR, errW     *os.File
}

func newRankPipes(spec Spec) (*rankPipes, error) {
	rp := &rankPipes{}
	var err error
	if spec.Stdin {
		if rp.stdinR, rp.stdinW, err = os.Pipe(); err != nil {
			return nil, fmt.Errorf("rank %d: stdin pipe: %w", spec.Rank, err)
		}
	}
	if rp.outR, rp.outW, err = os.Pipe(); err != nil {
		closeFile(rp.stdinR, rp.stdinW)
		return nil, fmt.Errorf("rank %d: stdout pipe: %w", spec.Rank, err)
	}
	if rp.errR, rp.errW, err = os.Pipe(); err != nil {
		closeFile(rp.stdinR, rp.stdinW, rp.outR, rp.outW)
		return nil, fmt.Errorf("rank %d: stderr pipe: %w", spec.Rank, err)
	}
	return rp, nil
}

// closeTheirs closes the program's ends, which the child has copies of.
func (rp *rankPipes) closeTheirs() { closeFile(rp.stdinR, rp.outW, rp.errW) }

// closeOurs closes the agent's ends, when no program was started.
func (rp *rankPipes) closeOurs() { closeFile(rp.stdinW, rp.outR, rp.errR) }

// StartGroup starts the programs of specs under one supervisor (their
// Supervisor, Cgroup and Credential must be the same, Supervisor not
// ""): a job's ranks on one host. Each Proc behaves as a rank under its
// own supervisor would, except that what a program leaves outside its
// process group (a setsid'd daemon) dies when the last of the group's
// programs has ended, not with its own program. The Done of the last
// one is closed only once the supervisor has killed everything below it
// and exited. errs[i] is set when specs[i] could not be started at all
// (then procs[i] is nil); a program the supervisor could not start has
// a Proc whose Result carries the error.
func StartGroup(ctx context.Context, specs []Spec, out Sink) (procs []*Proc, errs []error) {
	procs, errs = make([]*Proc, len(specs)), make([]error, len(specs))
	if len(specs) == 0 {
		return procs, errs
	}
	mine, theirs, err := newControl()
	if err != nil {
		for i, spec := range specs {
			errs[i] = fmt.Errorf("rank %d: supervisor socket: %w", spec.Rank, err)
		}
		return procs, errs
	}
	defer closeFile(theirs)
	b := &groupStart{g: &superGroup{f: mine, raw: fdio.RawConn(mine), gone: make(chan struct{})}, files: []*os.File{theirs},
		pipes: map[int]*rankPipes{}, procs: procs, errs: errs}
	defer b.closeTheirs()
	b.addAll(specs)
	if len(b.spec.Ranks) == 0 {
		mine.Close()
		return procs, errs
	}
	b.splitEnv()
	cmd, err := b.startSupervisor(specs[0])
	if err != nil {
		b.fail(err)
		return procs, errs
	}
	b.g.cmd = cmd
	if err := b.g.writeSpec(b.spec); err != nil {
		// The supervisor reads its job first thing; one that cannot is
		// stopped by someone else, and dies with its programs unstarted.
		_ = cmd.Process.Kill()
	}
	go b.g.read()
	for i, p := range procs {
		if p == nil {
			continue
		}
		p.pid = cmd.Process.Pid
		go p.supervise(ctx, out, b.pipes[i].outR, b.pipes[i].errR)
	}
	return procs, errs
}

// groupStart is StartGroup's work: the supervisor's job and the files
// it inherits, and each program's Proc (procs[i]; errs[i] when specs[i]
// cannot start) and pipes.
type groupStart struct {
	g     *superGroup
	files []*os.File // the supervisor's fd 3 on
	spec  superSpec
	pipes map[int]*rankPipes
	procs []*Proc
	errs  []error
}

// fd adds f to the supervisor's files and returns its number there; -1
// for nil (the supervisor's own stdin, /dev/null).
func (b *groupStart) fd(f *os.File) int {
	if f == nil {
		return -1
	}
	b.files = append(b.files, f)
	return 2 + len(b.files)
}

// addAll adds every program of specs to the job, or sets its error.
// Every program is looked up as its user, in one go: the programs share
// the credential.
func (b *groupStart) addAll(specs []Spec) {
	paths := make([]string, len(specs))
	_ = AsUser(specs[0].Credential, func() error {
		for i, s := range specs {
			if len(s.Argv) > 0 {
				paths[i], b.errs[i] = lookPath(s.Argv[0], envValue(s.Env, "PATH"), s.Dir)
			}
		}
		return nil
	})
	for i, s := range specs {
		if len(s.Argv) == 0 {
			b.errs[i] = fmt.Errorf("rank %d: empty command", s.Rank)
			continue
		}
		if b.errs[i] == nil {
			b.add(i, s, paths[i])
		}
	}
}

// add adds program i, found at path, to the job: its pipes, its files
// and its Proc.
func (b *groupStart) add(i int, s Spec, path string) {
	if s.Grace <= 0 {
		s.Grace = 5 * time.Second
	}
	rp, err := newRankPipes(s)
	if err != nil {
		b.errs[i] = err
		return
	}
	b.pipes[i] = rp
	r := superRank{Path: path, Argv: s.Argv, Env: dedupEnv(s.Env), Dir: s.Dir, CPUs: s.CPUs,
		Files: []int{b.fd(rp.stdinR), b.fd(rp.outW), b.fd(rp.errW)}}
	for _, f := range s.ExtraFiles {
		r.Files = append(r.Files, b.fd(f))
	}
	p := &Proc{spec: s, stdin: rp.stdinW, done: make(chan struct{}), reaped: make(chan struct{}),
		sup: &supervised{g: b.g, index: len(b.spec.Ranks), known: make(chan struct{}), end: make(chan struct{})}}
	b.spec.Ranks = append(b.spec.Ranks, r)
	b.g.procs = append(b.g.procs, p)
	b.procs[i] = p
}

// splitEnv sends the variables every program has once, in the job's
// Env, and each program's others with it.
func (b *groupStart) splitEnv() {
	envs := make([][]string, len(b.spec.Ranks))
	for i, r := range b.spec.Ranks {
		envs[i] = r.Env
	}
	common, rest := splitEnv(envs)
	b.spec.Env = common
	for i := range b.spec.Ranks {
		b.spec.Ranks[i].Env = rest[i]
	}
}

// startSupervisor starts the supervisor, with first's Supervisor,
// Credential and Cgroup. Its stdin and stdout are /dev/null (a
// program's stdin without Spec.Stdin is the supervisor's:
// superRank.Files), its stderr the agent's.
func (b *groupStart) startSupervisor(first Spec) (*exec.Cmd, error) {
	cmd := &exec.Cmd{Path: supervisorPath(first.Supervisor), Args: supervisorArgs(3, os.Getpid(), first.Credential),
		Env: []string{}, ExtraFiles: b.files, Stderr: os.Stderr}
	cmd.SysProcAttr = sysProcAttr()
	setPdeathsig(cmd.SysProcAttr, parentDeathSignal)
	if first.Cgroup != nil {
		applyCgroup(cmd.SysProcAttr, first.Cgroup)
	}
	// The supervisor starts with an empty signal mask, which its own
	// forks then give every program without a locked thread each.
	if err := StartClean(cmd); err != nil {
		return nil, fmt.Errorf("supervisor %s: %w", first.Supervisor, err)
	}
	return cmd, nil
}

// fail sets err for every program added, when the supervisor could not
// start.
func (b *groupStart) fail(err error) {
	for i, p := range b.procs {
		if p != nil {
			b.errs[i] = fmt.Errorf("rank %d: %w", p.spec.Rank, err)
			b.procs[i] = nil
			b.pipes[i].closeOurs()
		}
	}
	b.g.f.Close()
}

// closeTheirs closes the programs' ends of their pipes, which the
// supervisor has copies of once started.
func (b *groupStart) closeTheirs() {
	for _, rp := range b.pipes {
		rp.closeTheirs()
	}
}

// StartResult turns a Start error into the Result a failed start reports.
func StartResult(rank int, err error) Result {
	code := 126
	if errors.Is(err, ErrNotFound) {
		code = 127
	}
	return Result{Rank: rank, Code: code, Err: err}
}

// Pid is the rank's process ID, which is also its process group ID. Under
// a supervisor it is known once the supervisor has started the program,
// which Pid waits for (milliseconds; at most reportWait); it is the
// supervisor's own if the program could not be started.
func (p *Proc) Pid() int {
	if p.sup == nil {
		return p.pid
	}
	t := time.NewTimer(reportWait)
	defer t.Stop()
	select {
	case <-p.sup.known:
		if p.sup.pid > 0 {
			return p.sup.pid
		}
	case <-t.C: // a supervisor stopped by someone else
	}
	return p.pid
}

// reportWait bounds Pid's wait for a supervisor's report.
const reportWait = 10 * time.Second

// Stdin is the write end of the rank's stdin pipe, or nil.
func (p *Proc) Stdin() io.WriteCloser {
	if p.stdin == nil {
		return nil
	}
	return p.stdin
}

// Done is closed when the rank has exited, its group has been killed and
// its output drained.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Wait blocks until Done and returns the result.
func (p *Proc) Wait() Result {
	<-p.done
	return p.res
}

// Signal sends sig to the rank's whole process group. Under a supervisor
// it goes through the control socket, so SIGSTOP reaches the program rather
// than the supervisor, and SIGKILL kills everything below the supervisor,
// daemons that left the group included.
func (p *Proc) Signal(sig syscall.Signal) error {
	p.stopMu.Lock()
	defer p.stopMu.Unlock()
	if p.exited {
		return nil
	}
	if sig == syscall.SIGTERM || sig == syscall.SIGKILL || sig == syscall.SIGINT {
		p.stopd = true
	}
	if p.sup != nil {
		if err := p.sup.g.signal(p.sup.index, sig); err != nil {
			return fmt.Errorf("signal %d to rank %d's supervisor (pid %d): %w", int(sig), p.spec.Rank, p.pid, err)
		}
		return nil
	}
	return osproc.KillGroup(p.pid, sig)
}

// Stop sends SIGTERM to the group and SIGKILL after grace (the spec's grace
// when grace <= 0), by osproc.Shutdown; of several Stops the shortest grace wins.
// It returns at once; Wait for the end.
func (p *Proc) Stop(grace time.Duration) {
	if grace <= 0 {
		grace = p.spec.Grace
	}
	p.stopMu.Lock()
	defer p.stopMu.Unlock()
	if p.exited {
		return
	}
	p.stopd = true
	// Signal does nothing once the leader has been reaped, so a late
	// SIGKILL never reaches a reused process group.
	p.stoppers.Go(func() { _ = osproc.Shutdown(p.Signal, grace, p.reaped) })
}

// StopAll stops procs as Stop stops each, with grace (each one's own
// when grace <= 0), but where procs are every program of a supervisor it
// tells that supervisor once: SIGTERM to every program now, SIGKILL to
// what is left after grace, one line each. A busy host's agent (its ranks
// all ending at once on two CPUs) then wakes once per stop, not once per
// rank: with 8 ranks per host the signals for one host's ranks were seen
// arriving up to 55 ms apart.
func StopAll(procs []*Proc, grace time.Duration) {
	groups := map[*superGroup][]*Proc{}
	for _, p := range procs {
		if p.sup == nil {
			p.Stop(grace)
			continue
		}
		groups[p.sup.g] = append(groups[p.sup.g], p)
	}
	for g, ps := range groups {
		if len(ps) != len(g.procs) {
			for _, p := range ps {
				p.Stop(grace)
			}
			continue
		}
		d, live := grace, false
		for _, p := range ps {
			p.stopMu.Lock()
			if !p.exited {
				p.stopd, live = true, true
				if grace <= 0 {
					d = p.spec.Grace
				}
			}
			p.stopMu.Unlock()
		}
		if live {
			g.stoppers.Go(func() { _ = osproc.Shutdown(g.signalAll, d, g.gone) })
		}
	}
}

// Kill sends SIGKILL to the group now.
func (p *Proc) Kill() { _ = p.Signal(syscall.SIGKILL) }

func (p *Proc) supervise(ctx context.Context, out Sink, outR, errR *os.File) {
	defer close(p.done)
	var pumps sync.WaitGroup
	pumps.Go(func() { pump(outR, func(b []byte) { out(p.spec.Rank, Stdout, b) }) })
	pumps.Go(func() { pump(errR, func(b []byte) { out(p.spec.Rank, Stderr, b) }) })

	stopCtx := context.AfterFunc(ctx, func() { p.Stop(0) })
	var code int
	var sig syscall.Signal
	if p.sup != nil {
		<-p.sup.end
		code, sig = p.sup.result()
	} else {
		_ = p.cmd.Wait() // the state says how it ended
		var waited bool
		if code, sig, waited = osproc.ProcessExitCode(p.cmd.ProcessState); !waited {
			code = 1
		}
	}
	stopCtx()

	p.stopMu.Lock()
	p.exited = true
	stopped := p.stopd
	p.stopMu.Unlock()
	close(p.reaped)
	if p.sup == nil {
		// The leader is gone; anything left in its group (dataloader
		// workers, a shell's background jobs) dies with it. A supervisor
		// has done that before it reported the end.
		_ = osproc.KillGroup(p.pid, syscall.SIGKILL)
	} else if p.sup.g.last() {
		// The job's last program on this host: its supervisor is killing
		// everything below it, and is done when it exits.
		<-p.sup.g.gone
		p.sup.g.stoppers.Wait()
	}
	if p.stdin != nil {
		p.stdin.Close()
	}

	// Output: the pipes close when the last holder exits. A process that
	// left the group (setsid) and kept the pipe would hold us forever, so
	// drain for a bounded time, then cut.
	drained := syncx.Done(pumps.Wait)
	select {
	case <-drained:
	case <-time.After(2 * time.Second):
		// Cut, but keep what the pipes already hold: a pump starved of
		// CPU on a loaded node has not read the rank's last lines yet,
		// and those were written before it ended. The deadline stops the
		// pumps' waiting; each then takes what is buffered (pump).
		_ = outR.SetReadDeadline(time.Now())
		_ = errR.SetReadDeadline(time.Now())
		<-drained
	}
	outR.Close()
	errR.Close()
	p.stoppers.Wait()

	p.res = Result{Rank: p.spec.Rank, Pid: p.pid, Stopped: stopped, Code: code, Signal: sig}
	if p.sup != nil {
		p.res.Pid = p.Pid()
		if p.sup.err != nil {
			p.res.Err = p.sup.err // worded by execError in the supervisor
		}
	}
}

// pump reads r and calls emit with whole lines (textx.LastLineEnd: a
// progress bar's states end at their carriage returns), batching as many complete
// lines as one read delivered.
func pump(r io.Reader, emit func([]byte)) {
	buf := make([]byte, 0, 64<<10)
	for {
		if len(buf) == cap(buf) {
			// A line of MaxLine bytes and its newline fit: it goes whole.
			if cap(buf) > MaxLine {
				emit(buf)
				buf = buf[:0]
			} else {
				nb := make([]byte, len(buf), min(2*cap(buf), MaxLine+1))
				copy(nb, buf)
				buf = nb
			}
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		if n > 0 {
			start := len(buf)
			buf = buf[:start+n]
			// From the byte before: a carriage return the last read
			// ended with is a line end once a byte other than a newline
			// follows it.
			from := max(start-1, 0)
			if i := textx.LastLineEnd(buf[from:]); i >= 0 {
				end := from + i + 1
				emit(buf[:end])
				rest := copy(buf, buf[end:])
				buf = buf[:rest]
				if cap(buf) > 256<<10 && rest < 64<<10 {
					nb := make([]byte, rest, 64<<10)
					copy(nb, buf)
					buf = nb
				}
			}
		}
		if err != nil {
			if f, ok := r.(*os.File); ok && errors.Is(err, os.ErrDeadlineExceeded) {
				buf = drainBuffered(f, buf, emit)
			}
			if len(buf) > 0 {
				emit(buf)
			}
			return
		}
	}
}

// maxFinalDrain bounds what a cut pipe gives after its deadline: what the
// pipe buffer held (64 KiB by default), and not a writer that keeps on.
const maxFinalDrain = 4 << 20

// drainBuffered reads what f's pipe holds now, without waiting, after a
// deadline cut its pump: whole lines go to emit, a last partial line is
// returned with buf's.
func drainBuffered(f *os.File, buf []byte, emit func([]byte)) []byte {
	_ = f.SetReadDeadline(time.Time{})
	rc, err := f.SyscallConn()
	if err != nil {
		return buf
	}
	chunk := make([]byte, 64<<10)
	for total := 0; total < maxFinalDrain; {
		var n int
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			n, rerr = syscall.Read(int(fd), chunk)
			return true // never wait: only what is there now
		}); err != nil || rerr != nil || n <= 0 {
			break
		}
		total += n
		buf = append(buf, chunk[:n]...)
		rest := emitBounded(buf, emit)
		buf = append(buf[:0:0], rest...)
	}
	return buf
}

// emitBounded hands emit buf's whole lines in pieces of at most MaxLine+1
// bytes, a line longer than MaxLine cut as pump cuts it, and returns the
// partial line left (at most MaxLine bytes, in buf's storage). A piece
// longer than that would be refused by the launcher's framing, and its
// lines lost: a pump cut by its deadline with most of a 16 MiB line read
// took the line's last byte and its newline from the pipe and emitted
// the whole 16 MiB + 2 as one piece, which never reached the launcher.
func emitBounded(buf []byte, emit func([]byte)) []byte {
	for len(buf) > 0 {
		w := buf[:min(len(buf), MaxLine+1)]
		switch i := textx.LastLineEnd(w); {
		case i >= 0:
			emit(w[:i+1])
			buf = buf[i+1:]
		case len(w) == MaxLine+1:
			emit(w)
			buf = buf[len(w):]
		default:
			return buf
		}
	}
	return buf
}

// closeFile closes the files that are not nil.
func closeFile(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

// dedupEnv keeps the last of each variable set more than once, as
// exec.Cmd does (syscall.ForkExec, which the supervisor uses, would pass
// them all, and getenv finds the first).
func dedupEnv(env []string) []string {
	last := make(map[string]int, len(env))
	for i, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		last[k] = i
	}
	if len(last) == len(env) {
		return env
	}
	out := make([]string, 0, len(last))
	for i, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if last[k] == i {
			out = append(out, kv)
		}
	}
	return out
}

func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}
