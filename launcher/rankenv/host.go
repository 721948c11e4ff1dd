package rankenv

import (
	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/hostfile"
)

// Host is one host as the pipeline sees it once reached: as the launcher
// names it (its Slots set from its facts where they decide them), the
// address the launcher reached it on, and what its agent reported.
type Host struct {
	hostfile.Host
	Reached string // "" when not a network address
	// Peer is how the other hosts' agents were told of this host, for
	// their routes (wire.Hello's Peers): its address where the transport
	// knew it before the sessions started (transport.PeerAddresser, the
	// srun transport's reported address), else the name the hosts know
	// each other by (the HostName an ssh configuration gives an alias);
	// "" means Name.
	Peer  string
	Facts wire.Facts
}

// peerNames are the hosts as their peers were told of them (Host.Peer,
// else the name), in order.
func peerNames(hosts []Host) []string {
	out := make([]string, len(hosts))
	for i, h := range hosts {
		out[i] = h.Name
		if h.Peer != "" {
			out[i] = h.Peer
		}
	}
	return out
}

// PeerNames are the names as the agents are told of their peers: each
// name's address in addrs (transport.PeerAddresser's) where it has one,
// else the name. With peerNames it keeps Hello's Peers and the interface
// choice on the same strings.
func PeerNames(names []string, addrs map[string]string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = PeerName(n, addrs)
	}
	return out
}

// PeerName is one name of PeerNames.
func PeerName(name string, addrs map[string]string) string {
	if a := addrs[name]; a != "" {
		return a
	}
	return name
}
