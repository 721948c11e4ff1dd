package nettest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// procInfo is what the leftover checks report about a process.
type procInfo struct {
	Pid, PPid int
	Comm      string
	State     string
	Start     uint64 // start time in clock ticks since boot: tells a reused PID apart
}

func (p procInfo) String() string {
	return fmt.Sprintf("pid %d (%s) state %s ppid %d", p.Pid, p.Comm, p.State, p.PPid)
}

// readProc parses /proc/PID/stat ("pid (comm) S ppid ..."; comm may hold
// spaces and parentheses).
func readProc(pid int) (procInfo, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, false
	}
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return procInfo{}, false
	}
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 20 {
		return procInfo{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	st, _ := strconv.ParseUint(f[19], 10, 64) // field 22 of stat
	return procInfo{Pid: pid, PPid: ppid, Comm: string(b[open+1 : end]), State: f[0], Start: st}, true
}

// allPids lists the numeric entries of /proc.
func allPids() []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// descendants lists the live descendants of pid, found through /proc.
func descendants(pid int) []procInfo {
	children := map[int][]procInfo{}
	for _, p := range allPids() {
		if pi, ok := readProc(p); ok {
			children[pi.PPid] = append(children[pi.PPid], pi)
		}
	}
	var out []procInfo
	queue := []int{pid}
	for len(queue) > 0 {
		for _, c := range children[queue[0]] {
			out = append(out, c)
			queue = append(queue, c.Pid)
		}
		queue = queue[1:]
	}
	return out
}

// killProcs SIGKILLs each process by PID, unless its PID now belongs to
// another process (a different start time).
func killProcs(ps []procInfo) {
	for _, p := range ps {
		if alive(p) {
			_ = syscall.Kill(p.Pid, syscall.SIGKILL)
		}
	}
}

// alive reports whether p is still running (same PID and start time, not
// a zombie).
func alive(p procInfo) bool {
	now, ok := readProc(p.Pid)
	return ok && now.Start == p.Start && now.State != "Z" && now.State != "X"
}

// taggedProcs lists the live (non-zombie) processes whose initial
// environment holds tagEnv=tag.
func taggedProcs(tag string) []procInfo {
	want := []byte(tagEnv + "=" + tag)
	var out []procInfo
	for _, pid := range allPids() {
		env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err != nil {
			continue
		}
		if !slices.ContainsFunc(bytes.Split(env, []byte{0}), func(kv []byte) bool { return bytes.Equal(kv, want) }) {
			continue
		}
		if p, ok := readProc(pid); ok && p.State != "Z" && p.State != "X" {
			out = append(out, p)
		}
	}
	return out
}

// waitNoTagged waits until no live process carries tag, and fails naming
// the leftovers (after SIGKILLing them by PID) if some are still there
// after timeout. It returns how long it waited.
func waitNoTagged(t *testing.T, tag string, timeout time.Duration) time.Duration {
	t.Helper()
	t0 := time.Now()
	for {
		left := taggedProcs(tag)
		if len(left) == 0 {
			return time.Since(t0)
		}
		if time.Since(t0) > timeout {
			for _, p := range left {
				_ = syscall.Kill(p.Pid, syscall.SIGKILL)
			}
			t.Errorf("processes of job %s still running %v after the job ended: %v", tag, timeout, left)
			return time.Since(t0)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// netnsPids lists the processes in namespace ns (`ip netns pids`).
func netnsPids(t *testing.T, ns string) []int {
	t.Helper()
	out, err := exec.Command("ip", "netns", "pids", ns).CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns pids %s: %v: %s", ns, err, out)
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			if p, ok := readProc(pid); ok && p.State != "Z" && p.State != "X" {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// waitNetnsOnly waits until the live processes in ns are exactly keep
// (the host's agent or sshd), and fails naming the others after timeout.
// Survivors are left to Bed.Close, which kills them by PID.
func waitNetnsOnly(t *testing.T, ns string, timeout time.Duration, keep ...int) time.Duration {
	t.Helper()
	t0 := time.Now()
	for {
		var extra []procInfo
		for _, pid := range netnsPids(t, ns) {
			if !slices.Contains(keep, pid) {
				if p, ok := readProc(pid); ok {
					extra = append(extra, p)
				}
			}
		}
		if len(extra) == 0 {
			return time.Since(t0)
		}
		if time.Since(t0) > timeout {
			t.Errorf("namespace %s: processes besides %v still running %v after the job ended: %v", ns, keep, timeout, extra)
			return time.Since(t0)
		}
		time.Sleep(25 * time.Millisecond)
	}
}
