//go:build linux

package slurm

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
)

// TestSallocRanksIsolated: `salloc -N2 --ntasks-per-node=8 launcher
// RANK`: 8 isolated ranks (e2e.HelperMain) on each of 2 Slurm nodes,
// under agents that srun started: each rank and its child hold exactly
// their own descriptors with default signals, and no rank's forged
// writes reach another rank's tag, output file or PMI stream.
func TestSallocRanksIsolated(t *testing.T) {
	b := bed(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const np = 16
	dir := t.TempDir()
	release, outDir := filepath.Join(dir, "release"), filepath.Join(dir, "out")
	j := startJob(t, b, nil, sallocLauncher(t, []string{"-N2", "--ntasks-per-node=8"},
		"--output-filename", outDir, "-x", e2e.IsolatedEnv+"="+release, self)...)
	out, ok := j.stdout.WaitFor(jobTimeout, func(s string) bool { return len(e2e.IsolatedReady(s)) == np })
	if !ok {
		t.Fatalf("not every rank got ready:\n%s\nstderr:\n%s", out, j.stderr.String())
	}
	e2e.CheckIsolated(t, e2e.IsolatedReady(out), false)
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	j.wait(t)
	if j.code != 0 {
		t.Fatalf("salloc launcher: %v", j)
	}
	e2e.CheckForged(t, j.stdout.String(), outDir, np)
	checkNothingLeft(t, b, j)
}
