//go:build linux

package hostnet

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed/roottest"
)

// TestTorchRestartFromCheckpoint: a real PyTorch DDP job (gloo) of
// eight ranks on each of two namespace hosts, as on two DGX nodes,
// checkpoints every 5 steps; in the first attempt rank 9 (the second
// host's second rank) is killed at step 8. With --max-restarts 1 the
// launcher stops the gang and starts it again; all sixteen ranks resume
// from the step-5 checkpoint and finish with w = 0.8^20 = 0.011529, exit
// 0. With --max-restarts 0 the same job fails as before: rank 9's
// SIGKILL, exit 137. Nothing is left running either way.
//
// Not parallel: sixteen torch imports at once (about 2 s of CPU each)
// starve the package's other torch tests on a two-CPU machine, whose
// ranks then say nothing for longer than their --hang-timeout while
// torch loads.
func TestTorchRestartFromCheckpoint(t *testing.T) {
	roottest.RequireRoot(t)
	needTorch(t)
	script, err := filepath.Abs("testdata/ddp_resume.py")
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, "gwh5", 175, 2)
	agents := c.startAgents(t)
	const perHost, size, victim = 8, 16, 9
	job := func(dir string, restarts int) []string {
		return append(c.conn(c.hostList(perHost)), "-np", fmt.Sprint(size), "--max-restarts", fmt.Sprint(restarts), "--restart-backoff", "0.5",
			"-x", "CKPT="+filepath.Join(dir, "ckpt.pt"), "-x", fmt.Sprintf("KILL_RANK=%d", victim), debianPython, script)
	}

	t.Run("Resumes", func(t *testing.T) {
		l := runLauncher(t, job(t.TempDir(), 1)...)
		t.Logf("launcher: %v", l)
		if l.code != 0 {
			t.Fatalf("exit code %d, want 0 after one restart", l.code)
		}
		out, errOut := l.stdout.String(), l.stderr.String()
		want := []string{fmt.Sprintf("rank %d dies at step 8", victim)}
		for r := range size {
			want = append(want, fmt.Sprintf("rank %d attempt 1 resumed from step 5", r), fmt.Sprintf("rank %d attempt 1 world %d final w 0.011529", r, size))
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("stdout lacks %q", w)
			}
		}
		if !strings.Contains(errOut, fmt.Sprintf("rank %d on %s", victim, c.hosts[1].Addr)) || !strings.Contains(errOut, "killed by signal 9 (SIGKILL)") ||
			!strings.Contains(errOut, "restarting the whole gang") {
			t.Errorf("stderr does not say why the first attempt ended (rank %d on %s, SIGKILL) and that the gang restarts:\n%s", victim, c.hosts[1].Addr, e2e.Tail(errOut, 3000))
		}
		c.waitOnlyAgents(t, agents)
	})
	t.Run("NoRestarts", func(t *testing.T) {
		l := runLauncher(t, job(t.TempDir(), 0)...)
		t.Logf("launcher: %v", l)
		if l.code != 137 || strings.Contains(l.stdout.String(), "final w") {
			t.Errorf("exit code %d, want 137 (rank %d's SIGKILL) and no rank finishing", l.code, victim)
		}
		c.waitOnlyAgents(t, agents)
	})
}
