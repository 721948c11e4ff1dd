package nccl

// Interfaces of hosts a and b for the checks' tests (the interface
// choice's own tests, with more, are internal/netchoice's): 198.18.0.0/24
// is the fast fabric.
var (
	lo    = NIC{Name: "lo", Index: 1, Type: "loopback", Up: true, Addrs: []string{"127.0.0.1/8", "::1/128"}}
	enp1A = NIC{Name: "enp1s0f0", Index: 3, Type: "device", Up: true, SpeedMbps: 10000, Addrs: []string{"198.18.0.1/24", "fe80::1/64"}}
	eth2B = NIC{Name: "eth2", Index: 4, Type: "device", Up: true, SpeedMbps: 10000, Addrs: []string{"fe80::2/64", "198.18.0.2/24"}}
	ib0   = NIC{Name: "ib0", Index: 6, Type: "ipoib", Up: true, SpeedMbps: 100000, Addrs: []string{"192.168.1.1/24"}}
)

func down(n NIC) NIC { n.Up = false; return n }
