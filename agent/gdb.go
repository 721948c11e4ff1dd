package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/agent/proc"
	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/internal/osproc"
)

// gdb for hang diagnosis runs with the privilege of the rank it looks
// at, never more: a rank chooses the file names of its frames (Python's
// compile(src, "/any/file", "exec"), a native binary's debug info), and
// gdb prints each frame's source line by opening that file. Run as root,
// that printed root-only files (the agent's host key, /etc/shadow) into
// the user's stacks.txt. So gdb takes the rank's uid, gid and
// supplementary groups, with no capability, except CAP_SYS_PTRACE alone
// (ambient) where Yama's ptrace_scope is 1 and a same-uid tracer that is
// not the rank's ancestor needs it; where ptrace_scope is 2 or 3 nothing
// is attached. Each gdb is also bounded: in time (gdbTimeout, and the
// dump's own end), in memory (gdbMemory of address space, no core file:
// set by /bin/sh's ulimit in gdb's own process before it becomes gdb,
// since lowering one's own limits needs no privilege, where prlimit on
// another user's process needs CAP_SYS_RESOURCE, which containers often
// drop), in output
// (what the agent keeps of it), and in number (maxAttachPerRank,
// maxAttachPerDump, gdbParallel at a time, fewer where memory is short).
//
// gdbMemory: gdb attached to a CPU PyTorch rank (Debian's torch 1.13,
// 497 MiB of mapped libraries) peaked at 553 MiB of address space and
// 393 MiB resident, and failed under 512 MiB; a CUDA rank maps several
// GiB of libraries, of which gdb reads the symbol tables, not the GPU
// code. 4 GiB leaves room for that, and bounds what a frame named after
// /dev/zero costs (py-bt reads a frame's source file whole).
const (
	gdbTimeout              = 20 * time.Second
	gdbMemory        uint64 = 4 << 30
	gdbParallel             = 4
	maxAttachPerRank        = 8
	maxAttachPerDump        = 64
)

// gdbOutput bounds what the agent keeps of one gdb's output.
const gdbOutput = wire.MaxStacks / 4

// tracer runs a dump's gdbs: where gdb is, as whom, with which ambient
// capabilities, or why nothing may be attached.
type tracer struct {
	gdb      string              // "" when gdb is not installed
	parallel int                 // gdbs at a time
	cred     *syscall.Credential // the ranks' credential; nil: the agent's own user
	caps     []uintptr           // gdb's ambient capabilities
	refuse   string              // why nothing is attached; "" when gdb may attach
	log      *zap.Logger
}

// newTracer is the tracer for ranks running with cred (nil: as the agent
// itself) on this kernel.
func newTracer(gdb string, cred *syscall.Credential, log *zap.Logger) tracer {
	t := tracerFor(gdb, cred, ptraceScope(), log)
	t.parallel = parallelGDBs(memAvailable())
	return t
}

// parallelGDBs is how many gdbs a dump runs at once, given avail bytes of
// memory available (0: unknown): gdbParallel, fewer where their memory
// bounds together would pass half of avail, and at least one. A rank
// that makes its gdb read without end (a frame named after /dev/zero)
// then costs the node at most half of what was free.
func parallelGDBs(avail uint64) int {
	if avail == 0 {
		return gdbParallel
	}
	return max(1, min(gdbParallel, int(avail/2/gdbMemory)))
}

// gdbBound is how long the gdb of a dump's i-th target may run: a
// rank's leader (i < leaders: they come first) its share of what is left
// of the dump's time, left, over the rounds of leaders still to run at
// parallel a time, and never less than gdbTimeout; any other process
// gdbTimeout. A gdb reading a PyTorch rank's symbols is busy on a CPU for
// seconds (4.9 s for Debian's CPU torch on a machine whose system calls
// take 1 us, alone); on a busy node four of them took past 20 s, and a
// rank's leader is the stack a hang's report is about. left <= 0: the
// dump has no deadline.
func gdbBound(i, leaders, parallel int, left time.Duration) time.Duration {
	if i >= leaders || left <= 0 {
		return gdbTimeout
	}
	rounds := (leaders - i + parallel - 1) / max(1, parallel)
	return max(gdbTimeout, left/time.Duration(rounds))
}

// tracerFor decides from Yama's ptrace_scope (-1: Yama is absent).
// Scope 0 (or none): a same-uid tracer may attach to any dumpable
// process. 1: only to its descendants, unless it has CAP_SYS_PTRACE,
// which gdb then gets as its one ambient capability. 2: only with
// CAP_SYS_PTRACE, which a rank's user must not get. 3: never. An agent
// whose ranks run as itself changes nothing: its gdb is itself.
func tracerFor(gdb string, cred *syscall.Credential, scope int, log *zap.Logger) tracer {
	t := tracer{gdb: gdb, cred: cred, log: log}
	switch {
	case gdb == "":
		t.refuse = "gdb is not installed on this host"
	case scope >= 3:
		t.refuse = "kernel.yama.ptrace_scope is " + strconv.Itoa(scope) + ": no process may attach to another"
	case scope == 2 && cred != nil:
		t.refuse = "kernel.yama.ptrace_scope is 2: only a tracer with CAP_SYS_PTRACE may attach, and the agent gives no more privilege than the rank's own to what it runs for the rank"
	case scope == 1 && cred != nil:
		t.caps = ptraceCaps()
	}
	return t
}

