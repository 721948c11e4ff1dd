// Package procscan reads processes from /proc for the tests that prove a
// job left nothing behind: by the job's tag in their environment, by
// network namespace, or below a pid. A zombie is not live, and a process
// is named by its pid and start time, so a reused pid is never mistaken
// for (or killed as) the process that had it.
package procscan

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/gangway-hpc/gangway/internal/osproc"
)

// Info is what the leftover checks report about a process: its
// /proc/PID/stat, whose Start (with Pid) tells a reused pid apart.
type Info = osproc.Stat

// Read reads /proc/PID/stat; false when pid does not exist (any more).
func Read(pid int) (Info, bool) {
	p, err := osproc.ReadStat(pid)
	return p, err == nil
}

// Alive reports whether p still runs: the same pid and start time, live.
func Alive(p Info) bool {
	now, ok := Read(p.Pid)
	return ok && now.Start == p.Start && now.Live()
}

// Pids lists the numeric entries of /proc.
func Pids() []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Tagged lists the live processes whose initial environment holds the
// exact entry kv ("NAME=VALUE").
func Tagged(kv string) []Info {
	want := []byte(kv)
	var out []Info
	for _, pid := range Pids() {
		env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err != nil || !slices.ContainsFunc(bytes.Split(env, []byte{0}), func(e []byte) bool { return bytes.Equal(e, want) }) {
			continue
		}
		if p, ok := Read(pid); ok && p.Live() {
			out = append(out, p)
		}
	}
	return out
}

// Children lists pid's child processes, zombies included.
func Children(pid int) []int {
	var out []int
	for _, p := range Pids() {
		if pi, ok := Read(p); ok && pi.PPid == pid {
			out = append(out, p)
		}
	}
	return out
}

// Descendants lists the processes below pid.
func Descendants(pid int) []Info {
	children := map[int][]Info{}
	for _, p := range Pids() {
		if pi, ok := Read(p); ok {
			children[pi.PPid] = append(children[pi.PPid], pi)
		}
	}
	var out []Info
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

// InNetns lists the live processes in network namespace ns (`ip netns
// pids`).
func InNetns(ns string) ([]Info, error) {
	out, err := exec.Command("ip", "netns", "pids", ns).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ip netns pids %s: %w: %s", ns, err, out)
	}
	var ps []Info
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			if p, ok := Read(pid); ok && p.Live() {
				ps = append(ps, p)
			}
		}
	}
	return ps, nil
}

// Kill sends SIGKILL to each process by pid, unless the pid is now
// another process's.
func Kill(ps []Info) {
	for _, p := range ps {
		if Alive(p) {
			_ = syscall.Kill(p.Pid, syscall.SIGKILL)
		}
	}
}
