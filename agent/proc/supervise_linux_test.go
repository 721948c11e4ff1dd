//go:build linux

package proc

import (
	"encoding/json"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/proc/proctest"
)

func supervisorExe(t *testing.T) string {
	t.Helper()
	sup := SupervisorExecutable()
	if sup == "" {
		t.Fatal("no supervisor executable: TestMain must call Supervise")
	}
	return sup
}

// daemonPid reads the "daemon PID" line of proctest's daemon mode.
func daemonPid(t *testing.T, c *capture) int {
	t.Helper()
	waitFor(t, c, Stdout, "daemon ")
	return field(t, strings.Split(c.String(Stdout), "\n"), "daemon")
}

// TestSupervisorKillsDaemonAtExit: a rank that daemonises a grandchild
// (a child calls setsid, starts it and exits) and then exits 0. Started
// directly, the daemon outlives the rank (outside its group, and
// reparented to init): the gap the supervisor closes. Under a supervisor
// the daemon reparents to the supervisor and is dead when the rank's
// result is in, and the result is still exit code 0.
func TestSupervisorKillsDaemonAtExit(t *testing.T) {
	t.Run("direct", func(t *testing.T) {
		c := newCapture()
		p := start(t, t.Context(), fake(t, "daemon:1"), c)
		r := p.Wait()
		d := daemonPid(t, c)
		t.Cleanup(func() { syscall.Kill(d, syscall.SIGKILL) })
		if r.Code != 0 {
			t.Fatalf("result %+v", r)
		}
		if proctest.Gone(d) {
			t.Fatalf("daemon %d died with a rank started directly: this test no longer shows the gap", d)
		}
	})
	t.Run("supervised", func(t *testing.T) {
		c := newCapture()
		spec := fake(t, "daemon:1")
		spec.Supervisor = supervisorExe(t)
		p := start(t, t.Context(), spec, c)
		r := p.Wait()
		d := daemonPid(t, c)
		if r.Code != 0 || r.Signal != 0 || r.Err != nil {
			t.Fatalf("result %+v, want exit code 0", r)
		}
		if !proctest.Gone(d) {
			t.Errorf("daemon %d (state %c) outlived its supervised rank", d, proctest.State(d))
			syscall.Kill(d, syscall.SIGKILL)
		}
		if !proctest.Gone(p.pid) || !proctest.Gone(r.Pid) {
			t.Errorf("supervisor %d (state %c) or program %d (state %c) not reaped", p.pid, proctest.State(p.pid), r.Pid, proctest.State(r.Pid))
		}
	})
}

// TestSupervisorReRaises: the program's death signal reaches the agent as
// the supervisor's own, also for signals after which a Go program would
// print a stack trace and exit 2 (SIGQUIT, SIGABRT) or dump core.
func TestSupervisorReRaises(t *testing.T) {
	sup := supervisorExe(t)
	for _, sig := range []syscall.Signal{syscall.SIGSEGV, syscall.SIGQUIT, syscall.SIGABRT, syscall.SIGUSR1, syscall.SIGTERM} {
		t.Run(SignalName(sig), func(t *testing.T) {
			dir := t.TempDir()
			c := newCapture()
			p := start(t, t.Context(), Spec{
				Argv: []string{"sh", "-c", "ulimit -c 0; kill -" + strconv.Itoa(int(sig)) + " $$"},
				Env:  []string{"PATH=/usr/bin:/bin"}, Dir: dir, Supervisor: sup,
			}, c)
			r := p.Wait()
			if r.Signal != sig || r.Code != 128+int(sig) {
				t.Fatalf("result %+v, want killed by %s (%d); stderr %q", r, SignalName(sig), 128+int(sig), c.String(Stderr))
			}
			if s := c.String(Stderr); s != "" {
				t.Errorf("stderr %q, want nothing (no Go stack trace from the supervisor)", s)
			}
		})
	}
}

