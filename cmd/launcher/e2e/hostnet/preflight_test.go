//go:build linux

package hostnet

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/launcher"
)

// TestPreflight breaks the path between host 0 and host 2 of three while
// the launcher, in the root namespace, still reaches every agent.
//
// How the path is broken decides which check catches it, and both are
// tested:
//
//   - A blackhole route on host 0 to host 2's address (the same holds for
//     `prohibit` and `unreachable`) is visible to the route lookup the
//     agent does for its facts (RTM_GETROUTE answers EINVAL, EACCES or
//     EHOSTUNREACH), so the interface choice fails first, naming host 0
//     and its peer host 2.
//   - A route on host 0 to host 2 through a gateway that does not exist
//     (198.18.S.200, on-link) looks fine to the route lookup (via the data
//     NIC) but nothing gets through: ARP for the gateway is never
//     answered. Only the preflight's real TCP connection finds it, and
//     the job must not start. This is the case `SetLinkDown` cannot
//     produce here: a downed link also cuts the launcher off from host
//     2's agent, which the LinkDown subtest shows.
//
// iptables is not used: it is not installed everywhere, and routes are
// per namespace, so nothing outside the bed is touched.
func TestPreflight(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "gwh1", 171, 3)
	c.startAgents(t)
	h0, h1, h2 := c.hosts[0], c.hosts[1], c.hosts[2]
	job := func(marks string) []string {
		return append(append(c.conn(c.hostList(1)), "-np", "3"), rankScript(marks, "true")...)
	}
	// route runs `ip -n <host 0> route <args>`.
	route := func(t *testing.T, args ...string) {
		t.Helper()
		full := append([]string{"-n", h0.NS, "route"}, args...)
		if out, err := exec.CommandContext(t.Context(), "ip", full...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(full, " "), err, out)
		}
	}

	t.Run("Control", func(t *testing.T) {
		marks := t.TempDir()
		l := runLauncher(t, job(marks)...)
		if l.code != 0 || ranks(t, marks) != 3 {
			t.Fatalf("healthy bed: %d of 3 ranks ran; launcher: %v", ranks(t, marks), l)
		}
	})

	t.Run("Blackhole", func(t *testing.T) {
		route(t, "add", "blackhole", h2.Addr+"/32")
		defer route(t, "del", "blackhole", h2.Addr+"/32")

		// The facts show the route as unreachable.
		l := runLauncher(t, append(c.conn(c.hostList(1)), "--inspect", "--json")...)
		var got []launcher.InspectHost
		if err := json.Unmarshal(l.stdout.Bytes(), &got); err != nil || len(got) != 3 {
			t.Fatalf("--inspect --json: %v (%d hosts)\n%v", err, len(got), l)
		}
		for _, r := range got[0].Facts.Routes {
			if r.Peer == h2.Addr {
				t.Logf("host 0's route to host 2 in its facts: %+v", r)
				if r.Iface != "" || r.Err == "" {
					t.Errorf("host 0's route to host 2 = %+v, want no interface and an error", r)
				}
			}
		}
		if l.code != 1 || !strings.Contains(l.stderr.String(), "no route to peer "+h2.Addr) {
			t.Errorf("--inspect with a blackhole route: exit %d, want 1 and the broken route named:\n%v", l.code, l)
		}

		marks := t.TempDir()
		l = runLauncher(t, job(marks)...)
		t.Logf("launcher with a blackhole route on host 0 to host 2: %v", l)
		msg := l.stderr.String()
		if l.code != 1 {
			t.Errorf("exit code %d, want 1", l.code)
		}
		for _, want := range []string{"network interface choice", "host " + h0.Addr, "no route to peer " + h2.Addr} {
			if !strings.Contains(msg, want) {
				t.Errorf("stderr lacks %q", want)
			}
		}
		noneRan(t, marks)
	})

	t.Run("DeadGateway", func(t *testing.T) {
		gw := strings.TrimSuffix(h0.Addr, ".1") + ".200"
		route(t, "add", h2.Addr+"/32", "via", gw, "dev", h0.DataNIC)
		defer route(t, "del", h2.Addr+"/32", "via", gw, "dev", h0.DataNIC)

		marks := t.TempDir()
		l := runLauncher(t, job(marks)...)
		t.Logf("launcher with host 0 routing to host 2 through a dead gateway: %v", l)
		msg := l.stderr.String()
		if l.code != 1 {
			t.Errorf("exit code %d, want 1", l.code)
		}
		pair := func(a, b int) string {
			name := func(i int) string { return fmt.Sprintf("%s (h%d)", c.hosts[i].Addr, i) } // address and agent name
			return "  " + name(a) + " -> " + name(b) + " (" + c.hosts[b].Addr + ":22122 via " + c.hosts[a].DataNIC + "): "
		}
		for _, want := range []string{"launcher: preflight:", pair(0, 2), "nothing was started"} {
			if !strings.Contains(msg, want) {
				t.Errorf("stderr lacks %q", want)
			}
		}
		// Host 2 -> host 0 may fail too (host 0's answers take the dead
		// route); pairs without host 0 and host 2 together must not.
		for _, p := range [][2]int{{0, 1}, {1, 0}, {1, 2}, {2, 1}} {
			if strings.Contains(msg, pair(p[0], p[1])) {
				t.Errorf("stderr blames the healthy pair %d -> %d", p[0], p[1])
			}
		}
		noneRan(t, marks)
	})

	t.Run("LinkDown", func(t *testing.T) {
		// A pulled cable on host 2 also cuts the launcher off from its
		// agent: the launcher names the host it cannot reach.
		if err := c.bed.SetLinkDown(2); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := c.bed.SetLinkUp(2); err != nil {
				t.Error(err)
			}
		}()
		marks := t.TempDir()
		// 15 s: hosts 0 and 1 must answer within it on a loaded machine.
		l := runLauncher(t, append([]string{"--start-timeout", "15"}, job(marks)...)...)
		t.Logf("launcher with host 2's link down: %v", l)
		if l.code != 1 || !strings.Contains(l.stderr.String(), h2.Addr) {
			t.Errorf("exit code %d, want 1 and host 2 (%s) named", l.code, h2.Addr)
		}
		if strings.Contains(l.stderr.String(), h1.Addr) {
			t.Errorf("stderr names host 1 (%s), which is reachable", h1.Addr)
		}
		noneRan(t, marks)
	})
}
