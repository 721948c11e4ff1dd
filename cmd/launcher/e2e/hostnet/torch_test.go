//go:build linux

package hostnet

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed/roottest"
)

// debianPython is Debian's Python, where python3-torch lives; a python3
// earlier on PATH may be another installation (docs/testbed.md §2).
const debianPython = "/usr/bin/python3"

// needTorch skips the test unless Debian's python3 imports torch with
// Gloo.
func needTorch(t *testing.T) {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), debianPython, "-c",
		"import torch.distributed as d; assert d.is_gloo_available(), 'torch without gloo'").CombinedOutput()
	if err != nil {
		t.Skipf("%s cannot import torch with Gloo (install Debian's python3-torch): %v: %s", debianPython, err, e2e.Tail(strings.TrimSpace(string(out)), 500))
	}
}

// TestTorchGloo: a real python3-torch Gloo all_reduce across two hosts
// whose data NICs are named differently, with the GLOO_SOCKET_IFNAME the
// launcher chose per host; then the same job forced onto the dead-end NIC,
// which must not succeed: the trap the per-host choice avoids.
//
// Every namespace reports the machine's hostname, which resolves to
// 127.0.0.1, so Gloo without GLOO_SOCKET_IFNAME would advertise loopback;
// with it, Gloo binds the named interface's address.
func TestTorchGloo(t *testing.T) {
	t.Parallel()
	roottest.RequireRoot(t)
	needTorch(t)
	script, err := filepath.Abs("testdata/allreduce.py")
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, "gwh2", 172, 2)
	agents := c.startAgents(t)
	const perHost = 2
	size := perHost * len(c.hosts)
	job := append(c.conn(c.hostList(perHost)), "-l", "-np", fmt.Sprint(size))

	t.Run("AllReduce", func(t *testing.T) {
		l := runLauncher(t, append(job, debianPython, script)...)
		t.Logf("launcher: %v", l)
		if l.code != 0 {
			t.Fatalf("torch gloo all_reduce failed: exit code %d", l.code)
		}
		lines := e2e.RankLines(l.stdout.String())
		for r := range size {
			nic := dataNIC(r / perHost)
			if !contains(lines[r], "GLOO_SOCKET_IFNAME="+nic+" MASTER_ADDR="+c.hosts[0].Addr) {
				t.Errorf("rank %d (host %d): %q, want GLOO_SOCKET_IFNAME=%s and MASTER_ADDR=%s", r, r/perHost, lines[r], nic, c.hosts[0].Addr)
			}
			want := fmt.Sprintf("rank %d of %d sum %d", r, size, size)
			if !contains(lines[r], want) {
				t.Errorf("rank %d printed %q, want %q", r, lines[r], want)
			}
		}
		c.waitOnlyAgents(t, agents)
	})

	t.Run("DeadEndNIC", func(t *testing.T) {
		// -x wins over the launcher's choice: every rank binds eno1,
		// whose subnet reaches nothing. The TCPStore still works (it
		// dials MASTER_ADDR over the data network); Gloo's pairs do not.
		// One rank per host: the trap needs only a pair across hosts, and
		// two torch imports fit the 20 s on 2 busy cores better than four.
		//
		// What happens (seen here): host 1's rank gets EHOSTUNREACH when
		// ARP for host 0's dead-end address goes unanswered (about 3 s),
		// raises "connect [198.19.S.1]:PORT: No route to host" and exits
		// 1, and the launcher stops the other rank (exit 1); or the
		// failing Python hangs at exit in Gloo's threads and the job ends
		// at --timeout (exit 124). Either way it never succeeds.
		dead := c.hosts[0].DeadEndNIC
		deadJob := append(c.conn(c.hostList(1)), "-l", "-np", "2", "-x", "GLOO_SOCKET_IFNAME="+dead)
		var l *launch
		imported := 0
		for _, timeout := range []string{"20", "60"} {
			l = runLauncher(t, append(deadJob, "--timeout", timeout, debianPython, script)...)
			t.Logf("launcher -x GLOO_SOCKET_IFNAME=%s --timeout %s: %v", dead, timeout, l)
			imported = 0
			for _, lines := range e2e.RankLines(l.stdout.String()) {
				if contains(lines, "GLOO_SOCKET_IFNAME="+dead) {
					imported++
				}
			}
			if imported > 0 || l.code == 0 {
				break
			}
			// Inconclusive: the ranks were still importing torch.
			t.Logf("no rank got past importing torch within --timeout %s (machine busy); trying again with a longer timeout", timeout)
		}
		if l.code == 0 {
			t.Fatalf("the job on the dead-end NIC %s succeeded; it must not", dead)
		}
		if contains(strings.Split(l.stdout.String(), "\n"), " sum ") {
			t.Errorf("a rank completed the all_reduce on the dead-end NIC")
		}
		if imported == 0 {
			t.Errorf("no rank got past importing torch, so the run proves nothing about the NIC")
		}
		switch {
		case l.code == 124:
			t.Logf("dead-end NIC: --timeout expired (exit 124) after %v; %d of 2 ranks had imported torch and hung in Gloo", l.took.Round(100e6), imported)
		default:
			t.Logf("dead-end NIC: exit code %d after %v, before --timeout: Gloo failed by itself (%q)", l.code, l.took.Round(100e6), e2e.LineWith(l.stderr.String(), "RuntimeError"))
		}
		// The stuck ranks (including one hung in Python's exit after
		// Gloo's error) are gone once the launcher has returned.
		c.waitOnlyAgents(t, agents)
	})
}

// contains reports whether any line contains s.
func contains(lines []string, s string) bool {
	for _, l := range lines {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}
