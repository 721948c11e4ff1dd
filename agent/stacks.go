package agent

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/json"
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

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/agent/proc"
	"github.com/gangway-hpc/gangway/agent/wire"
)

// Stack collection for hang diagnosis (wire.Dump). The processes of
// every local rank (its process group, listed once from /proc with each
// process's start time) are attached with gdb, where gdb is installed,
// for native stacks of every thread, and for a Python process its Python
// stacks too (py-bt) where gdb has the interpreter's extension. gdb runs
// as the rank's user, bounded in time, memory and number (gdb.go). With
// Abort (the job is stopped next) Python processes then get SIGABRT,
// which makes Python's faulthandler (PYTHONFAULTHANDLER=1, set by the
// launcher) print every thread's Python stack on stderr, and Go programs
// get SIGQUIT, which prints every goroutine; the rank's stderr is
// captured for a few seconds and added to its stacks. The whole dump
// answers within the launcher's wait.

// captureFor bounds the wait for the aborted ranks to exit, having
// printed their stacks (a SIGABRT may also write a core file of the whole
// process first). gdb's own bounds are in gdb.go.
const (
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

// dumpWithin is how long a launcher that does not say (Dump.Within)
// waits for the stacks; answerMargin is what the answer is given to
// reach it.
const (
	dumpWithin   = 60 * time.Second
	answerMargin = 3 * time.Second
)

// dumpBudget is how long a dump may take before it answers: within the
// launcher's wait, less the answer's margin.
func dumpBudget(within time.Duration) time.Duration {
	if within <= 0 {
		within = dumpWithin
	}
	return max(within-answerMargin, within/2)
}

// dump collects the stacks of every local rank. It answers when ctx
// ends (the launcher stopped waiting, or stopped the job), with what it
// has: the gdbs still running are killed.
func (s *session) dump(ctx context.Context, d wire.Dump) wire.Dumped {
	procs := s.liveProcs()
	pgids := map[int]int{}
	var all []int
	for r, p := range procs {
		pgids[r] = p.Pid()
		all = append(all, pgids[r])
	}
	groups := proc.Groups(all)
	members := map[int][]proc.Member{}
	for r, g := range pgids {
		members[r] = groups[g]
	}
	out := wire.Dumped{Stacks: map[int]string{}}
	gdb, _ := exec.LookPath("gdb")
	t := newTracer(gdb, s.login.Account.Credential(), s.log)
	if t.refuse == "" {
		out.Tools = append(out.Tools, "gdb")
	}
	// With Abort, the signals and their stacks on stderr come after gdb:
	// gdb gets what is left once they have had their time.
	gctx := ctx
	if dl, ok := ctx.Deadline(); ok && d.Abort {
		var cancel context.CancelFunc
		gctx, cancel = context.WithDeadline(ctx, dl.Add(-min(settle+captureFor, time.Until(dl)/2)))
		defer cancel()
	}
	begin := time.Now()
	// The ranks are ended after an Abort dump: stopped for it, they are
	// one snapshot, and what they burn spinning in a hung collective
	// (MPI's and NCCL's progress loops, dataloader workers) is not taken
	// from the gdbs. On two CPUs with 16 spinning MPICH ranks a gdb took
	// 4.5 s instead of 0.44, and half of them ran out of the dump's
	// time; lowering the ranks' priority (nice 19) changed nothing. gdb
	// attaches to a stopped process and leaves it stopped; the ranks run
	// on before the aborts.
	freeze := d.Abort && t.refuse == ""
	if freeze {
		signalAll(procs, syscall.SIGSTOP)
	}
	out.Stacks = t.stacks(gctx, pgids, members)
	if freeze {
		signalAll(procs, syscall.SIGCONT)
	}
	s.log.Debug("stacks collected", zap.Int("ranks", len(procs)), zap.Int("parallel", t.parallel), zap.Duration("took", time.Since(begin)))
	for _, text := range out.Stacks {
		if strings.Contains(text, pyBTHeader) {
			out.Tools = append(out.Tools, "gdb py-bt")
			break
		}
	}
	if d.Abort && ctx.Err() == nil {
		// Let the processes gdb stopped run on a moment before they are
		// signalled: right after the detach, Python may be in the middle
		// of a collection, and faulthandler then has no frame to show.
		if t.refuse == "" {
			select {
			case <-time.After(settle):
			case <-ctx.Done():
			}
		}
		s.abortForStacks(ctx, procs, pgids, members, &out)
	}
	fitStacks(out.Stacks)
	return out
}

// signalAll sends sig to every rank's process group as Proc.Signal does
// (through a supervisor to its program; nothing once the rank's leader is
// reaped, so never to a reused group).
func signalAll(procs map[int]*proc.Proc, sig syscall.Signal) {
	for _, p := range procs {
		_ = p.Signal(sig) // a rank that has ended has nothing to stop
	}
}

// liveProcs are the local ranks whose programs have not ended.
func (s *session) liveProcs() map[int]*proc.Proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	procs := map[int]*proc.Proc{}
	for r, p := range s.procs {
		select {
		case <-p.Done():
		default:
			procs[r] = p
		}
	}
	return procs
}