// TestSupervisorForwardsSignals: signals sent to the supervisor's pid (as
// a user with Started.Pids would) and signals sent through Proc.Signal
// reach the program; SIGSTOP and SIGCONT through Proc.Signal stop and
// continue the program, not the supervisor; SIGKILL kills the program and
// reports it.
func TestSupervisorForwardsSignals(t *testing.T) {
	c := newCapture()
	spec := fake(t, "trapterm")
	spec.Supervisor = supervisorExe(t)
	p := start(t, t.Context(), spec, c)
	waitFor(t, c, Stdout, "ready ")
	prog := field(t, strings.Split(c.String(Stdout), "\n"), "ready")
	if p.Pid() != prog || p.pid == prog {
		t.Fatalf("Pid %d, supervisor %d, program %d: want the program's pid reported", p.Pid(), p.pid, prog)
	}
	term := "term " + strconv.Itoa(prog) + "\n"

	if err := syscall.Kill(p.pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, c, Stdout, term)

	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitState(t, prog, func(s byte) bool { return s == 'T' }, "stopped")
	if s := proctest.State(p.pid); s == 'T' {
		t.Fatalf("the supervisor stopped (state %c) instead of the program", s)
	}
	if err := p.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitState(t, prog, func(s byte) bool { return s != 'T' }, "running again")

	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, c, Stdout, term+term)
	if n := strings.Count(c.String(Stdout), term); n != 2 {
		t.Fatalf("program got %d SIGTERMs, want 2 (one each way, no duplicates):\n%s", n, c.String(Stdout))
	}

	p.Kill()
	r := p.Wait()
	if r.Signal != syscall.SIGKILL || r.Code != 137 || !r.Stopped {
		t.Fatalf("result %+v, want killed by SIGKILL", r)
	}
	if left := proctest.WaitGone(10*time.Second, prog, p.pid); len(left) > 0 {
		t.Fatalf("still running after SIGKILL: %v", left)
	}
}

