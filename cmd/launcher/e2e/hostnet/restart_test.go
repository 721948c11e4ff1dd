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

// TestTorchRestartFromCheckpoint: a real PyTorch DDP job (gloo) on two
// namespace hosts checkpoints every 5 steps; in the first attempt rank 1
// is killed at step 8. With --max-restarts 1 the launcher stops the gang
// and starts it again; the ranks resume from the step-5 checkpoint and
// finish with w = 0.8^20 = 0.011529, exit 0. With --max-restarts 0 the
// same job fails as before: rank 1's SIGKILL, exit 137. Nothing is left
// running either way.
func TestTorchRestartFromCheckpoint(t *testing.T) {
	t.Parallel()
	roottest.RequireRoot(t)
	needTorch(t)
	script, err := filepath.Abs("testdata/ddp_resume.py")
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, "gwh5", 175, 2)
	agents := c.startAgents(t)
	job := func(dir string, restarts int) []string {
		return append(c.conn(c.hostList(1)), "-np", "2", "--max-restarts", fmt.Sprint(restarts), "--restart-backoff", "0.5",
			"-x", "CKPT="+filepath.Join(dir, "ckpt.pt"), "-x", "KILL_RANK=1", debianPython, script)
	}

	t.Run("Resumes", func(t *testing.T) {
		l := runLauncher(t, job(t.TempDir(), 1)...)
		t.Logf("launcher: %v", l)
		if l.code != 0 {
			t.Fatalf("exit code %d, want 0 after one restart", l.code)
		}
		out, errOut := l.stdout.String(), l.stderr.String()
		for _, want := range []string{"rank 1 dies at step 8", "rank 0 attempt 1 resumed from step 5", "rank 1 attempt 1 resumed from step 5",
			"rank 0 attempt 1 world 2 final w 0.011529", "rank 1 attempt 1 world 2 final w 0.011529"} {
			if !strings.Contains(out, want) {
				t.Errorf("stdout lacks %q", want)
			}
		}
		if !strings.Contains(errOut, "killed by signal 9 (SIGKILL)") || !strings.Contains(errOut, "restarting the whole gang") {
			t.Errorf("stderr does not say why the first attempt ended and that the gang restarts:\n%s", e2e.Tail(errOut, 3000))
		}
		c.waitOnlyAgents(t, agents)
	})
	t.Run("NoRestarts", func(t *testing.T) {
		l := runLauncher(t, job(t.TempDir(), 0)...)
		t.Logf("launcher: %v", l)
		if l.code != 137 || strings.Contains(l.stdout.String(), "final w") {
			t.Errorf("exit code %d, want 137 (rank 1's SIGKILL) and no rank finishing", l.code)
		}
		c.waitOnlyAgents(t, agents)
	})
}
