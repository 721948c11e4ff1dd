package nettest

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed/roottest"
)

// TestMasterAddrDeadEnd: hosts with a dead-end NIC (lower interface
// index, an address that reaches nothing) and differently named data NICs
// (host 1's is eth2). A real job's ranks report GANGWAY_HOST and
// MASTER_ADDR, and then use them: rank 0 listens on MASTER_ADDR:MASTER_PORT
// and every rank, on both hosts, connects to it. MASTER_ADDR must be host
// 0's data address, never its dead-end one.
func TestMasterAddrDeadEnd(t *testing.T) {
	roottest.RequireRoot(t)
	_, launcherBin := binaries(t)
	b := newAgentBed(t, testbed.Options{Prefix: "gwn4", Hosts: 2, Subnet: 184, DeadEnd: true,
		DataNIC: func(i int) string {
			if i == 1 {
				return "eth2"
			}
			return testbed.DefaultDataNIC
		}})
	hosts, agents, keys, kh := b.hosts, b.agents, b.keys, b.knownHosts
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tag := newTag(t)
	l := run(t, nil, launcherBin, "-i", keys.ClientKey, "--known-hosts", kh,
		"-H", hosts[0].Addr+":8,"+hosts[1].Addr+":8", "-l", "-np", "16",
		"-x", tagEnv+"="+tag, "-x", helperEnv+"=rendezvous", "-x", "GORACE=atexit_sleep_ms=0",
		self)
	if l.code != 0 {
		t.Fatalf("launcher: %v", l)
	}
	t.Logf("dead-end address of host 0: %s", hosts[0].DeadEndAddr)
	port := checkRendezvous(t, l.stdout.String(), 16, func(r int) string { return hosts[r/8].Addr }, hosts[0].Addr)
	left := waitNoTagged(t, tag, 10*time.Second)
	for i, h := range hosts {
		waitNetnsOnly(t, h.NS, 10*time.Second, agents[i].Pid)
	}
	t.Logf("16 ranks on 2 hosts with dead-end NICs: MASTER_ADDR %s:%s reached from both hosts; launcher ran %v; no rank left (checked in %v)",
		hosts[0].Addr, port, l.took.Round(time.Millisecond), left.Round(time.Millisecond))
}

// checkRendezvous checks the output of np ranks of the rendezvous
// helper: each says its GANGWAY_HOST (wantHost) and MASTER_ADDR
// (master) with the one MASTER_PORT, every rank reached rank 0 and rank
// 0 heard from the others (WORLD_SIZE=np). It returns the port.
func checkRendezvous(t *testing.T, out string, np int, wantHost func(rank int) string, master string) string {
	t.Helper()
	lines := e2e.RankLines(out)
	t.Logf("rank lines: %v", lines)
	if len(lines) != np {
		t.Fatalf("output of %d ranks, want %d:\n%s", len(lines), np, out)
	}
	var port string
	for r := range np {
		got := lines[r]
		if len(got) != 2 {
			t.Errorf("rank %d printed %q, want 2 lines", r, got)
			continue
		}
		var gotHost, gotMaster string
		if _, err := fmt.Sscanf(got[0], "rank %d host %s master %s", new(int), &gotHost, &gotMaster); err != nil {
			t.Errorf("rank %d: %q: %v", r, got[0], err)
			continue
		}
		addr, p, _ := strings.Cut(gotMaster, ":")
		if want := wantHost(r); gotHost != want {
			t.Errorf("rank %d: GANGWAY_HOST=%s, want %s", r, gotHost, want)
		}
		if addr != master {
			t.Errorf("rank %d: MASTER_ADDR=%s, want %s", r, addr, master)
		}
		if port == "" {
			port = p
		} else if p != port {
			t.Errorf("rank %d: MASTER_PORT=%s, rank 0 has %s", r, p, port)
		}
		want := fmt.Sprintf("rank %d reached master", r)
		if r == 0 {
			want = fmt.Sprintf("rank 0 heard from %d ranks", np-1)
		}
		if got[1] != want {
			t.Errorf("rank %d: %q, want %q", r, got[1], want)
		}
	}
	return port
}
