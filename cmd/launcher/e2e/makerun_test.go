package e2e_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
)

// TestMakeRun is `make run` on loopback: two agent processes with
// throwaway keys, 8 ranks of a shell command through a launcher process,
// with -l as examples/local-cluster.sh asks for tags (its output may be a
// pipe).
func TestMakeRun(t *testing.T) {
	t.Parallel()
	launcherBin, agentBin := e2e.BuildBinaries(t)
	c := e2e.StartProcs(t, 2, agentBin)
	args := append(c.SSHFlags(), "-l", "-np", "8", "-H", c.HostList(4), "sh", "-c", `echo "$RANK on $GANGWAY_HOST"`)
	t0 := time.Now()
	l := e2e.StartProc(t, nil, launcherBin, args...)
	if code := l.Wait(t); code != 0 {
		t.Fatalf("exit code %d\nstdout:\n%s\nstderr:\n%s", code, l.Stdout, l.Stderr)
	}
	took := time.Since(t0)
	got := lines(l.Stdout.String())
	var want []string
	for r := range 8 {
		want = append(want, fmt.Sprintf("[%d] %d on %s", r, r, c.Hosts[r/4].Addr))
	}
	sorted := slices.Clone(got)
	slices.Sort(sorted)
	if !slices.Equal(sorted, want) {
		t.Errorf("output:\n%s\nwant (in any order):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	t.Logf("launcher %s (%v):\n%s", strings.Join(args[4:], " "), took.Round(time.Millisecond), l.Stdout)
}
