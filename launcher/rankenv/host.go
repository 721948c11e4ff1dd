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
	Facts   wire.Facts
}

// hostNames are the hosts' names, in order.
func hostNames(hosts []Host) []string {
	out := make([]string, len(hosts))
	for i, h := range hosts {
		out[i] = h.Name
	}
	return out
}
