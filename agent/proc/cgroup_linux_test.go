//go:build linux

package proc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gangway-hpc/gangway/agent/proc/proctest"
)

// needCgroup returns where this test process may make job groups, or
// skips the test (fails it with GANGWAY_REQUIRE_ROOT_TESTS=1: CI runs as
// root on a machine with a writable cgroup2).
func needCgroup(t *testing.T) *CgroupParent {
	t.Helper()
	p, err := FindCgroupParent()
	if err == nil {
		return p
	}
	if os.Getenv(requireRootEnv) == "1" {
		t.Fatalf("no writable cgroup2 (%v) and %s=1", err, requireRootEnv)
	}
	t.Skipf("no writable cgroup2: %v (run as root where cgroup2 is mounted read-write; %s=1 makes this a failure)", err, requireRootEnv)
	return nil
}

func newCgroup(t *testing.T, p *CgroupParent, job string) *Cgroup {
	t.Helper()
	cg, err := p.New(job)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cg.Close(5 * time.Second) })
	return cg
}

// cgroupOf is the cgroup2 path of pid relative to the parent of the
// agent's groups, read from /proc/PID/cgroup.
func cgroupOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatalf("pid %d: %v", pid, err)
	}
	g, err := parseCgroup2Path(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestCgroupJobKillsEscapees: a rank started directly (no supervisor) in
// a job group leaves a setsid'd daemon, which its process group's kill
// does not reach; the daemon is in the job group, and Close kills it and
// removes the group, the way the agent ends a job.
func TestCgroupJobKillsEscapees(t *testing.T) {
	parent := needCgroup(t)
	cg := newCgroup(t, parent, "test/job 1")
	if base := filepath.Base(cg.Path()); !strings.HasPrefix(base, "gangway-"+strconv.Itoa(os.Getpid())+"-") || !strings.HasSuffix(base, "-test_job_1") {
		t.Errorf("group %s: want gangway-PID-N-test_job_1", base)
	}
	if filepath.Dir(cg.Path()) != parent.Dir() {
		t.Errorf("group %s is not under the agent's own group %s", cg.Path(), parent.Dir())
	}
	c := newCapture()
	spec := fake(t, "daemon:1")
	spec.Cgroup = cg
	p := start(t, t.Context(), spec, c)
	r := p.Wait()
	d := daemonPid(t, c)
	t.Cleanup(func() { syscall.Kill(d, syscall.SIGKILL) })
	if r.Code != 0 {
		t.Fatalf("result %+v", r)
	}
	if proctest.Gone(d) {
		t.Fatalf("daemon %d already gone: the test shows nothing", d)
	}
	want := cgroupOf(t, os.Getpid())
	want = strings.TrimSuffix(want, "/") + "/" + filepath.Base(cg.Path())
	if got := cgroupOf(t, d); got != want {
		t.Fatalf("daemon in cgroup %s, want the job's %s", got, want)
	}
	if err := cg.Close(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if s := proctest.State(d); s != 0 && s != 'Z' {
		t.Fatalf("daemon %d (state %c) survived cgroup.kill", d, s)
	}
	if _, err := os.Stat(cg.Path()); !os.IsNotExist(err) {
		t.Fatalf("group %s still there after Close: %v", cg.Path(), err)
	}
}

// TestCgroupSupervisedRank: a supervised rank starts in the job group,
// supervisor and program, and the usual result comes back.
func TestCgroupSupervisedRank(t *testing.T) {
	parent := needCgroup(t)
	cg := newCgroup(t, parent, "sup")
	c := newCapture()
	spec := fake(t, "sleep")
	spec.Cgroup, spec.Supervisor = cg, supervisorExe(t)
	p := start(t, t.Context(), spec, c)
	waitFor(t, c, Stdout, "ready ")
	prog := field(t, strings.Split(c.String(Stdout), "\n"), "ready")
	for _, pid := range []int{p.pid, prog} {
		if g := cgroupOf(t, pid); filepath.Base(g) != filepath.Base(cg.Path()) {
			t.Errorf("pid %d in cgroup %s, want %s", pid, g, cg.Path())
		}
	}
	p.Stop(5 * time.Second) // SIGTERM ends it; a loaded machine may take over 1 s to deliver it
	if r := p.Wait(); r.Signal != syscall.SIGTERM || r.Code != 143 {
		t.Fatalf("result %+v, want SIGTERM", r)
	}
}

// deadAgentCgroup makes and locks a job group under p as New does, but
// named for a process that cannot exist (pid_max itself: PIDs stay below
// it), as the group of an agent that died is.
func deadAgentCgroup(t *testing.T, p *CgroupParent, job string) *Cgroup {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || processExists(pid) {
		t.Fatalf("pid_max %q: %v (a process with it exists: %v)", b, err, processExists(pid))
	}
	dir := filepath.Join(p.dir, jobCgroupName(pid, cgroupSeq.Add(1), job))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(dir)
	if err == nil {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	}
	if err != nil {
		t.Fatal(err)
	}
	cg := &Cgroup{dir: dir, f: f}
	t.Cleanup(func() { _ = cg.Close(5 * time.Second) })
	return cg
}

// TestCgroupSweep: the groups of an agent that died (its process gone,
// its lock released without Close) are swept, what is in them killed; a
// live agent's group is left alone, also when its lock is not held (as
// between its mkdir and its lock, when another agent sweeping then took
// it and warned that an agent had died).
func TestCgroupSweep(t *testing.T) {
	parent := needCgroup(t)
	dead, live, unlocked := deadAgentCgroup(t, parent, "dead"), newCgroup(t, parent, "live"), newCgroup(t, parent, "unlocked")
	daemons := map[*Cgroup]int{}
	for _, cg := range []*Cgroup{dead, live, unlocked} {
		c := newCapture()
		spec := fake(t, "daemon:1")
		spec.Cgroup = cg
		p := start(t, t.Context(), spec, c)
		p.Wait()
		d := daemonPid(t, c)
		t.Cleanup(func() { syscall.Kill(d, syscall.SIGKILL) })
		daemons[cg] = d
	}
	dead.f.Close()     // as the agent's death would
	unlocked.f.Close() // its agent (this process) lives
	// Tests in other packages may sweep at the same time: what counts is
	// that the dead group is gone and the live ones are not.
	removed, err := parent.Sweep(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dead.Path()); !os.IsNotExist(err) {
		t.Errorf("the dead agent's group %s is still there (swept %v): %v", dead.Path(), removed, err)
	}
	if s := proctest.State(daemons[dead]); s != 0 && s != 'Z' {
		t.Errorf("the dead agent's daemon %d (state %c) survived the sweep", daemons[dead], s)
	}
	for what, cg := range map[string]*Cgroup{"live agent's group": live, "live agent's unlocked group": unlocked} {
		if slices.Contains(removed, cg.Path()) {
			t.Errorf("swept the %s %s", what, cg.Path())
		}
		if proctest.Gone(daemons[cg]) {
			t.Errorf("the %s's daemon %d was killed", what, daemons[cg])
		}
		if _, err := os.Stat(cg.Path()); err != nil {
			t.Errorf("the %s: %v", what, err)
		}
	}
	// Its lock is gone; only its Close removes it now.
	f, err := os.Open(unlocked.Path())
	if err != nil {
		t.Fatal(err)
	}
	unlocked.f = f
}

// TestCgroupNewRacesSweep: agents sharing a parent group make job groups
// while others sweep it: every group New returns is still there, locked,
// and no Sweep removes it (as happened when a Sweep took a group between
// its mkdir and its lock: ranks then failed to start in it, ENOENT).
func TestCgroupNewRacesSweep(t *testing.T) {
	parent := needCgroup(t)
	const makers, rounds, sweepers = 6, 60, 3
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range sweepers {
		wg.Go(func() {
			for range 10000 {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = parent.Sweep(time.Second)
			}
		})
	}
	var makersWG sync.WaitGroup
	var failures atomic.Int64
	for m := range makers {
		makersWG.Go(func() {
			for i := range rounds {
				cg, err := parent.New(fmt.Sprintf("race-%d-%d", m, i))
				if err != nil {
					t.Errorf("New: %v", err)
					failures.Add(1)
					continue
				}
				if _, err := os.Stat(cg.Path()); err != nil {
					t.Errorf("New returned %s, which is gone: %v", cg.Path(), err)
					failures.Add(1)
				}
				if err := cg.Close(time.Second); err != nil {
					t.Errorf("Close: %v", err)
				}
			}
		})
	}
	makersWG.Wait()
	close(stop)
	wg.Wait()
	t.Logf("%d makers x %d groups against %d sweepers: %d failures", makers, rounds, sweepers, failures.Load())
}

// TestCgroupReadOnly: where cgroup2 is mounted read-only, as containers
// often do (a mount namespace with the mount remounted read-only here),
// FindCgroupParent says so, and ranks run without a job group.
func TestCgroupReadOnly(t *testing.T) {
	parent := needCgroup(t)
	requireRoot(t, "remount cgroup2 read-only in a mount namespace")
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	var mnt string
	for _, m := range parseCgroup2Mounts(string(mi)) {
		if strings.HasPrefix(parent.Dir(), m.dir) {
			mnt = m.dir
		}
	}
	self, _ := os.Executable()
	cmd := exec.CommandContext(t.Context(), "unshare", "--mount", "sh", "-c", `mount -o remount,ro,bind "$0" && exec "$1"`, mnt, self)
	cmd.Env = append(os.Environ(), testHelperEnv+"=findcgroup")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if want := "no cgroup: cgroup2 at " + mnt + " is mounted read-only\n"; string(out) != want {
		t.Fatalf("got %q, want %q", out, want)
	}
}
