//go:build linux

package slurm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
)

// mpichEnv is what MPICH ranks need between namespace hosts (found by
// cmd/launcher/e2e/nettest): UCX over TCP on the data NIC, shared memory
// within a kernel.
var mpichEnv = []string{"-x", "UCX_TLS=tcp,self,sm", "-x", "UCX_NET_DEVICES=enp1s0f0", "-x", "UCX_WARN_UNUSED_ENV_VARS=n"}

// TestSallocMPICH: `salloc -N3 --ntasks-per-node=8 launcher mpitest`: the
// launcher reads the allocation, starts one agent per node with srun, and
// a real MPICH program runs 24 ranks, 8 per node, with the PMI the agents
// serve (ranks and node-local ranks checked). The ranks' environment is
// the job's, not the agents' step's. Nothing is written under the
// launcher's HOME (no known_hosts), and nothing is left on any node.
func TestSallocMPICH(t *testing.T) {
	const per, np = 8, 24
	b := bed(t)
	bin := compileMPITest(t)
	home := t.TempDir()
	args := append([]string{"--kill-grace", "2s"}, mpichEnv...)
	j := startJob(t, b, []string{"HOME=" + home}, sallocLauncher(t, []string{"-N3", "--ntasks-per-node=8"}, append(args, bin)...)...)
	j.wait(t)
	if j.code != 0 {
		t.Fatalf("salloc launcher mpitest: %v", j)
	}
	lines := e2e.RankLines(j.stdout.String())
	for r := range np {
		want := fmt.Sprintf("rank %d size %d local %d/%d sum %d bcast ok", r, np, r%per, per, np*(np-1)/2)
		if got := lines[r]; len(got) != 1 || got[0] != want {
			t.Errorf("rank %d printed %q, want [%q]", r, got, want)
		}
	}
	if len(lines) != np {
		t.Errorf("%d ranks printed, want %d:\n%s", len(lines), np, j.stdout.String())
	}
	if ents, _ := os.ReadDir(home); len(ents) != 0 {
		t.Errorf("the launcher wrote under its HOME: %v", ents)
	}
	checkNothingLeft(t, b, j)
	t.Logf("%d MPICH ranks on 3 Slurm nodes: salloc ran %v", np, j.took)
}

// TestSallocEnvironment: every rank of 3 nodes x 8 sees its launcher
// identity, its own node's hostname and SLURMD_NODENAME, the job's
// SLURM_JOB_ID, and none of the agent's own step (SLURM_PROCID,
// SLURM_NTASKS, SLURM_STEP_ID) or the launcher's key; -x reaches the
// ranks; the ranks of each node are numbered as the plan says (fill by
// slot).
func TestSallocEnvironment(t *testing.T) {
	const per, np = 8, 24
	b := bed(t)
	script := `echo "rank=$RANK local=$LOCAL_RANK/$LOCAL_WORLD_SIZE size=$WORLD_SIZE host=$(hostname) node=$SLURMD_NODENAME job=$SLURM_JOB_ID` +
		` procid=${SLURM_PROCID-unset} ntasks=${SLURM_NTASKS-unset} step=${SLURM_STEP_ID-unset} key=${GANGWAY_SRUN_LAUNCHER_KEY-unset} x=$FROM_X"`
	j := startJob(t, b, nil, sallocLauncher(t, []string{"-N3", "--ntasks-per-node=8"}, "-x", "FROM_X=yes", "sh", "-c", script)...)
	id := j.jobID(t)
	j.wait(t)
	if j.code != 0 {
		t.Fatalf("salloc launcher sh: %v", j)
	}
	lines := e2e.RankLines(j.stdout.String())
	for r := range np {
		node := fmt.Sprintf("cn%d", r/per+1)
		want := fmt.Sprintf("rank=%d local=%d/%d size=%d host=%s node=%s job=%s procid=unset ntasks=unset step=unset key=unset x=yes", r, r%per, per, np, node, node, id)
		if got := lines[r]; len(got) != 1 || got[0] != want {
			t.Errorf("rank %d printed %q, want [%q]", r, got, want)
		}
	}
	if len(lines) != np {
		t.Errorf("%d ranks printed, want %d", len(lines), np)
	}
	checkNothingLeft(t, b, j)
}

// debianPython is Debian's Python, where python3-torch lives.
const debianPython = "/usr/bin/python3"

// TestSallocTorchGloo: a real python3-torch Gloo all_reduce across the
// three nodes (one rank each), with MASTER_ADDR and GLOO_SOCKET_IFNAME the
// launcher chose from the agents' facts.
func TestSallocTorchGloo(t *testing.T) {
	b := bed(t)
	out, err := exec.CommandContext(t.Context(), debianPython, "-c",
		"import torch.distributed as d; assert d.is_gloo_available(), 'torch without gloo'").CombinedOutput()
	if err != nil {
		t.Skipf("%s cannot import torch with Gloo (Debian: python3-torch): %v: %s", debianPython, err, e2e.Tail(string(out), 500))
	}
	script, err := filepath.Abs("../hostnet/testdata/allreduce.py")
	if err != nil {
		t.Fatal(err)
	}
	j := startJob(t, b, nil, sallocLauncher(t, []string{"-N3"}, debianPython, script)...)
	j.wait(t)
	if j.code != 0 {
		t.Fatalf("torch gloo all_reduce: %v", j)
	}
	lines := e2e.RankLines(j.stdout.String())
	master := b.Nodes()[0].Addr
	for r := range 3 {
		for _, want := range []string{"GLOO_SOCKET_IFNAME=enp1s0f0 MASTER_ADDR=" + master, fmt.Sprintf("rank %d of 3 sum 3", r)} {
			if !strings.Contains(strings.Join(lines[r], "\n"), want) {
				t.Errorf("rank %d printed %q, want a line with %q", r, lines[r], want)
			}
		}
	}
	checkNothingLeft(t, b, j)
	t.Logf("torch gloo all_reduce on 3 Slurm nodes: salloc ran %v", j.took)
}

// TestSallocInspect: --inspect inside an allocation reaches every node's
// agent through srun and prints each node's facts.
func TestSallocInspect(t *testing.T) {
	b := bed(t)
	j := startJob(t, b, nil, sallocLauncher(t, []string{"-N3"}, "--inspect")...)
	j.wait(t)
	if j.code != 0 {
		t.Fatalf("salloc launcher --inspect: %v", j)
	}
	for _, n := range b.Nodes() {
		if !strings.Contains(j.stdout.String(), n.Name) || !strings.Contains(j.stdout.String(), n.Addr) {
			t.Errorf("--inspect output lacks %s (%s):\n%s", n.Name, n.Addr, j.stdout.String())
		}
	}
	checkNothingLeft(t, b, j)
}
