package engine

import (
	"reflect"
	"slices"
	"testing"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/plan"
	"github.com/gangway-hpc/gangway/launcher/transport"
)

// TestUniverseSize: -usize as PMI tells it, Hydra's meanings: a number is
// itself, SYSTEM the slots of the hosts that run ranks, INFINITE and no
// -usize -1 (unknown).
func TestUniverseSize(t *testing.T) {
	slots := []int{3, 5, 7}
	onFirst := []plan.Rank{{Rank: 0, Host: 0}, {Rank: 1, Host: 0}}
	onTwo := []plan.Rank{{Rank: 0, Host: 0}, {Rank: 1, Host: 0}, {Rank: 2, Host: 0}, {Rank: 3, Host: 1}}
	for _, tc := range []struct {
		name  string
		u     int
		ranks []plan.Rank
		want  int
	}{
		{"not given", 0, onTwo, -1},
		{"INFINITE", cli.UniverseInfinite, onTwo, -1},
		{"a number", 12, onTwo, 12},
		{"SYSTEM, ranks on one host", cli.UniverseSystem, onFirst, 3},
		{"SYSTEM, ranks on two hosts", cli.UniverseSystem, onTwo, 8},
	} {
		if got := universeSize(tc.u, slots, tc.ranks); got != tc.want {
			t.Errorf("%s: universeSize(%d) = %d, want %d", tc.name, tc.u, got, tc.want)
		}
	}
}

// rk is a Rank written compactly: rank, host, local rank, local size, node rank.
func rk(rank, host, local, localSize, node int) plan.Rank {
	return plan.Rank{Rank: rank, Host: host, LocalRank: local, LocalSize: localSize, NodeRank: node}
}

// TestForgetFacts: once a job is planned its sessions keep the agent's
// identity (label still names it) and drop the rest of the facts.
func TestForgetFacts(t *testing.T) {
	s := &session{host: hostfile.Host{Name: "10.0.0.1"}, facts: wire.Facts{Version: wire.Version, Name: "node1", Hostname: "node1.example",
		NICs: []wire.NIC{{Name: "eth0"}}, Routes: []wire.Route{{Peer: "10.0.0.2"}}, GPUs: []wire.GPU{{Index: 0}}, GPUTopo: &wire.Topo{Link: [][]string{{"X"}}}}}
	s.facts = factsForStart(s.facts)
	if got := label(s); got != "10.0.0.1 (node1)" {
		t.Errorf("label after the facts were dropped: %q", got)
	}
	if s.facts.NICs != nil || s.facts.Routes != nil || s.facts.GPUs != nil || s.facts.GPUTopo != nil || s.facts.Hostname != "node1.example" {
		t.Errorf("facts after they were dropped: %+v", s.facts)
	}
}

// TestFactsForStart: once the attempt is planned a session keeps what
// the rest of the start reads (the agent's identity, the preflight's
// probe port, the self-test's protocol) and drops the rest.
func TestFactsForStart(t *testing.T) {
	f := wire.Facts{Version: wire.Version, Agent: "v1", Name: "node1", Hostname: "node1.example", ProbePort: 40123, Selftest: wire.SelftestVersion,
		CPUs: 64, NICs: []wire.NIC{{Name: "eth0"}}, Routes: []wire.Route{{Peer: "10.0.0.2"}}, GPUs: []wire.GPU{{Index: 0}}, DiscoveryErrs: []string{"x"}}
	got := factsForStart(f)
	want := wire.Facts{Version: wire.Version, Agent: "v1", Name: "node1", Hostname: "node1.example", ProbePort: 40123, Selftest: wire.SelftestVersion}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("factsForStart: %+v, want %+v", got, want)
	}
	s := &session{host: hostfile.Host{Name: "10.0.0.1"}, facts: got}
	if port, _ := probePort(transport.Options{}, s); port != 40123 {
		t.Errorf("probe port after the facts were dropped: %d, want 40123", port)
	}
}

// TestNetRequest: a host that chooses its interface is asked for brief
// facts, unless the launcher judges the user's NCCL_SOCKET_IFNAME on
// every host or the host is a relay; nothing asked stays nothing.
func TestNetRequest(t *testing.T) {
	force := &wire.NetRequest{Force: []string{"ib0"}}
	for _, c := range []struct {
		name  string
		net   *wire.NetRequest
		vars  map[string]string
		relay bool
		brief bool
	}{
		{"nothing asked", nil, nil, false, false},
		{"a leaf", &wire.NetRequest{}, nil, false, true},
		{"a leaf, forced", force, map[string]string{"NCCL_DEBUG": "INFO"}, false, true},
		{"a relay", force, nil, true, false},
		{"NCCL_SOCKET_IFNAME given", &wire.NetRequest{}, map[string]string{"NCCL_SOCKET_IFNAME": "=eth0"}, false, false},
	} {
		got := netRequest(c.net, c.vars, c.relay)
		switch {
		case c.net == nil && got != nil:
			t.Errorf("%s: %+v, want nothing", c.name, got)
		case c.net != nil && (got == nil || got.Brief != c.brief || !slices.Equal(got.Force, c.net.Force)):
			t.Errorf("%s: %+v, want brief %v with %q forced", c.name, got, c.brief, c.net.Force)
		}
	}
}
