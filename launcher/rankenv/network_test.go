package rankenv

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/internal/environ"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/plan"
	"github.com/gangway-hpc/gangway/nccl"
)

func TestRoutePeers(t *testing.T) {
	names := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = "h" + strconv.Itoa(i)
		}
		return out
	}
	small := names(17)
	if got := RoutePeers(small, 3); len(got) != 16 || slices.Contains(got, "h3") {
		t.Fatalf("17 hosts: want every other host, got %v", got)
	}
	big := names(1024)
	for _, i := range []int{0, 1, 500, 1023} {
		got := RoutePeers(big, i)
		if len(got) != maxRoutePeers {
			t.Fatalf("host %d: %d peers, want %d", i, len(got), maxRoutePeers)
		}
		for _, want := range []string{"h0", big[(i+1)%1024], big[(i+1023)%1024]} {
			if want != big[i] && !slices.Contains(got, want) {
				t.Errorf("host %d: %v lacks %s", i, got, want)
			}
		}
		if slices.Contains(got, big[i]) {
			t.Errorf("host %d routes to itself", i)
		}
		seen := map[string]bool{}
		for _, p := range got {
			if seen[p] {
				t.Errorf("host %d: %s twice", i, p)
			}
			seen[p] = true
		}
		if !slices.Equal(got, RoutePeers(big, i)) {
			t.Errorf("host %d: not deterministic", i)
		}
	}
}

// TestChooseNetworksByAddress: where the agents were told of their peers
// by address (Host.Peer: the srun transport's reported addresses, Slurm
// node names that resolve nowhere), the interface choice reads their
// routes by those addresses; told by name, a name the agent could not
// resolve is the failure users saw before.
func TestChooseNetworksByAddress(t *testing.T) {
	hosts := hostPair("eth0", func(_ int, reached string) []string { return []string{reached + "/24"} })
	if got := PeerNames([]string{"cn1", "cn2", "cn3"}, map[string]string{"cn1": "198.18.51.2", "cn2": "198.18.51.3"}); !slices.Equal(got, []string{"198.18.51.2", "198.18.51.3", "cn3"}) {
		t.Errorf("PeerNames: %v", got)
	}
	choices, err := ChooseNetworks(cli.Network{}, hosts)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range choices {
		if c == nil || !slices.Equal(c.Ifaces, []string{"eth0"}) {
			t.Errorf("host %d: %+v, want eth0", i, c)
		}
	}
	// Told by name, with the name unresolved on the node: the old failure.
	for i := range hosts {
		hosts[i].Peer = ""
		hosts[i].Facts.Routes = []wire.Route{{Peer: hosts[1-i].Name, Err: "no addresses"}}
	}
	if _, err := ChooseNetworks(cli.Network{}, hosts); err == nil || !strings.Contains(err.Error(), "no route to peer cn2") {
		t.Errorf("by name: %v, want no route to peer cn2", err)
	}
}

// hostPair is two hosts, cn1 and cn2, told of each other by address,
// each with loopback and iface (its addresses from addrs, given the one
// the launcher reached it on) and a route to the other through iface.
func hostPair(iface string, addrs func(i int, reached string) []string) []Host {
	hosts := []Host{
		{Host: hostfile.Host{Name: "cn1"}, Reached: "198.18.51.2", Peer: "198.18.51.2"},
		{Host: hostfile.Host{Name: "cn2"}, Reached: "198.18.51.3", Peer: "198.18.51.3"},
	}
	for i := range hosts {
		other := hosts[1-i].Reached
		hosts[i].Facts = wire.Facts{
			NICs: []wire.NIC{
				{Name: "lo", Index: 1, Type: "loopback", Up: true, Addrs: []string{"127.0.0.1/8"}},
				{Name: iface, Index: 2, Type: "device", Up: true, Addrs: addrs(i, hosts[i].Reached)},
			},
			Routes: []wire.Route{{Peer: other, Addr: other, Iface: iface}},
		}
	}
	return hosts
}

