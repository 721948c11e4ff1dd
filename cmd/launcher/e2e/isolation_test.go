package e2e_test

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed/roottest"
)

// TestLocalRanksIsolated: the launcher's local mode (its built-in agent
// and the job's supervisor, the launcher's binary re-executed) started by
// a careless parent (SIGHUP and SIGPIPE ignored, SIGUSR2 blocked, a stray
// pipe: e2e.DirtyEnv) runs 16 isolated ranks on this machine, in the
// job's cgroup: each rank and its child hold exactly their own
// descriptors with default signals, and no rank's forged writes reach
// another rank's tag, output file or PMI stream.
func TestLocalRanksIsolated(t *testing.T) {
	e2e.NoTree(t, "local ranks only")
	roottest.RequireRoot(t) // the job cgroup
	launcherBin, _ := e2e.BuildBinaries(t)
	const np = 16
	dir := t.TempDir()
	release, outDir := filepath.Join(dir, "release"), filepath.Join(dir, "out")
	l := e2e.StartProc(t, e2e.DirtyEnv(false), self(t), launcherBin, "-l", "-np", strconv.Itoa(np),
		"--output-filename", outDir, "-x", e2e.IsolatedEnv+"="+release, self(t))
	out, ok := l.Stdout.WaitFor(e2e.Deadline, func(s string) bool { return len(e2e.IsolatedReady(s)) == np })
	if !ok {
		t.Fatalf("not every rank got ready:\n%s\nstderr:\n%s", out, l.Stderr)
	}
	e2e.CheckIsolated(t, e2e.IsolatedReady(out), true)
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := l.Wait(t); code != 0 {
		t.Fatalf("launcher exit %d; stderr:\n%s", code, l.Stderr)
	}
	e2e.CheckForged(t, l.Stdout.String(), outDir, np)
}