func waitState(t *testing.T, pid int, ok func(byte) bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok(proctest.State(pid)) {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d not %s within 10s (state %c)", pid, what, proctest.State(pid))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSupervisorReapsOrphans: orphans of the program (4 background
// waiters of shells that exited) reparent to the supervisor, a
// subreaper, and are reaped by it: none is left a zombie. The orphans
// live until the test has seen all four (a file it makes then), not for
// a fixed time a loaded machine could spend before the test looks.
func TestSupervisorReapsOrphans(t *testing.T) {
	c := newCapture()
	release := filepath.Join(t.TempDir(), "release")
	p := start(t, t.Context(), Spec{
		Argv:       []string{"sh", "-c", `for i in 1 2 3 4; do sh -c "n=0; while [ ! -e $0 ] && [ \$n -lt 1200 ]; do sleep 0.05; n=\$((n+1)); done &" "$0"; done; echo ready $$; exec sleep 3600`, release},
		Env:        []string{"PATH=/usr/bin:/bin"},
		Supervisor: supervisorExe(t),
	}, c)
	waitFor(t, c, Stdout, "ready ")
	prog := field(t, strings.Split(c.String(Stdout), "\n"), "ready")
	sup := p.pid
	children := func() (orphans, zombies []int) {
		for _, q := range procs() {
			if q.PPid != sup || q.Pid == prog {
				continue
			}
			if q.State == 'Z' {
				zombies = append(zombies, q.Pid)
			} else {
				orphans = append(orphans, q.Pid)
			}
		}
		return orphans, zombies
	}
	var seen []int
	deadline := time.Now().Add(20 * time.Second)
	for {
		o, z := children()
		for _, pid := range o {
			if !slices.Contains(seen, pid) {
				seen = append(seen, pid)
			}
		}
		if len(seen) == 4 {
			if _, err := os.Stat(release); err != nil {
				if err := os.WriteFile(release, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		if len(o) == 0 && len(z) == 0 && len(seen) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s: orphans %v, zombies %v under supervisor %d (seen %v)", o, z, sup, seen)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(seen) != 4 {
		t.Errorf("saw %d orphans reparented to the supervisor, want 4: %v", len(seen), seen)
	}
	p.Stop(5 * time.Second) // SIGTERM ends it; a loaded machine may take over 1 s to deliver it
	if r := p.Wait(); r.Signal != syscall.SIGTERM {
		t.Fatalf("result %+v, want SIGTERM", r)
	}
}

// TestSupervisorParentDeath: SIGKILL the agent (a helper process running
// one supervised rank, with a background job in the rank's group and a
// setsid'd daemon outside it): the supervisor kills everything below it
// and exits, so nothing of the rank is left.
func TestSupervisorParentDeath(t *testing.T) {
	self, _ := os.Executable()
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), testHelperEnv+"=agent")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	agentPid := cmd.Process.Pid
	var pids []int
	t.Cleanup(func() {
		syscall.Kill(agentPid, syscall.SIGKILL)
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		cmd.Wait()
	})
	lines := newLineReader(out.(*os.File)).untilAll(t, 30*time.Second, "supervisor", "ready", "bg", "daemon")
	pids = []int{field(t, lines, "supervisor"), field(t, lines, "ready"), field(t, lines, "bg"), field(t, lines, "daemon")}
	for i, pid := range pids {
		if proctest.Gone(pid) {
			t.Fatalf("%s %d not running before the agent's death", []string{"supervisor", "program", "background job", "daemon"}[i], pid)
		}
	}
	if ppid(pids[3]) != pids[0] {
		t.Errorf("daemon %d has parent %d, want the supervisor %d", pids[3], ppid(pids[3]), pids[0])
	}
	if err := syscall.Kill(agentPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if left := proctest.WaitGone(20*time.Second, pids...); len(left) > 0 {
		t.Fatalf("alive 20s after the agent's SIGKILL: %v (supervisor, program, background job, daemon: %v)", left, pids)
	}
}

// TestSupervisorParentAlreadyGone: a supervisor whose parent is not the
// one named on its command line (the agent died before the supervisor
// could watch it) starts nothing and exits 1, its job unread.
func TestSupervisorParentAlreadyGone(t *testing.T) {
	self, _ := os.Executable()
	mark := filepath.Join(t.TempDir(), "started")
	mine, theirs, err := newControl()
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()
	job, _ := json.Marshal(superSpec{Ranks: []superRank{{Path: "/bin/sh", Argv: []string{"sh", "-c", "touch " + mark}, Files: []int{-1, -1, -1}}}})
	if _, err := mine.Write(append(job, '\n')); err != nil {
		t.Fatal(err)
	}
	cmd := &exec.Cmd{Path: self, Args: supervisorArgs(3, 1, nil), ExtraFiles: []*os.File{theirs}}
	err = cmd.Run()
	theirs.Close()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 1 {
		t.Fatalf("supervisor: %v, want exit code 1", err)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Fatal("the program ran although the parent was gone")
	}
}

func TestSupervisorArgs(t *testing.T) {
	args := supervisorArgs(4, 99, nil)
	if args[0] != supervisorArgv0 || args[1] != superviseArg {
		t.Fatalf("argv %q", args)
	}
	c, err := parseSupervisorArgs(args[2:])
	if err != nil || c.ctlFD != 4 || c.parent != 99 || c.cred != nil {
		t.Fatalf("parsed %+v, %v", c, err)
	}
	for _, cred := range []*syscall.Credential{
		{Uid: 1000, Gid: 1000, Groups: []uint32{}},
		{Uid: 4294967295, Gid: 0, Groups: []uint32{27, 100, 1000}},
	} {
		c, err := parseSupervisorArgs(supervisorArgs(4, 99, cred)[2:])
		if err != nil || c.cred == nil || c.cred.Uid != cred.Uid || c.cred.Gid != cred.Gid || !slices.Equal(c.cred.Groups, cred.Groups) {
			t.Errorf("credential %+v parsed as %+v, %v", cred, c.cred, err)
		}
	}
	for _, bad := range [][]string{nil, {"4", "99"}, {"4", "99", "-", "/p"}, {"x", "99", "-"}, {"2", "99", "-"}, {"4", "0", "-"},
		{"4", "99", "1000"}, {"4", "99", "1000:x:"}, {"4", "99", "1:1:2,"}, {"4", "99", "-1:1:"}, {"4", "99", "1:4294967296:"}} {
		if _, err := parseSupervisorArgs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if code := SupervisorMain(nil); code != 2 {
		t.Errorf("SupervisorMain(nil) = %d, want 2", code)
	}
}

// BenchmarkStartTrue is the cost of a rank's supervisor: start, wait and
// reap /bin/true directly and under a supervisor (this test binary, which
// is larger than the agent; build without -race for real numbers).
func BenchmarkStartTrue(b *testing.B) {
	for _, sup := range []string{"", SupervisorExecutable()} {
		name := "direct"
		if sup != "" {
			name = "supervised"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				p, err := Start(b.Context(), Spec{Argv: []string{"/bin/true"}, Supervisor: sup}, func(int, Stream, []byte) {})
				if err != nil {
					b.Fatal(err)
				}
				if r := p.Wait(); r.Code != 0 {
					b.Fatal(r)
				}
			}
		})
	}
}

// TestSupervisorStartError: a program that passes the agent's checks but
// cannot be executed (no #! line, not a binary) fails the same way
// directly (Start's error, code 126) and supervised (the supervisor's
// report: a Result with code 126 and the error).
func TestSupervisorStartError(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "garbage")
	if err := os.WriteFile(bad, []byte("\x00\x01\x02 not a program\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Start(t.Context(), Spec{Rank: 5, Argv: []string{bad}}, newCapture().sink)
	if r := StartResult(5, err); err == nil || r.Code != 126 || !strings.Contains(err.Error(), "exec format error") {
		t.Fatalf("direct: err %v code %d, want 126 and exec format error", err, r.Code)
	}
	p := start(t, t.Context(), Spec{Rank: 5, Argv: []string{bad}, Supervisor: supervisorExe(t)}, newCapture())
	r := p.Wait()
	if r.Code != 126 || r.Err == nil || r.Err.Error() != bad+": cannot start: not a program for this machine and no #! line (exec format error)" {
		t.Fatalf("supervised: result %+v (err %v), want code 126 and the start error", r, r.Err)
	}
}

// TestRanksStartWithDefaultSignals: an agent started with SIGHUP and
// SIGPIPE ignored and SIGUSR2 blocked (nohup, a careless parent) starts
// its ranks as sshd and systemd start a session: every signal at its
// default and none blocked, with a supervisor or without.
func TestRanksStartWithDefaultSignals(t *testing.T) {
	self, _ := os.Executable()
	for _, mode := range []string{"sigclean", "sigclean-supervised"} {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), testHelperEnv+"=sigdirty", testHelperEnv+"_NEXT="+mode)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s", mode, err, out)
		}
		st := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				st[k] = strings.TrimSpace(v)
			}
		}
		for _, k := range []string{"SigBlk", "SigIgn"} {
			if st[k] != "0000000000000000" {
				t.Errorf("%s: rank's %s %q, want none:\n%s", mode, k, st[k], out)
			}
		}
	}
}

