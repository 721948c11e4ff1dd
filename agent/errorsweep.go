package agent

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/internal/osproc"
)

// Error-file directories are named after the agent that made them,
// "gangway-PID.START-JOB-errors-RANDOM" (START: the agent's start time in
// clock ticks after boot, which tells it from a later process given the
// same pid). An agent killed mid-job (SIGKILL, the OOM killer) leaves its
// directories behind; the next agent on the host removes those whose
// agent is gone, at its first job, as it removes dead agents' job
// cgroups.

// errorDirPrefix is the start of this agent's error-file directories.
var errorDirPrefix = sync.OnceValue(func() string {
	return "gangway-" + strconv.Itoa(os.Getpid()) + "." + strconv.FormatUint(startTime(os.Getpid()), 10) + "-"
})

// startTime is pid's start time (clock ticks after boot), or 0.
func startTime(pid int) uint64 {
	st, err := osproc.ReadStat(pid)
	if err != nil {
		return 0
	}
	return st.Start
}

// staleErrorDir reports whether name is an error-file directory whose
// agent is gone: "gangway-PID.START-..." where PID no longer runs with
// that start time. Names of the older form (no START) and others are not.
func staleErrorDir(name string, alive func(pid int, start uint64) bool) bool {
	rest, ok := strings.CutPrefix(name, "gangway-")
	if !ok || !strings.Contains(rest, "-errors-") {
		return false
	}
	id, _, ok := strings.Cut(rest, "-")
	ps, ss, ok2 := strings.Cut(id, ".")
	if !ok || !ok2 {
		return false
	}
	pid, err1 := strconv.Atoi(ps)
	start, err2 := strconv.ParseUint(ss, 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return false
	}
	return !alive(pid, start)
}

// runsSince reports whether pid runs and started at start.
func runsSince(pid int, start uint64) bool { return startTime(pid) == start }

// onceEach is alive asked once per process: the directories of one
// agent's jobs name the same process, and an in-process farm of agents
// (gwbench's thousands) left thousands of one process's, each read from
// /proc by every agent's sweep.
func onceEach(alive func(pid int, start uint64) bool) func(pid int, start uint64) bool {
	type proc struct {
		pid   int
		start uint64
	}
	known := map[proc]bool{}
	return func(pid int, start uint64) bool {
		p := proc{pid, start}
		v, ok := known[p]
		if !ok {
			v = alive(pid, start)
			known[p] = v
		}
		return v
	}
}

// sweepErrorDirs removes, once per agent, the error-file directories of
// agents that are gone: directories this agent's user owns (never a link,
// never another user's) in errorFileBase.
func (a *Agent) sweepErrorDirs(log *zap.Logger) {
	a.errSweep.Do(func() {
		base := errorFileBase()
		ents, err := os.ReadDir(base)
		if err != nil {
			return
		}
		alive := onceEach(runsSince)
		var removed []string
		for _, e := range ents {
			if !e.IsDir() || !staleErrorDir(e.Name(), alive) {
				continue
			}
			path := filepath.Join(base, e.Name())
			fi, err := os.Lstat(path)
			if err != nil || !fi.IsDir() {
				continue
			}
			if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
				continue
			}
			if os.RemoveAll(path) == nil {
				removed = append(removed, e.Name())
			}
		}
		if len(removed) > 0 {
			log.Info("removed the error-file directories of agents that died", zap.String("dir", base), zap.Strings("dirs", removed))
		}
	})
}
