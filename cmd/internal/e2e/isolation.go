package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gangway-hpc/gangway/agent/proc/proctest"
	"github.com/gangway-hpc/gangway/internal/osproc"
)

// Each rank alone on a busy host. A test binary whose TestMain calls
// HelperMain can play two parts, picked by environment variables:
//
//   - an isolated rank (IsolatedEnv set to a release file's path): it
//     writes a forged PMI put, which is also an output line, to every
//     descriptor from 3 to 1024 it can besides its own PMI socket, does
//     a PMI-1 exchange that would see a forged put, starts a child,
//     prints "ready PID child PID wrote N", and exits 0 once the release
//     file exists;
//   - a careless parent (DirtyExecEnv=1): it execs its arguments with
//     SIGHUP and SIGPIPE ignored, SIGUSR2 blocked and a pipe open
//     without close-on-exec, as a shell script, nohup or a CI runner
//     leaves them (and, with MountCgroupEnv=1, with cgroup2 mounted at
//     /sys/fs/cgroup, which a namespace host's own sysfs lacks).
//
// CheckIsolated and CheckForged then prove through /proc and the output
// that each rank and its child hold exactly their own descriptors, with
// default signals, and that no rank spoke for another.

const (
	// IsolatedEnv, set to a file's path, makes HelperMain an isolated
	// rank released by that file's creation.
	IsolatedEnv = "GANGWAY_E2E_ISOLATED"
	// DirtyExecEnv, set to 1, makes HelperMain exec os.Args[1:] as a
	// careless parent would.
	DirtyExecEnv = "GANGWAY_E2E_DIRTY_EXEC"
	// MountCgroupEnv, set to 1 with DirtyExecEnv, mounts cgroup2 at
	// /sys/fs/cgroup first.
	MountCgroupEnv = "GANGWAY_E2E_MOUNT_CGROUP2"
)

// isolatedWait bounds an isolated rank's wait for its release.
const isolatedWait = 3 * time.Minute

