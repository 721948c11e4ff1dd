package netchoice

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// Hosts a and b; 198.18.0.0/24 is the fast fabric, 10.0.0.0/24 the
// management network, 10.9.0.0/24 a storage network only a is on.
var (
	lo       = NIC{Name: "lo", Index: 1, Type: "loopback", Up: true, Addrs: []string{"127.0.0.1/8", "::1/128"}}
	eno1Dead = NIC{Name: "eno1", Index: 2, Type: "device", Up: true, SpeedMbps: 25000, Addrs: []string{"10.9.0.1/24"}}
	enp1A    = NIC{Name: "enp1s0f0", Index: 3, Type: "device", Up: true, SpeedMbps: 10000, Addrs: []string{"198.18.0.1/24", "fe80::1/64"}}
	eth2B    = NIC{Name: "eth2", Index: 4, Type: "device", Up: true, SpeedMbps: 10000, Addrs: []string{"fe80::2/64", "198.18.0.2/24"}}
	docker0  = NIC{Name: "docker0", Index: 2, Type: "bridge", Up: true, SpeedMbps: 10000, Addrs: []string{"172.17.0.1/16"}}
	eth0Mgmt = NIC{Name: "eth0", Index: 5, Type: "device", Up: true, SpeedMbps: 1000, Addrs: []string{"10.0.0.1/24"}}
	ib0      = NIC{Name: "ib0", Index: 6, Type: "ipoib", Up: true, SpeedMbps: 100000, Addrs: []string{"192.168.1.1/24"}}
	ib1      = NIC{Name: "ib1", Index: 7, Type: "ipoib", Up: true, SpeedMbps: 100000, Addrs: []string{"192.168.2.1/24"}}
)

func down(n NIC) NIC { n.Up = false; return n }

