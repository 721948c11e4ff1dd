//go:build linux

package slurm

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
)

// TestSallocTree: the agent tree under Slurm. `salloc -N3
// --ntasks-per-node=8 launcher --tree-width 1 mpitest`: srun starts the
// three agents; the launcher reaches the first node's agent itself, that
// agent relays for the second, the second for the third, each relay
// logging in with a certificate the step's one-time key signed (there is
// no other key the agents trust). A real MPICH program runs 24 ranks; the
// first relay combines the fences of all three nodes (one subtree fence
// per barrier), no node refuses the certificate, and nothing is left on
// any node.
func TestSallocTree(t *testing.T) {
	b := bed(t)
	bin := compileMPITest(t)
	const nodes, per = 3, 8
	args := append([]string{"-v", "--tree-width", "1", "--kill-grace", "2s"}, mpichEnv...)
	j := startJob(t, b, nil, sallocLauncher(t, []string{fmt.Sprintf("-N%d", nodes), fmt.Sprintf("--ntasks-per-node=%d", per)}, append(args, bin)...)...)
	j.wait(t)
	if j.code != 0 {
		t.Fatalf("salloc launcher --tree-width 1 mpitest: %v", j)
	}
	np := nodes * per
	lines := e2e.RankLines(j.stdout.String())
	for r := range np {
		want := fmt.Sprintf("rank %d size %d local %d/%d sum %d bcast ok", r, np, r%per, per, np*(np-1)/2)
		if got := lines[r]; len(got) != 1 || got[0] != want {
			t.Errorf("rank %d printed %q, want [%q]", r, got, want)
		}
	}
	stderr := j.stderr.String()
	if !regexp.MustCompile(`agent tree.*"width": 1, "hosts": 3, "levels": 3`).MatchString(stderr) {
		t.Errorf("the launcher did not log a chain of 3 levels over 3 nodes:\n%s", e2e.Tail(stderr, 4000))
	}
	if !regexp.MustCompile(`subtree fence.*"relay": "[^"]+", "seq": 1, "hosts": 3`).MatchString(stderr) {
		t.Errorf("no subtree fence of all 3 nodes from the first relay:\n%s", e2e.Tail(stderr, 4000))
	}
	if strings.Contains(stderr, "refused the relay's job certificate") {
		t.Errorf("a node refused the relay's certificate:\n%s", e2e.Tail(stderr, 4000))
	}
	checkNothingLeft(t, b, j)
}