// TestSupervisorGroup: one supervisor runs a job's ranks on a host. Every
// program is its child; a program that ends is reported while the others
// run; a start that fails in the agent (not found) or in the supervisor
// (no #! line) fails that rank alone; signals reach the program they were
// sent to; and once the last program has ended, what an earlier one left
// outside its group (a setsid'd daemon) and the supervisor are gone.
func TestSupervisorGroup(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "garbage")
	if err := os.WriteFile(bad, []byte("\x00\x01\x02 not a program\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	caps := map[int]*capture{0: newCapture(), 1: newCapture(), 2: newCapture(), 3: newCapture()}
	sink := func(rank int, s Stream, data []byte) { caps[rank].sink(rank, s, data) }
	sup := supervisorExe(t)
	specs := []Spec{fake(t, "daemon:1"), fake(t, "trapterm"), {Argv: []string{"no-such-program-here"}, Env: []string{"PATH=/nonexistent"}}, {Argv: []string{bad}}}
	for i := range specs {
		specs[i].Rank, specs[i].Supervisor = i, sup
	}
	procs, errs := StartGroup(t.Context(), specs, sink)
	t.Cleanup(func() {
		for _, p := range procs {
			if p != nil {
				p.Kill()
				p.Wait()
			}
		}
	})
	if errs[0] != nil || errs[1] != nil || errs[3] != nil || procs[2] != nil || !errors.Is(errs[2], ErrNotFound) {
		t.Fatalf("errs %v, procs %v: want rank 2 not found and the others started", errs, procs)
	}
	if procs[0].pid != procs[1].pid || procs[1].pid != procs[3].pid {
		t.Fatalf("supervisors %d, %d, %d: want one", procs[0].pid, procs[1].pid, procs[3].pid)
	}
	supPid := procs[0].pid

	r0 := procs[0].Wait()
	if r0.Code != 0 || r0.Err != nil {
		t.Fatalf("rank 0: %+v, want exit code 0", r0)
	}
	daemon := daemonPid(t, caps[0])
	r3 := procs[3].Wait()
	if r3.Code != 126 || r3.Err == nil || !strings.Contains(r3.Err.Error(), "no #! line") {
		t.Fatalf("rank 3: %+v (err %v), want code 126 and the start error", r3, r3.Err)
	}

	waitFor(t, caps[1], Stdout, "ready ")
	prog := field(t, strings.Split(caps[1].String(Stdout), "\n"), "ready")
	if procs[1].Pid() != prog || ppid(prog) != supPid || ppid(r0.Pid) == os.Getpid() {
		t.Fatalf("rank 1's program %d (parent %d), Pid %d, supervisor %d: want the program's pid, a child of the supervisor", prog, ppid(prog), procs[1].Pid(), supPid)
	}
	if err := procs[1].Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, caps[1], Stdout, "term "+strconv.Itoa(prog)+"\n")
	if proctest.Gone(supPid) {
		t.Fatal("the supervisor ended while a program ran")
	}

	procs[1].Kill()
	r1 := procs[1].Wait()
	if r1.Signal != syscall.SIGKILL || !r1.Stopped {
		t.Fatalf("rank 1: %+v, want killed by SIGKILL", r1)
	}
	if left := proctest.WaitGone(10*time.Second, prog, daemon, supPid); len(left) > 0 {
		t.Fatalf("still there after the last program ended: %v (program, rank 0's daemon, supervisor: %d, %d, %d)", left, prog, daemon, supPid)
	}
}