func TestChoose(t *testing.T) {
	for _, tc := range []struct {
		name   string
		h      HostNet
		force  []string
		ifaces []string
		addr   string
	}{
		{
			name: "dead-end NIC with the lower index",
			h: HostNet{Host: "a", Peers: []string{"a", "b", "c"}, NICs: []NIC{enp1A, eno1Dead, lo}, Routes: []Route{
				{Peer: "b", Addr: "198.18.0.2", Iface: "enp1s0f0"}, {Peer: "c", Addr: "198.18.0.3", Iface: "enp1s0f0"}}},
			ifaces: []string{"enp1s0f0"}, addr: "198.18.0.1",
		},
		{
			name: "host b names its NIC eth2",
			h: HostNet{Host: "b", Peers: []string{"a"}, NICs: []NIC{lo, eth2B}, Routes: []Route{
				{Peer: "a", Addr: "198.18.0.1", Iface: "eth2"}}},
			ifaces: []string{"eth2"}, addr: "198.18.0.2",
		},
		{
			name: "docker0 reaches too, and is faster",
			h: HostNet{Host: "a", Peers: []string{"b"}, NICs: []NIC{lo, docker0, eth0Mgmt}, Routes: []Route{
				{Peer: "b", Addr: "10.0.0.2", Iface: "eth0"}, {Peer: "b", Addr: "172.17.0.2", Iface: "docker0"}}},
			ifaces: []string{"eth0"}, addr: "10.0.0.1",
		},
		{
			name: "docker0 only: containers on one bridge",
			h: HostNet{Host: "a", Peers: []string{"b"}, NICs: []NIC{lo, docker0, eth0Mgmt}, Routes: []Route{
				{Peer: "b", Addr: "172.17.0.3", Iface: "docker0"}}},
			ifaces: []string{"docker0"}, addr: "172.17.0.1",
		},
		{
			name: "fastest of two that reach",
			h: HostNet{Host: "a", Peers: []string{"b"}, NICs: []NIC{eth0Mgmt, ib0, lo}, Routes: []Route{
				{Peer: "b", Addr: "10.0.0.2", Iface: "eth0"}, {Peer: "b", Addr: "192.168.1.2", Iface: "ib0"}}},
			ifaces: []string{"ib0"}, addr: "192.168.1.1",
		},
		{
			name: "same speed: lowest index",
			h: HostNet{Host: "a", Peers: []string{"b"}, NICs: []NIC{ib1, ib0}, Routes: []Route{
				{Peer: "b", Addr: "192.168.2.2", Iface: "ib1"}, {Peer: "b", Addr: "192.168.1.2", Iface: "ib0"}}},
			ifaces: []string{"ib0"}, addr: "192.168.1.1",
		},
		{
			name: "reaching more peers beats speed",
			h: HostNet{Host: "a", Peers: []string{"b", "c"}, NICs: []NIC{eth0Mgmt, ib0}, Routes: []Route{
				{Peer: "b", Addr: "10.0.0.2", Iface: "eth0"}, {Peer: "c", Addr: "10.0.0.3", Iface: "eth0"},
				{Peer: "b", Addr: "192.168.1.2", Iface: "ib0"}}},
			ifaces: []string{"eth0"}, addr: "10.0.0.1",
		},
		{
			name: "two rails, each reaching one peer",
			h: HostNet{Host: "a", Peers: []string{"b", "c"}, NICs: []NIC{ib1, ib0}, Routes: []Route{
				{Peer: "b", Addr: "192.168.2.2", Iface: "ib1"}, {Peer: "c", Addr: "192.168.1.3", Iface: "ib0"}}},
			ifaces: []string{"ib0", "ib1"}, addr: "192.168.1.1",
		},
		{
			name: "route through a down NIC is ignored",
			h: HostNet{Host: "a", Peers: []string{"b"}, NICs: []NIC{down(ib0), eth0Mgmt}, Routes: []Route{
				{Peer: "b", Addr: "192.168.1.2", Iface: "ib0"}, {Peer: "b", Addr: "10.0.0.2", Iface: "eth0"}}},
			ifaces: []string{"eth0"}, addr: "10.0.0.1",
		},
		{
			name: "forced", force: []string{"eth2"},
			h:      HostNet{Host: "b", Peers: []string{"a"}, NICs: []NIC{lo, eth2B}},
			ifaces: []string{"eth2"}, addr: "198.18.0.2",
		},
		{
			name: "forced two, dead end first", force: []string{"eno1", "enp1s0f0"},
			h:      HostNet{Host: "a", Peers: []string{"b"}, NICs: []NIC{lo, eno1Dead, enp1A}},
			ifaces: []string{"eno1", "enp1s0f0"}, addr: "10.9.0.1",
		},
		{
			name:   "single host: first physical NIC with IPv4",
			h:      HostNet{Host: "a", NICs: []NIC{ib0, down(eno1Dead), docker0, lo, eth0Mgmt}},
			ifaces: []string{"eth0"}, addr: "10.0.0.1",
		},
		{
			name:   "single host, only loopback and docker0",
			h:      HostNet{Host: "a", Peers: []string{"a"}, NICs: []NIC{docker0, lo}},
			ifaces: []string{"lo"}, addr: "127.0.0.1",
		},
		{
			name: "single host in a container: veth eth0 is virtual",
			h: HostNet{Host: "a", NICs: []NIC{lo,
				{Name: "eth0", Index: 9, Type: "veth", Up: true, Addrs: []string{"172.17.0.5/16"}}}},
			ifaces: []string{"lo"}, addr: "127.0.0.1",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Choose(tc.h, tc.force...)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.Ifaces, tc.ifaces) || c.Addr != tc.addr || c.Host != tc.h.Host || c.Forced != (tc.force != nil) {
				t.Errorf("got %+v, want ifaces %v addr %s", c, tc.ifaces, tc.addr)
			}
		})
	}
}

func TestChooseInterfaceErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		h     HostNet
		force []string
		err   string
	}{
		{
			name: "no route to a peer",
			h: HostNet{Host: "a", Peers: []string{"b", "c"}, NICs: []NIC{lo, enp1A}, Routes: []Route{
				{Peer: "b", Addr: "198.18.0.2", Iface: "enp1s0f0"},
				{Peer: "c", Addr: "198.18.9.3"}, {Peer: "c", Addr: "10.7.0.3"}}},
			err: "host a: no usable network interface: no route to peer c (tried 198.18.9.3, 10.7.0.3)",
		},
		{
			name: "peer never looked up",
			h:    HostNet{Host: "a", Peers: []string{"b"}, NICs: []NIC{lo, enp1A}},
			err:  "host a: no usable network interface: no route to peer b (no addresses)",
		},
		{
			name: "peer whose name did not resolve there",
			h: HostNet{Host: "a", Peers: []string{"b"}, NICs: []NIC{lo, enp1A}, Routes: []Route{
				{Peer: "b", Err: "resolve b: lookup b on 10.0.0.53:53: no such host"}}},
			err: "host a: no usable network interface: no route to peer b (resolve b: lookup b on 10.0.0.53:53: no such host)",
		},
		{
			name: "two peers unreachable, only through a down NIC",
			h: HostNet{Host: "a", Peers: []string{"b", "c"}, NICs: []NIC{down(ib0)}, Routes: []Route{
				{Peer: "b", Addr: "192.168.1.2", Iface: "ib0"}, {Peer: "c", Addr: "192.168.1.3", Iface: "ib0"}}},
			err: "host a: no usable network interface: no route to peer b (tried 192.168.1.2 via ib0, which is down), " +
				"peer c (tried 192.168.1.3 via ib0, which is down)",
		},
		{
			name: "forced missing", force: []string{"enp1s0f0"},
			h:   HostNet{Host: "b", NICs: []NIC{eth2B, lo}},
			err: "host b: --network-interface enp1s0f0: no usable network interface: no such interface (have lo, eth2)",
		},
		{
			name: "forced down", force: []string{"eth0", "ib0"},
			h:   HostNet{Host: "b", NICs: []NIC{eth0Mgmt, down(ib0)}},
			err: "host b: --network-interface ib0: no usable network interface: interface is down",
		},
		{
			name: "forced without address", force: []string{"eth7"},
			h:   HostNet{Host: "c", NICs: []NIC{{Name: "eth7", Index: 3, Up: true, Addrs: []string{"fe80::7/64"}}}},
			err: "host c: --network-interface eth7: no usable network interface: no IP address",
		},
		{
			name: "single host with nothing up",
			h:    HostNet{Host: "d", NICs: []NIC{down(lo)}},
			err:  "host d: no usable network interface: no interface is up with an address",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Choose(tc.h, tc.force...)
			if err == nil || err.Error() != tc.err {
				t.Fatalf("err = %v\nwant %s", err, tc.err)
			}
			if !errors.Is(err, ErrNoInterface) {
				t.Errorf("%v is not ErrNoInterface", err)
			}
		})
	}
}

func TestChoiceHCAs(t *testing.T) {
	h := HostNet{Host: "a", NICs: []NIC{eth0Mgmt}, HCAs: []HCA{
		{Name: "mlx5_10", Port: 1, State: "ACTIVE", LinkLayer: "InfiniBand"},
		{Name: "mlx5_2", Port: 1, State: "ACTIVE", LinkLayer: "InfiniBand"},
		{Name: "mlx5_1", Port: 1, State: "DOWN", LinkLayer: "InfiniBand"},
		{Name: "mlx5_0", Port: 2, State: "ACTIVE", LinkLayer: "Ethernet"},
		{Name: "mlx5_0", Port: 1, State: "ACTIVE", LinkLayer: "InfiniBand"},
		{Name: "mlx5_3", Port: 1, State: "INIT", LinkLayer: "InfiniBand"},
	}}
	c, err := Choose(h)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"mlx5_0:1", "mlx5_0:2", "mlx5_2:1", "mlx5_10:1"}; !reflect.DeepEqual(c.HCAs, want) {
		t.Errorf("HCAs %v, want %v", c.HCAs, want)
	}
}

func TestNaturalCompare(t *testing.T) {
	in := []string{"mlx5_10:1", "mlx5_2:1", "mlx5_1:2", "mlx5_1:1", "mlx4_0:1", "ib", "mlx5_1"}
	slices.SortFunc(in, naturalCompare)
	if got, want := strings.Join(in, " "), "ib mlx4_0:1 mlx5_1 mlx5_1:1 mlx5_1:2 mlx5_2:1 mlx5_10:1"; got != want {
		t.Errorf("sorted %s, want %s", got, want)
	}
}
