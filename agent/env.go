package agent

import (
	"os"
	"strings"

	"github.com/gangway-hpc/gangway/agent/account"
	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/internal/environ"
)

// rankEnv is a rank's whole environment: the one place where the agent
// adds to what the launcher sends for the rank (wire.RankSpec.Env). Its
// sources, lowest precedence first (a later one wins a name an earlier
// one sets):
//
//  1. base, what ranks start from: Agent.BaseEnv, by default the agent's
//     own environment (under srun, SrunRankEnv's);
//  2. the identity of the login the ranks run as, HOME, LOGNAME, SHELL
//     and USER (account.Account.Identity), when the session is a login
//     of the SSH server (who is nil for --stdio and the launcher's
//     in-process agent);
//  3. TORCHELASTIC_ERROR_FILE=errorFile, the rank's own error file
//     (session.errorFile), unless errorFile is "": the launcher's Env
//     sets the variable itself, or no file could be made;
//  4. shared, the job's StartJob.Env: what the launcher forwards of its
//     own environment (never HOME, USER, LOGNAME, SHELL unless the user
//     listed them: those stay the login's) under what it gives every
//     rank alike (the job's variables, -mca, -x);
//  5. the rank's RankSpec.Env: its identity (RANK, PMI_RANK, ...), its
//     GPUs, the host's name and network variables, where they win over
//     the shared ones (from the compact form, StartJob.Expand has built
//     the identity and merged StartJob.HostEnv in);
//  6. pmiEnv, PMI_FD when the agent serves the job's PMI
//     (pmi.Server.Env).
//
// Nothing else is added. The list is built in one pass, one entry per
// name, sorted.
func rankEnv(base []string, who *account.Account, errorFile string, shared []string, r wire.RankSpec, pmiEnv []string) []string {
	var identity, errFile []string
	if who != nil {
		identity = who.Identity()
	}
	if errorFile != "" {
		errFile = []string{errorFileVar + "=" + errorFile}
	}
	return environ.Merge(base, identity, errFile, shared, r.Env, pmiEnv)
}

// baseEnv is what a's ranks start from (rankEnv): BaseEnv, or the
// agent's own environment when that is nil.
func (a *Agent) baseEnv() []string {
	if a.BaseEnv == nil {
		return os.Environ()
	}
	return a.BaseEnv
}

// SrunRankEnv is the environment ranks start from under an agent started
// by srun: the agent's own, less what describes the agent's step and task
// rather than the job, so that ranks look as they do under an agent
// started any other way. Frameworks that read SLURM_PROCID, SLURM_NTASKS
// or SLURM_LOCALID to find their rank (when SLURM_NTASKS is set) would
// otherwise take the agent's task number for theirs; the launcher's
// RANK, WORLD_SIZE, LOCAL_RANK and PMI_* are the ranks' identity. The
// job's SLURM_JOB_*, SLURM_CLUSTER_NAME, SLURM_CONF, SLURM_SUBMIT_*,
// SLURMD_NODENAME and the like stay.
func SrunRankEnv(environ []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if !stepVar(k) {
			out = append(out, kv)
		}
	}
	return out
}

// stepVar reports whether k describes the agent's srun step or task
// (srun's output environment) rather than the job.
func stepVar(k string) bool {
	switch k {
	case wire.SrunKeyEnv,
		"SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_GTIDS", "SLURM_TASK_PID",
		"SLURM_NTASKS", "SLURM_NPROCS", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE",
		"SLURM_STEPID", "SLURM_LAUNCH_NODE_IPADDR", "SLURM_DISTRIBUTION", "SLURM_MPI_TYPE",
		"SLURM_PRIO_PROCESS", "SLURM_UMASK", "SLURM_LABELIO", "SLURM_OVERLAP", "SLURM_EXPORT_ENV",
		"SLURM_CPUS_PER_TASK", "SLURM_KILL_BAD_EXIT", "SLURM_STDINMODE":
		return true
	}
	for _, p := range []string{"SLURM_STEP_", "SLURM_CPU_BIND", "SLURM_SRUN_COMM_", "PMI_", "PMIX_"} {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}
