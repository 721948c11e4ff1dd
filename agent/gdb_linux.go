//go:build linux

package agent

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ptraceCaps are the ambient capabilities gdb gets under ptrace_scope 1.
func ptraceCaps() []uintptr { return []uintptr{unix.CAP_SYS_PTRACE} }

// sysProcAttr runs gdb in its own process group, dying with the thread
// that started it, with the ranks' credential (uid, gid, supplementary
// groups) and only the tracer's ambient capabilities: Go keeps the
// capabilities across the change of uid only for the exec, which leaves
// gdb with its ambient set as its permitted and effective sets.
func (t tracer) sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: t.cred, AmbientCaps: t.caps}
}

// maxRSS is a finished process's peak resident set in bytes.
func maxRSS(ps *os.ProcessState) uint64 {
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok && ru != nil {
		return uint64(ru.Maxrss) << 10
	}
	return 0
}

// idsMismatch says why pid does not run as c (all four uids c.Uid, all
// four gids c.Gid) or may not be dumped; "" when it does and may.
func idsMismatch(pid int, c *syscall.Credential) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return "the process ended"
	}
	want := map[string]uint32{"Uid": c.Uid, "Gid": c.Gid}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		id, ok := want[k]
		if !ok {
			continue
		}
		delete(want, k)
		f := strings.Fields(v)
		for _, s := range f {
			if s != strconv.FormatUint(uint64(id), 10) {
				return fmt.Sprintf("it runs with other ids than the rank (%s: %s)", k, strings.Join(f, " "))
			}
		}
	}
	if len(want) > 0 {
		return "its ids could not be read"
	}
	fi, err := os.Stat("/proc/" + strconv.Itoa(pid))
	if err != nil {
		return "the process ended"
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != c.Uid {
		return "it is not dumpable"
	}
	return ""
}

// memAvailable is MemAvailable of /proc/meminfo in bytes, 0 when unknown.
func memAvailable() uint64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			kib, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kib << 10
		}
	}
	return 0
}
