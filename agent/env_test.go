package agent

import (
	"slices"
	"testing"

	"github.com/gangway-hpc/gangway/agent/account"
	"github.com/gangway-hpc/gangway/agent/wire"
)

func TestSrunRankEnv(t *testing.T) {
	in := []string{
		"PATH=/usr/bin", "HOME=/root", wire.SrunKeyEnv + "=ssh-ed25519 AAAA",
		"SLURM_JOB_ID=7", "SLURM_JOB_NODELIST=cn[1-3]", "SLURM_JOBID=7", "SLURM_CLUSTER_NAME=c", "SLURM_CONF=/etc/slurm.conf",
		"SLURMD_NODENAME=cn2", "SLURM_SUBMIT_DIR=/home/u", "SLURM_NNODES=3", "SLURM_JOB_CPUS_PER_NODE=8(x3)",
		"SLURM_PROCID=1", "SLURM_LOCALID=0", "SLURM_NODEID=1", "SLURM_NTASKS=3", "SLURM_NPROCS=3", "SLURM_GTIDS=1",
		"SLURM_STEP_ID=0", "SLURM_STEPID=0", "SLURM_STEP_NODELIST=cn[1-3]", "SLURM_TASKS_PER_NODE=1(x3)",
		"SLURM_CPU_BIND=quiet,none", "SLURM_CPU_BIND_TYPE=none", "SLURM_SRUN_COMM_HOST=10.0.0.1", "SLURM_LAUNCH_NODE_IPADDR=10.0.0.1",
		"SLURM_TASK_PID=99", "PMI_FD=5", "PMIX_RANK=1", "NCCL_DEBUG=INFO",
	}
	want := []string{
		"PATH=/usr/bin", "HOME=/root",
		"SLURM_JOB_ID=7", "SLURM_JOB_NODELIST=cn[1-3]", "SLURM_JOBID=7", "SLURM_CLUSTER_NAME=c", "SLURM_CONF=/etc/slurm.conf",
		"SLURMD_NODENAME=cn2", "SLURM_SUBMIT_DIR=/home/u", "SLURM_NNODES=3", "SLURM_JOB_CPUS_PER_NODE=8(x3)",
		"NCCL_DEBUG=INFO",
	}
	if got := SrunRankEnv(in); !slices.Equal(got, want) {
		t.Errorf("SrunRankEnv:\n got %q\nwant %q", got, want)
	}
}

// TestRankEnvPrecedence: what the agent adds to a rank's environment and
// which source wins a name: base < the login's identity < the rank's
// error file < the job's shared Env (forwarded) < the rank's Env < PMI_FD.
func TestRankEnvPrecedence(t *testing.T) {
	base := []string{"HOME=/agent", "PATH=/bin", "PMI_FD=9", "TORCHELASTIC_ERROR_FILE=/agent/err", "USER=agent", "NCCL_DEBUG=WARN"}
	who := &account.Account{Name: "u", Home: "/home/u", Shell: "/bin/bash"}
	shared := []string{"PATH=/u/bin", "NCCL_DEBUG=INFO", "RANK=7"}
	r := wire.RankSpec{Rank: 1, Env: []string{"PMI_FD=7", "RANK=1", "USER=launcher"}}
	got := rankEnv(base, who, "/shm/rank.1.json", shared, r, []string{"PMI_FD=3"})
	want := []string{"HOME=/home/u", "LOGNAME=u", "NCCL_DEBUG=INFO", "PATH=/u/bin", "PMI_FD=3", "RANK=1", "SHELL=/bin/bash",
		"TORCHELASTIC_ERROR_FILE=/shm/rank.1.json", "USER=launcher"}
	if !slices.Equal(got, want) {
		t.Errorf("rankEnv:\n got %q\nwant %q", got, want)
	}
	// The launcher's own error file wins; no login: no identity; no PMI.
	r.Env = append(r.Env, "TORCHELASTIC_ERROR_FILE=/launcher/err")
	got = rankEnv(base, nil, "/shm/rank.1.json", nil, r, nil)
	want = []string{"HOME=/agent", "NCCL_DEBUG=WARN", "PATH=/bin", "PMI_FD=7", "RANK=1", "TORCHELASTIC_ERROR_FILE=/launcher/err", "USER=launcher"}
	if !slices.Equal(got, want) {
		t.Errorf("rankEnv without a login:\n got %q\nwant %q", got, want)
	}
}
