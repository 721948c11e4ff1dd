//go:build linux

package hostnet

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gangway/agent/testbed/roottest"
)

// debianPython is Debian's Python, where python3-torch lives; a python3
// earlier on PATH may be another installation (TESTBED-NOTES).
const debianPython = "/usr/bin/python3"

// needTorch skips the test unless Debian's python3 imports torch with
// Gloo.
func needTorch(t *testing.T) {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), debianPython, "-c",
		"import torch.distributed as d; assert d.is_gloo_available(), 'torch without gloo'").CombinedOutput()
	if err != nil {
		t.Skipf("%s cannot import torch with Gloo (install Debian's python3-torch): %v: %s", debianPython, err, tail(strings.TrimSpace(string(out)), 500))
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
	c.startAgents(t)
	const perHost = 2
	size := perHost * len(c.hosts)
	job := append(c.conn(c.hostList(perHost)), "-np", fmt.Sprint(size))

	t.Run("AllReduce", func(t *testing.T) {
		l := runLauncher(t, append(job, debianPython, script)...)
		t.Logf("launcher: %v", l)
		if l.code != 0 {
			t.Fatalf("torch gloo all_reduce failed: exit code %d", l.code)
		}
		lines := rankLines(l.stdout.String())
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
	})

	t.Run("DeadEndNIC", func(t *testing.T) {
		// -x wins over the launcher's choice: every rank binds eno1,
		// whose subnet reaches nothing. The TCPStore still works (it
		// dials MASTER_ADDR over the data network); Gloo's pairs do not.
		dead := c.hosts[0].DeadEndNIC
		args := append(append(job, "-x", "GLOO_SOCKET_IFNAME="+dead, "--timeout", "20"), debianPython, script)
		l := runLauncher(t, args...)
		t.Logf("launcher with -x GLOO_SOCKET_IFNAME=%s: %v", dead, l)
		lines := rankLines(l.stdout.String())
		if l.code == 0 {
			t.Fatalf("the job on the dead-end NIC %s succeeded; it must not", dead)
		}
		for r := range size {
			if contains(lines[r], "sum") {
				t.Errorf("rank %d completed the all_reduce on the dead-end NIC: %q", r, lines[r])
			}
		}
		imported := 0
		for r := range size {
			if contains(lines[r], "GLOO_SOCKET_IFNAME="+dead) {
				imported++
			}
		}
		switch {
		case l.code == 124:
			t.Logf("as expected: --timeout expired (exit 124) after %v; %d of %d ranks had imported torch and were stuck in Gloo's connect", l.took.Round(100e6), imported, size)
		default:
			t.Logf("NOTE: the dead-end job failed with exit code %d after %v, not 124 (--timeout): Gloo gave up by itself", l.code, l.took.Round(100e6))
		}
		if imported == 0 {
			t.Errorf("no rank got past importing torch within --timeout 20, so the run proves nothing about the NIC (machine overloaded?)")
		}
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
