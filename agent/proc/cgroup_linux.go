//go:build linux

package proc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// CgroupParent is the cgroup2 group under which an agent makes its jobs'
// groups: the agent's own.
type CgroupParent struct {
	dir string
}

var cgroupSeq atomic.Uint64

// FindCgroupParent finds this process's cgroup2 group, through
// /proc/self/cgroup's "0::" line and the cgroup2 mounts of
// /proc/self/mountinfo (wherever they are: /sys/fs/cgroup on a unified
// layout, /sys/fs/cgroup/unified on a hybrid one), and proves that a job
// group can be made there: it makes and removes a probe group, which must
// have cgroup.kill (Linux 5.14) and a cgroup.procs it may write (which
// clone3's CLONE_INTO_CGROUP needs). The error says why not: no cgroup2,
// mounted read-only (as containers often do), not permitted, or too old
// a kernel.
func FindCgroupParent() (*CgroupParent, error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoCgroup2, err)
	}
	pc, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoCgroup2, err)
	}
	group, err := parseCgroup2Path(string(pc))
	if err != nil {
		return nil, err
	}
	m, dir, err := cgroupDir(parseCgroup2Mounts(string(mi)), group)
	if err != nil {
		return nil, err
	}
	if m.readOnly {
		return nil, fmt.Errorf("cgroup2 at %s is mounted read-only", m.dir)
	}
	probe := filepath.Join(dir, fmt.Sprintf("%sprobe-%d-%d", cgroupPrefix, os.Getpid(), cgroupSeq.Add(1)))
	if err := os.Mkdir(probe, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup2 group %s: cannot make a job group: %w", dir, err)
	}
	defer os.Remove(probe)
	if _, err := os.Stat(filepath.Join(probe, "cgroup.kill")); err != nil {
		return nil, fmt.Errorf("cgroup2 group %s: no cgroup.kill (Linux 5.14 or newer needed): %w", dir, err)
	}
	if err := unix.Access(filepath.Join(probe, "cgroup.procs"), unix.W_OK); err != nil {
		return nil, fmt.Errorf("cgroup2 group %s: cgroup.procs not writable: %w", dir, err)
	}
	return &CgroupParent{dir: dir}, nil
}

// Dir is the parent group's directory.
func (p *CgroupParent) Dir() string { return p.dir }

// Cgroup is a job's cgroup2 group. Ranks start in it (Spec.Cgroup);
// Close kills whatever is left in it and removes it. While it is open the
// agent holds a lock on its directory, so another agent's Sweep can tell
// a live job's group from one whose agent died.
type Cgroup struct {
	dir string
	f   *os.File // the directory: the lock, and the fd for CLONE_INTO_CGROUP
}

// New makes a job's group under p, named for this process and job (any
// characters of job other than letters, digits, '-', '_' and '.' become
// '_'), and locks it.
//
// A mkdir the kernel answers EAGAIN (it does under heavy churn of
// groups, other agents making and sweeping theirs) is tried again after
// a pause that doubles from a millisecond, at most newAttempts times in
// all (about a tenth of a second).
func (p *CgroupParent) New(job string) (*Cgroup, error) {
	var last error
	pause := time.Millisecond
	for range newAttempts {
		dir := filepath.Join(p.dir, jobCgroupName(os.Getpid(), cgroupSeq.Add(1), job))
		if err := os.Mkdir(dir, 0o755); err != nil {
			last = err
			if !errors.Is(err, syscall.EAGAIN) {
				break
			}
			time.Sleep(pause)
			pause = min(2*pause, 20*time.Millisecond)
			continue
		}
		f, err := os.Open(dir)
		if err == nil {
			err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
			if err == nil {
				// Between the mkdir and the lock, a Sweep that cannot
				// see this process (an agent in another PID namespace,
				// or an older one that judged by the lock alone) can
				// take the fresh group for a dead agent's, remove it
				// and let go of the lock: the lock is then held on a
				// removed directory. Once locked, the path can no longer
				// be removed by a Sweep, so it still naming the same
				// directory proves the group ours.
				if same(f, dir) {
					return &Cgroup{dir: dir, f: f}, nil
				}
				err = fmt.Errorf("%s was removed by another agent's sweep before it was locked", dir)
			}
			f.Close()
		}
		// Another agent's Sweep took the fresh group for a dead one's.
		last = err
	}
	return nil, fmt.Errorf("make job cgroup under %s: %w", p.dir, last)
}