// HelperMain plays the part the environment asks for (here, and in
// tty.go) and exits; it returns at once when no such variable is set.
func HelperMain() {
	if os.Getenv(PTYEnv) == "1" {
		os.Exit(onPTY())
	}
	if os.Getenv(TTYProbeEnv) == "1" {
		os.Exit(ttyProbe())
	}
	if os.Getenv(DirtyExecEnv) == "1" {
		err := dirtyExec()
		fmt.Fprintln(os.Stderr, "dirty exec:", err)
		os.Exit(2)
	}
	if release := os.Getenv(IsolatedEnv); release != "" {
		if err := isolatedRank(release); err != nil {
			fmt.Fprintln(os.Stderr, "isolated rank:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// DirtyEnv is the environment that makes a HelperMain binary exec its
// arguments as a careless parent.
func DirtyEnv(cgroup bool) []string {
	env := []string{DirtyExecEnv + "=1"}
	if cgroup {
		env = append(env, MountCgroupEnv+"=1")
	}
	return env
}

func dirtyExec() error {
	if len(os.Args) < 2 {
		return errors.New("nothing to exec")
	}
	runtime.LockOSThread()
	if os.Getenv(MountCgroupEnv) == "1" {
		if err := unix.Mount("cgroup2", "/sys/fs/cgroup", "cgroup2", 0, ""); err != nil {
			return fmt.Errorf("mount cgroup2: %w", err)
		}
	}
	var p [2]int
	if err := unix.Pipe2(p[:], 0); err != nil { // no O_CLOEXEC: both ends stray
		return err
	}
	var set unix.Sigset_t
	set.Val[0] = 1 << (uint(syscall.SIGUSR2) - 1)
	if err := unix.PthreadSigmask(unix.SIG_BLOCK, &set, nil); err != nil {
		return err
	}
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)                // SIG_IGN survives exec
	if err := osproc.SetSignalDisposition(32, true); err != nil { // as some CI runners start us
		return err
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, DirtyExecEnv+"=") || strings.HasPrefix(kv, MountCgroupEnv+"=")
	})
	path, err := exec.LookPath(os.Args[1])
	if err != nil {
		return err
	}
	return syscall.Exec(path, os.Args[1:], env)
}

// isolatedRank is the rank part (see the file's doc).
func isolatedRank(release string) error {
	rank, _ := strconv.Atoi(os.Getenv("PMI_RANK"))
	size, _ := strconv.Atoi(os.Getenv("PMI_SIZE"))
	pmiFD, err := strconv.Atoi(os.Getenv("PMI_FD"))
	if err != nil {
		return fmt.Errorf("PMI_FD: %w", err)
	}
	f := os.NewFile(uintptr(pmiFD), "pmi")
	nc, err := net.FileConn(f) // a dup: pmiFD stays open, and is skipped below
	if err != nil {
		return fmt.Errorf("PMI_FD %d: %w", pmiFD, err)
	}
	defer nc.Close()
	p := &pmiClient{rw: bufio.NewReadWriter(bufio.NewReader(nc), bufio.NewWriter(nc))}
	if _, err := p.ask("cmd=init pmi_version=1 pmi_subversion=1"); err != nil {
		return fmt.Errorf("PMI init: %w", err)
	}
	reply, err := p.ask("cmd=get_my_kvsname")
	if err != nil {
		return err
	}
	p.kvs = pmiField(reply, "kvsname")
	wrote := forge(rank, pmiFD, p.kvs)
	if err := p.check(rank, size); err != nil {
		fmt.Printf("PMI check failed: %v\n", err)
	}
	child := exec.Command("sleep", "600")
	child.Stdout, child.Stderr = os.Stdout, os.Stderr
	if err := child.Start(); err != nil {
		return err
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	fmt.Printf("ready %d child %d wrote %d\n", os.Getpid(), child.Process.Pid, wrote)
	for range int(isolatedWait / (50 * time.Millisecond)) {
		if _, err := os.Stat(release); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("no release file %s after %v", release, isolatedWait)
}

// forge writes a forged PMI put, which is also an output line, to every
// fd from 3 to 1024 that is not the rank's own, and says how many writes
// succeeded: the runtime's own fds (epoll, eventfd, pidfd) are anon
// inodes or cgroup files, and the dup of the PMI socket has its target.
func forge(rank, pmiFD int, kvs string) (wrote int) {
	pmiTarget, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(pmiFD))
	for fd := 3; fd <= 1024; fd++ {
		target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
		if err != nil || fd == pmiFD || target == pmiTarget || strings.HasPrefix(target, "anon_inode:") || strings.HasPrefix(target, "/sys/fs/cgroup/") {
			continue
		}
		line := fmt.Sprintf("cmd=put kvsname=%s key=forged-%d value=fd%d\n", kvs, rank, fd)
		if n, err := syscall.Write(fd, []byte(line)); err == nil && n > 0 {
			wrote++
		}
	}
	return wrote
}

// pmiClient is a rank's PMI-1 conversation over its PMI_FD.
type pmiClient struct {
	rw  *bufio.ReadWriter
	kvs string
}

func (p *pmiClient) ask(req string) (string, error) {
	if _, err := p.rw.WriteString(req + "\n"); err != nil {
		return "", err
	}
	if err := p.rw.Flush(); err != nil {
		return "", err
	}
	reply, err := p.rw.ReadString('\n')
	return strings.TrimSuffix(reply, "\n"), err
}

// check puts the rank's own key, waits at a barrier, then finds every
// rank's key and no rank's forged one.
func (p *pmiClient) check(rank, size int) error {
	if r, err := p.ask(fmt.Sprintf("cmd=put kvsname=%s key=mine-%d value=v-%d", p.kvs, rank, rank)); err != nil || pmiField(r, "rc") != "0" {
		return fmt.Errorf("put: %q %v", r, err)
	}
	if r, err := p.ask("cmd=barrier_in"); err != nil || !strings.Contains(r, "barrier_out") {
		return fmt.Errorf("barrier: %q %v", r, err)
	}
	for r := range size {
		got, err := p.ask(fmt.Sprintf("cmd=get kvsname=%s key=mine-%d", p.kvs, r))
		if err != nil || pmiField(got, "value") != "v-"+strconv.Itoa(r) {
			return fmt.Errorf("get mine-%d: %q %v", r, got, err)
		}
		got, err = p.ask(fmt.Sprintf("cmd=get kvsname=%s key=forged-%d", p.kvs, r))
		if err != nil || pmiField(got, "rc") == "0" {
			return fmt.Errorf("rank %d's forged put reached a PMI stream: %q %v", r, got, err)
		}
	}
	if r, err := p.ask("cmd=finalize"); err != nil || !strings.Contains(r, "finalize_ack") {
		return fmt.Errorf("finalize: %q %v", r, err)
	}
	return nil
}

// pmiField is a field of a PMI-1 reply ("" when absent).
func pmiField(reply, key string) string {
	for _, tok := range strings.Fields(reply) {
		if v, ok := strings.CutPrefix(tok, key+"="); ok {
			return v
		}
	}
	return ""
}

// IsolatedRank is an isolated rank's ready line.
type IsolatedRank struct {
	Rank, Pid, Child int
	Wrote            int // writes to fds not its own that succeeded
}

var isolatedRe = regexp.MustCompile(`(?m)^\[(\d+)\] ready (\d+) child (\d+) wrote (\d+)$`)

// IsolatedReady parses the isolated ranks' ready lines from the
// launcher's -l tagged stdout.
func IsolatedReady(out string) []IsolatedRank {
	var rs []IsolatedRank
	for _, m := range isolatedRe.FindAllStringSubmatch(out, -1) {
		var r IsolatedRank
		r.Rank, _ = strconv.Atoi(m[1])
		r.Pid, _ = strconv.Atoi(m[2])
		r.Child, _ = strconv.Atoi(m[3])
		r.Wrote, _ = strconv.Atoi(m[4])
		rs = append(rs, r)
	}
	return rs
}

// CheckIsolated proves through /proc, while the ranks wait, that each
// rank and its child hold exactly fds 0, 1, 2 and the rank's PMI_FD (the
// rank, a Go program, also its runtime's anon inodes and its dup of the
// PMI socket), none shared with another rank, with no signal blocked or
// ignored, that no rank could write to an fd not its own, and that each
// rank runs in a job cgroup when cgroup is true and in none otherwise.
func CheckIsolated(t testing.TB, ranks []IsolatedRank, cgroup bool) {
	t.Helper()
	owner := map[string]int{} // what an fd refers to -> the rank holding it
	wrote := 0
	cgroups := map[string]bool{}
	for _, r := range ranks {
		wrote += r.Wrote
		pmiFD := environ(r.Pid)["PMI_FD"]
		want := []int{0, 1, 2}
		if fd, err := strconv.Atoi(pmiFD); err == nil {
			want = append(want, fd)
		} else {
			t.Errorf("rank %d: no PMI_FD (%q)", r.Rank, pmiFD)
		}
		for _, p := range []int{r.Pid, r.Child} {
			var fds map[int]string
			proctest.WaitFds(p, 5*time.Second, func(read map[int]string) bool {
				fds = read
				if p == r.Pid {
					fds = runtimeFdsOut(read, want)
				}
				return slices.Equal(slices.Sorted(maps.Keys(fds)), want)
			})
			if nums := slices.Sorted(maps.Keys(fds)); !slices.Equal(nums, want) {
				t.Errorf("rank %d (pid %d) holds fds %v, want %v: %v", r.Rank, p, nums, want, fds)
			}
			for fd, target := range fds {
				if !strings.HasPrefix(target, "pipe:") && !strings.HasPrefix(target, "socket:") {
					continue // /dev/null, the runtime's own
				}
				if o, ok := owner[target]; ok && o != r.Rank {
					t.Errorf("rank %d (pid %d) fd %d is %s, which rank %d holds", r.Rank, p, fd, target, o)
				}
				owner[target] = r.Rank
			}
			st := status(p)
			for _, k := range []string{"SigBlk", "SigIgn"} {
				if st[k] != "0000000000000000" {
					t.Errorf("rank %d (pid %d): %s %s, want none", r.Rank, p, k, st[k])
				}
			}
		}
		cgroups[cgroupOf(r.Pid)] = true
	}
	t.Logf("%d ranks and their children: fds and signal state checked; %d writes by ranks to fds not their own succeeded; cgroups %v", len(ranks), wrote, slices.Sorted(maps.Keys(cgroups)))
	if wrote != 0 {
		t.Errorf("ranks wrote to %d descriptors not their own", wrote)
	}
	for c := range cgroups {
		if inJob := strings.Contains(c, "/gangway-"); inJob != cgroup {
			t.Errorf("a rank runs in cgroup %q: want a job cgroup %v", c, cgroup)
		}
	}
}

// runtimeFdsOut is a Go rank's descriptors less the runtime's own: epoll,
// eventfd and pidfds (anon inodes), the CPU quota files it keeps open to
// size GOMAXPROCS, and the rank's dup of its PMI socket (want's last).
func runtimeFdsOut(fds map[int]string, want []int) map[int]string {
	pmi := fds[want[len(want)-1]]
	out := map[int]string{}
	for fd, target := range fds {
		own := strings.HasPrefix(target, "anon_inode:") || strings.HasPrefix(target, "/sys/fs/cgroup/") || target == pmi
		if slices.Contains(want, fd) || !own {
			out[fd] = target
		}
	}
	return out
}

var forgedRe = regexp.MustCompile(`forged-(\d+)`)

// CheckForged checks, once the job is over, that no rank's forged line
// appears under another rank's tag in out (the launcher's -l stdout) or
// in another rank's --output-filename files under outDir ("" for none),
// and that every rank's PMI check passed.
func CheckForged(t testing.TB, out, outDir string, np int) {
	t.Helper()
	for r, lines := range RankLines(out) {
		for _, line := range lines {
			if m := forgedRe.FindStringSubmatch(line); m != nil && m[1] != strconv.Itoa(r) {
				t.Errorf("rank %s's forged line under rank %d's tag: %q", m[1], r, line)
			}
			if strings.HasPrefix(line, "PMI check failed") {
				t.Errorf("rank %d: %s", r, line)
			}
		}
	}
	if outDir == "" {
		return
	}
	for r := range np {
		for _, stream := range []string{"stdout", "stderr"} {
			b, err := os.ReadFile(filepath.Join(outDir, "rank."+strconv.Itoa(r), stream))
			if errors.Is(err, fs.ErrNotExist) && stream == "stderr" {
				continue // made at the first byte, and these ranks wrote none
			}
			if err != nil {
				t.Errorf("rank %d's %s file: %v", r, stream, err)
				continue
			}
			for _, m := range forgedRe.FindAllStringSubmatch(string(b), -1) {
				if m[1] != strconv.Itoa(r) {
					t.Errorf("rank %s's forged line in rank %d's %s file", m[1], r, stream)
				}
			}
		}
	}
}

// environ reads a process's initial environment (nil when gone).
func environ(pid int) map[string]string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return nil
	}
	m := map[string]string{}
	for _, kv := range strings.Split(string(b), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// status reads /proc/PID/status as a map of its fields.
func status(pid int) map[string]string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	m := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// cgroupOf is a process's cgroup2 path ("" when none is shown).
func cgroupOf(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p
		}
	}
	return ""
}

// StatusOf returns the SigBlk and SigIgn of pid, for tests of other
// children (a stock session's command).
func StatusOf(pid int) (sigBlk, sigIgn string) {
	st := status(pid)
	return st["SigBlk"], st["SigIgn"]
}
