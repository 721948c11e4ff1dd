package agent

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"gangway/agent/proc"
	"gangway/agent/wire"
)

// Stack collection for hang diagnosis (wire.Dump). Every process of every
// local rank (its process group) is attached with gdb, where gdb is
// installed, for native stacks of every thread, and for a Python
// process its Python stacks too (py-bt) where gdb has the interpreter's
// extension. With Abort (the job is
// stopped next) Python processes then get SIGABRT, which makes Python's
// faulthandler (PYTHONFAULTHANDLER=1, set by the launcher) print every
// thread's Python stack on stderr, and Go programs get SIGQUIT, which
// prints every goroutine; the rank's stderr is captured for a few seconds
// and added to its stacks.

// gdbTimeout bounds one gdb attach; captureFor bounds the wait for the
// aborted ranks to exit, having printed their stacks (a SIGABRT may also
// write a core file of the whole process first).
var (
	gdbTimeout = 20 * time.Second
	captureFor = 20 * time.Second
	settle     = time.Second
)

// capture collects a rank's stderr while a dump waits for it, and
// remembers the ranks a dump ended (their exit is not a failure).
type capture struct {
	mu     sync.Mutex
	buf    map[int]*bytes.Buffer // by rank; nil when not capturing
	byDump map[int]bool
}

// aborted marks rank as ended by a dump's signal.
func (s *session) aborted(rank int) {
	s.capture.mu.Lock()
	defer s.capture.mu.Unlock()
	if s.capture.byDump == nil {
		s.capture.byDump = map[int]bool{}
	}
	s.capture.byDump[rank] = true
}

// endedByDump reports whether a dump's signal ended rank.
func (s *session) endedByDump(rank int) bool {
	s.capture.mu.Lock()
	defer s.capture.mu.Unlock()
	return s.capture.byDump[rank]
}

func (c *capture) start(ranks []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf = map[int]*bytes.Buffer{}
	for _, r := range ranks {
		c.buf[r] = &bytes.Buffer{}
	}
}

// add keeps stderr data of a captured rank, up to wire.MaxStacks.
func (c *capture) add(rank int, s proc.Stream, data []byte) {
	if s != proc.Stderr {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if b := c.buf[rank]; b != nil && b.Len() < wire.MaxStacks {
		b.Write(data[:min(len(data), wire.MaxStacks-b.Len())])
	}
}

func (c *capture) stop() map[int]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[int]string{}
	for r, b := range c.buf {
		out[r] = b.String()
	}
	c.buf = nil
	return out
}

// dump collects the stacks of every local rank.
func (s *session) dump(ctx context.Context, d wire.Dump) wire.Dumped {
	s.mu.Lock()
	procs := map[int]*proc.Proc{}
	for r, p := range s.procs {
		procs[r] = p
	}
	s.mu.Unlock()
	out := wire.Dumped{Stacks: map[int]string{}}
	gdb, _ := exec.LookPath("gdb")
	if gdb != "" {
		out.Tools = append(out.Tools, "gdb")
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	members := map[int][]int{}
	for r, p := range procs {
		members[r] = proc.GroupMembers(p.Pid())
	}
	pyBT := false
	for r := range procs {
		wg.Go(func() {
			text := nativeStacks(ctx, gdb, members[r])
			mu.Lock()
			out.Stacks[r] = text
			pyBT = pyBT || strings.Contains(text, pyBTHeader)
			mu.Unlock()
		})
	}
	wg.Wait()
	if pyBT {
		out.Tools = append(out.Tools, "gdb py-bt")
	}
	if !d.Abort {
		return out
	}
	ranks := make([]int, 0, len(procs))
	for r := range procs {
		ranks = append(ranks, r)
	}
	// Let the processes gdb stopped run on a moment before they are
	// signalled: right after the detach, Python may be in the middle of a
	// collection, and faulthandler then has no frame to show.
	if gdb != "" {
		time.Sleep(settle)
	}
	s.capture.start(ranks)
	var tools []string
	var signalled []*proc.Proc
	for r, p := range procs {
		sigs := map[int]syscall.Signal{}
		for _, pid := range members[r] {
			switch {
			case isPython(pid):
				sigs[pid] = syscall.SIGABRT
				tools = append(tools, "faulthandler")
			case isGo(pid):
				sigs[pid] = syscall.SIGQUIT
				tools = append(tools, "SIGQUIT")
			}
		}
		if len(sigs) == 0 {
			continue
		}
		s.aborted(r) // before the signal: its Exit says "stopped"
		signalled = append(signalled, p)
		for pid, sig := range sigs {
			_ = syscall.Kill(pid, sig)
		}
	}
	// Wait for the signalled ranks to exit, having printed their stacks.
	deadline := time.NewTimer(captureFor)
	defer deadline.Stop()
wait:
	for _, p := range signalled {
		select {
		case <-p.Done():
		case <-deadline.C:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	for r, text := range s.capture.stop() {
		if text != "" {
			out.Stacks[r] += "\n== stderr after the dump signal ==\n" + text
		}
	}
	for _, t := range tools {
		if !slices.Contains(out.Tools, t) {
			out.Tools = append(out.Tools, t)
		}
	}
	return out
}

// pyBTHeader starts each thread's Python stack in gdb's py-bt output.
const pyBTHeader = "Traceback (most recent call first):"

// nativeStacks runs gdb on each process, one after the other, and joins
// their outputs under headers; without gdb it lists the processes.
func nativeStacks(ctx context.Context, gdb string, pids []int) string {
	var b strings.Builder
	for _, pid := range pids {
		fmt.Fprintf(&b, "== pid %d (%s) ==\n", pid, comm(pid))
		if gdb == "" {
			b.WriteString("(gdb is not installed on this host)\n")
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, gdbTimeout)
		args := []string{"-batch", "-nx", "-p", strconv.Itoa(pid), "-ex", "set pagination off", "-ex", "thread apply all bt"}
		if isPython(pid) {
			// Python's own frames, where gdb has the interpreter's
			// extension (Debian: python3-dbg, which also brings the
			// interpreter's debug symbols); elsewhere gdb says the
			// command is undefined, and only faulthandler (when the job
			// is stopped) shows them.
			args = append(args, "-ex", "thread apply all py-bt")
		}
		cmd := exec.CommandContext(cctx, gdb, args...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
		text, err := cmd.CombinedOutput()
		cancel()
		if len(text) > wire.MaxStacks/4 {
			text = text[:wire.MaxStacks/4]
		}
		b.Write(text)
		if err != nil {
			fmt.Fprintf(&b, "(gdb: %v)\n", err)
		}
	}
	s := b.String()
	if len(s) > wire.MaxStacks {
		s = s[:wire.MaxStacks]
	}
	return s
}

func comm(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(b))
}

// isPython reports whether pid runs a Python interpreter.
func isPython(pid int) bool {
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	return err == nil && strings.HasPrefix(filepath.Base(exe), "python")
}

// isGo reports whether pid runs a Go program other than this agent (its
// own supervisors stay out of it).
func isGo(pid int) bool {
	exe := "/proc/" + strconv.Itoa(pid) + "/exe"
	if self, err := os.Executable(); err == nil {
		if target, err := os.Readlink(exe); err == nil && target == self {
			return false
		}
	}
	_, err := buildinfo.ReadFile(exe)
	return err == nil
}