// TestGroupProgramsHoldOnlyTheirFds: eight programs under one supervisor,
// each with its own PMI-style socket, started from an agent that holds a
// stray inherited fd: each program, and a child it starts, holds its own
// stdio and socket as fds 0 to 3 and nothing else, none of another
// program's, the supervisor's or the agent's.
func TestGroupProgramsHoldOnlyTheirFds(t *testing.T) {
	stray, strayW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stray.Close()
	defer strayW.Close()
	// What CloseOnExecInherited guards against: a descriptor this process
	// got without close-on-exec. The agent calls it first thing in main;
	// the stray fd must not reach a program even so.
	if _, _, e := syscall.Syscall(syscall.SYS_FCNTL, stray.Fd(), syscall.F_SETFD, 0); e != 0 {
		t.Fatal(e)
	}
	CloseOnExecInherited()

	const n = 8
	specs := make([]Spec, n)
	var theirs []*os.File
	for i := range specs {
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		mine, their := os.NewFile(uintptr(fds[0]), "mine"), os.NewFile(uintptr(fds[1]), "theirs")
		defer mine.Close()
		theirs = append(theirs, their)
		specs[i] = Spec{Rank: i, Argv: []string{"sh", "-c", "sleep 60 & echo child $!; exec sleep 60"},
			Env: []string{"PATH=/usr/bin:/bin"}, ExtraFiles: []*os.File{their}, Supervisor: supervisorExe(t)}
	}
	caps := make([]*capture, n)
	for i := range caps {
		caps[i] = newCapture()
	}
	procs, errs := StartGroup(t.Context(), specs, func(rank int, s Stream, b []byte) { caps[rank].sink(rank, s, b) })
	for _, f := range theirs {
		f.Close() // as the agent does once the programs hold them
	}
	t.Cleanup(func() {
		for _, p := range procs {
			if p != nil {
				p.Kill()
				p.Wait()
			}
		}
	})
	owner := map[string]int{} // fd target (pipe:[N], socket:[N]) -> rank
	for i, p := range procs {
		if errs[i] != nil {
			t.Fatalf("rank %d: %v", i, errs[i])
		}
		waitFor(t, caps[i], Stdout, "child ")
		child := field(t, strings.Split(caps[i].String(Stdout), "\n"), "child")
		for _, pid := range []int{p.Pid(), child} {
			fds := proctest.WaitFds(pid, 5*time.Second, func(fds map[int]string) bool {
				return slices.Equal(slices.Sorted(maps.Keys(fds)), []int{0, 1, 2, 3})
			})
			var nums []int
			for fd, target := range fds {
				nums = append(nums, fd)
				if fd == 0 && target == "/dev/null" {
					continue
				}
				if r, ok := owner[target]; ok && r != i {
					t.Errorf("rank %d (pid %d) fd %d is %s, which rank %d holds", i, pid, fd, target, r)
				}
				owner[target] = i
			}
			slices.Sort(nums)
			if !slices.Equal(nums, []int{0, 1, 2, 3}) {
				t.Errorf("rank %d (pid %d) holds fds %v, want 0 1 2 3: %v", i, pid, nums, fds)
			}
		}
	}
	if owner == nil {
		t.Fatal("no fds read")
	}
}