// attach runs gdb on m, a process of group pgid, and returns its text:
// gdb's output (cut to gdbOutput) and a note when it failed, or why it
// was not attached.
func (t tracer) attach(ctx context.Context, rank, pgid int, m proc.Member, bound time.Duration) string {
	if t.refuse != "" {
		return "(not attached: " + t.refuse + ")\n"
	}
	// Just before: the pid is still the process listed, and (for another
	// user's ranks) runs with the rank's ids and may be dumped. A process
	// that ran a set-user-ID program keeps the rank's process group but
	// not its ids; the kernel would refuse gdb without a capability, and
	// with CAP_SYS_PTRACE (ptrace_scope 1) must not be asked.
	if !m.Current(pgid) {
		return "(not attached: the process ended)\n"
	}
	if why := t.sameIDs(m.Pid); why != "" {
		return "(not attached: " + why + ")\n"
	}
	actx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	args := []string{"-batch", "-nx", "-p", strconv.Itoa(m.Pid), "-ex", "set pagination off", "-ex", "thread apply all bt"}
	if isPython(m.Pid) {
		// Python's own frames, where gdb has the interpreter's extension
		// (Debian: python3-dbg, which also brings the interpreter's debug
		// symbols); elsewhere gdb says the command is undefined, and only
		// faulthandler (when the job is stopped) shows them.
		args = append(args, "-ex", "thread apply all py-bt")
	}
	out := &headWriter{max: gdbOutput}
	cmd := t.command(actx, out, args...)
	begin := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Sprintf("(gdb: %v)\n", err)
	}
	gdbPid := cmd.Process.Pid
	err := cmd.Wait()
	took := time.Since(begin).Round(time.Millisecond)
	peak := maxRSS(cmd.ProcessState)
	t.log.Debug("gdb", zap.Int("rank", rank), zap.Int("pid", m.Pid), zap.Int("gdb", gdbPid), zap.Duration("took", took),
		zap.Uint64("peak_rss", peak), zap.Int64("output_left_out", out.dropped), zap.Error(err))
	// Just after: a process that ended, or changed ids, while gdb ran may
	// not be the one gdb was asked for; its output is not the rank's to
	// read.
	var b strings.Builder
	switch why := t.sameIDs(m.Pid); {
	case !m.Current(pgid):
		b.WriteString("(gdb's output left out: the process ended while gdb ran)\n")
	case why != "":
		fmt.Fprintf(&b, "(gdb's output left out: while gdb ran, %s)\n", why)
	default:
		b.Write(out.buf)
		if len(out.buf) > 0 && out.buf[len(out.buf)-1] != '\n' {
			b.WriteByte('\n')
		}
		if out.dropped > 0 {
			fmt.Fprintf(&b, "(gdb printed %d more bytes, left out)\n", out.dropped)
		}
	}
	mem := fmt.Sprintf("peak %d MiB of its %d MiB bound", peak>>20, gdbMemory>>20)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		fmt.Fprintf(&b, "(gdb stopped after %v: the dump's time is up; %s)\n", took, mem)
	case actx.Err() != nil:
		fmt.Fprintf(&b, "(gdb stopped at its time bound, %v; %s)\n", bound.Round(time.Second), mem)
	default:
		fmt.Fprintf(&b, "(gdb: %v after %v; %s)\n", err, took, mem)
	}
	return b.String()
}

// boundedExec lowers the shell's own limits, then becomes the program
// in its arguments: $1 is the address space in KiB, the rest the
// program and its arguments, which are never part of the script.
const boundedExec = `ulimit -c 0 && ulimit -v "$1" && shift && exec "$@"`

// command is gdb (or, in tests, another program) as the tracer runs it:
// its own process group, killed whole when ctx ends; the rank's
// credential and the tracer's capabilities; no more than gdbMemory of
// address space and no core file; a fixed environment; output to out.
func (t tracer) command(ctx context.Context, out *headWriter, args ...string) *exec.Cmd {
	argv := append([]string{"-c", boundedExec, "gangway-gdb", strconv.FormatUint(gdbMemory>>10, 10), t.gdb}, args...)
	cmd := exec.CommandContext(ctx, "/bin/sh", argv...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "MALLOC_ARENA_MAX=2"}
	cmd.Dir = "/" // the agent's may be closed to the rank's user
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = t.sysProcAttr()
	cmd.Cancel = func() error { return osproc.KillGroup(cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	return cmd
}

// sameIDs says why pid may not be attached with the ranks' credential:
// ids other than the rank's (all of real, effective, saved and
// filesystem), or not dumpable (its /proc directory then belongs to
// root). An agent whose ranks run as itself checks nothing.
func (t tracer) sameIDs(pid int) string {
	if t.cred == nil {
		return ""
	}
	return idsMismatch(pid, t.cred)
}

// headWriter keeps the first max bytes written to it and counts the
// rest.
type headWriter struct {
	buf     []byte
	max     int
	dropped int64
}

func (w *headWriter) Write(p []byte) (int, error) {
	n := min(len(p), w.max-len(w.buf))
	w.buf = append(w.buf, p[:n]...)
	w.dropped += int64(len(p) - n)
	return len(p), nil
}

// ptraceScopeFile is Yama's setting; without Yama it is missing.
const ptraceScopeFile = "/proc/sys/kernel/yama/ptrace_scope"

// ptraceScope reads Yama's ptrace_scope: -1 when Yama is absent; 3
// (the strictest) when the file is there but unreadable.
func ptraceScope() int {
	b, err := os.ReadFile(ptraceScopeFile)
	if errors.Is(err, os.ErrNotExist) {
		return -1
	}
	n, perr := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || perr != nil {
		return 3
	}
	return n
}
