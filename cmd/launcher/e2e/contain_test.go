package e2e_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/proc"
	"github.com/gangway-hpc/gangway/agent/proc/proctest"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed/roottest"
)

// The tests here kill what should clean up (the agent, a local launcher)
// while ranks have left things behind: a shell's background sleep in the
// rank's process group, and a daemon that left it (setsid, double fork:
// proctest's daemon mode). Every process of a job carries a marker in its
// environment (-x), so "nothing of the job is left" is read from
// /proc/PID/environ: no live process has it.

// markEnv is the marker's variable.
const markEnv = "GANGWAY_CONTAIN_MARK"

// newMark is a marker unique to the test: "GANGWAY_CONTAIN_MARK=<name>-<random>".
func newMark(t *testing.T) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return markEnv + "=" + strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()) + "-" + hex.EncodeToString(b[:])
}

// marked returns the live processes whose environment holds mark
// (zombies have no readable environment).
func marked(mark string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	want := []byte(mark)
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if bytes.Equal(kv, want) {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// describe names pids for a failure message: pid, state, parent, command.
func describe(pids []int) string {
	var b strings.Builder
	for _, pid := range pids {
		cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		fmt.Fprintf(&b, "\n  pid %d state %c ppid %d: %s", pid, proctest.State(pid), parentOf(pid), bytes.ReplaceAll(bytes.TrimRight(cmd, "\x00"), []byte{0}, []byte{' '}))
	}
	return b.String()
}

// parentOf reads the parent pid from /proc/PID/stat, or 0.
func parentOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	p, _ := strconv.Atoi(f[1])
	return p
}

// under returns every process below pid, and their states.
func under(pid int) map[int]byte {
	ents, _ := os.ReadDir("/proc")
	kids := map[int][]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err == nil {
			kids[parentOf(p)] = append(kids[parentOf(p)], p)
		}
	}
	out := map[int]byte{}
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, k := range kids[p] {
			out[k] = proctest.State(k)
			queue = append(queue, k)
		}
	}
	return out
}

