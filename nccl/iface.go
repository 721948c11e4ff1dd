package nccl

import "github.com/gangway-hpc/gangway/internal/netchoice"

// The interface choice lives in internal/netchoice, which agents use too
// (an agent asked to chooses for its own host); these are its names here.
type (
	NIC     = netchoice.NIC
	Route   = netchoice.Route
	HCA     = netchoice.HCA
	HostNet = netchoice.HostNet
	Choice  = netchoice.Choice
)

// ErrNoInterface is wrapped when a host has no usable interface: a forced
// one is missing or down, or no interface reaches a peer.
var ErrNoInterface = netchoice.ErrNoInterface

// ChooseInterface picks the interface(s) a host's ranks talk over
// (netchoice.Choose).
func ChooseInterface(h HostNet, force ...string) (Choice, error) {
	return netchoice.Choose(h, force...)
}

// activeHCAs lists the ACTIVE InfiniBand/RoCE ports as "name:port".
func activeHCAs(hcas []HCA) []string { return netchoice.ActiveHCAs(hcas) }