// TestStopAll: a job's ranks under one supervisor, some ignoring SIGTERM,
// are stopped with one line to the supervisor per signal: the others end
// at SIGTERM, the ignoring ones at SIGKILL after the grace, every one
// reported stopped; and the supervisor is gone with the last.
func TestStopAll(t *testing.T) {
	sup := supervisorExe(t)
	var specs []Spec
	for i := range 8 {
		mode := "sleep"
		if i%3 == 0 {
			mode = "ignoreterm"
		}
		s := fake(t, mode)
		s.Rank, s.Supervisor = i, sup
		specs = append(specs, s)
	}
	caps := make([]*capture, len(specs))
	for i := range caps {
		caps[i] = newCapture()
	}
	procs, errs := StartGroup(t.Context(), specs, func(rank int, s Stream, b []byte) { caps[rank].sink(rank, s, b) })
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
	}
	for i := range procs {
		waitFor(t, caps[i], Stdout, "ready ")
	}
	supPid := procs[0].pid
	StopAll(procs, 3*time.Second) // the SIGTERM ranks must die of it before the grace, on a loaded machine too
	for i, p := range procs {
		r := p.Wait()
		want := syscall.SIGTERM
		if i%3 == 0 {
			want = syscall.SIGKILL
		}
		if r.Signal != want || !r.Stopped {
			t.Errorf("rank %d: %+v, want stopped by %v", i, r, want)
		}
	}
	if !proctest.Gone(supPid) {
		t.Errorf("the supervisor %d outlived its programs", supPid)
	}
}