// newAttempts bounds New's tries: each mkdir refused with EAGAIN, each
// fresh group another agent's sweep took before it was locked.
const newAttempts = 10

// same reports whether path still names the directory open as f.
func same(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && os.SameFile(a, b)
}

// Sweep removes the job groups under p whose agents died (the process
// the group is named for is gone, and no one holds the group's lock),
// killing what is left in them first: what escaped both the agent and
// the job's supervisor. It returns the groups it removed.
//
// The lock alone is not enough: a live agent's group is unlocked between
// its mkdir and its lock, and a Sweep in that moment (another agent's
// first job on the same parent, as two launches starting together on one
// machine) took it for a dead agent's, removed it, and said so in a
// warning ("removed the job cgroups of agents that died") while that
// agent made another. A group whose agent still lives is left; a PID
// reused since only delays its sweep to a later agent's.
func (p *CgroupParent) Sweep(timeout time.Duration) ([]string, error) {
	ents, err := os.ReadDir(p.dir)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, cgroupPrefix) || strings.HasPrefix(name, cgroupPrefix+"probe-") {
			continue
		}
		if pid, ok := cgroupAgent(name); ok && processExists(pid) {
			continue
		}
		dir := filepath.Join(p.dir, name)
		f, err := os.Open(dir)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
			f.Close() // a live agent's
			continue
		}
		if err := (&Cgroup{dir: dir, f: f}).Close(timeout); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, dir)
	}
	return removed, errors.Join(errs...)
}

// processExists reports whether pid names a process (a zombie too), of
// any user.
func processExists(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// Path is the group's directory.
func (c *Cgroup) Path() string { return c.dir }

// Close kills every process in the group (cgroup.kill), waits up to
// timeout until cgroup.events says it is empty, removes it and releases
// its lock. Killing an empty group is harmless; a group that did not
// empty in time is left, with an error.
func (c *Cgroup) Close(timeout time.Duration) error {
	defer c.f.Close()
	if err := os.WriteFile(filepath.Join(c.dir, "cgroup.kill"), []byte("1"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("kill cgroup %s: %w", c.dir, err)
	}
	if err := waitEmpty(c.dir, timeout); err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Rmdir(c.dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", c.dir, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitEmpty waits until dir's cgroup.events reads "populated 0", woken by
// the kernel's notification on that file (POLLPRI), or timeout passes.
func waitEmpty(dir string, timeout time.Duration) error {
	f, err := os.Open(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("cgroup %s: %w", dir, err)
	}
	defer f.Close()
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 256)
	for {
		n, err := f.ReadAt(buf, 0)
		if n == 0 && err != nil {
			return fmt.Errorf("cgroup %s: read cgroup.events: %w", dir, err)
		}
		if populated(buf[:n]) == 0 {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("cgroup %s: still populated %v after cgroup.kill", dir, timeout)
		}
		// The notification can come between the read and the poll; a short
		// poll bounds that miss.
		fds := []unix.PollFd{{Fd: int32(f.Fd()), Events: unix.POLLPRI}}
		_, _ = unix.Poll(fds, int(min(left, 50*time.Millisecond)/time.Millisecond)+1)
	}
}

// applyCgroup makes a process start in c (clone3 CLONE_INTO_CGROUP).
func applyCgroup(attr *syscall.SysProcAttr, c *Cgroup) {
	attr.UseCgroupFD = true
	attr.CgroupFD = int(c.f.Fd())
}
