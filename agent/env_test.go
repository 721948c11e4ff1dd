package agent

import (
	"slices"
	"testing"

	"gangway/agent/wire"
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
