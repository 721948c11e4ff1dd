//go:build linux

package hostnet

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
	"github.com/gangway-hpc/gangway/launcher"
	"github.com/gangway-hpc/gangway/launcher/rankenv"
)

// TestDataNIC: two hosts whose data NICs are named differently and whose
// lowest-index NIC is a dead end. Each rank sees its own host's data NIC
// and rank 0's data address; --inspect shows the same choice; the facts
// are the real namespaces' NICs and routes.
func TestDataNIC(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "gwh0", 170, 2)
	c.startAgents(t)
	h0, h1 := c.hosts[0], c.hosts[1]

	t.Run("Env", func(t *testing.T) {
		args := append(c.conn(c.hostList(8)), "-l", "-np", "16", "-v", // eight a host, as on a DGX
			"sh", "-c", `echo "$NCCL_SOCKET_IFNAME $GLOO_SOCKET_IFNAME $HOROVOD_GLOO_IFACE $MASTER_ADDR"`)
		l := runLauncher(t, args...)
		if l.code != 0 {
			t.Fatalf("launcher: %v", l)
		}
		// Each host chose its data NIC itself (wire.Hello.Net): -v says so
		// for both, and the choice is the one the ranks print below.
		if n := strings.Count(l.stderr.String(), rankenv.ChosenAtHost); n != 2 {
			t.Errorf("-v says %d hosts chose their own interface, want 2:\n%s", n, l.stderr.String())
		}
		lines := e2e.RankLines(l.stdout.String())
		for r := range 16 {
			nic := dataNIC(r / 8)
			want := fmt.Sprintf("=%s %s %s %s", nic, nic, nic, h0.Addr)
			if got := lines[r]; len(got) != 1 || got[0] != want {
				t.Errorf("rank %d (host %d) printed %q, want [%q]", r, r/8, got, want)
			}
			t.Logf("rank %d on %s: %s", r, c.hosts[r/8].NS, strings.Join(lines[r], " | "))
		}
	})

	t.Run("Inspect", func(t *testing.T) {
		l := runLauncher(t, append(c.conn(c.hostList(2)), "--inspect")...)
		if l.code != 0 {
			t.Fatalf("launcher --inspect: %v", l)
		}
		out := l.stdout.String()
		t.Logf("launcher --inspect:\n%s", out)
		// The table's row for each host names its data NIC and address.
		for i, h := range c.hosts {
			row := tableRow(out, h.Addr)
			if row == nil {
				t.Errorf("no table row for host %d (%s)", i, h.Addr)
				continue
			}
			if !slices.Contains(row, h.DataNIC) || !slices.Contains(row, h.Addr) {
				t.Errorf("table row for host %d = %q, want data NIC %s and address %s", i, row, h.DataNIC, h.Addr)
			}
			if slices.Contains(row, h.DeadEndNIC) {
				t.Errorf("table row for host %d = %q names the dead-end NIC %s", i, row, h.DeadEndNIC)
			}
			wantEnv := "env   GLOO_SOCKET_IFNAME=" + h.DataNIC
			if !strings.Contains(hostSection(out, h.Addr), wantEnv) {
				t.Errorf("section of host %d lacks %q", i, wantEnv)
			}
		}

		l = runLauncher(t, append(c.conn(c.hostList(2)), "--inspect", "--json")...)
		if l.code != 0 {
			t.Fatalf("launcher --inspect --json: %v", l)
		}
		var got []launcher.InspectHost
		if err := json.Unmarshal(l.stdout.Bytes(), &got); err != nil {
			t.Fatalf("--inspect --json output is not JSON: %v\n%s", err, l.stdout.String())
		}
		// The interfaces key itself, not only what Go decodes into.
		var raw []map[string]json.RawMessage
		if err := json.Unmarshal(l.stdout.Bytes(), &raw); err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || len(raw) != 2 {
			t.Fatalf("--inspect --json lists %d hosts, want 2:\n%s", len(got), l.stdout.String())
		}
		for i, h := range c.hosts {
			g := got[i]
			if g.Host != h.Addr || !slices.Equal(g.Interfaces, []string{h.DataNIC}) || g.Addr != h.Addr {
				t.Errorf("host %d: host %q interfaces %q addr %q, want %q [%s] %q", i, g.Host, g.Interfaces, g.Addr, h.Addr, h.DataNIC, h.Addr)
			}
			if _, ok := raw[i]["interfaces"]; !ok {
				t.Errorf("host %d: no \"interfaces\" key in %v", i, keys(raw[i]))
			}
			if g.Facts.Name != fmt.Sprintf("h%d", i) {
				t.Errorf("host %d: facts name %q, want h%d (the agent's --name)", i, g.Facts.Name, i)
			}
		}

		t.Run("Facts", func(t *testing.T) {
			// Host 1's facts, as its agent gathered them in its namespace.
			f := got[1].Facts
			eth2, okData := findNIC(f.NICs, h1.DataNIC)
			eno1, okDead := findNIC(f.NICs, h1.DeadEndNIC)
			if !okData || !okDead {
				t.Fatalf("host 1 facts: NICs %v, want %s and %s", nicNames(f.NICs), h1.DataNIC, h1.DeadEndNIC)
			}
			if !slices.Contains(eth2.Addrs, h1.Addr+"/24") || !eth2.Up {
				t.Errorf("host 1 %s: %+v, want up with %s/24", h1.DataNIC, eth2, h1.Addr)
			}
			if !slices.Contains(eno1.Addrs, h1.DeadEndAddr+"/24") || !eno1.Up {
				t.Errorf("host 1 %s: %+v, want up with %s/24", h1.DeadEndNIC, eno1, h1.DeadEndAddr)
			}
			if eno1.Index >= eth2.Index {
				t.Errorf("host 1: dead-end %s has index %d, data %s %d; the bed must put the dead end first", eno1.Name, eno1.Index, eth2.Name, eth2.Index)
			}
			var toH0 []wire.Route
			for _, r := range f.Routes {
				if r.Peer == h0.Addr {
					toH0 = append(toH0, r)
				}
			}
			if len(toH0) != 1 || toH0[0].Iface != h1.DataNIC || toH0[0].Err != "" || toH0[0].Src != h1.Addr {
				t.Errorf("host 1 routes to host 0 (%s) = %+v, want one via %s from %s", h0.Addr, toH0, h1.DataNIC, h1.Addr)
			}
			t.Logf("host 1 facts: NICs %s; routes %+v", nicSummary(f.NICs), f.Routes)
		})
	})

	// A down interface with an address in host 1: --inspect's section
	// leaves it out and counts it; with -v it is listed.
	t.Run("InspectHidesDown", func(t *testing.T) {
		ns := h1.NS
		ip := func(args ...string) {
			t.Helper()
			if out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
				t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
			}
		}
		ip("link", "add", "gwpdown0", "type", "veth", "peer", "name", "gwpdown1")
		t.Cleanup(func() { exec.Command("ip", "-n", ns, "link", "del", "gwpdown0").Run() })
		ip("addr", "add", "198.19.218.250/32", "dev", "gwpdown0")
		for _, tc := range []struct {
			verbose bool
			want    string
		}{{false, "down, or no address but link-local; -v lists them"}, {true, "nic   gwpdown0 "}} {
			args := append(c.conn(c.hostList(2)), "--inspect")
			if tc.verbose {
				args = append(args, "-v")
			}
			l := runLauncher(t, args...)
			if l.code != 0 {
				t.Fatalf("launcher %s: %v", strings.Join(args, " "), l)
			}
			sec := hostSection(l.stdout.String(), h1.Addr)
			if !strings.Contains(sec, tc.want) || tc.verbose != strings.Contains(sec, "gwpdown0") {
				t.Errorf("-v %v: host 1's section lacks %q or shows gwpdown0 wrongly:\n%s", tc.verbose, tc.want, sec)
			}
			if !strings.Contains(sec, "nic   "+h1.DataNIC+" ") {
				t.Errorf("-v %v: host 1's section lacks its data NIC %s:\n%s", tc.verbose, h1.DataNIC, sec)
			}
		}
	})
}

