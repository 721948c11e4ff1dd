package agent

import (
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/agent/proc"
)

// cgroupCloseTimeout bounds the wait for a job's cgroup to empty after
// cgroup.kill, at the job's end and when sweeping dead agents' groups.
const cgroupCloseTimeout = 5 * time.Second

// errCgroupOff is why there is no job cgroup when Agent.NoCgroup is set.
var errCgroupOff = errors.New("turned off")

// containment is how this agent contains ranks beyond their process
// groups, found at the first use: where job cgroups are made, or why
// they are not.
type containment struct {
	once   sync.Once
	parent *proc.CgroupParent
	why    error
}

// cgroupParent finds, once, the group under which this agent makes job
// groups, and removes the groups that dead agents left there.
func (a *Agent) cgroupParent() (*proc.CgroupParent, error) {
	a.contain.once.Do(func() {
		if a.NoCgroup {
			a.contain.why = errCgroupOff
			return
		}
		a.contain.parent, a.contain.why = proc.FindCgroupParent()
		if a.contain.why != nil {
			a.Log.Info("ranks run without a job cgroup", zap.Error(a.contain.why))
			return
		}
		removed, err := a.contain.parent.Sweep(cgroupCloseTimeout)
		if len(removed) > 0 || err != nil {
			a.Log.Warn("removed the job cgroups of agents that died", zap.Strings("cgroups", removed), zap.Error(err))
		}
	})
	return a.contain.parent, a.contain.why
}

// containmentFact says, for Facts.Containment, what holds this agent's
// ranks: a job cgroup and a supervisor per rank where it can.
func (a *Agent) containmentFact() string {
	parent, why := a.cgroupParent()
	switch {
	case parent != nil && a.Supervisor != "":
		return "cgroup2 " + parent.Dir() + " + subreaper supervisor"
	case parent != nil:
		return "cgroup2 " + parent.Dir() + " + process groups (no supervisor)"
	case a.Supervisor != "":
		return "subreaper supervisor (no writable cgroup2: " + why.Error() + ")"
	default:
		return "process groups only (no supervisor; no writable cgroup2: " + why.Error() + ")"
	}
}

// jobCgroup makes the group a job's ranks start in, or returns nil when
// there is none: the ranks then rely on their supervisors alone.
func (a *Agent) jobCgroup(log *zap.Logger, job string) *proc.Cgroup {
	parent, _ := a.cgroupParent()
	if parent == nil {
		return nil
	}
	cg, err := parent.New(job)
	if err != nil {
		log.Warn("ranks run without a job cgroup", zap.Error(err))
		return nil
	}
	return cg
}
