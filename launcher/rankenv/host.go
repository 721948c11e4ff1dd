package rankenv

import (
	"gangway/agent/wire"
	"gangway/hostfile"
)

// Host is one host as the pipeline sees it once reached: as the launcher
// names it (its Slots set from its facts where they decide them), the
// address the launcher reached it on, and what its agent reported.
type Host struct {
	hostfile.Host
	Reached string // "" when not a network address
	// Peer is the name the other hosts know it by, which its agent's
	// routes to them are keyed by (the HostName an ssh configuration
	// gives an alias); "" means Name.
	Peer  string
	Facts wire.Facts
}

// peerNames are the names the hosts know each other by, in order.
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
