package nettest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed/roottest"
)

// TestSSHConfigProxyJump: agents that only jump hosts can reach, found
// through a user's ~/.ssh/config as users write it (Host aliases,
// HostName, User, IdentityFile, ProxyJump, a Match block for the
// cluster's login decided on the name typed and the HostName behind it
// (without it no node's login has a key), a Host * block with
// keepalives the launcher applies and options it ignores). Host 0 and host 1 run a stock OpenSSH sshd
// (port 22, their own config and host key); hosts 2 and 3 run agents.
// The root namespace (where the launcher runs) cannot reach hosts 1-3:
// their route back to it is unreachable. So:
//   - node1,node2 (ProxyJump jump): 8 ranks on each, the rendezvous
//     helper, MASTER_ADDR the HostName of node1; one login on the jump
//     host for both;
//   - deep1,deep2 (ProxyJump jump,jump2): jump2 is reachable only through
//     jump, a two-hop chain;
//   - a jump host that refuses the connection, or the login, fails the
//     launch with the jump host named.
func TestSSHConfigProxyJump(t *testing.T) {
	roottest.RequireRoot(t)
	_, launcherBin := binaries(t)
	b := newBed(t, testbed.Options{Prefix: "gwj0", Hosts: 4, Subnet: 30})
	hosts := b.Hosts()
	keys, err := sshtest.GenKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sshds := make([]*testbed.Proc, 2)
	for i := range sshds {
		if sshds[i], err = b.StartSSHD(t.Context(), i, 22, keys); err != nil {
			t.Fatal(err)
		}
	}
	// logins counts the logins each jump host's sshd accepted so far.
	logins := func() [2]int {
		return [2]int{strings.Count(sshds[0].Output(), "Accepted publickey"), strings.Count(sshds[1].Output(), "Accepted publickey")}
	}
	agents := startAgents(t, b, keys, 2, 3)
	// Cut the root namespace off from hosts 1-3 (replies to the bridge's
	// address go nowhere); host 0 still reaches all of them.
	rootAddr := "198.18.30.254/32"
	for _, h := range hosts[1:] {
		if out, err := exec.CommandContext(t.Context(), "ip", "-n", h.NS, "route", "add", "unreachable", rootAddr).CombinedOutput(); err != nil {
			t.Fatalf("ip route in %s: %v\n%s", h.NS, err, out)
		}
	}
	for _, addr := range []string{hosts[1].Addr + ":22", hosts[2].Addr + ":22122"} {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Fatalf("%s reachable from the launcher's namespace; the test would prove nothing", addr)
		}
	}

	other, err := sshtest.GenKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	sshDir := filepath.Join(home, ".ssh")
	if err := os.Mkdir(sshDir, 0o700); err != nil {
		t.Fatal(err)
	}
	copyKey := func(from, name string) {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sshDir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	copyKey(keys.ClientKey, "id_cluster")
	copyKey(other.ClientKey, "id_other")
	kh := keys.KnownHosts([]string{hosts[0].Addr, hosts[1].Addr}, 22) +
		keys.KnownHosts([]string{hosts[2].Addr, hosts[3].Addr}, agentPort)
	if err := os.WriteFile(filepath.Join(sshDir, "known_hosts"), []byte(kh), 0o600); err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(`# ~/.ssh/config of a laptop
Host jump
    HostName %[1]s
    User root
    IdentityFile ~/.ssh/id_cluster

Host jump2
    HostName %[2]s
    User root
    IdentityFile ~/.ssh/id_cluster

Host node1 deep1
    HostName %[3]s
Host node2 deep2
    HostName %[4]s

Host node*
    ProxyJump jump
Host deep*
    ProxyJump jump,jump2

# a jump host that is down, and one that does not know the key
Host badjump
    HostName %[1]s
    Port 2222
    User root
    IdentityFile ~/.ssh/id_cluster
Host lost1
    HostName %[3]s
    ProxyJump badjump
Host authjump
    HostName %[1]s
    User root
    IdentityFile ~/.ssh/id_other
    IdentitiesOnly yes
Host denied1
    HostName %[3]s
    ProxyJump authjump

# the cluster's login, for the names typed once the blocks above have
# given their HostName (ssh decides Match host on it, in file order)
Match originalhost node*,deep*,lost*,denied* host 198.18.*
    User root
    IdentityFile ~/.ssh/id_cluster
    IdentitiesOnly yes

Host *
    ServerAliveInterval 30
    ServerAliveCountMax 4
    AddKeysToAgent yes
    ForwardAgent no
    ControlMaster auto
    ControlPath ~/.ssh/cm-%%r@%%h:%%p
`, hosts[0].Addr, hosts[1].Addr, hosts[2].Addr, hosts[3].Addr)
	if err := os.WriteFile(filepath.Join(sshDir, "config"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=" + home, "SSH_AUTH_SOCK="}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}

	// job runs 8 ranks on each of a and b; wantLogins are the logins it
	// makes on each jump host: one for both hosts behind it.
	job := func(t *testing.T, a, b string, wantLogins [2]int, extra ...string) (stderr string) {
		before := logins()
		tag := newTag(t)
		args := append([]string{"-H", a + ":8," + b + ":8", "-np", "16", "-l"}, extra...)
		l := run(t, env, launcherBin, append(args, "-x", tagEnv+"="+tag, "-x", helperEnv+"=rendezvous", "-x", "GORACE=atexit_sleep_ms=0", self)...)
		if l.code != 0 {
			t.Fatalf("launcher: %v", l)
		}
		lines := e2e.RankLines(l.stdout.String())
		if len(lines) != 16 {
			t.Fatalf("output of %d ranks, want 16: %v", len(lines), l)
		}
		for r := range 16 {
			want := fmt.Sprintf("rank %d reached master", r)
			if r == 0 {
				want = "rank 0 heard from 15 ranks"
			}
			got := strings.Join(lines[r], "\n")
			if !strings.Contains(got, " master "+hosts[2].Addr+":") || !strings.Contains(got, want) {
				t.Errorf("rank %d printed %q, want MASTER_ADDR %s and %q", r, got, hosts[2].Addr, want)
			}
		}
		if after := logins(); after[0]-before[0] != wantLogins[0] || after[1]-before[1] != wantLogins[1] {
			t.Errorf("logins on jump, jump2: %d, %d; want %v", after[0]-before[0], after[1]-before[1], wantLogins)
		}
		left := waitNoTagged(t, tag, 10*time.Second)
		for _, i := range []int{2, 3} {
			waitNetnsOnly(t, hosts[i].NS, 10*time.Second, agents[i].Pid)
		}
		t.Logf("16 ranks on %s,%s: launcher ran %v; no rank left (checked in %v)", a, b, l.took.Round(time.Millisecond), left.Round(time.Millisecond))
		return l.stderr.String()
	}
	t.Run("OneJump", func(t *testing.T) { job(t, "node1", "node2", [2]int{1, 0}) })
	t.Run("TwoJumps", func(t *testing.T) { job(t, "deep1", "deep2", [2]int{1, 1}) })
	// In an agent tree only the launcher needs the jumps: node1's agent
	// relays for node2 and reaches it directly (the nodes reach each
	// other), with a job certificate; the jump host sees node1's login
	// alone.
	t.Run("Relayed", func(t *testing.T) {
		certLogins := func() int { return strings.Count(agents[3].Output(), "job-certificate") }
		before := certLogins()
		job(t, "node1", "node2", [2]int{1, 0}, "--tree-width", "1")
		if certLogins() == before {
			t.Errorf("node2's agent logged no job-certificate login: it was not reached through node1's relay\n%s", e2e.Tail(agents[3].Output(), 3000))
		}
	})
	// A relay that cannot reach its child's agent (node1's connections to
	// node2's agent port are routed nowhere here, by a policy rule, as a
	// site firewall would drop them; the ranks still reach each other)
	// hands it back: the launcher reaches node2 through the jump itself,
	// and says so once.
	t.Run("RelayCannotReach", func(t *testing.T) {
		ip := func(args ...string) {
			t.Helper()
			if out, err := exec.CommandContext(t.Context(), "ip", append([]string{"-n", hosts[2].NS}, args...)...).CombinedOutput(); err != nil {
				t.Fatalf("ip %s in %s: %v\n%s", strings.Join(args, " "), hosts[2].NS, err, out)
			}
		}
		port := strconv.Itoa(agentPort)
		ip("route", "add", "unreachable", hosts[3].Addr+"/32", "table", "122")
		ip("rule", "add", "ipproto", "tcp", "dport", port, "table", "122")
		defer ip("rule", "del", "ipproto", "tcp", "dport", port, "table", "122")
		// The preflight probes the agents' port, which this rule drops.
		stderr := job(t, "node1", "node2", [2]int{1, 0}, "--tree-width", "1", "--preflight=false")
		if !strings.Contains(stderr, "a relay could not reach a host the launcher reaches through its jump hosts") {
			t.Errorf("no warning that node2 was reached through the jump:\n%s", stderr)
		}
	})

	fails := func(t *testing.T, host string, want ...string) {
		l := run(t, env, launcherBin, "--start-timeout", "60s", "-H", host+":1", "true")
		stderr := l.stderr.String()
		t.Logf("exit %d after %v:\n%s", l.code, l.took.Round(time.Millisecond), stderr)
		if l.code != 1 {
			t.Errorf("exit code %d, want 1", l.code)
		}
		for _, w := range want {
			if !strings.Contains(stderr, w) {
				t.Errorf("stderr lacks %q", w)
			}
		}
		if strings.Contains(stderr, "start-timeout") {
			t.Errorf("waited for --start-timeout on a jump host that refuses")
		}
	}
	t.Run("JumpRefusesConnection", func(t *testing.T) {
		fails(t, "lost1", "jump host badjump ("+hosts[0].Addr+":2222)", "connection refused")
	})
	t.Run("JumpRefusesLogin", func(t *testing.T) {
		fails(t, "denied1", "jump host authjump ("+hosts[0].Addr+":22)", "authentication refused for user root")
	})
}
