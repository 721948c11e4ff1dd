package rankenv

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/nccl"
)

// ChooseNetworks picks every host's data interface. Single-host jobs keep
// NCCL's and Gloo's own defaults (all their traffic is local) unless
// --network-interface forces one. The result is indexed like hosts; a nil
// entry means "set nothing".
func ChooseNetworks(n cli.Network, hosts []Host) ([]*nccl.Choice, error) {
	out := make([]*nccl.Choice, len(hosts))
	if !ChoosesNetwork(n, len(hosts)) {
		return out, nil
	}
	force := n.Forced()
	names := peerNames(hosts)
	var errs []error
	for i, s := range hosts {
		if n := s.Facts.Net; n != nil {
			// The host chose (wire.Hello.Net asked it to).
			if n.Err != "" {
				errs = append(errs, errors.New(n.Err))
				continue
			}
			out[i] = &nccl.Choice{Host: s.Name, Ifaces: n.Ifaces, Addr: n.Addr, HCAs: n.HCAs, Forced: n.Forced}
			continue
		}
		c, err := nccl.ChooseInterface(s.Facts.HostNet(s.Name, RoutePeers(names, i)), force...)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[i] = &c
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("network interface choice: %w", errors.Join(errs...))
	}
	return out, nil
}

// ChoosesNetwork reports whether a job of hosts hosts gets a data
// interface chosen per host (ChooseNetworks): a multi-host job, or one
// with --network-interface.
func ChoosesNetwork(n cli.Network, hosts int) bool {
	return hosts > 1 || n.Interface != ""
}

// ChosenAtHost is how -v's network line says that the host chose its
// data interface itself, from its own routes (wire.Hello.Net).
const ChosenAtHost = "the host, from its routes to the other hosts"

// logNetworks says at -v each host's network choice (NCCL_SOCKET_IFNAME
// and the rest), or that a single-host job keeps the libraries' defaults.
func logNetworks(log *zap.Logger, hosts []Host, choices []*nccl.Choice) {
	if !log.Core().Enabled(zap.InfoLevel) {
		return // its fields cost a few hundred bytes a host, unread
	}
	for i, c := range choices {
		if c == nil {
			log.Info("network", zap.String("host", hosts[i].Name), zap.String("NCCL_SOCKET_IFNAME", "unset (single host: NCCL's own choice)"))
			continue
		}
		how := "routes to the other hosts"
		switch {
		case c.Forced:
			how = "--network-interface"
		case hosts[i].Facts.Net != nil:
			how = ChosenAtHost
		}
		log.Info("network", zap.String("host", c.Host), zap.String("NCCL_SOCKET_IFNAME", strings.Join(c.Ifaces, ",")),
			zap.String("addr", c.Addr), zap.Strings("NCCL_IB_HCA", c.HCAs), zap.String("chosen by", how))
	}
}

// maxRoutePeers bounds how many peers each agent looks up routes to, so
// that facts, their transfer and the interface choice stay O(hosts) in
// total rather than O(hosts^2).
const maxRoutePeers = 16

// RoutePeers are the peers host i is asked to route to: every other host
// in small jobs; beyond that rank 0's host, its ring neighbours (the
// peers NCCL's rings and the preflight use) and hosts spread evenly over
// the rest. It is a pure function, so the agent's Hello and the interface
// choice agree on the list.
func RoutePeers(names []string, i int) []string {
	n := len(names)
	if n-1 <= maxRoutePeers {
		return without(names, i)
	}
	// The indices taken (i first): at most maxRoutePeers+1, so a list
	// on the stack, not a map, for each of a launch's hosts.
	seen := make([]int, 1, maxRoutePeers+1)
	seen[0] = i
	out := make([]string, 0, maxRoutePeers)
	add := func(k int) {
		k = ((k % n) + n) % n
		if len(out) < maxRoutePeers && !slices.Contains(seen, k) {
			seen = append(seen, k)
			out = append(out, names[k])
		}
	}
	add(0)
	add(i + 1)
	add(i - 1)
	for step := 1; step < maxRoutePeers; step++ {
		add(i + step*n/(maxRoutePeers-2))
	}
	for d := 2; len(out) < maxRoutePeers && d < n; d++ {
		add(i + d)
		add(i - d)
	}
	return out
}

// DataAddr is the address of a host that the other hosts should use (rank
// 0's is MASTER_ADDR; the preflight probes every host's): the address the
// launcher reached it on when that address is on the chosen data
// interface, else the data interface's address.
func DataAddr(s Host, c *nccl.Choice) string {
	reached := net.ParseIP(s.Reached)
	if c == nil || len(c.Ifaces) == 0 {
		if reached != nil {
			return s.Reached
		}
		return s.Name
	}
	if reached != nil {
		for _, a := range ifaceAddrs(s.Facts, c.Ifaces[0]) {
			if _, ipn, err := net.ParseCIDR(a); err == nil && ipn.Contains(reached) {
				return s.Reached
			}
		}
	}
	if c.Addr != "" {
		return c.Addr
	}
	return s.Reached
}

// ifaceAddrs are the addresses (CIDR) of the host's interface iface:
// from its own choice (wire.NetChoice.Addrs, brief facts carry no
// interfaces), else from its interfaces.
func ifaceAddrs(f wire.Facts, iface string) []string {
	if n := f.Net; n != nil && len(n.Ifaces) > 0 && n.Ifaces[0] == iface && len(n.Addrs) > 0 {
		return n.Addrs
	}
	for _, n := range f.NICs {
		if n.Name == iface {
			return n.Addrs
		}
	}
	return nil
}

func without(s []string, i int) []string {
	out := make([]string, 0, len(s))
	out = append(out, s[:i]...)
	return append(out, s[i+1:]...)
}