// TestEnvsWithoutFacts: an Attempt builds every rank's environment from
// what Prepare took from the facts: with the hosts' facts dropped after
// Prepare (as the engine does, to free them before the environments are
// built), the environments are those built with the facts held, network
// choice included; a start message over the limit is still refused.
func TestEnvsWithoutFacts(t *testing.T) {
	build := func(drop bool, argv ...string) ([][]string, error) {
		// The address the launcher reached a host on is its
		// interface's second: the data address is still it.
		hosts := hostPair("enp1s0f0", func(i int, reached string) []string {
			return []string{"198.18.51.10" + strconv.Itoa(i) + "/24", reached + "/24"}
		})
		for i := range hosts {
			hosts[i].Facts.FreePort = 29511
		}
		var ranks []plan.Rank // eight a host, as on a DGX
		for r := range 16 {
			ranks = append(ranks, rk(r, r/8, r%8, 8, r/8))
		}
		cfg, err := cli.Parse(append([]string{"-np", "16", "-H", "cn1:8,cn2:8"}, argv...), func(string) string { return "" }, nil)
		if err != nil {
			t.Fatal(err)
		}
		a, err := Prepare(cfg, ranks, hosts, "j1", 0, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for i, h := range hosts {
			want = append(want, DataAddr(h, a.Choices[i]))
		}
		if drop {
			for i := range hosts {
				hosts[i].Facts = wire.Facts{}
			}
		}
		if !slices.Equal(a.Addrs, want) || !slices.Equal(want, []string{"198.18.51.2", "198.18.51.3"}) {
			t.Errorf("data addresses %q, want %q (where the launcher reached them)", a.Addrs, want)
		}
		starts, err := a.Starts(make([]bool, len(hosts)))
		if err != nil {
			return nil, err
		}
		envs := make([][]string, len(ranks))
		for _, hs := range starts {
			for _, r := range hs.Ranks {
				envs[r.Rank] = environ.Merge(a.Shared, r.Env) // as the agent puts them together
			}
		}
		return envs, nil
	}
	held, err := build(false, "python3", "train.py")
	if err != nil {
		t.Fatal(err)
	}
	dropped, err := build(true, "python3", "train.py")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(held, dropped, slices.Equal) {
		t.Errorf("built after the facts were dropped:\n%q\nwith them held:\n%q", dropped, held)
	}
	for _, want := range []string{"NCCL_SOCKET_IFNAME==enp1s0f0", "MASTER_ADDR=198.18.51.2", "MASTER_PORT=29511"} {
		if !slices.Contains(dropped[15], want) {
			t.Errorf("rank 15's environment lacks %s: %q", want, dropped[15])
		}
	}
	if _, err := build(true, "python3", strings.Repeat("x", wire.MaxJobControl)); err == nil || !strings.Contains(err.Error(), "start message") {
		t.Errorf("an argument over the start message's limit: %v, want refused", err)
	}
}

// TestChooseNetworksAtHosts: a host that chose its own interface
// (wire.Facts.Net, asked by Hello.Net) is taken at its word, routes or
// none; its failure fails the choice in its words; a host that sent
// routes instead (an older agent) is chosen for here, beside it.
func TestChooseNetworksAtHosts(t *testing.T) {
	hosts := hostPair("eth0", func(_ int, reached string) []string { return []string{reached + "/24"} })
	hosts[0].Facts.Routes = nil
	hosts[0].Facts.Net = &wire.NetChoice{Ifaces: []string{"ib0", "eth0"}, Addr: "198.18.77.1", HCAs: []string{"mlx5_0:1"}}
	choices, err := ChooseNetworks(cli.Network{}, hosts)
	if err != nil {
		t.Fatal(err)
	}
	if c := choices[0]; c == nil || c.Host != hosts[0].Name || !slices.Equal(c.Ifaces, []string{"ib0", "eth0"}) || c.Addr != "198.18.77.1" || !slices.Equal(c.HCAs, []string{"mlx5_0:1"}) {
		t.Errorf("host 0 (chose itself): %+v", c)
	}
	if c := choices[1]; c == nil || !slices.Equal(c.Ifaces, []string{"eth0"}) {
		t.Errorf("host 1 (sent routes): %+v, want eth0", c)
	}
	hosts[0].Facts.Net = &wire.NetChoice{Err: "host cn1: no usable network interface: no route to peer 198.18.51.3 (no addresses)"}
	_, err = ChooseNetworks(cli.Network{}, hosts)
	if err == nil || !strings.Contains(err.Error(), "network interface choice: host cn1: no usable network interface: no route to peer 198.18.51.3") {
		t.Errorf("a host's own failure: %v", err)
	}
}

// TestDataAddrBrief: a host's data address is the address the launcher
// reached it on when that lies on its chosen interface, else the
// interface's own; from its interfaces, or, in brief facts (no
// interfaces), from its choice's addresses.
func TestDataAddrBrief(t *testing.T) {
	choice := &nccl.Choice{Host: "cn1", Ifaces: []string{"eth1"}, Addr: "198.18.7.1"}
	full := wire.Facts{NICs: []wire.NIC{
		{Name: "eth0", Up: true, Addrs: []string{"198.19.0.5/24"}},
		{Name: "eth1", Up: true, Addrs: []string{"198.18.7.1/24"}},
	}}
	brief := wire.Facts{Net: &wire.NetChoice{Ifaces: []string{"eth1"}, Addr: "198.18.7.1", Addrs: []string{"198.18.7.1/24"}}}
	for _, c := range []struct {
		name    string
		facts   wire.Facts
		reached string
		want    string
	}{
		{"full, reached on the data interface", full, "198.18.7.9", "198.18.7.9"},
		{"full, reached on another", full, "198.19.0.5", "198.18.7.1"},
		{"brief, reached on the data interface", brief, "198.18.7.9", "198.18.7.9"},
		{"brief, reached on another", brief, "198.19.0.5", "198.18.7.1"},
		{"brief without addresses", wire.Facts{Net: &wire.NetChoice{Ifaces: []string{"eth1"}, Addr: "198.18.7.1"}}, "198.18.7.9", "198.18.7.1"},
	} {
		h := Host{Host: hostfile.Host{Name: "cn1"}, Reached: c.reached, Facts: c.facts}
		if got := DataAddr(h, choice); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}