// tableRow returns the fields of --inspect's table line for host.
func tableRow(out, host string) []string {
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) > 0 && f[0] == host {
			return f
		}
		if strings.HasPrefix(line, "\n") || strings.TrimSpace(line) == "" {
			break // the table ends at the first blank line
		}
	}
	return nil
}

// hostSection returns --inspect's per-host section ("# host (...)" up to
// the next blank line).
func hostSection(out, host string) string {
	_, rest, ok := strings.Cut(out, "\n# "+host+" ")
	if !ok {
		return ""
	}
	sec, _, _ := strings.Cut(rest, "\n\n")
	return sec
}

func findNIC(nics []wire.NIC, name string) (wire.NIC, bool) {
	for _, n := range nics {
		if n.Name == name {
			return n, true
		}
	}
	return wire.NIC{}, false
}

func nicNames(nics []wire.NIC) []string {
	var s []string
	for _, n := range nics {
		s = append(s, n.Name)
	}
	return s
}

func nicSummary(nics []wire.NIC) string {
	var s []string
	for _, n := range nics {
		s = append(s, fmt.Sprintf("%d:%s %v", n.Index, n.Name, n.Addrs))
	}
	return strings.Join(s, ", ")
}

func keys(m map[string]json.RawMessage) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	slices.Sort(k)
	return k
}