// waitUnmarked waits up to d until no process carries mark and none of
// also lives, and returns the ones that still do.
func waitUnmarked(mark string, d time.Duration, also ...int) []int {
	deadline := time.Now().Add(d)
	for {
		left := marked(mark)
		for _, pid := range also {
			if !proctest.Gone(pid) && !slices.Contains(left, pid) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// killMarked is a cleanup that kills, by pid, whatever still carries
// mark, then removes the job cgroups that dead agents left (sweepDead),
// so that a failed test leaves nothing either.
func killMarked(t *testing.T, mark string) {
	t.Cleanup(func() {
		left := marked(mark)
		for _, pid := range left {
			t.Logf("killing leftover pid %d", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if len(left) > 0 {
			time.Sleep(100 * time.Millisecond) // let SIGKILL land before the sweep
		}
		sweepDead(t)
	})
}

// leavers are the launcher arguments of np ranks that each leave a
// background sleep in their group and a setsid'd daemon behind, all
// carrying mark; each prints "[R] ready PID".
func leavers(t *testing.T, np int, mark string) []string {
	return []string{"-np", strconv.Itoa(np), "-x", proctest.Env + "=daemon", "-x", mark,
		"sh", "-c", `sleep 3600 & exec "$0"`, self(t)}
}

// startedAll waits for np ready lines and checks that every rank left its
// processes: np × (program, sleep, daemon) carry mark, and one supervisor
// per host (the agent re-executed, which carries no rank's environment)
// is the parent of every program, hosts supervisors in all. It returns
// them all, the supervisors last, and the supervisors.
func startedAll(t *testing.T, out *e2e.Output, stderr fmt.Stringer, np, hosts int, mark string) (all, sups []int) {
	t.Helper()
	s, ok := out.WaitFor(e2e.Deadline, e2e.HasReady(np))
	if !ok {
		t.Fatalf("not every rank started:\n%s\nstderr:\n%s", s, stderr)
	}
	var pids []int
	deadline := time.Now().Add(e2e.Deadline)
	for pids = marked(mark); len(pids) < 3*np && time.Now().Before(deadline); pids = marked(mark) {
		time.Sleep(20 * time.Millisecond)
	}
	if len(pids) < 3*np {
		t.Fatalf("%d processes carry the marker, want %d (program, sleep, daemon per rank):%s", len(pids), 3*np, describe(pids))
	}
	for _, pid := range pids {
		pp := parentOf(pid)
		if cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pp) + "/cmdline"); bytes.HasPrefix(cmd, []byte("gangway-supervisor\x00")) && !slices.Contains(sups, pp) {
			sups = append(sups, pp)
		}
	}
	if len(sups) != hosts {
		t.Fatalf("the job's processes have supervisors %v, want %d (one per host):%s", sups, hosts, describe(pids))
	}
	return append(pids, sups...), sups
}

// supervisedBy returns the job's supervisor among sups whose parent is
// agent, with every process below it: all of that host's part of the job.
func supervisedBy(t *testing.T, sups []int, agent int) []int {
	t.Helper()
	for _, s := range sups {
		if parentOf(s) == agent {
			out := []int{s}
			for pid := range under(s) {
				out = append(out, pid)
			}
			return out
		}
	}
	t.Fatalf("no supervisor among %v is the child of agent %d", sups, agent)
	return nil
}

// cgroup2Mount is the mount point of the cgroup2 hierarchy this test
// process's agents make their job groups in.
func cgroup2Mount(t *testing.T) string {
	t.Helper()
	parent, err := proc.FindCgroupParent()
	if err != nil {
		t.Fatalf("no writable cgroup2 as root: %v", err)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for line := range strings.Lines(string(mi)) {
		f := strings.Fields(line)
		if i := slices.Index(f, "-"); i > 4 && i+1 < len(f) && f[i+1] == "cgroup2" && strings.HasPrefix(parent.Dir(), f[4]) {
			return f[4]
		}
	}
	t.Fatalf("no cgroup2 mount above %s", parent.Dir())
	return ""
}

// sweepDead removes the job groups that killed agents left (empty: their
// supervisors emptied them), as the next agent on the host does.
func sweepDead(t *testing.T) {
	t.Helper()
	parent, err := proc.FindCgroupParent()
	if err != nil {
		return
	}
	if _, err := parent.Sweep(5 * time.Second); err != nil {
		t.Error(err)
	}
}

// jobGroups lists the job cgroups of the agent with pid (in this test's
// cgroup2 group, where the agents it starts make theirs).
func jobGroups(t *testing.T, pid int) []string {
	t.Helper()
	parent, err := proc.FindCgroupParent()
	if err != nil {
		t.Fatal(err)
	}
	dirs, _ := filepath.Glob(filepath.Join(parent.Dir(), "gangway-"+strconv.Itoa(pid)+"-*"))
	return dirs
}

// TestAgentKilledLeavesNothing: SIGKILL one of two real agents mid-job
// (perHost ranks on each) while their ranks have a background sleep in
// their group and a setsid'd daemon outside it: every process of the
// killed agent's part of the job is gone, by the job's supervisor alone,
// and the launcher, naming the host, stops the other host's part. With
// cgroup2 writable the job also had a cgroup per host, which the next
// agent on the host removes; with cgroup2 read-only (a container's mount)
// the agent says it runs on supervisors alone, and they are enough.
func TestAgentKilledLeavesNothing(t *testing.T) {
	roottest.RequireRoot(t)
	_, agentBin := e2e.BuildBinaries(t)
	for _, tc := range []struct {
		name   string
		prefix func(t *testing.T) []string
		facts  string
		groups int // job cgroups while the job runs
	}{
		{"cgroup2", func(*testing.T) []string { return nil }, "ranks cgroup2 ", 1},
		{"read-only cgroup2", func(t *testing.T) []string {
			return []string{"unshare", "--mount", "sh", "-c", `mount -o remount,ro,bind "$0" && exec "$@"`, cgroup2Mount(t)}
		}, "ranks subreaper supervisor (no writable cgroup2: cgroup2 at ", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := e2e.StartProcs(t, 2, agentBin, e2e.Wrapped(tc.prefix(t)...))
			inspect, _, code := c.RunLauncher(t, "-H", c.HostList(perHost), "--inspect")
			if code != 0 || strings.Count(inspect, "\n"+tc.facts) != 2 || strings.Count(inspect, "subreaper supervisor") != 2 {
				t.Fatalf("--inspect (exit %d) does not show %q for both hosts:\n%s", code, tc.facts, inspect)
			}
			mark := newMark(t)
			killMarked(t, mark)
			np := 2 * perHost
			l := c.StartLauncher(t, append([]string{"-l", "-H", c.HostList(perHost), "--kill-grace", "5s"}, leavers(t, np, mark)...)...)
			before, sups := startedAll(t, l.Stdout, l.Stderr, np, 2, mark)
			for i, p := range c.Procs {
				if n, want := len(jobGroups(t, p.Pid())), tc.groups; n != want {
					t.Errorf("agent %d has %d job cgroups, want %d", i, n, want)
				}
			}
			agent := c.Procs[1].Pid()
			lost := supervisedBy(t, sups, agent)
			if len(lost) != 1+3*perHost {
				t.Fatalf("agent %d's supervisor and its processes are %d, want %d (the supervisor, and a program, a sleep and a daemon per rank):%s", agent, len(lost), 1+3*perHost, describe(lost))
			}
			t0 := time.Now()
			if err := c.Procs[1].Kill(); err != nil {
				t.Fatal(err)
			}
			if code := l.Wait(t); code != 255 {
				t.Errorf("launcher exit code %d, want 255 (agent lost)\n%s", code, l.Stderr)
			}
			if want := "lost the agent on " + c.Hosts[1].Addr; !strings.Contains(l.Stderr.String(), want) {
				t.Errorf("launcher stderr does not say %q:\n%s", want, l.Stderr)
			}
			if left := proctest.WaitGone(30*time.Second, lost...); len(left) > 0 {
				t.Fatalf("30s after the agent's SIGKILL, %d of its %d processes of the job live:%s", len(left), len(lost), describe(left))
			}
			goneLost := time.Since(t0)
			if left := waitUnmarked(mark, 30*time.Second, before...); len(left) > 0 {
				t.Fatalf("30s after the agent's SIGKILL, %d of the job's %d processes live:%s", len(left), len(before), describe(left))
			}
			sweepDead(t)
			if left := jobGroups(t, agent); len(left) > 0 {
				t.Errorf("the dead agent's job cgroups are still there after a sweep: %v", left)
			}
			t.Logf("agent SIGKILL (%s), %d ranks (%d per host): the killed agent's %d processes of the job gone after %v; all %d gone", tc.name, np, perHost, len(lost), goneLost.Round(time.Millisecond), len(before))
		})
	}
}

// TestLocalLauncherKilledLeavesNothing: a real launcher running ranks on
// this machine through its built-in agent is killed with SIGKILL, or gets
// SIGHUP (its terminal closed; it does not catch SIGHUP): every process
// of the job is gone. Local mode has one host: it runs two DGX nodes'
// ranks (2×perHost) there.
func TestLocalLauncherKilledLeavesNothing(t *testing.T) {
	e2e.NoTree(t, "local ranks only")
	roottest.RequireRoot(t)
	launcherBin, _ := e2e.BuildBinaries(t)
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGHUP} {
		t.Run(proc.SignalName(sig), func(t *testing.T) {
			mark := newMark(t)
			killMarked(t, mark)
			np := 2 * perHost
			l := e2e.StartProc(t, nil, launcherBin, append([]string{"-l"}, leavers(t, np, mark)...)...)
			before, _ := startedAll(t, l.Stdout, l.Stderr, np, 1, mark)
			if n := len(jobGroups(t, l.Pid())); n != 1 {
				t.Errorf("the launcher has %d job cgroups, want 1", n)
			}
			t0 := time.Now()
			if err := syscall.Kill(l.Pid(), sig); err != nil {
				t.Fatal(err)
			}
			// SIGKILL ends the launcher at once; SIGHUP (its terminal went
			// away) makes it stop every rank and exit 128+1.
			want := -1
			if sig == syscall.SIGHUP {
				want = 128 + int(sig)
			}
			if code := l.Wait(t); code != want {
				t.Errorf("launcher exit code %d, want %d after %s", code, want, proc.SignalName(sig))
			}
			if left := proctest.WaitGone(30*time.Second, before...); len(left) > 0 {
				t.Fatalf("30s after the launcher's %s, %d of the job's %d processes live:%s", proc.SignalName(sig), len(left), len(before), describe(left))
			}
			took := time.Since(t0)
			if left := waitUnmarked(mark, 30*time.Second); len(left) > 0 {
				t.Fatalf("after the launcher's %s, processes of the job live:%s", proc.SignalName(sig), describe(left))
			}
			sweepDead(t)
			if left := jobGroups(t, l.Pid()); len(left) > 0 {
				t.Errorf("the dead launcher's job cgroups are still there after a sweep: %v", left)
			}
			t.Logf("local launcher %s, %d ranks on one host: all %d processes of the job gone after %v", proc.SignalName(sig), np, len(before), took.Round(time.Millisecond))
		})
	}
}

// TestAgentAsPID1: bin/agent as PID 1 of a new PID namespace (a container
// without Docker) on each of two hosts runs 4 jobs of perHost ranks per
// host whose ranks leave orphans (each rank starts two sleeps, waits for
// the test's word and exits 0): the orphans die with their job, and
// afterwards no process of either namespace is a zombie; SIGTERM to PID 1
// (a container's stop) ends the agent, and so the namespace, with exit
// code 0, and nothing is left.
func TestAgentAsPID1(t *testing.T) {
	roottest.RequireRoot(t)
	_, agentBin := e2e.BuildBinaries(t)
	c := e2e.StartProcs(t, 2, agentBin, e2e.Wrapped("unshare", "--pid", "--mount-proc", "--kill-child"))
	inits := make([]int, len(c.Procs))
	for i, unshare := range c.Procs {
		for pid := range under(unshare.Pid()) {
			if parentOf(pid) == unshare.Pid() {
				inits[i] = pid
			}
		}
		if inits[i] == 0 {
			t.Fatalf("no PID 1 below unshare (pid %d)", unshare.Pid())
		}
	}
	np := 2 * perHost
	const script = `sleep 600 & sleep 600 & while [ ! -e "$0" ]; do sleep 0.05; done; exit 0`
	for i := range 4 {
		mark := newMark(t)
		killMarked(t, mark)
		word := filepath.Join(t.TempDir(), "go")
		l := c.StartLauncher(t, "-H", c.HostList(perHost), "-np", strconv.Itoa(np), "-x", mark, "sh", "-c", script, word)
		children := waitOrphansToBe(t, l, mark, 2*np)
		if err := os.WriteFile(word, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if code := l.Wait(t); code != 0 {
			t.Fatalf("job %d: exit code %d\n%s\n%s", i, code, l.Stdout, l.Stderr)
		}
		if left := waitUnmarked(mark, 30*time.Second, children...); len(left) > 0 {
			t.Fatalf("job %d's processes live on:%s", i, describe(left))
		}
	}
	var zombies []int
	deadline := time.Now().Add(10 * time.Second)
	for {
		zombies = zombies[:0]
		for _, init1 := range inits {
			for pid, st := range under(init1) {
				if st == 'Z' {
					zombies = append(zombies, pid)
				}
			}
		}
		if len(zombies) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(zombies) > 0 {
		t.Fatalf("%d zombies in the agents' PID namespaces:%s", len(zombies), describe(zombies))
	}
	var pids []int
	for _, init1 := range inits {
		pids = append(pids, init1)
		for pid := range under(init1) {
			pids = append(pids, pid)
		}
		if err := syscall.Kill(init1, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	for i, unshare := range c.Procs {
		if code := unshare.Wait(t); code != 0 {
			t.Errorf("unshare (the container) %d exit code %d after SIGTERM, want 0\n%s", i, code, unshare.Stderr)
		}
	}
	if left := proctest.WaitGone(10*time.Second, pids...); len(left) > 0 {
		t.Fatalf("left after the containers' stop:%s", describe(left))
	}
	t.Logf("agent as PID 1 on 2 hosts: 4 jobs of %d ranks (%d per host), each rank leaving 2 orphans, all gone; no zombies; %d processes in the namespaces before SIGTERM, none after", np, perHost, len(pids))
}

// waitOrphansToBe waits until n processes carrying mark run "sleep 600"
// (the ranks' children) and returns them.
func waitOrphansToBe(t *testing.T, l *e2e.Launch, mark string, n int) []int {
	t.Helper()
	deadline := time.Now().Add(e2e.Deadline)
	for {
		var sleeps []int
		for _, pid := range marked(mark) {
			if cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); string(cmd) == "sleep\x00600\x00" {
				sleeps = append(sleeps, pid)
			}
		}
		if len(sleeps) == n {
			return sleeps
		}
		if len(sleeps) > n || time.Now().After(deadline) {
			t.Fatalf("%d of the ranks' children run, want %d:%s\nstderr:\n%s", len(sleeps), n, describe(sleeps), l.Stderr)
		}
		select {
		case <-l.Done():
			t.Fatalf("the job ended before its ranks' children ran (%d of %d):\n%s", len(sleeps), n, l.Stderr)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
