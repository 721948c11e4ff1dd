//go:build linux

package slurm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
	"github.com/gangway-hpc/gangway/cmd/internal/slurmbed"
	"github.com/gangway-hpc/gangway/cmd/internal/slurmbed/slurmtest"
)

// localNames is a bed whose node names resolve only on their own node
// (slurm.conf's NodeName is no DNS name; NodeAddr is the address), as on
// many cloud and container clusters: on cn1, cn2 does not resolve, and
// on the login node (the root namespace) neither does.
var localNames = slurmtest.Shared{Options: slurmbed.Options{Prefix: "gwh51", Subnet: 51, Nodes: 2, CPUs: 8, LocalNamesOnly: true}}

// localNamesBed returns the bed once every node is idle.
func localNamesBed(t *testing.T) *slurmbed.Bed {
	t.Helper()
	b := localNames.Get(t)
	if err := b.WaitIdle(t.Context(), 60*time.Second); err != nil {
		t.Fatalf("%v%s", err, b.Logs())
	}
	return b
}

// TestSallocNodeNamesUnresolved: where a node's name resolves only on that
// node, a two-node job runs: the agents are told of their peers by the
// addresses they reported (and the launcher dialled), not by names, so
// the interface choice finds the data NIC on both (before, every host
// failed with "no usable network interface: no route to peer cn2 (no
// addresses)"). MASTER_ADDR is cn1's address. 8 ranks a node.
func TestSallocNodeNamesUnresolved(t *testing.T) {
	b := localNamesBed(t)
	// The bed is what it claims: on cn1, cn2 does not resolve.
	if out, err := b.Command(t.Context(), "srun", "-N1", "-w", "cn1", "getent", "hosts", "cn2").CombinedOutput(); err == nil {
		t.Fatalf("cn2 resolves on cn1 (%s): the bed does not reproduce the case", strings.TrimSpace(string(out)))
	}
	script := `echo "rank=$RANK host=$(hostname) master=$MASTER_ADDR ifname=$NCCL_SOCKET_IFNAME"`
	j := startJob(t, b, nil, sallocLauncher(t, []string{"-N2", "--ntasks-per-node=8"}, "-v", "sh", "-c", script)...)
	j.wait(t)
	if j.code != 0 {
		t.Fatalf("salloc launcher sh: %v", j)
	}
	master := b.Nodes()[0].Addr
	lines := e2e.RankLines(j.stdout.String())
	for r := range 16 {
		want := fmt.Sprintf("rank=%d host=cn%d master=%s ifname==enp1s0f0", r, r/8+1, master)
		if got := lines[r]; len(got) != 1 || got[0] != want {
			t.Errorf("rank %d printed %q, want [%q]", r, got, want)
		}
	}
	if len(lines) != 16 {
		t.Errorf("%d ranks printed, want 16", len(lines))
	}
	checkNothingLeft(t, b, j)
}

// TestSallocAgentBesideLauncher: run from a directory that holds an
// agent/ directory (the source tree's root) with no --agent-path, the
// launcher starts the agent beside itself (bin/agent beside bin/launcher,
// by absolute path): before, slurmstepd executed the directory and every
// node failed with "execve(): agent: Permission denied".
func TestSallocAgentBesideLauncher(t *testing.T) {
	b := localNamesBed(t)
	launcherBin, _ := binaries(t)
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	j := startJobIn(t, b, root, nil, "salloc", "-N2", launcherBin, "-l", "sh", "-c", `echo "rank $RANK on $(hostname)"`)
	j.wait(t)
	if j.code != 0 {
		t.Fatalf("salloc launcher from a directory with agent/: %v", j)
	}
	lines := e2e.RankLines(j.stdout.String())
	for r := range 2 {
		want := fmt.Sprintf("rank %d on cn%d", r, r+1)
		if got := lines[r]; len(got) != 1 || got[0] != want {
			t.Errorf("rank %d printed %q, want [%q]", r, got, want)
		}
	}
	if strings.Contains(j.stderr.String(), "Permission denied") {
		t.Errorf("stderr: %s", j.stderr.String())
	}
	checkNothingLeft(t, b, j)
}
