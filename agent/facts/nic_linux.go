//go:build linux

package facts

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"syscall"

	"github.com/vishvananda/netlink"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// iffLowerUp is IFF_LOWER_UP from <linux/if.h>: the driver signals carrier.
const iffLowerUp = 0x10000

// listNICs lists the network interfaces of the current network namespace
// through netlink, sorted by index. Per-link address failures are returned
// as problems; only a failed link listing is an error.
func listNICs(o Options) ([]wire.NIC, []error, error) {
	links, err := redump(netlink.LinkList)
	if err != nil {
		return nil, nil, fmt.Errorf("netlink link list: %w", err)
	}
	names := make(map[int]string, len(links))
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	var problems []error
	nics := make([]wire.NIC, 0, len(links))
	for _, l := range links {
		a := l.Attrs()
		n := wire.NIC{
			Name:      a.Name,
			Index:     a.Index,
			Type:      linkType(l),
			Up:        linkUp(a),
			MTU:       a.MTU,
			SpeedMbps: readSpeed(o, a.Name),
			Master:    names[a.MasterIndex],
		}
		addrs, err := redump(func() ([]netlink.Addr, error) { return netlink.AddrList(l, netlink.FAMILY_ALL) })
		if err != nil {
			problems = append(problems, fmt.Errorf("addresses of %s: %w", a.Name, err))
		}
		for _, ad := range addrs {
			if ad.IPNet != nil {
				n.Addrs = append(n.Addrs, ad.IPNet.String())
			}
		}
		nics = append(nics, n)
	}
	slices.SortFunc(nics, func(a, b wire.NIC) int { return a.Index - b.Index })
	return nics, problems, nil
}

// redump retries a netlink dump that the kernel interrupted because the
// table changed meanwhile (another namespace's links coming and going):
// the next dump is consistent, and a few tries always get one.
func redump[T any](dump func() (T, error)) (T, error) {
	v, err := dump()
	for try := 0; try < 5 && errors.Is(err, netlink.ErrDumpInterrupted); try++ {
		v, err = dump()
	}
	return v, err
}

// linkType is netlink's link type, except that the loopback device (type
// "device" to netlink) is reported as "loopback".
func linkType(l netlink.Link) string {
	if l.Attrs().RawFlags&syscall.IFF_LOOPBACK != 0 {
		return "loopback"
	}
	return l.Type()
}

// linkUp is true when the link is administratively up and running:
// operstate UP, or operstate UNKNOWN (dummy, loopback, some drivers) with
// carrier.
func linkUp(a *netlink.LinkAttrs) bool {
	if a.Flags&net.FlagUp == 0 {
		return false
	}
	switch a.OperState {
	case netlink.OperUp:
		return true
	case netlink.OperUnknown:
		return a.RawFlags&iffLowerUp != 0
	}
	return false
}

// RouteTo returns the route this host uses to reach dst: the outgoing
// interface, preferred source address and gateway (netlink RTM_GETROUTE,
// like `ip route get`). Nothing is sent to dst.
func RouteTo(dst net.IP) (Route, error) {
	route, done := newRouter()
	defer done()
	return route(dst)
}

// newRouter returns a route lookup that reuses one netlink socket and
// remembers interface names, for many lookups in a row (one per peer).
func newRouter() (func(net.IP) (Route, error), func()) {
	h, err := netlink.NewHandle()
	if err != nil {
		return func(dst net.IP) (Route, error) {
			return Route{}, fmt.Errorf("route to %s: netlink: %w", dst, err)
		}, func() {}
	}
	names := map[int]string{}
	return func(dst net.IP) (Route, error) { return routeTo(h, names, dst) }, h.Close
}

func routeTo(h *netlink.Handle, names map[int]string, dst net.IP) (Route, error) {
	routes, err := h.RouteGet(dst)
	if err != nil {
		// The kernel answers a route lookup that hits a blackhole, prohibit
		// or unreachable route with these errnos; say which.
		switch {
		case errors.Is(err, syscall.EINVAL):
			return Route{}, fmt.Errorf("route to %s: blackhole route (%w)", dst, err)
		case errors.Is(err, syscall.EACCES):
			return Route{}, fmt.Errorf("route to %s: prohibit route (%w)", dst, err)
		case errors.Is(err, syscall.EHOSTUNREACH):
			return Route{}, fmt.Errorf("route to %s: unreachable route (%w)", dst, err)
		}
		return Route{}, fmt.Errorf("route to %s: %w", dst, err)
	}
	if len(routes) == 0 {
		return Route{}, fmt.Errorf("route to %s: no route", dst)
	}
	r := routes[0]
	name, ok := names[r.LinkIndex]
	if !ok {
		link, err := h.LinkByIndex(r.LinkIndex)
		if err != nil {
			return Route{}, fmt.Errorf("route to %s: interface %d: %w", dst, r.LinkIndex, err)
		}
		name = link.Attrs().Name
		names[r.LinkIndex] = name
	}
	return Route{Iface: name, Src: r.Src, Gateway: r.Gw}, nil
}
