package proc

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// A job's cgroup holds every process its ranks start, however they
// detach (setsid, double fork), so the agent can kill them all at once
// with cgroup.kill when the job ends. Job groups are made only in cgroup2
// (never a v1 hierarchy: on a hybrid layout the v1 controllers belong to
// someone else) and only under the agent's own cgroup2 group.

// cgroupPrefix starts the name of every group an agent makes: job groups
// "gangway-PID-N-JOB" and probes "gangway-probe-PID-N".
const cgroupPrefix = "gangway-"

// ErrNoCgroup2 is wrapped by FindCgroupParent's error when the process
// has no cgroup2 group that it can see mounted.
var ErrNoCgroup2 = errors.New("no cgroup2")

// cgroupMount is one cgroup2 mount from mountinfo.
type cgroupMount struct {
	root     string // the group of the hierarchy mounted there
	dir      string // the mount point
	readOnly bool
}

// parseCgroup2Mounts returns the cgroup2 mounts of a mountinfo file
// (proc(5)): "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] -
// FSTYPE SOURCE SUPEROPTIONS".
func parseCgroup2Mounts(mountinfo string) []cgroupMount {
	var out []cgroupMount
	for line := range strings.Lines(mountinfo) {
		f := strings.Fields(line)
		sep := -1
		for i, x := range f {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 6 || sep+1 >= len(f) || f[sep+1] != "cgroup2" {
			continue
		}
		m := cgroupMount{root: unescapeMount(f[3]), dir: unescapeMount(f[4])}
		for _, o := range strings.Split(f[5], ",") {
			m.readOnly = m.readOnly || o == "ro"
		}
		if sep+3 < len(f) {
			for _, o := range strings.Split(f[sep+3], ",") {
				m.readOnly = m.readOnly || o == "ro"
			}
		}
		out = append(out, m)
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 is a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// parseCgroup2Path returns the cgroup2 group of a /proc/PID/cgroup file:
// the path of its "0::" line.
func parseCgroup2Path(procCgroup string) (string, error) {
	for line := range strings.Lines(procCgroup) {
		if p, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "0::"); ok {
			if !strings.HasPrefix(p, "/") || strings.Contains(p, "/..") {
				// Outside this cgroup namespace's root: not reachable.
				return "", fmt.Errorf("%w: own group %q is outside the visible hierarchy", ErrNoCgroup2, p)
			}
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: no 0:: line in /proc/self/cgroup (cgroup v1 only)", ErrNoCgroup2)
}

// cgroupDir maps group (a path in the hierarchy) to a directory through
// the first mount that shows it.
func cgroupDir(mounts []cgroupMount, group string) (cgroupMount, string, error) {
	for _, m := range mounts {
		rel, ok := "", false
		switch {
		case m.root == "/":
			rel, ok = group, true
		case group == m.root:
			rel, ok = "/", true
		case strings.HasPrefix(group, m.root+"/"):
			rel, ok = group[len(m.root):], true
		}
		if ok {
			return m, strings.TrimSuffix(m.dir+rel, "/"), nil
		}
	}
	if len(mounts) == 0 {
		return cgroupMount{}, "", fmt.Errorf("%w: no cgroup2 mount in /proc/self/mountinfo", ErrNoCgroup2)
	}
	return cgroupMount{}, "", fmt.Errorf("%w: own group %s is not under any cgroup2 mount", ErrNoCgroup2, group)
}

// jobCgroupName is the name of a job's group: the agent's pid, a number
// unique in the agent, and the job id reduced to safe characters.
func jobCgroupName(pid int, n uint64, job string) string {
	var b strings.Builder
	for _, r := range job {
		if b.Len() >= 32 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	name := cgroupPrefix + strconv.Itoa(pid) + "-" + strconv.FormatUint(n, 10)
	if b.Len() > 0 {
		name += "-" + b.String()
	}
	return name
}

// cgroupAgent is the process a job group's name (jobCgroupName's) says
// made it.
func cgroupAgent(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, cgroupPrefix)
	if !ok {
		return 0, false
	}
	num, _, _ := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(num)
	return pid, err == nil && pid > 0
}

// populated reads the "populated" key of cgroup.events; -1 if absent.
func populated(events []byte) int {
	for line := range bytes.Lines(events) {
		if v, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("populated ")); ok {
			n, err := strconv.Atoi(string(v))
			if err == nil {
				return n
			}
		}
	}
	return -1
}