// abortForStacks has the ranks' Python and Go processes print their own
// stacks on stderr (SIGABRT for faulthandler, SIGQUIT for Go), captures
// that stderr until the signalled ranks exit (or captureFor, or ctx
// ends), and adds it to out's stacks and the tools to out's.
func (s *session) abortForStacks(ctx context.Context, procs map[int]*proc.Proc, pgids map[int]int, members map[int][]proc.Member, out *wire.Dumped) {
	ranks := make([]int, 0, len(procs))
	for r := range procs {
		ranks = append(ranks, r)
	}
	s.capture.start(ranks)
	signalled, tools := s.signalForStacks(procs, pgids, members)
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
}

// signalForStacks sends SIGABRT to the Python processes and SIGQUIT to
// the Go programs of every rank's group (at most maxAttachPerRank each,
// by pidfd, checked against the listing), marking each rank it signals
// as ended by the dump first. It returns those ranks and the tools used.
func (s *session) signalForStacks(procs map[int]*proc.Proc, pgids map[int]int, members map[int][]proc.Member) (signalled []*proc.Proc, tools []string) {
	for r, p := range procs {
		sigs := map[proc.Member]syscall.Signal{}
		for _, m := range capped(members[r]) {
			switch {
			case isPython(m.Pid):
				sigs[m] = syscall.SIGABRT
				tools = append(tools, "faulthandler")
			case isGo(m.Pid):
				sigs[m] = syscall.SIGQUIT
				tools = append(tools, "SIGQUIT")
			}
		}
		if len(sigs) == 0 {
			continue
		}
		s.aborted(r) // before the signal: its Exit says "stopped"
		signalled = append(signalled, p)
		for m, sig := range sigs {
			// By pidfd, checked against the listing: never a later
			// process given the same pid.
			_ = m.Signal(pgids[r], sig)
		}
	}
	return signalled, tools
}

// pyBTHeader starts each thread's Python stack in gdb's py-bt output.
const pyBTHeader = "Traceback (most recent call first):"

// capped is the part of a group a dump looks at: the leader and the
// next processes by pid, up to maxAttachPerRank.
func capped(ms []proc.Member) []proc.Member {
	return ms[:min(len(ms), maxAttachPerRank)]
}

// stacks runs gdb on the processes of every rank's group (pgids by
// rank, members by rank), t.parallel at a time, the ranks' leaders
// first, at most maxAttachPerRank per rank and maxAttachPerDump in all;
// each rank's text has a header per process and says what was left out.
// When ctx ends, the gdbs running are killed and the rest not started.
func (t tracer) stacks(ctx context.Context, pgids map[int]int, members map[int][]proc.Member) map[int]string {
	type target struct {
		rank int
		m    proc.Member
		comm string
	}
	ranks := make([]int, 0, len(pgids))
	for r := range pgids {
		ranks = append(ranks, r)
	}
	slices.Sort(ranks)
	var targets []target
	for i := 0; i < maxAttachPerRank; i++ {
		for _, r := range ranks {
			if i < len(members[r]) && len(targets) < maxAttachPerDump {
				m := members[r][i]
				targets = append(targets, target{r, m, comm(m.Pid)})
			}
		}
	}
	texts := make([]string, len(targets))
	next := make(chan int)
	var wg sync.WaitGroup
	leaders := 0 // the first targets: each rank's leader
	for _, r := range ranks {
		if len(members[r]) > 0 {
			leaders++
		}
	}
	parallel := max(1, min(t.parallel, len(targets)))
	for range parallel {
		wg.Go(func() {
			for i := range next {
				tg := targets[i]
				var left time.Duration
				if dl, ok := ctx.Deadline(); ok {
					left = max(time.Until(dl), time.Millisecond)
				}
				texts[i] = t.attach(ctx, tg.rank, pgids[tg.rank], tg.m, gdbBound(i, leaders, parallel, left))
			}
		})
	}
feed:
	for i := range targets {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()

	byRank := map[int]*strings.Builder{}
	shown := map[int]int{}
	for _, r := range ranks {
		byRank[r] = &strings.Builder{}
		if len(members[r]) == 0 {
			byRank[r].WriteString("(no process left in the rank's process group)\n")
		}
	}
	for i, tg := range targets {
		b := byRank[tg.rank]
		fmt.Fprintf(b, "== pid %d (%s) ==\n", tg.m.Pid, tg.comm)
		if texts[i] == "" {
			b.WriteString("(not attached: the dump's time is up)\n")
		}
		b.WriteString(texts[i])
		shown[tg.rank]++
	}
	out := map[int]string{}
	for _, r := range ranks {
		b := byRank[r]
		if left := len(members[r]) - shown[r]; left > 0 {
			fmt.Fprintf(b, "== %d more processes of the rank's group not attached (at most %d per rank, %d per dump) ==\n",
				left, maxAttachPerRank, maxAttachPerDump)
		}
		text := b.String()
		if len(text) > wire.MaxStacks {
			text = text[:wire.MaxStacks]
		}
		out[r] = text
	}
	return out
}

// fitStacks cuts the ranks' texts so that the Dumped answer fits one
// frame (wire.MaxJobControl) once JSON-encoded, where escapes may make
// text up to six times longer: every rank gets an equal share.
func fitStacks(stacks map[int]string) {
	if len(stacks) == 0 {
		return
	}
	share := (wire.MaxJobControl - 64<<10) / len(stacks)
	for r, text := range stacks {
		cut := false
		for n := encodedLen(text); n > share; n = encodedLen(text) {
			text, cut = text[:len(text)*share/n*9/10], true
		}
		if cut {
			text += "\n(cut to fit the agent's answer)\n"
		}
		stacks[r] = text
	}
}

func encodedLen(s string) int {
	b, _ := json.Marshal(s)
	return len(b)
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
