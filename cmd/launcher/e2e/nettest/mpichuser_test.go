package nettest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/agenttest"
	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
)

// TestMPICHAsUser: a real MPICH program launched as a user other than the
// agents' (root) runs every rank as that user, and PMI works for them:
// each rank's PMI socket is an inherited socketpair (PMI_FD), which the
// rank can use whoever created it. Every rank reports its uid through
// /proc/self/status, the job ends with 0, and nothing is left.
func TestMPICHAsUser(t *testing.T) {
	agenttest.RequireRoot(t)
	bin := compileMPI(t, &mpichTest, "mpicc.mpich", mpitestSrc, "mpitest")
	u := agenttest.NewUser(t, "")
	keys, err := sshtest.GenKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	u.Authorize(t, keys.ClientSigner.PublicKey())
	// The user's copy of the program: binDir is root's.
	dir, err := os.MkdirTemp("", "gw-mpich-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "mpitest")
	if err := os.WriteFile(prog, b, 0o755); err != nil {
		t.Fatal(err)
	}

	c := e2e.StartLocal(t, 2)
	var hosts []string
	for _, h := range c.Hosts {
		hosts = append(hosts, fmt.Sprintf("%s@%s:2:%d", u.Name, h.Addr, h.Port))
	}
	tag := newTag(t)
	args := append([]string{"-i", keys.ClientKey, "--known-hosts", c.KnownHosts, "-H", strings.Join(hosts, ","),
		"-l", "-np", "4", "-wdir", dir, "-x", tagEnv + "=" + tag}, mpichLoopEnv...)
	// Each rank prints mpitest's line, then its Uid line on stderr.
	args = append(args, "sh", "-c", prog+` && grep '^Uid:' /proc/self/status >&2`)
	l := launchInProcArgs(t, args...)
	if l.code != 0 {
		t.Fatalf("launcher: %v", l)
	}
	out := l.stdout.String()
	checkMPICHLines(t, out, 4, func(r int) string { return mpichLine(r, 4, r%2, 2) })
	want := fmt.Sprintf("Uid:\t%d\t%d\t%d\t%d", u.Uid, u.Uid, u.Uid, u.Uid)
	for r := range 4 {
		if !strings.Contains(l.stderr.String(), fmt.Sprintf("[%d] %s\n", r, want)) {
			t.Errorf("rank %d did not run as %s (uid %d):\n%s", r, u.Name, u.Uid, l.stderr.String())
		}
	}
	left := waitNoTagged(t, tag, 10*time.Second)
	t.Logf("4 MPICH ranks as %s on 2 loopback agents: launcher ran %v; no rank left (checked in %v)", u.Name, l.took.Round(time.Millisecond), left.Round(time.Millisecond))
}
