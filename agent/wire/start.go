package wire

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gangway-hpc/gangway/internal/environ"
)

// Identity gives emit, in name order, the identity variables of rank
// (local rank local, placed at p) that every launcher convention reads:
// torchrun's (RANK, LOCAL_RANK, GROUP_RANK, ROLE_RANK, LOCAL_WORLD_SIZE),
// Open MPI's (OMPI_COMM_WORLD_*), MPICH's and Intel MPI's (PMI_RANK,
// MPI_LOCALRANKID, MPI_LOCALNRANKS) and Horovod's (HOROVOD_*). The
// launcher and the agent both build them here: the launcher for --dry-run
// and for agents that take the whole StartJob, an agent for the compact
// one (Expand).
func Identity(rank, local int, p Place, emit func(k, v string)) {
	r, l, ls := strconv.Itoa(rank), strconv.Itoa(local), strconv.Itoa(p.LocalSize)
	emit("GROUP_RANK", strconv.Itoa(p.Node))
	emit("HOROVOD_CROSS_RANK", strconv.Itoa(p.Cross))
	emit("HOROVOD_CROSS_SIZE", strconv.Itoa(p.CrossSize))
	emit("HOROVOD_LOCAL_RANK", l)
	emit("HOROVOD_LOCAL_SIZE", ls)
	emit("HOROVOD_RANK", r)
	emit("LOCAL_RANK", l)
	emit("LOCAL_WORLD_SIZE", ls)
	emit("MPI_LOCALNRANKS", ls)
	emit("MPI_LOCALRANKID", l)
	emit("OMPI_COMM_WORLD_LOCAL_RANK", l)
	emit("OMPI_COMM_WORLD_LOCAL_SIZE", ls)
	emit("OMPI_COMM_WORLD_NODE_RANK", l)
	emit("OMPI_COMM_WORLD_RANK", r)
	emit("PMI_RANK", r)
	emit("RANK", r)
	emit("ROLE_RANK", r)
}

// Expand turns j's compact form into the whole one, in place, so that
// the rest of the agent reads one form: each rank without a command or
// directory of its own gets the job's (Argv, Dir), and a rank's Env
// becomes its identity (Identity, from Place) under HostEnv under its
// own Env, one entry per name, sorted. A StartJob in the whole form is
// left as it is. The compact form moves the building of every rank's
// identity and the copies of its host's variables from the launcher,
// which would do it for every rank of the job, to the host that runs
// the rank.
//
// A Place that cannot be this host's (a local size other than the
// ranks listed here, a cross index outside its size, a negative node),
// and an entry without "=" that merging would drop, are refused, naming
// the rank; the rest is the agent's to check (validateStartJob).
func (j *StartJob) Expand() error {
	for i := range j.Ranks {
		r := &j.Ranks[i]
		if len(r.Argv) == 0 && len(j.Argv) > 0 {
			r.Argv = j.Argv
		}
		if r.Dir == "" {
			r.Dir = j.Dir
		}
		if r.Place == nil && len(j.HostEnv) == 0 {
			continue
		}
		for _, l := range [][]string{j.HostEnv, r.Env} {
			for _, kv := range l {
				if !strings.Contains(kv, "=") {
					return fmt.Errorf("rank %d: environment entry %.80q: want KEY=VALUE", r.Rank, kv)
				}
			}
		}
		var id []string
		if p := r.Place; p != nil {
			if err := p.check(len(j.Ranks)); err != nil {
				return fmt.Errorf("rank %d: %w", r.Rank, err)
			}
			id = make([]string, 0, 17)
			Identity(r.Rank, r.LocalRank, *p, func(k, v string) { id = append(id, k+"="+v) })
		}
		r.Env = environ.Merge(id, j.HostEnv, r.Env)
		r.Place = nil
	}
	j.Argv, j.Dir, j.HostEnv = nil, "", nil
	return nil
}

// check refuses a Place that cannot be that of a rank on a host running
// n ranks.
func (p Place) check(n int) error {
	switch {
	case p.LocalSize != n:
		return fmt.Errorf("place: local size %d, but this host runs %d", p.LocalSize, n)
	case p.Node < 0:
		return fmt.Errorf("place: node %d: want 0 or more", p.Node)
	case p.Cross < 0 || p.Cross >= p.CrossSize:
		return fmt.Errorf("place: cross rank %d of %d: want 0 to %d", p.Cross, p.CrossSize, p.CrossSize-1)
	}
	return nil
}

// CheckShared checks a job frame (KindJob): the part of a start every host
// shares, so it names the job and carries no host's part (no ranks, no
// HostEnv, no Argv or Dir, not itself Shared).
func (j *StartJob) CheckShared() error {
	switch {
	case j.JobID == "":
		return fmt.Errorf("the job's shared start names no job")
	case len(j.Ranks) > 0 || len(j.HostEnv) > 0 || len(j.Argv) > 0 || j.Dir != "" || j.Shared:
		return fmt.Errorf("the job's shared start for %s carries a host's part (ranks, host_env, argv, dir or shared)", j.JobID)
	}
	return nil
}

// WithShared completes a start that says Shared with the job's shared
// start sh (the KindJob frame that came before it, nil when none did):
// Env, KillGrace, StdinRank, PMI and Bind become sh's. A start that says
// Shared and carries Env, PMI or Bind itself, or names another job, is
// refused, as is one whose shared start never came. A start that does not
// say Shared is left as it is.
func (j *StartJob) WithShared(sh *StartJob) error {
	if !j.Shared {
		return nil
	}
	switch {
	case sh == nil:
		return fmt.Errorf("the start of %s refers to the job's shared start, which did not come before it", j.JobID)
	case sh.JobID != j.JobID:
		return fmt.Errorf("the start of %s refers to the shared start of another job (%s)", j.JobID, sh.JobID)
	case len(j.Env) > 0 || j.PMI != nil || j.Bind != "":
		return fmt.Errorf("the start of %s refers to the job's shared start and carries env, pmi or bind itself", j.JobID)
	}
	j.Env, j.KillGrace, j.StdinRank, j.PMI, j.Bind = sh.Env, sh.KillGrace, sh.StdinRank, sh.PMI, sh.Bind
	j.Shared = false
	return nil
}
