// Package netchoice chooses the network interface a host's ranks talk
// over, from the host's interfaces, InfiniBand ports and routes to its
// peers: a pure function both ends use. The launcher chooses for a host
// whose agent reported its routes; an agent asked to (wire.Hello.Net)
// chooses for its own host, so that the launcher of a large job neither
// receives every host's routes nor works through them (package nccl
// re-exports it for the launcher's other NCCL decisions).
package netchoice

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// NIC is one network interface of a host.
type NIC struct {
	Name      string
	Index     int
	Type      string // link type: device, veth, bridge, ipoib, loopback...
	Up        bool   // administratively up with carrier
	SpeedMbps int    // 0 when unknown
	Addrs     []string
}

// Route is how a host reaches one address of a peer. Iface is empty when
// the host has no route to Addr.
type Route struct {
	Peer  string
	Addr  string
	Iface string
	Err   string // why there is no route, when Iface is empty
}

// HCA is one port of an InfiniBand or RoCE adapter.
type HCA struct {
	Name      string
	Port      int
	State     string // ACTIVE, DOWN...
	LinkLayer string // InfiniBand or Ethernet
}

// HostNet is what the launcher knows about one host's network.
type HostNet struct {
	Host   string   // the host's name in the job
	Peers  []string // the job's other hosts; empty for a single-host job
	NICs   []NIC
	Routes []Route // this host's routes to its peers' addresses
	HCAs   []HCA
}

// Choice is the network a host's ranks use.
type Choice struct {
	Host   string
	Ifaces []string // NCCL_SOCKET_IFNAME, best first
	Addr   string   // an address on Ifaces[0] (MASTER_ADDR), IPv4 preferred
	HCAs   []string // ACTIVE IB/RoCE ports as "mlx5_0:1", sorted
	Forced bool     // Ifaces came from --network-interface
}

// ErrNoInterface is wrapped when a host has no usable interface: a forced
// one is missing or down, or no interface reaches a peer.
var ErrNoInterface = errors.New("no usable network interface")

// Choose picks the interface(s) a host's ranks talk over.
//
// With force (--network-interface NAME[,NAME]) the named interfaces are
// used after checking that each exists on the host, is up and has an
// address.
//
// Otherwise, in a multi-host job, only interfaces that the host's routes to
// its peers leave through are candidates: a NIC that reaches no peer is
// never chosen, whatever its index. docker*, virbr* and lo* are used only
// when nothing else reaches the peers. The interface reaching the most
// peers wins, then the fastest, then the lowest index; when no single
// interface reaches every peer, more are added until each peer is covered.
// A peer the host has no route to is an error naming both.
//
// A single-host job uses the first up, non-virtual interface (not
// loopback, bridge, veth, dummy, tunnel, docker*, virbr*) with an IPv4
// address, else lo.
func Choose(h HostNet, force ...string) (Choice, error) {
	nics := slices.Clone(h.NICs)
	slices.SortFunc(nics, func(a, b NIC) int { return a.Index - b.Index })
	c := Choice{Host: h.Host, HCAs: ActiveHCAs(h.HCAs)}
	byName := map[string]NIC{}
	for _, n := range nics {
		byName[n.Name] = n
	}

	if len(force) > 0 {
		for _, name := range force {
			n, ok := byName[name]
			switch {
			case !ok:
				return Choice{}, fmt.Errorf("host %s: --network-interface %s: %w: no such interface (have %s)",
					h.Host, name, ErrNoInterface, names(nics))
			case !n.Up:
				return Choice{}, fmt.Errorf("host %s: --network-interface %s: %w: interface is down", h.Host, name, ErrNoInterface)
			case pickAddr(n.Addrs) == "":
				return Choice{}, fmt.Errorf("host %s: --network-interface %s: %w: no IP address", h.Host, name, ErrNoInterface)
			}
		}
		c.Ifaces, c.Forced = slices.Clone(force), true
		c.Addr = pickAddr(byName[force[0]].Addrs)
		return c, nil
	}

	peers := slices.DeleteFunc(slices.Clone(h.Peers), func(p string) bool { return p == h.Host })
	if len(peers) == 0 {
		n, ok := singleHostNIC(nics)
		if !ok {
			return Choice{}, fmt.Errorf("host %s: %w: no interface is up with an address", h.Host, ErrNoInterface)
		}
		c.Ifaces, c.Addr = []string{n.Name}, pickAddr(n.Addrs)
		return c, nil
	}

	// reach[iface] is the set of peers routed through iface.
	reach := map[string]map[string]bool{}
	for _, r := range h.Routes {
		n, ok := byName[r.Iface]
		if !ok || !n.Up || pickAddr(n.Addrs) == "" || !slices.Contains(peers, r.Peer) {
			continue
		}
		if reach[r.Iface] == nil {
			reach[r.Iface] = map[string]bool{}
		}
		reach[r.Iface][r.Peer] = true
	}
	var unreachable []string
	for _, p := range peers {
		if !slices.ContainsFunc(nics, func(n NIC) bool { return reach[n.Name][p] }) {
			unreachable = append(unreachable, p+" ("+triedAddrs(h.Routes, p, byName)+")")
		}
	}
	if len(unreachable) > 0 {
		return Choice{}, fmt.Errorf("host %s: %w: no route to peer %s", h.Host, ErrNoInterface, strings.Join(unreachable, ", peer "))
	}

	chosen := cover(nics, reach, peers, func(n NIC) bool { return !avoided(n) })
	if chosen == nil {
		chosen = cover(nics, reach, peers, func(NIC) bool { return true })
	}
	for _, n := range chosen {
		c.Ifaces = append(c.Ifaces, n.Name)
	}
	c.Addr = pickAddr(chosen[0].Addrs)
	return c, nil
}

