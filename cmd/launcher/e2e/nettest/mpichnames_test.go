package nettest

import (
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/cmd/internal/testbed"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed/roottest"
)

var namepubTest built

// TestMPICHNameService: MPI_Publish_name on rank 0, MPI_Lookup_name on
// every rank, MPI_Unpublish_name, as MPICH's namepub test does: under
// mpiexec.hydra (the reference), then under the launcher with the ranks
// on two network-namespace hosts, where the lookup must cross hosts
// through the launcher's name table.
func TestMPICHNameService(t *testing.T) {
	bin := compileMPI(t, &namepubTest, "mpicc.mpich", "testdata/namepub.c", "namepub")
	want := func(r int) string { return fmt.Sprintf("rank %d lookup ok unpublished ok", r) }
	t.Run("Hydra", func(t *testing.T) {
		hydra, err := exec.LookPath("mpiexec.hydra")
		if err != nil {
			t.Skip("mpiexec.hydra not found")
		}
		tag := newTag(t)
		// Both ranks on this machine: shared memory, so that UCX does
		// not probe the root namespace's devices, which other tests'
		// beds add and remove meanwhile ("init_worker No such device"
		// when one went away mid-probe), as mpichLoopEnv does.
		env := []string{tagEnv + "=" + tag, "UCX_TLS=self,sm", "UCX_WARN_UNUSED_ENV_VARS=n"}
		l := run(t, env, hydra, "-l", "-launcher", "fork", "-hosts", "gwm-a,gwm-b", "-n", "2", bin)
		if l.code != 0 {
			t.Fatalf("mpiexec.hydra: %v", l)
		}
		checkMPICHLines(t, l.stdout.String(), 2, want)
		waitNoTagged(t, tag, 10*time.Second)
	})
	t.Run("TwoHosts", func(t *testing.T) {
		roottest.RequireRoot(t)
		_, launcherBin := binaries(t)
		b := newAgentBed(t, testbed.Options{Prefix: "gwm1", Hosts: 2, Subnet: 201})
		hosts, agents, keys, kh := b.hosts, b.agents, b.keys, b.knownHosts
		tag := newTag(t)
		args := append([]string{"-i", keys.ClientKey, "--known-hosts", kh, "-H", hosts[0].Addr + ":1," + hosts[1].Addr + ":1",
			"-l", "-np", "2", "-x", tagEnv + "=" + tag}, mpichNetEnv(testbed.DefaultDataNIC)...)
		l := run(t, nil, launcherBin, append(args, bin)...)
		if l.code != 0 {
			t.Fatalf("launcher: %v", l)
		}
		logRankLines(t, l.stdout.String())
		checkMPICHLines(t, l.stdout.String(), 2, want)
		waitNoTagged(t, tag, 10*time.Second)
		for i, h := range hosts {
			waitNetnsOnly(t, h.NS, 10*time.Second, agents[i].Pid)
		}
	})
}