// cover picks interfaces allowed by ok until every peer is reached: each
// step takes the interface reaching the most still-uncovered peers, then
// the fastest, then the lowest index (nics are sorted by index). It returns
// nil when the allowed interfaces cannot reach every peer.
func cover(nics []NIC, reach map[string]map[string]bool, peers []string, ok func(NIC) bool) []NIC {
	left := map[string]bool{}
	for _, p := range peers {
		left[p] = true
	}
	var chosen []NIC
	for len(left) > 0 {
		best, bestN := -1, 0
		for i, n := range nics {
			if !ok(n) || slices.ContainsFunc(chosen, func(c NIC) bool { return c.Name == n.Name }) {
				continue
			}
			k := 0
			for p := range reach[n.Name] {
				if left[p] {
					k++
				}
			}
			if k > bestN || (k == bestN && k > 0 && n.SpeedMbps > nics[best].SpeedMbps) {
				best, bestN = i, k
			}
		}
		if best < 0 {
			return nil
		}
		chosen = append(chosen, nics[best])
		for p := range reach[nics[best].Name] {
			delete(left, p)
		}
	}
	return chosen
}

// avoided are the interfaces NCCL itself tries last: docker*, virbr*, lo*.
func avoided(n NIC) bool {
	return strings.HasPrefix(n.Name, "docker") || strings.HasPrefix(n.Name, "virbr") ||
		strings.HasPrefix(n.Name, "lo") || n.Type == "loopback"
}

// virtualTypes are link types that never carry traffic off the host.
var virtualTypes = map[string]bool{
	"loopback": true, "bridge": true, "veth": true, "dummy": true, "tuntap": true,
	"ifb": true, "vxlan": true, "geneve": true, "wireguard": true, "ipip": true, "gre": true,
}

// singleHostNIC implements the single-host rule of Choose.
func singleHostNIC(nics []NIC) (NIC, bool) {
	for _, n := range nics {
		if n.Up && !virtualTypes[n.Type] && !avoided(n) && hasIPv4(n.Addrs) {
			return n, true
		}
	}
	for _, n := range nics {
		if n.Up && (n.Name == "lo" || n.Type == "loopback") && pickAddr(n.Addrs) != "" {
			return n, true
		}
	}
	return NIC{}, false
}

// pickAddr returns the first IPv4 address of a CIDR list, else the first
// IPv6 address that is not link-local, without the prefix length.
func pickAddr(addrs []string) string {
	v6 := ""
	for _, a := range addrs {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			continue
		}
		ip := p.Addr()
		if ip.Is4() || ip.Is4In6() {
			return ip.Unmap().String()
		}
		if v6 == "" && !ip.IsLinkLocalUnicast() {
			v6 = ip.String()
		}
	}
	return v6
}

func hasIPv4(addrs []string) bool {
	a := pickAddr(addrs)
	return a != "" && !strings.Contains(a, ":")
}

// ActiveHCAs lists the ACTIVE InfiniBand/RoCE ports as "name:port".
func ActiveHCAs(hcas []HCA) []string {
	var out []string
	for _, h := range hcas {
		if h.State == "ACTIVE" && (h.LinkLayer == "InfiniBand" || h.LinkLayer == "Ethernet" || h.LinkLayer == "") {
			out = append(out, h.Name+":"+strconv.Itoa(h.Port))
		}
	}
	slices.SortFunc(out, naturalCompare)
	return slices.Compact(out)
}

// naturalCompare orders names with their digit runs compared as numbers,
// so mlx5_2 sorts before mlx5_10.
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digitRun(a), digitRun(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := len(na) - len(nb); c != 0 {
				return c
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

func digitRun(s string) int {
	i := 0
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	return i
}

func names(nics []NIC) string {
	var s []string
	for _, n := range nics {
		s = append(s, n.Name)
	}
	return strings.Join(s, ", ")
}

// triedAddrs describes the routes to peer that were of no use.
func triedAddrs(routes []Route, peer string, byName map[string]NIC) string {
	var s []string
	for _, r := range routes {
		if r.Peer != peer {
			continue
		}
		if r.Addr == "" {
			if r.Err != "" {
				s = append(s, r.Err) // its name did not resolve there
			}
			continue
		}
		n, ok := byName[r.Iface]
		switch {
		case r.Iface == "" && r.Err != "":
			s = append(s, r.Addr+": "+r.Err)
		case r.Iface == "":
			s = append(s, r.Addr)
		case !ok:
			s = append(s, r.Addr+" via unknown "+r.Iface)
		case !n.Up:
			s = append(s, r.Addr+" via "+r.Iface+", which is down")
		default:
			s = append(s, r.Addr+" via "+r.Iface+", which has no address")
		}
	}
	switch {
	case len(s) == 0:
		return "no addresses"
	case !slices.ContainsFunc(routes, func(r Route) bool { return r.Peer == peer && r.Addr != "" }):
		return strings.Join(s, ", ")
	}
	return "tried " + strings.Join(s, ", ")
}
